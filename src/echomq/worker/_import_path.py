"""A processor's import path: how a child process of a pool (``processes=N``) finds the
function the worker was given, and the checks that it will find that very object."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from ..errors import InvalidOptionError


def processor_path(processor: Any) -> str:
    """The ``module:qualname`` a child imports ``processor`` by.

    Raises:
        InvalidOptionError: ``processor`` cannot be imported by path (a lambda, a nested
            function, a callable instance, something defined in ``__main__``, or a name that
            resolves to another object).
    """
    module = getattr(processor, "__module__", None)
    qualname = getattr(processor, "__qualname__", None)
    what = f"processor {processor!r} cannot run with processes > 0"
    if not isinstance(module, str) or not isinstance(qualname, str):
        raise InvalidOptionError(
            f"{what}: a child process imports it by 'module:function', and it has no "
            "module-level name; use a function defined at the top level of a module"
        )
    if "<" in qualname:  # <lambda>, <locals>
        raise InvalidOptionError(
            f"{what}: {qualname} is a lambda or a nested function, which a child process "
            "cannot import; define it at the top level of a module"
        )
    if module == "__main__":
        raise InvalidOptionError(
            f"{what}: it is defined in __main__, which a child process cannot import by "
            "name; move it into a module (e.g. tasks.py) and import it from there"
        )
    path = f"{module}:{qualname}"
    try:
        found = load_processor(path)
    except Exception as exc:
        raise InvalidOptionError(f"{what}: importing {path} failed: {exc}") from None
    if found is not processor:
        raise InvalidOptionError(
            f"{what}: {path} names another object (a decorator that does not keep "
            "__qualname__?); a child process would run that one"
        )
    return path


def load_processor(path: str) -> Callable[[Any], Any]:
    """Import ``module:qualname`` and return the object it names."""
    module_name, _, qualname = path.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{path} is not callable")
    return obj  # type: ignore[no-any-return]
