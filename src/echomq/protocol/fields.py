"""Job-hash field names, option short codes and JSON encoding (CORE.md sections 2.5, 2.6, 12.4).

This is the only module that knows the wire names: ``removeOnComplete``, ``kl``, ``atm`` and so on.
It converts :class:`~echomq.options.JobOptions` to the stored ``opts`` JSON and back; durations
become milliseconds here and only here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from ..errors import PayloadError
from ..options import (
    UNSET,
    Backoff,
    JobOptions,
    KeepJobs,
    Retention,
    moment_to_ms,
    to_ms,
    to_seconds,
)

# Job hash fields.
NAME = "name"
DATA = "data"
OPTS = "opts"
TIMESTAMP = "timestamp"
DELAY = "delay"
PRIORITY = "priority"
PROCESSED_ON = "processedOn"
FINISHED_ON = "finishedOn"
PROCESSED_BY = "pb"
ATTEMPTS_STARTED = "ats"
ATTEMPTS_MADE = "atm"
LEGACY_ATTEMPTS_MADE = "attemptsMade"
STALLED_COUNTER = "stc"
DEFERRED_FAILURE = "defa"
PROGRESS = "progress"
RETURN_VALUE = "returnvalue"
FAILED_REASON = "failedReason"
STACKTRACE = "stacktrace"
PARENT_KEY = "parentKey"
PARENT = "parent"
REPEAT_JOB_KEY = "rjk"
DEDUP_ID = "deid"

_encoder = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_encode = _encoder.encode


def dumps(value: Any, what: str = "value") -> str:
    """Encode ``value`` as compact JSON text; raise :class:`PayloadError` naming ``what``."""
    try:
        return _encode(value)
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"{what} is not JSON-serialisable: {exc}") from None


loads = json.loads


def loads_or(text: str | None, default: Any) -> Any:
    """Decode JSON ``text``; ``default`` when it is missing or not valid JSON (as Node reads)."""
    if text is None:
        return default
    try:
        return json.loads(text)
    except ValueError:
        return default


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


def options_to_wire(options: JobOptions) -> dict[str, Any]:
    """The ``opts`` object Node would store for these options (always with ``attempts``)."""
    wire: dict[str, Any] = {"attempts": options.get("attempts", 0)}
    o = options
    if o.job_id is not UNSET:
        wire["jobId"] = o.job_id
    if o.delay is not UNSET:
        wire["delay"] = to_ms(o.delay, "delay")
    if o.priority is not UNSET:
        wire["priority"] = o.priority
    if o.lifo is not UNSET:
        wire["lifo"] = o.lifo
    if isinstance(o.backoff, Backoff):
        backoff: dict[str, Any] = {"type": o.backoff.type, "delay": o.backoff.delay_ms}
        if o.backoff.jitter:
            backoff["jitter"] = o.backoff.jitter
        wire["backoff"] = backoff
    if o.remove_on_complete is not UNSET:
        wire["removeOnComplete"] = _retention_to_wire(o.remove_on_complete)
    if o.remove_on_fail is not UNSET:
        wire["removeOnFail"] = _retention_to_wire(o.remove_on_fail)
    if o.keep_logs is not UNSET:
        wire["kl"] = o.keep_logs
    if o.stacktrace_limit is not UNSET:
        wire["stackTraceLimit"] = o.stacktrace_limit
    if o.size_limit is not UNSET:
        wire["sizeLimit"] = o.size_limit
    if o.timestamp is not UNSET:
        wire["timestamp"] = moment_to_ms(o.timestamp, "timestamp")
    return wire


def _int_or_none(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
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


def options_from_wire(wire: Any) -> JobOptions:
    """Decode a stored ``opts`` object leniently (foreign producers may write anything)."""
    if not isinstance(wire, Mapping):
        return JobOptions()
    kw: dict[str, Any] = {}
    job_id = wire.get("jobId")
    if isinstance(job_id, str) and job_id:
        kw["job_id"] = job_id
    delay = wire.get("delay")
    if isinstance(delay, (int, float)) and not isinstance(delay, bool) and delay >= 0:
        kw["delay"] = delay / 1000
    for wire_name, name, high in (
        ("priority", "priority", 2**21 - 1),
        ("attempts", "attempts", None),
        ("kl", "keep_logs", None),
        ("stackTraceLimit", "stacktrace_limit", None),
    ):
        n = _int_or_none(wire.get(wire_name))
        if n is not None and n >= 0 and (high is None or n <= high):
            kw[name] = n
    size = _int_or_none(wire.get("sizeLimit"))
    if size is not None and size >= 1:
        kw["size_limit"] = size
    if isinstance(wire.get("lifo"), bool):
        kw["lifo"] = wire["lifo"]
    backoff = backoff_from_wire(wire.get("backoff"))
    if backoff is not None:
        kw["backoff"] = backoff
    for wire_name, name in (
        ("removeOnComplete", "remove_on_complete"),
        ("removeOnFail", "remove_on_fail"),
    ):
        if wire_name in wire:
            retention = retention_from_wire(wire[wire_name])
            if retention is not None:
                kw[name] = retention
    ts = wire.get("timestamp")
    if isinstance(ts, (int, float)) and not isinstance(ts, bool) and ts >= 0:
        kw["timestamp"] = ts / 1000
    return JobOptions(**kw)


def keep_jobs_to_wire(value: Retention | None) -> dict[str, int]:
    """The ``keepJobs`` object a finishing worker sends (CORE.md 7.6): count -1 keeps all."""
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
