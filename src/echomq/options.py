"""Job options: frozen, keyword-only dataclasses validated before anything is written.

Durations are seconds (``float``) or :class:`datetime.timedelta`; points in time are
:class:`datetime.datetime` or epoch seconds. Milliseconds exist only on the wire: the
``to_wire`` / ``from_wire`` conversions here produce them. Each job option is defined once, in
its field of :class:`JobOptions` (an :class:`OptionSpec`: wire name, doc, check, conversions);
:data:`OPTION_NAMES`, the class's ``Args:`` list, validation and the wire form are derived from
those fields. :class:`JobOptionsDict` (the typing of ``**options``, which static typing cannot
derive) is checked against them by ``tests/test_options_model.py``.

Per-call options override queue defaults through :data:`UNSET`, which is distinct from
``None``: ``JobOptions.merged(defaults, overrides)`` keeps a default only where the override is
``UNSET``.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from types import MappingProxyType
from typing import Any, Final, Literal, Protocol, TypeAlias, TypedDict

from .errors import InvalidOptionError

MAX_PRIORITY: Final = 2**21 - 1

Duration: TypeAlias = float | int | timedelta
Moment: TypeAlias = datetime | float | int


class _Unset(enum.Enum):
    UNSET = "UNSET"

    def __repr__(self) -> str:
        return "UNSET"


#: Marks an option that was not given, so a queue default applies.
UNSET: Final = _Unset.UNSET


def to_seconds(value: Duration, field: str, *, allow_negative: bool = False) -> float:
    """Convert a duration option to float seconds, refusing bad values with the field's name."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    else:
        raise InvalidOptionError(
            f"{field} must be seconds (int/float) or a timedelta, got {type(value).__name__}"
        )
    if not math.isfinite(seconds):
        raise InvalidOptionError(f"{field} must be finite, got {value!r}")
    if seconds < 0 and not allow_negative:
        raise InvalidOptionError(f"{field} must not be negative, got {value!r}")
    return seconds


def to_ms(value: Duration, field: str) -> int:
    """A non-negative duration in whole milliseconds (rounded)."""
    return round(to_seconds(value, field) * 1000)


def moment_to_ms(value: Moment, field: str) -> int:
    """A point in time (datetime or epoch seconds) as epoch milliseconds."""
    if isinstance(value, datetime):
        return round(value.timestamp() * 1000)
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        if value < 0:
            raise InvalidOptionError(f"{field} must not be before the epoch, got {value!r}")
        return round(value * 1000)
    raise InvalidOptionError(f"{field} must be a datetime or epoch seconds, got {value!r}")


def _check_int(value: object, field: str, *, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidOptionError(f"{field} must be an int, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"between {low} and {high}" if high is not None else f">= {low}"
        raise InvalidOptionError(f"{field} must be {bound}, got {value}")
    return value


def check_timeout(value: object, field: str) -> float:
    """A job timeout in seconds: a positive duration (seconds or timedelta)."""
    seconds = to_seconds(value, field, allow_negative=True)  # type: ignore[arg-type]
    if seconds <= 0:
        raise InvalidOptionError(f"{field} must be positive (seconds or timedelta), got {value!r}")
    return seconds


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Backoff:
    """How long to wait before retrying a failed attempt.

    Args:
        type: ``"fixed"``, ``"exponential"``, or the name of a worker's custom strategy.
        delay: the base delay (seconds or timedelta).
        jitter: 0..1; the share of the delay that is randomised.
    """

    type: str = "fixed"
    delay: Duration = 0.0
    jitter: float = 0.0

    def __post_init__(self) -> None:
        if not isinstance(self.type, str) or not self.type:
            raise InvalidOptionError(f"backoff.type must be a non-empty str, got {self.type!r}")
        to_seconds(self.delay, "backoff.delay")
        if (
            isinstance(self.jitter, bool)
            or not isinstance(self.jitter, (int, float))
            or not 0 <= self.jitter <= 1
        ):
            raise InvalidOptionError(f"backoff.jitter must be between 0 and 1, got {self.jitter!r}")

    @property
    def delay_ms(self) -> int:
        """The base delay in milliseconds (wire form)."""
        return to_ms(self.delay, "backoff.delay")

    @classmethod
    def coerce(cls, value: Backoff | Mapping[str, Any] | Duration) -> Backoff:
        """Accept a Backoff, a mapping like ``{"type": "fixed", "delay": 0.5}``, or a duration."""
        if isinstance(value, Backoff):
            return value
        if isinstance(value, Mapping):
            unknown = set(value) - {"type", "delay", "jitter"}
            if unknown:
                raise InvalidOptionError(
                    f"backoff has unknown keys {sorted(unknown)}; allowed: type, delay, jitter"
                )
            return cls(**value)
        if isinstance(value, (int, float, timedelta)) and not isinstance(value, bool):
            return cls(type="fixed", delay=value)
        raise InvalidOptionError(
            f"backoff must be a Backoff, a mapping or a duration, got {value!r}"
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class KeepJobs:
    """Retention of finished jobs: keep at most ``count`` jobs, none older than ``age``.

    Args:
        count: how many finished jobs to keep (None: no count limit).
        age: the maximum age (seconds or timedelta; None: no age limit).
        limit: how many old jobs one finish may delete at most (protects Redis latency).
    """

    count: int | None = None
    age: Duration | None = None
    limit: int | None = None

    def __post_init__(self) -> None:
        if self.count is not None:
            _check_int(self.count, "keep.count", low=0)
        if self.age is not None:
            to_seconds(self.age, "keep.age")
        if self.limit is not None:
            _check_int(self.limit, "keep.limit", low=1)
        if self.count is None and self.age is None:
            raise InvalidOptionError("KeepJobs needs count or age")


#: What ``remove_on_complete`` / ``remove_on_fail`` accept: True (remove at once), False (keep
#: all), a count to keep, or a :class:`KeepJobs`.
Retention: TypeAlias = bool | int | KeepJobs


def _check_retention(value: object, field: str) -> None:
    if isinstance(value, (bool, KeepJobs)):
        return
    if not isinstance(value, int) or value < 0:
        raise InvalidOptionError(
            f"{field} must be True (remove at once), False (keep all), a count >= 0 of jobs to "
            f"keep, or a KeepJobs(count=..., age=...), got {value!r}"
        )


@dataclasses.dataclass(frozen=True, slots=True)
class Parent:
    """The parent a job is added under (a flow): its id and its queue's qualified name.

    Args:
        id: the parent job's id.
        queue: the parent's queue as ``"<prefix>:<name>"`` (``job.queue_qualified_name``),
            e.g. ``"bull:videos"``.
    """

    id: str
    queue: str

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id or ":" in self.id:
            raise InvalidOptionError(
                f"parent id must be a non-empty str without ':', got {self.id!r}"
            )
        if not isinstance(self.queue, str) or ":" not in self.queue.strip(":"):
            raise InvalidOptionError(
                "parent queue must be the qualified name '<prefix>:<queue name>' "
                f"(job.queue_qualified_name, e.g. 'bull:videos'), got {self.queue!r}"
            )

    @property
    def prefix(self) -> str:
        """The parent queue's key prefix."""
        return self.queue.rpartition(":")[0]

    @property
    def queue_name(self) -> str:
        """The parent queue's name."""
        return self.queue.rpartition(":")[2]

    @property
    def key(self) -> str:
        """The parent's job key, ``"<prefix>:<name>:<id>"``."""
        return f"{self.queue}:{self.id}"

    @classmethod
    def coerce(cls, value: object) -> Parent:
        """Accept a Parent, a mapping ``{"id": ..., "queue": "prefix:name"}`` (Node's form), or
        a job (anything with ``id`` and ``queue_qualified_name``)."""
        if isinstance(value, Parent):
            return value
        if isinstance(value, Mapping):
            unknown = set(value) - {"id", "queue"}
            if unknown or "id" not in value or "queue" not in value:
                raise InvalidOptionError(
                    "parent must be {'id': <parent job id>, 'queue': '<prefix>:<queue name>'}"
                    f" or a Job, got {dict(value)!r}"
                )
            return cls(value["id"], value["queue"])
        job_id = getattr(value, "id", None)
        queue = getattr(value, "queue_qualified_name", None)
        if isinstance(job_id, str) and isinstance(queue, str):
            return cls(job_id, queue)
        raise InvalidOptionError(
            "parent must be {'id': <parent job id>, 'queue': '<prefix>:<queue name>'} or a Job,"
            f" got {value!r}"
        )


class ParentJob(Protocol):
    """What ``parent=`` accepts of a job: its id and its queue's qualified name."""

    @property
    def id(self) -> str:
        """The job id."""
        ...

    @property
    def queue_qualified_name(self) -> str:
        """``"<prefix>:<queue name>"``."""
        ...


@dataclasses.dataclass(frozen=True, slots=True)
class Deduplication:
    """Add a job only when no job owns the deduplication window of ``id`` (BullMQ's
    ``deduplication`` option; see docs/dedup.md).

    An add whose window is owned creates nothing and returns the owner (``job.deduplicated``
    is True). The window opens with the job that is added and lasts:

    - without ``ttl`` (simple): until that job completes or fails;
    - with ``ttl`` (throttle): ``ttl``, whatever happens to the job;
    - with ``ttl`` and ``extend``: ``ttl`` from the latest add, each deduplicated add restarting it;
    - with ``replace`` (debounce, with ``extend`` and a ``delay``): an add that finds the owner
      still delayed deletes it and takes its place.

    Args:
        id: the deduplication id; the jobs that share it are deduplicated together.
        ttl: how long the window lasts (seconds or timedelta; positive).
        extend: restart the ``ttl`` on each deduplicated add.
        replace: an add that finds the owner still delayed replaces it.
        keep_last_if_active: an add that finds the owner active is kept aside (the latest one
            wins) and added when the owner finishes; the window then lasts until the owner
            finishes, whatever ``ttl`` says.
    """

    id: str
    _: dataclasses.KW_ONLY
    ttl: Duration | None = None
    extend: bool = False
    replace: bool = False
    keep_last_if_active: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise InvalidOptionError(f"deduplication id must be a non-empty str, got {self.id!r}")
        if self.ttl is not None and to_seconds(self.ttl, "deduplication.ttl") <= 0:
            raise InvalidOptionError(f"deduplication.ttl must be positive, got {self.ttl!r}")
        if self.ttl is not None and self.ttl_ms == 0:
            raise InvalidOptionError(f"deduplication.ttl must be at least 1 ms, got {self.ttl!r}")
        for flag in ("extend", "replace", "keep_last_if_active"):
            if not isinstance(getattr(self, flag), bool):
                raise InvalidOptionError(
                    f"deduplication.{flag} must be a bool, got {getattr(self, flag)!r}"
                )

    @property
    def ttl_ms(self) -> int | None:
        """The ttl in milliseconds (wire form), or None."""
        return None if self.ttl is None else to_ms(self.ttl, "deduplication.ttl")

    @classmethod
    def coerce(cls, value: object) -> Deduplication:
        """Accept a Deduplication or a mapping of its fields (``{"id": ..., "ttl": ...}``)."""
        if isinstance(value, Deduplication):
            return value
        if isinstance(value, Mapping):
            allowed = {"id", "ttl", "extend", "replace", "keep_last_if_active"}
            unknown = set(value) - allowed
            if unknown or "id" not in value:
                raise InvalidOptionError(
                    f"deduplication has unknown keys {sorted(unknown)} or no id; allowed: "
                    f"{sorted(allowed)}"
                )
            return cls(**value)
        raise InvalidOptionError(
            f"deduplication must be a Deduplication or a mapping, got {value!r}"
        )


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class JobTelemetry:
    """The per-job ``telemetry`` option (BullMQ's ``{metadata, omitContext}``, stored as the
    ``tm`` and ``omc`` keys of ``opts``; see docs/operations.md, "OpenTelemetry").

    Args:
        metadata: the trace context the job carries: a string, the JSON of a W3C carrier
            (``'{"traceparent": "00-..."}'``). A producer with ``telemetry=`` writes it; one
            given here is stored as is and wins over the producer's.
        omit_context: do not attach the producer's trace context to this job.
    """

    metadata: str | None = None
    omit_context: bool = False

    def __post_init__(self) -> None:
        if self.metadata is not None and not isinstance(self.metadata, str):
            raise InvalidOptionError(
                f"telemetry.metadata must be a str (JSON text) or None, got {self.metadata!r}"
            )
        if not isinstance(self.omit_context, bool):
            raise InvalidOptionError(
                f"telemetry.omit_context must be a bool, got {self.omit_context!r}"
            )

    @classmethod
    def coerce(cls, value: object) -> JobTelemetry:
        """Accept a JobTelemetry or a mapping of its fields."""
        if isinstance(value, JobTelemetry):
            return value
        if isinstance(value, Mapping):
            unknown = set(value) - {"metadata", "omit_context"}
            if unknown:
                raise InvalidOptionError(
                    f"telemetry has unknown keys {sorted(unknown)}; allowed: "
                    "['metadata', 'omit_context']"
                )
            return cls(**value)
        raise InvalidOptionError(f"telemetry must be a JobTelemetry or a mapping, got {value!r}")


# -- the wire form (BullMQ's ``opts`` object): encoders and lenient decoders ---------------------


def _same(value: Any) -> Any:
    return value


def _retention_to_wire(value: Retention) -> Any:
    if isinstance(value, KeepJobs):
        out: dict[str, int] = {}
        if value.count is not None:
            out["count"] = value.count
        if value.age is not None:
            out["age"] = round(to_seconds(value.age, "keep.age"))
        if value.limit is not None:
            out["limit"] = value.limit
        return out
    return value


def _dedup_to_wire(value: Deduplication) -> dict[str, Any]:
    out: dict[str, Any] = {"id": value.id}
    if value.ttl_ms is not None:
        out["ttl"] = value.ttl_ms
    if value.extend:
        out["extend"] = True
    if value.replace:
        out["replace"] = True
    if value.keep_last_if_active:
        out["keepLastIfActive"] = True
    return out


def _backoff_to_wire(value: Backoff) -> dict[str, Any]:
    out: dict[str, Any] = {"type": value.type, "delay": value.delay_ms}
    if value.jitter:
        out["jitter"] = value.jitter
    return out


def _telemetry_to_wire(value: JobTelemetry) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if value.metadata is not None:
        out[TELEMETRY_KEY] = value.metadata
    if value.omit_context:
        out[OMIT_CONTEXT] = True
    return out


def _telemetry_from_wire(wire: Mapping[str, Any]) -> JobTelemetry | None:
    """``tm`` (a string) and ``omc`` (a bool); a value of another type is read as absent."""
    metadata = wire.get(TELEMETRY_KEY)
    if not isinstance(metadata, str):
        metadata = None
    omit = wire.get(OMIT_CONTEXT) is True
    if metadata is None and not omit:
        return None
    return JobTelemetry(metadata=metadata, omit_context=omit)


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _count(low: int, high: int | None = None) -> Callable[[Any], int | None]:
    def decode(value: Any) -> int | None:
        n = _int_or_none(value)
        return n if n is not None and n >= low and (high is None or n <= high) else None

    return decode


def _ms_to_seconds(value: Any) -> float | None:
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
        return value / 1000
    return None


def retention_from_wire(value: Any) -> Retention | None:
    """Read a stored removeOnComplete / removeOnFail value (None when unreadable)."""
    if isinstance(value, bool):
        return value
    count = _int_or_none(value)
    if count is not None:
        return max(count, 0)
    if isinstance(value, Mapping):
        c = _int_or_none(value.get("count"))
        age = value.get("age")
        limit = _int_or_none(value.get("limit"))
        age_s = float(age) if isinstance(age, (int, float)) and not isinstance(age, bool) else None
        if c is None and age_s is None:
            return None
        if c is not None and c < 0:
            return False
        return KeepJobs(count=c, age=age_s, limit=limit if limit and limit > 0 else None)
    return None


def backoff_from_wire(value: Any) -> Backoff | None:
    """Read a stored backoff as Node does: a bare number means fixed with that delay in ms."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Backoff(type="fixed", delay=timedelta(milliseconds=max(value, 0)))
    if isinstance(value, Mapping):
        kind = value.get("type")
        delay = value.get("delay", 0)
        jitter = value.get("jitter", 0)
        if not isinstance(kind, str) or not kind:
            return None
        if not isinstance(delay, (int, float)) or isinstance(delay, bool) or delay < 0:
            delay = 0
        if not isinstance(jitter, (int, float)) or not 0 <= jitter <= 1:
            jitter = 0
        return Backoff(type=kind, delay=delay / 1000, jitter=jitter)
    return None


def _bool_or_none(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _parent_from_wire(value: Any) -> Parent | None:
    if isinstance(value, Mapping):
        try:
            return Parent(str(value.get("id")), str(value.get("queue")))
        except InvalidOptionError:
            return None
    return None


def _dedup_from_wire(value: Any) -> Deduplication | None:
    """A stored ``de`` object; flags that are not booleans, and a ttl that is not a positive
    number of ms, are read as absent (``reschedule`` is not an echomq option)."""
    if not isinstance(value, Mapping) or not isinstance(value.get("id"), str) or not value["id"]:
        return None
    ttl = _ms_to_seconds(value.get("ttl"))
    return Deduplication(
        value["id"],
        ttl=ttl if ttl is not None and math.isfinite(ttl) and ttl >= 0.001 else None,
        extend=value.get("extend") is True,
        replace=value.get("replace") is True,
        keep_last_if_active=value.get("keepLastIfActive") is True,
    )


#: The ``opts`` keys of the telemetry option: ``metadata`` is stored as ``tm`` (a string: the
#: JSON of a W3C carrier), ``omit_context`` as ``omc`` (docs/operations.md, "OpenTelemetry").
TELEMETRY_KEY: Final = "tm"
OMIT_CONTEXT: Final = "omc"


def _keep(value: Any, field: str) -> Any:
    return value


def _int_in(low: int, high: int | None = None) -> Callable[[Any, str], Any]:
    return lambda value, field: _check_int(value, field, low=low, high=high)


def _is_bool(value: Any, field: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidOptionError(f"{field} must be a bool, got {value!r}")
    return value


def _validated_by(check: Callable[[Any, str], object]) -> Callable[[Any, str], Any]:
    """A check that keeps the value as given once ``check(value, field)`` accepted it."""

    def validated(value: Any, field: str) -> Any:
        check(value, field)
        return value

    return validated


_is_duration = _validated_by(to_seconds)
_is_moment = _validated_by(moment_to_ms)
_is_retention = _validated_by(_check_retention)
_is_timeout = _validated_by(check_timeout)


def _is_job_id(value: Any, field: str) -> str:
    if not isinstance(value, str):
        from .errors import InvalidJobIdError

        raise InvalidJobIdError(f"{field} must be a str, got {type(value).__name__} {value!r}")
    return value


#: The longest group id accepted (characters).
MAX_GROUP_ID = 256


def _is_group_id(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise InvalidOptionError(
            f"{field} must be a str (a tenant, customer or API key id), got "
            f"{type(value).__name__} {value!r}"
        )
    if not value:
        raise InvalidOptionError(f"{field} must not be empty; leave it unset for no group")
    if len(value) > MAX_GROUP_ID:
        raise InvalidOptionError(
            f"{field} must be at most {MAX_GROUP_ID} characters, got {len(value)}; use a "
            "shorter id (a hash of a long one, for instance)"
        )
    return value


def _coerced_by(coerce: Callable[[Any], Any]) -> Callable[[Any, str], Any]:
    return lambda value, field: coerce(value)


@dataclasses.dataclass(frozen=True, slots=True)
class OptionSpec:
    """One job option, defined once, in its :class:`JobOptions` field: the key of the stored
    ``opts`` object (BullMQ's name; docs/protocol/options.md#option-names), what the option
    means, how a value is checked (and coerced) before anything is written, and how it goes to
    the wire and comes back (leniently: an unreadable value reads as unset, None)."""

    wire: str
    doc: str
    #: required: what a foreign producer stored is never taken on trust
    from_wire: Callable[[Any], Any]
    check: Callable[[Any, str], Any] = _keep
    to_wire: Callable[[Any], Any] = _same
    #: the option spans several keys: ``to_wire`` returns them all, ``from_wire`` reads the
    #: whole ``opts`` object
    several_keys: bool = False

    def encode(self, value: Any) -> dict[str, Any]:
        """The ``opts`` keys and values of ``value``."""
        if self.several_keys:
            return dict(self.to_wire(value))
        return {self.wire: self.to_wire(value)}

    def decode(self, opts: Mapping[str, Any]) -> Any:
        """The option's value in a stored ``opts`` object, or None when absent or unreadable."""
        if self.several_keys:
            return self.from_wire(opts)
        return self.from_wire(opts[self.wire]) if self.wire in opts else None


_SPEC = "echomq.option"


def _option(wire: str, doc: str, **spec: Any) -> Any:
    """A :class:`JobOptions` field: unset by default, its :class:`OptionSpec` in its metadata."""
    return dataclasses.field(default=UNSET, metadata={_SPEC: OptionSpec(wire, doc, **spec)})


def _flag(wire: str, doc: str) -> Any:
    """A bool option."""
    return _option(wire, doc, check=_is_bool, from_wire=_bool_or_none)


def _number(wire: str, doc: str, low: int, high: int | None = None) -> Any:
    """An int option from ``low`` (to ``high``)."""
    return _option(wire, doc, check=_int_in(low, high), from_wire=_count(low, high))


def _retention(wire: str, doc: str) -> Any:
    """A retention option (``True``, ``False``, a count or a :class:`KeepJobs`)."""
    return _option(
        wire,
        doc,
        check=_is_retention,
        to_wire=_retention_to_wire,
        from_wire=retention_from_wire,
    )


#: The four failure policies of a child job (at most one per job), by option name.
FAILURE_POLICIES: Final = (
    "fail_parent_on_failure",
    "continue_parent_on_failure",
    "ignore_dependency_on_failure",
    "remove_dependency_on_failure",
)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class JobOptions:
    """Options of one job. Every field is optional; ``UNSET`` means "use the default".

    Each field is the one definition of its option (:class:`OptionSpec`: its ``opts`` key, its
    meaning, its check and its wire conversions); the list below is made from them.

    At most one of the four failure policies may be set. A child without one that fails for
    good keeps its parent waiting (until the child is retried or removed).
    """

    job_id: str | _Unset = _option(
        "jobId",
        "a custom id (a string that is not an integer, without ``:``).",
        check=_is_job_id,
        from_wire=lambda value: value if isinstance(value, str) and value else None,
    )
    delay: Duration | _Unset = _option(
        "delay",
        "wait this long before the job may run.",
        check=_is_duration,
        to_wire=lambda value: to_ms(value, "delay"),
        from_wire=_ms_to_seconds,
    )
    priority: int | _Unset = _number(
        "priority",
        "0 (none) .. 2**21-1; lower numbers run first.",
        0,
        MAX_PRIORITY,
    )
    lifo: bool | _Unset = _flag(
        "lifo",
        "put the job at the front of the line instead of the back.",
    )
    attempts: int | _Unset = _number(
        "attempts",
        "total number of tries (0 and 1 both mean one try).",
        0,
    )
    backoff: Backoff | _Unset = _option(
        "backoff",
        "delay between tries.",
        check=_coerced_by(Backoff.coerce),
        to_wire=_backoff_to_wire,
        from_wire=backoff_from_wire,
    )
    remove_on_complete: Retention | _Unset = _retention(
        "removeOnComplete",
        "retention of the job once completed.",
    )
    remove_on_fail: Retention | _Unset = _retention(
        "removeOnFail",
        "retention of the job once failed.",
    )
    keep_logs: int | _Unset = _number("kl", "keep only the newest N log lines.", 0)
    stacktrace_limit: int | _Unset = _number(
        "stackTraceLimit",
        "keep only the newest N stack traces.",
        0,
    )
    size_limit: int | _Unset = _number(
        "sizeLimit",
        "refuse data whose JSON text is larger than this many bytes.",
        1,
    )
    timestamp: Moment | _Unset = _option(
        "timestamp",
        "creation time (defaults to now).",
        check=_is_moment,
        to_wire=lambda value: moment_to_ms(value, "timestamp"),
        from_wire=_ms_to_seconds,
    )
    parent: Parent | _Unset = _option(
        "parent",
        "add the job as a child of this existing job (a :class:`Parent`, a mapping "
        '``{"id": ..., "queue": "prefix:name"}`` or a Job); the parent must exist.',
        check=_coerced_by(Parent.coerce),
        to_wire=lambda value: {"id": value.id, "queue": value.queue},
        from_wire=_parent_from_wire,
    )
    fail_parent_on_failure: bool | _Unset = _flag(
        "fpof",
        "when this child fails for good, fail its parent.",
    )
    continue_parent_on_failure: bool | _Unset = _flag(
        "cpof",
        "when this child fails for good, release its parent at once, even with other "
        "children pending.",
    )
    ignore_dependency_on_failure: bool | _Unset = _flag(
        "idof",
        "when this child fails for good, count it as done and record its failure in the "
        "parent (``get_ignored_children_failures``).",
    )
    remove_dependency_on_failure: bool | _Unset = _flag(
        "rdof",
        "when this child fails for good, count it as done, recording nothing.",
    )
    deduplication: Deduplication | _Unset = _option(
        "de",
        "add the job only when no job owns this deduplication window (a "
        ":class:`Deduplication` or a mapping of its fields); not with ``parent``.",
        check=_coerced_by(Deduplication.coerce),
        to_wire=_dedup_to_wire,
        from_wire=_dedup_from_wire,
    )
    # echomq's own: BullMQ 6 has no such option and passes unknown keys through untouched.
    timeout: Duration | _Unset = _option(
        "emqTimeout",
        "fail an attempt that runs longer than this (seconds or timedelta; positive) with "
        ":class:`~echomq.JobTimeoutError`; echomq workers enforce it, Node workers ignore it "
        '(see docs/workers.md, "Process isolation and timeouts").',
        check=_is_timeout,
        to_wire=lambda value: max(to_ms(value, "timeout"), 1),
        from_wire=lambda value: _ms_to_seconds(value) or None,
    )
    # echomq's own (docs/groups.md): BullMQ 6 passes the key through; the scripts read the
    # group from the job hash's `gid` field.
    group: str | _Unset = _option(
        "emqGroup",
        "the job's group (a non-empty str of at most 256 characters, e.g. a tenant id): it "
        "waits apart from other groups' jobs, under its group's limits, and groups take turns "
        "(docs/groups.md); BullMQ workers for Node never take it.",
        check=_is_group_id,
        from_wire=lambda value: value if isinstance(value, str) and value else None,
    )
    telemetry: JobTelemetry | _Unset = _option(
        TELEMETRY_KEY,
        "the job's trace context options (a :class:`JobTelemetry` or a mapping of its "
        "fields; stored as ``tm`` / ``omc`` as BullMQ does).",
        check=_coerced_by(JobTelemetry.coerce),
        to_wire=_telemetry_to_wire,
        from_wire=_telemetry_from_wire,
        several_keys=True,
    )

    def __post_init__(self) -> None:
        for name, spec in _SPECS.items():
            value = getattr(self, name)
            if value is not UNSET:
                checked = spec.check(value, name)
                if checked is not value:
                    object.__setattr__(self, name, checked)
        chosen = [policy for policy in FAILURE_POLICIES if getattr(self, policy) is True]
        if len(chosen) > 1:
            raise InvalidOptionError(
                f"the failure policies {' and '.join(chosen)} cannot be used together; "
                "choose one for this job"
            )
        if self.deduplication is not UNSET and self.parent is not UNSET:
            raise InvalidOptionError(
                "deduplication and parent cannot be used together (as in BullMQ): a child "
                "job cannot be deduplicated"
            )

    @property
    def failure_policy(self) -> str | None:
        """The wire flag of the failure policy set (``fpof``, ``cpof``, ``idof``, ``rdof``) or
        None."""
        for policy in FAILURE_POLICIES:
            if getattr(self, policy) is True:
                return _SPECS[policy].wire
        return None

    @classmethod
    def build(cls, options: Mapping[str, Any]) -> JobOptions:
        """Build from keyword options, naming unknown ones in the error."""
        if not options:
            return EMPTY_OPTIONS
        unknown = set(options) - set(_SPECS)
        if unknown:
            raise InvalidOptionError(
                f"unknown job option(s) {sorted(unknown)}; allowed: {sorted(_SPECS)}"
            )
        return cls(**options)

    def merged(self, overrides: JobOptions) -> JobOptions:
        """These options with every field that ``overrides`` sets replaced."""
        if overrides is EMPTY_OPTIONS:
            return self
        changes = {
            name: getattr(overrides, name)
            for name in _SPECS
            if getattr(overrides, name) is not UNSET
        }
        return dataclasses.replace(self, **changes) if changes else self

    def get(self, name: str, default: Any = None) -> Any:
        """The value of option ``name``, or ``default`` when it is UNSET."""
        value = getattr(self, name)
        return default if value is UNSET else value

    def to_wire(self) -> dict[str, Any]:
        """The ``opts`` object Node would store for these options (always with ``attempts``)."""
        wire: dict[str, Any] = {_SPECS["attempts"].wire: self.get("attempts", 0)}
        for name, spec in _SPECS.items():
            value = getattr(self, name)
            if value is not UNSET and name != "attempts":
                wire.update(spec.encode(value))
        return wire

    @classmethod
    def from_wire(cls, wire: Any) -> JobOptions:
        """Decode a stored ``opts`` object leniently (foreign producers may write anything):
        a value that is missing or unreadable leaves its option UNSET."""
        if not isinstance(wire, Mapping):
            return cls()
        kw: dict[str, Any] = {}
        for name, spec in _SPECS.items():
            value = spec.decode(wire)
            if value is not None:
                kw[name] = value
        flags = [policy for policy in FAILURE_POLICIES if kw.get(policy) is True]
        for policy in flags[1:]:  # a foreign writer set several: the first one acts
            del kw[policy]
        return cls(**kw)


#: Every job option's definition, by field name, in field order.
_SPECS: Final[Mapping[str, OptionSpec]] = MappingProxyType(
    {f.name: f.metadata[_SPEC] for f in dataclasses.fields(JobOptions)}
)
#: Keys of the stored ``opts`` object, by :class:`JobOptions` field (BullMQ's names;
#: docs/protocol/options.md#option-names).
OPTION_NAMES: Final[Mapping[str, str]] = MappingProxyType(
    {name: spec.wire for name, spec in _SPECS.items()}
)
JobOptions.__doc__ = (JobOptions.__doc__ or "").replace(
    "\n\n    At most one",
    "\n\n    Args:\n"
    + "".join(f"        {name}: {spec.doc}\n" for name, spec in _SPECS.items())
    + "\n    At most one",
    1,
)

EMPTY_OPTIONS: Final = JobOptions()


def keep_jobs_to_wire(value: Retention | None) -> dict[str, int]:
    """The ``keepJobs`` object a finishing worker sends: count -1 keeps all.

    See docs/protocol/options.md#retention.
    """
    if value is None or value is False:
        return {"count": -1}
    if value is True:
        return {"count": 0}
    if isinstance(value, KeepJobs):
        out: dict[str, int] = {"count": -1 if value.count is None else value.count}
        if value.age is not None:
            out["age"] = round(to_seconds(value.age, "keep.age"))
        if value.limit is not None:
            out["limit"] = value.limit
        return out
    return {"count": value}


State = Literal[
    "completed", "failed", "delayed", "active", "waiting", "prioritized", "waiting-children"
]


class JobOptionsDict(TypedDict, total=False):
    """The keyword form of :class:`JobOptions` (``await echomq.add(..., delay=5)``)."""

    job_id: str
    delay: Duration
    priority: int
    lifo: bool
    attempts: int
    backoff: Backoff | Mapping[str, Any] | Duration
    remove_on_complete: Retention
    remove_on_fail: Retention
    keep_logs: int
    stacktrace_limit: int
    size_limit: int
    timestamp: Moment
    parent: Parent | Mapping[str, str] | ParentJob
    fail_parent_on_failure: bool
    continue_parent_on_failure: bool
    ignore_dependency_on_failure: bool
    remove_dependency_on_failure: bool
    deduplication: Deduplication | Mapping[str, Any]
    timeout: Duration
    group: str
    telemetry: JobTelemetry | Mapping[str, Any]


def coerce_options(value: JobOptions | Mapping[str, Any] | None) -> JobOptions:
    """Accept a JobOptions, a mapping of option keywords, or None (no options)."""
    if value is None:
        return EMPTY_OPTIONS
    if isinstance(value, JobOptions):
        return value
    if isinstance(value, Mapping):
        return JobOptions.build(value)
    raise InvalidOptionError(f"job options must be a JobOptions or a mapping, got {value!r}")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Limiter:
    """Take at most ``max`` jobs per ``duration``, across every worker with this limiter.

    Args:
        max: jobs per window.
        duration: the window (seconds or timedelta).
    """

    max: int
    duration: Duration

    def __post_init__(self) -> None:
        _check_int(self.max, "limiter.max", low=1)
        if to_seconds(self.duration, "limiter.duration") <= 0:
            raise InvalidOptionError("limiter.duration must be positive")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Batch:
    """Give the processor jobs in lists (docs/workers.md, "Batches").

    The processor is called with a list of up to ``size`` jobs and returns a list of as many
    results, in the same order; an exception instance at a position fails that job alone.
    A batch is called once it has ``size`` jobs, or ``wait`` after its first job arrived.

    Args:
        size: the most jobs in one call (>= 1).
        wait: how long a batch waits after its first job for more to fill it (seconds or
            timedelta, >= 0; 0: only the jobs that arrived together).
    """

    size: int
    wait: Duration = 0.0

    def __post_init__(self) -> None:
        _check_int(self.size, "batch.size", low=1)
        to_seconds(self.wait, "batch.wait")

    @property
    def wait_seconds(self) -> float:
        """``wait`` in seconds."""
        return to_seconds(self.wait, "batch.wait")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class WorkerOptions:
    """How a worker runs. Durations are seconds or timedelta.

    Args:
        concurrency: how many jobs run at once in this worker.
        name: worker name, written to jobs it takes (``pb``) and to its client name.
        lock_duration: how long a job's lock lives without renewal.
        lock_renew_time: how often locks are renewed (default: half the lock duration).
        stalled_interval: how often the stalled check runs (fleet-wide, at most once per interval).
        max_stalled_count: how often a job may stall before it fails.
        drain_delay: how long an idle worker blocks on the marker before checking again.
        limiter: a rate limit for taking jobs.
        remove_on_complete: default retention of completed jobs without their own option.
        remove_on_fail: default retention of failed jobs without their own option.
        metrics_max_data_points: keep per-minute metrics for this many minutes (None: off).
        max_started_attempts: fail jobs started more often than this (None: no limit).
        close_grace: how long ``close()`` waits for running jobs before cancelling them.
        batch_finish: record finished jobs of a worker together in one script call.
        processes: run a sync processor in a pool of this many child processes (0: in the
            worker's threads); see docs/workers.md, "Process isolation and timeouts".
        max_tasks_per_child: replace a pool child after it ran this many jobs (None: never).
        job_timeout: the timeout of jobs without their own ``timeout`` option (None: none).
        skip_stalled_check: run no stalled check in this worker (other workers of the queue,
            or none, do it).
        skip_lock_renewal: never renew the locks of this worker's jobs (a job running longer
            than ``lock_duration`` is then taken for stalled).
        maximum_rate_limit_delay: the longest the worker sleeps out a rate limit before it
            asks Redis again.
        heartbeat_interval: how often the worker refreshes its entry in the queue's worker
            registry, which ``get_workers()`` and the dashboard read; an entry lives three
            intervals without a refresh (None: keep no entry; docs/workers.md, "Listing
            workers").
        batch: give the processor lists of jobs (a :class:`Batch`; None: one job per call);
            not with ``processes``. The worker runs at least ``batch.size`` jobs at once: a
            lower ``concurrency`` here is raised to it (``Worker(concurrency=...)`` or
            ``worker.concurrency = ...`` below it is refused).
    """

    concurrency: int = 1
    name: str | None = None
    lock_duration: Duration = 30.0
    lock_renew_time: Duration | None = None
    stalled_interval: Duration = 30.0
    max_stalled_count: int = 1
    drain_delay: Duration = 5.0
    limiter: Limiter | None = None
    remove_on_complete: Retention | None = None
    remove_on_fail: Retention | None = None
    metrics_max_data_points: int | None = None
    max_started_attempts: int | None = None
    close_grace: Duration = 30.0
    batch_finish: bool = True
    processes: int = 0
    max_tasks_per_child: int | None = None
    job_timeout: Duration | None = None
    skip_stalled_check: bool = False
    skip_lock_renewal: bool = False
    maximum_rate_limit_delay: Duration = 30.0
    heartbeat_interval: Duration | None = 5.0
    batch: Batch | None = None

    def __post_init__(self) -> None:
        _check_int(self.concurrency, "concurrency", low=1)
        for flag in ("skip_stalled_check", "skip_lock_renewal"):
            if not isinstance(getattr(self, flag), bool):
                raise InvalidOptionError(
                    f"{flag} must be True or False, got {getattr(self, flag)!r}"
                )
        if to_seconds(self.maximum_rate_limit_delay, "maximum_rate_limit_delay") <= 0:
            raise InvalidOptionError(
                "maximum_rate_limit_delay must be more than 0 seconds,"
                f" got {self.maximum_rate_limit_delay!r}"
            )
        _check_int(self.processes, "processes", low=0)
        if (
            self.heartbeat_interval is not None
            and to_seconds(self.heartbeat_interval, "heartbeat_interval") <= 0
        ):
            raise InvalidOptionError(
                "heartbeat_interval must be more than 0 seconds (or None: no registry entry),"
                f" got {self.heartbeat_interval!r}"
            )
        if self.max_tasks_per_child is not None:
            _check_int(self.max_tasks_per_child, "max_tasks_per_child", low=1)
        if self.job_timeout is not None:
            check_timeout(self.job_timeout, "job_timeout")
        if self.name is not None and (
            not isinstance(self.name, str) or not self.name or any(c.isspace() for c in self.name)
        ):
            raise InvalidOptionError(
                f"worker name must be a non-empty str without spaces, got {self.name!r}"
            )
        if to_seconds(self.lock_duration, "lock_duration") < 0.01:
            raise InvalidOptionError("lock_duration must be at least 0.01 seconds")
        if self.lock_renew_time is not None:
            to_seconds(self.lock_renew_time, "lock_renew_time")
        if to_seconds(self.stalled_interval, "stalled_interval") <= 0:
            raise InvalidOptionError("stalled_interval must be positive")
        _check_int(self.max_stalled_count, "max_stalled_count", low=0)
        to_seconds(self.drain_delay, "drain_delay")
        if self.limiter is not None and not isinstance(self.limiter, Limiter):
            raise InvalidOptionError(f"limiter must be a Limiter, got {self.limiter!r}")
        if self.remove_on_complete is not None:
            _check_retention(self.remove_on_complete, "remove_on_complete")
        if self.remove_on_fail is not None:
            _check_retention(self.remove_on_fail, "remove_on_fail")
        if self.metrics_max_data_points is not None:
            _check_int(self.metrics_max_data_points, "metrics_max_data_points", low=1)
        if self.max_started_attempts is not None:
            _check_int(self.max_started_attempts, "max_started_attempts", low=1)
        to_seconds(self.close_grace, "close_grace")
        if self.batch is not None:
            if not isinstance(self.batch, Batch):
                raise InvalidOptionError(f"batch must be a Batch, got {self.batch!r}")
            if self.processes:
                raise InvalidOptionError(
                    "batch does not work with processes: batches run in the worker's threads "
                    "(sync processors) or on its event loop (async ones)"
                )

    @property
    def lock_ms(self) -> int:
        """Lock duration in ms (wire form)."""
        return to_ms(self.lock_duration, "lock_duration")

    @property
    def renew_interval(self) -> float:
        """Seconds between lock-renewal ticks (half the renew time, as Node does)."""
        renew = (
            to_seconds(self.lock_renew_time, "lock_renew_time")
            if self.lock_renew_time is not None
            else to_seconds(self.lock_duration, "lock_duration") / 2
        )
        return max(renew / 2, 0.005)


class WorkerOptionsDict(TypedDict, total=False):
    """The keyword form of :class:`WorkerOptions` (except ``concurrency``)."""

    name: str | None
    lock_duration: Duration
    lock_renew_time: Duration | None
    stalled_interval: Duration
    max_stalled_count: int
    drain_delay: Duration
    limiter: Limiter | None
    remove_on_complete: Retention | None
    remove_on_fail: Retention | None
    metrics_max_data_points: int | None
    max_started_attempts: int | None
    close_grace: Duration
    batch_finish: bool
    processes: int
    max_tasks_per_child: int | None
    job_timeout: Duration | None
    skip_stalled_check: bool
    skip_lock_renewal: bool
    maximum_rate_limit_delay: Duration
    heartbeat_interval: Duration | None
    batch: Batch | None
