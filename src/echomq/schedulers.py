"""Job schedulers: the validated definition of a scheduler, and the record the getters return.

A job scheduler makes a job (an *iteration*) every ``every`` seconds or at each time of a cron
``pattern``, with BullMQ 6.7's layout, so echomq and BullMQ processes share schedulers
(docs/protocol/flows-dedup-schedulers.md#schedulers). ``Queue.upsert_job_scheduler`` creates or
replaces one; whichever worker takes an iteration creates the next one.

Everything is checked here before anything is written, more strictly than BullMQ (which stores a
negative interval, or an end before the start): a refused definition raises
:class:`~echomq.InvalidOptionError` naming the field. Cron times are computed by
:mod:`echomq._cron`, which refuses what it cannot evaluate exactly as BullMQ does.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any, TypedDict

from . import _cron
from .errors import InvalidOptionError
from .options import EMPTY_OPTIONS, UNSET, Duration, JobOptions, Moment, moment_to_ms, to_seconds
from .protocol import fields

#: Job options a template may not carry: each iteration's id, delay and time are the scheduler's.
_NOT_IN_TEMPLATE = (
    "job_id",
    "delay",
    "timestamp",
    "parent",
    "fail_parent_on_failure",
    "continue_parent_on_failure",
    "ignore_dependency_on_failure",
    "remove_dependency_on_failure",
    "deduplication",
)
_TEMPLATE_KEYS = frozenset({"name", "data", "opts"})


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerTemplate:
    """What each iteration of a scheduler is made of.

    Args:
        name: the job name (defaults to the scheduler id).
        data: the payload of every iteration (``{}`` when omitted).
        options: job options of every iteration (not ``job_id``, ``delay``, ``timestamp``,
            ``parent`` or a failure policy).
    """

    name: str | None = None
    data: Any = dataclasses.field(default_factory=dict)
    options: JobOptions = EMPTY_OPTIONS

    def __post_init__(self) -> None:
        if self.name is not None and (not isinstance(self.name, str) or not self.name):
            raise InvalidOptionError(f"template name must be a non-empty str, got {self.name!r}")
        if not isinstance(self.options, JobOptions):
            raise InvalidOptionError(
                f"template opts must be a JobOptions or a mapping, got {self.options!r}"
            )
        for name in _NOT_IN_TEMPLATE:
            if getattr(self.options, name, UNSET) not in (UNSET, None, False):
                raise InvalidOptionError(
                    f"template opts may not set {name}: each iteration's id, delay and time "
                    "come from the scheduler"
                )

    @classmethod
    def coerce(cls, value: SchedulerTemplate | Mapping[str, Any] | None) -> SchedulerTemplate:
        """Accept a template, a mapping ``{"name", "data", "opts"}`` or None."""
        if value is None:
            return cls()
        if isinstance(value, SchedulerTemplate):
            return value
        if not isinstance(value, Mapping):
            raise InvalidOptionError(
                f"template must be a mapping with name, data and opts, got {value!r}"
            )
        unknown = set(value) - _TEMPLATE_KEYS
        if unknown:
            raise InvalidOptionError(
                f"unknown template key(s) {sorted(unknown)}; allowed: {sorted(_TEMPLATE_KEYS)}"
            )
        opts = value.get("opts")
        if opts is None:
            options = EMPTY_OPTIONS
        elif isinstance(opts, JobOptions):
            options = opts
        elif isinstance(opts, Mapping):
            options = JobOptions.build(opts)
        else:
            raise InvalidOptionError(f"template opts must be a mapping, got {opts!r}")
        data = value.get("data")
        return cls(name=value.get("name"), data={} if data is None else data, options=options)


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    """When a job scheduler makes its iterations: the one definition of the scheduler fields
    (``Queue.upsert_job_scheduler`` takes them as keywords, :class:`ScheduleDict`).

    Exactly one of ``every`` and ``pattern`` is given; the fields are checked when the scheduler
    is upserted (:func:`build_spec`), before anything is written.

    Args:
        every: run every this many seconds (or a timedelta); the first run is now.
        pattern: a cron expression: 5 fields, or 6 with seconds first.
        tz: the IANA time zone of ``pattern`` (default: the process's local zone).
        start_date: no run before this time (datetime or epoch seconds).
        end_date: no run after this time.
        limit: at most this many iterations.
        immediately: a cron scheduler's first run is now instead of its next cron time.
        offset: an every-scheduler's phase within its interval (seconds).
    """

    every: Duration | None = None
    pattern: str | None = None
    tz: str | None = None
    start_date: Moment | None = None
    end_date: Moment | None = None
    limit: int | None = None
    immediately: bool = False
    offset: Duration | None = None

    @classmethod
    def build(cls, given: Mapping[str, Any]) -> Schedule:
        """From keywords, naming unknown ones in the error."""
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(given) - names
        if unknown:
            raise InvalidOptionError(
                f"unknown scheduler field(s) {sorted(unknown)}; allowed: {sorted(names)}"
            )
        return cls(**given)


class ScheduleDict(TypedDict, total=False):
    """The keyword form of :class:`Schedule` (``upsert_job_scheduler("id", every=60)``)."""

    every: Duration | None
    pattern: str | None
    tz: str | None
    start_date: Moment | None
    end_date: Moment | None
    limit: int | None
    immediately: bool
    offset: Duration | None


#: The scheduler hash's (and an iteration's ``opts.repeat``) names of the stored fields, by
#: :class:`SchedulerSpec` field (BullMQ's names; ``immediately`` is not stored).
_WIRE = {
    "every_ms": "every",
    "pattern": "pattern",
    "tz": "tz",
    "start_ms": "startDate",
    "end_ms": "endDate",
    "limit": "limit",
    "offset_ms": "offset",
}


@dataclasses.dataclass(frozen=True, slots=True)
class SchedulerSpec:
    """A checked :class:`Schedule` in protocol units (milliseconds); internal."""

    scheduler_id: str
    every_ms: int | None
    pattern: str | None
    tz: str | None
    start_ms: int | None
    end_ms: int | None
    limit: int | None
    immediately: bool
    offset_ms: int | None

    def repeat_options(self) -> dict[str, Any]:
        """The iteration's ``opts.repeat`` (without ``count``) as BullMQ stores it."""
        repeat: dict[str, Any] = {}
        for name, wire in _WIRE.items():
            value = getattr(self, name)
            if name == "offset_ms" and self.every_ms is None:
                continue  # a cron scheduler's offset is its own (set by the upsert)
            if value is not None:
                repeat[wire] = value
        return repeat


def _check_tz(tz: str | None) -> None:
    if tz is None:
        return
    if not isinstance(tz, str) or not tz:
        raise InvalidOptionError(f"tz must be an IANA time zone name, got {tz!r}")
    _cron.validate_cron("* * * * *", tz)


def build_spec(scheduler_id: str, schedule: Schedule, now_ms: int) -> SchedulerSpec:
    """Check a scheduler definition; raise :class:`InvalidOptionError` naming the bad field."""
    if not isinstance(scheduler_id, str) or not scheduler_id:
        raise InvalidOptionError(f"scheduler id must be a non-empty str, got {scheduler_id!r}")
    every, pattern, tz = schedule.every, schedule.pattern, schedule.tz
    if (every is None) == (pattern is None):
        raise InvalidOptionError(
            "give exactly one of every (an interval) and pattern (a cron expression)"
        )
    every_ms = None
    if every is not None:
        seconds = to_seconds(every, "every", allow_negative=True)
        every_ms = round(seconds * 1000)
        if every_ms <= 0:
            raise InvalidOptionError(f"every must be at least 1 ms, got {every!r}")
    if pattern is not None:
        if not isinstance(pattern, str):
            raise InvalidOptionError(f"pattern must be a cron expression str, got {pattern!r}")
        _cron.validate_cron(pattern, tz)
    _check_tz(tz)
    start, end = schedule.start_date, schedule.end_date
    start_ms = None if start is None else moment_to_ms(start, "start_date")
    end_ms = None if end is None else moment_to_ms(end, "end_date")
    if end_ms is not None:
        if start_ms is not None and end_ms <= start_ms:
            raise InvalidOptionError(
                f"end_date ({_iso(end_ms)}) must be after start_date ({_iso(start_ms)})"
            )
        if end_ms <= now_ms:
            raise InvalidOptionError(f"end_date ({_iso(end_ms)}) is not in the future")
    limit = schedule.limit
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InvalidOptionError(f"limit must be an int >= 1, got {limit!r}")
    immediately = schedule.immediately
    if not isinstance(immediately, bool):
        raise InvalidOptionError(f"immediately must be a bool, got {immediately!r}")
    if immediately and start_ms is not None:
        raise InvalidOptionError("immediately and start_date cannot be used together")
    offset_ms = None
    if schedule.offset is not None:
        if every_ms is None:
            raise InvalidOptionError("offset applies to every-schedulers only")
        offset_ms = round(to_seconds(schedule.offset, "offset") * 1000)
    return SchedulerSpec(
        scheduler_id, every_ms, pattern, tz, start_ms, end_ms, limit, immediately, offset_ms
    )


def template_wire_options(options: JobOptions) -> dict[str, Any]:
    """The template's stored ``opts``: only the options given (BullMQ adds no ``attempts``)."""
    wire = options.to_wire()
    if options.attempts is UNSET:
        wire.pop("attempts", None)
    return wire


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, timezone.utc).isoformat()


def _moment(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, timezone.utc)


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return int(value) if math.isfinite(value) else None


@dataclasses.dataclass(frozen=True, slots=True)
class JobScheduler:
    """A job scheduler as stored in Redis (or a BullMQ 5 repeatable job, ``legacy``).

    Attributes:
        id: the scheduler id (for a legacy repeatable job, its repeat key).
        name: the job name of its iterations.
        next_run: when its current next iteration is due (the last one made, once the
            scheduler reached its limit or end).
        every: the interval in seconds, for an every-scheduler.
        pattern: the cron expression, for a cron scheduler.
        tz: the time zone of the cron expression.
        start_date: no iteration before this time.
        end_date: no iteration after this time.
        limit: at most this many iterations.
        offset: the phase of an every-scheduler's runs within the interval, in seconds.
        iteration_count: how many iterations were made (None for a legacy repeatable job).
        template: name, data and options of each iteration.
        legacy: a repeatable job made by BullMQ 5 (not continued; remove or re-create it).
    """

    id: str
    name: str
    next_run: datetime | None
    every: float | None
    pattern: str | None
    tz: str | None
    start_date: datetime | None
    end_date: datetime | None
    limit: int | None
    offset: float | None
    iteration_count: int | None
    template: SchedulerTemplate
    legacy: bool

    @classmethod
    def from_hash(cls, scheduler_id: str, h: Mapping[str, str], score: str | None) -> JobScheduler:
        """Decode a scheduler hash (lenient: foreign writers may store anything)."""
        every = _int(h.get(_WIRE["every_ms"]))
        offset = _int(h.get(_WIRE["offset_ms"]))
        opts = fields.loads_or(h.get("opts"), {})
        data = fields.loads_or(h.get("data"), {})
        name = h.get("name") or scheduler_id
        ic = _int(h.get("ic"))
        return cls(
            id=scheduler_id,
            name=name,
            next_run=_moment(_int(score)),
            every=None if every is None else every / 1000,
            pattern=h.get(_WIRE["pattern"]) or None,
            tz=h.get(_WIRE["tz"]) or None,
            start_date=_moment(_int(h.get(_WIRE["start_ms"]))),
            end_date=_moment(_int(h.get(_WIRE["end_ms"]))),
            limit=_int(h.get(_WIRE["limit"])),
            offset=None if offset is None else offset / 1000,
            iteration_count=ic,
            template=SchedulerTemplate(name=name, data=data, options=_lenient_options(opts)),
            legacy=ic is None,
        )


def _lenient_options(wire: Any) -> JobOptions:
    try:
        options = JobOptions.from_wire(wire)
        return SchedulerTemplate(options=options).options
    except InvalidOptionError:
        return EMPTY_OPTIONS
