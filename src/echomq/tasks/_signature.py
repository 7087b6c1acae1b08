"""A task's signature: binding call arguments into a job's data object, reading them back.

The data of a task's job is ONE JSON object: the arguments bound by parameter name, defaults
applied (``{"to": "ada@example.com", "name": "there"}``), so any producer (BullMQ for Node
included) can enqueue a task by adding a job with the task's name and such an object.

Mapping rules (the one place they live):

- positional-or-keyword, keyword-only and positional-only parameters are keys of the object
  (a positional-only one is passed back positionally);
- ``**kwargs``: its items are more keys of the object, and keys that name no parameter go back
  into it on the worker;
- ``*args`` cannot be named in an object: a function that has it is refused when decorated.

Checks happen before anything is written: a missing or unknown argument, or a value that has no
JSON text, raises :class:`~echomq.ValidationError` naming the argument. With pydantic installed,
each argument is also validated and coerced against its type hint (a ``pydantic.TypeAdapter``
per parameter) on both sides: on enqueue, and on the worker for data a foreign producer wrote.
Return values are turned into JSON (pydantic models and dataclasses included) and read back as
the return annotation says.
"""

from __future__ import annotations

import dataclasses
import inspect
import typing
from collections.abc import Callable, Mapping
from typing import Any

from .._json import dumps
from ..errors import PayloadError, UnrecoverableError, ValidationError

try:  # the optional extra echomq[pydantic]
    import pydantic
    import pydantic_core
except ImportError:  # pragma: no cover - exercised where pydantic is absent
    pydantic = None  # type: ignore[assignment]
    pydantic_core = None  # type: ignore[assignment]

_EMPTY = inspect.Parameter.empty


class TaskSignature:
    """The parameters and type hints of one task function, and the conversions they imply."""

    def __init__(self, fn: Callable[..., Any], task_name: str) -> None:
        self.task_name = task_name
        self.signature = inspect.signature(fn)
        params = list(self.signature.parameters.values())
        if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params):
            raise TypeError(
                f"task {task_name!r}: *args cannot be bound into a job's data object (a JSON "
                "object of named arguments); give the values a named parameter (a list)"
            )
        self.named = [p for p in params if p.kind is not inspect.Parameter.VAR_KEYWORD]
        self.var_keyword = next(
            (p.name for p in params if p.kind is inspect.Parameter.VAR_KEYWORD), None
        )
        try:
            hints = typing.get_type_hints(fn, include_extras=True)
        except Exception:  # unresolvable forward references: plain checks only
            hints = {}
        self.hints: dict[str, Any] = hints
        self.returns: Any = hints.get("return", _EMPTY)
        self._adapters: dict[str, Any] = {}

    # -- producer side ---------------------------------------------------------------------

    def bind(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The job's data object for a call with ``args`` and ``kwargs``.

        Raises:
            ValidationError: an argument is missing, unknown, invalid for its type hint (with
                pydantic) or has no JSON text; the message names it.
        """
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise ValidationError(f"task {self.task_name!r}: {exc}") from None
        bound.apply_defaults()
        data: dict[str, Any] = {}
        for name, value in bound.arguments.items():
            if name == self.var_keyword:
                for key, item in value.items():
                    checked = self._validate(name, f"argument {key!r}", item, ValidationError)
                    data[key] = self._to_json(key, checked)
            else:
                checked = self._validate(name, f"argument {name!r}", value, ValidationError)
                data[name] = self._to_json(name, checked)
        return data

    def _to_json(self, name: str, value: Any) -> Any:
        if pydantic_core is not None:
            try:
                value = pydantic_core.to_jsonable_python(value)
            except pydantic_core.PydanticSerializationError as exc:
                raise PayloadError(
                    f"task {self.task_name!r}: argument {name!r} is not JSON-serialisable: {exc}"
                ) from None
        elif dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = dataclasses.asdict(value)
        dumps(value, f"task {self.task_name!r}: argument {name!r}")
        return value

    # -- worker side ------------------------------------------------------------------------

    def call_arguments(self, data: Any) -> tuple[list[Any], dict[str, Any]]:
        """The positional and keyword arguments to call the function with, from a job's data.

        Raises:
            UnrecoverableError: the data is not an object, lacks a required argument, has an
                unknown key, or a value is invalid for its type hint (with pydantic); the
                message names the argument.
        """
        if not isinstance(data, Mapping):
            raise UnrecoverableError(
                f"task {self.task_name!r}: job data must be a JSON object of named arguments, "
                f"got {type(data).__name__}"
            )
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        for param in self.named:
            if param.name not in data:
                if param.default is _EMPTY:
                    raise UnrecoverableError(
                        f"task {self.task_name!r}: missing argument {param.name!r} in job data"
                    )
                continue
            value = self._validate(
                param.name, f"argument {param.name!r}", data[param.name], UnrecoverableError
            )
            if param.kind is inspect.Parameter.POSITIONAL_ONLY:
                args.append(value)
            else:
                kwargs[param.name] = value
        extra = [key for key in data if key not in self.signature.parameters]
        if extra and self.var_keyword is None:
            raise UnrecoverableError(
                f"task {self.task_name!r}: unknown argument(s) {sorted(extra)} in job data; "
                f"it takes {[p.name for p in self.named]}"
            )
        for key in extra:
            assert self.var_keyword is not None
            kwargs[key] = self._validate(
                self.var_keyword, f"argument {key!r}", data[key], UnrecoverableError
            )
        return args, kwargs

    def result_to_json(self, value: Any) -> Any:
        """A task's return value as a JSON value (models and dataclasses as objects)."""
        if pydantic_core is not None:
            return pydantic_core.to_jsonable_python(value)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return dataclasses.asdict(value)
        return value

    # -- reading results --------------------------------------------------------------------

    def result_from_json(self, raw: Any) -> Any:
        """A stored return value as the return annotation says (as is without one).

        Raises:
            ValidationError: with pydantic, the stored value does not fit the annotation.
        """
        returns = self.returns
        if returns is _EMPTY or returns is Any or returns is None or returns is type(None):
            return raw
        if pydantic is not None:
            return self._validate("return", "return value", raw, ValidationError)
        if (
            dataclasses.is_dataclass(returns)
            and isinstance(returns, type)
            and isinstance(raw, Mapping)
        ):
            return returns(**raw)
        return raw

    # -- pydantic --------------------------------------------------------------------------

    def _validate(
        self,
        slot: str,
        label: str,
        value: Any,
        error: type[ValidationError | UnrecoverableError],
    ) -> Any:
        """``value`` validated and coerced against the type hint of ``slot`` (a parameter, the
        ``**kwargs`` parameter for each of its items, or ``return``); as is without pydantic or
        a hint. The error names ``label``."""
        hint = self.hints.get(slot, _EMPTY)
        if pydantic is None or hint is _EMPTY or hint is Any:
            return value
        adapter = self._adapters.get(slot)
        if adapter is None:
            adapter = self._adapters[slot] = pydantic.TypeAdapter(hint)
        try:
            return adapter.validate_python(value)
        except pydantic.ValidationError as exc:
            raise error(f"task {self.task_name!r}: {label}: {_describe(exc)}") from None


def _describe(exc: Any) -> str:
    """pydantic's errors in one line: ``field.path: message`` for each."""
    parts = []
    for err in exc.errors(include_url=False):
        loc = ".".join(str(part) for part in err.get("loc", ()))
        parts.append(f"{loc}: {err['msg']}" if loc else str(err["msg"]))
    return "; ".join(parts)
