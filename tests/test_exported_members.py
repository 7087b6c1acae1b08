"""The public surface: ``echomq.__all__`` is sorted and complete; everything public has docs.

A name added to the package namespace without being exported (or exported without existing)
fails here, as does a public callable without a docstring: everything public is re-exported from
``echomq/__init__.py`` through a sorted ``__all__``, ``protocol``, ``scripts``, ``ops`` and ``_*``
modules stay internal, and everything public carries a docstring.
"""

from __future__ import annotations

import inspect
import types
import typing
from typing import Any

import echomq


def _is_type_alias(obj: object) -> bool:
    """True for ``Callable[...]``-style aliases, which are callable but are not functions."""
    return typing.get_origin(obj) is not None


def _public_callables() -> list[tuple[str, Any]]:
    """Every exported class and function, and the public methods and properties of the classes."""
    found: list[tuple[str, Any]] = []
    for name in echomq.__all__:
        obj = getattr(echomq, name)
        if _is_type_alias(obj) or not (inspect.isclass(obj) or inspect.isroutine(obj)):
            continue
        found.append((name, obj))
        if not inspect.isclass(obj):
            continue
        for attr, member in vars(obj).items():
            if attr.startswith("_"):
                continue
            if isinstance(member, property):
                found.append((f"{name}.{attr}", member.fget))
            elif isinstance(member, (staticmethod, classmethod)):
                found.append((f"{name}.{attr}", member.__func__))
            elif inspect.isfunction(member):
                found.append((f"{name}.{attr}", member))
    return found


def _own_doc(obj: Any) -> str:
    """The docstring written for ``obj`` itself (not inherited, not dataclass-generated)."""
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else obj.__doc__
    if not doc:
        return ""
    if inspect.isclass(obj) and doc.startswith(f"{obj.__name__}("):
        return ""  # the signature text @dataclass puts on an undocumented class
    return str(doc).strip()


def test_all_is_sorted() -> None:
    # The file lists names in plain code-point order (sorted()): upper-case names, then
    # "__version__", then the lower-case functions.
    assert echomq.__all__ == sorted(echomq.__all__)


def test_all_has_no_duplicates() -> None:
    assert len(echomq.__all__) == len(set(echomq.__all__))


def test_every_name_in_all_exists() -> None:
    missing = [name for name in echomq.__all__ if not hasattr(echomq, name)]
    assert missing == []


def test_every_public_name_is_in_all() -> None:
    public = {
        name
        for name, value in vars(echomq).items()
        if not name.startswith("_") and not isinstance(value, types.ModuleType)
    }
    assert public - set(echomq.__all__) == set()


def test_star_import_gives_exactly_all() -> None:
    namespace: dict[str, Any] = {}
    exec("from echomq import *", namespace)
    namespace.pop("__builtins__")
    assert set(namespace) == set(echomq.__all__)


def test_exports_cover_the_documented_entry_points() -> None:
    # ``echomq.add`` is the one obvious way to enqueue: it, the classes behind it and the
    # exception roots must stay public.
    for name in ("add", "add_bulk", "Queue", "Worker", "Job", "JobOptions", "EchoMQError"):
        assert name in echomq.__all__
    assert issubclass(echomq.ValidationError, echomq.EchoMQError)
    assert issubclass(echomq.ValidationError, ValueError)


def test_internal_modules_are_not_exported() -> None:
    for name in ("protocol", "scripts", "ops"):
        assert name not in echomq.__all__


def test_every_public_callable_has_a_docstring() -> None:
    callables = _public_callables()
    assert len(callables) > len(echomq.__all__) // 2  # the walk found the API
    undocumented = [name for name, obj in callables if not _own_doc(obj)]
    assert undocumented == []
