"""The typed events of a queue's events stream, and how a stream entry becomes one.

One frozen, slotted dataclass per event name the protocol writes
(docs/protocol/events.md#event-table), with snake_case
fields; the wire names (``jobId``, ``failedReason``, ...) are translated in one table,
:data:`_SPECS`. An entry whose name is not in it (a custom event) becomes :class:`Unknown`.
:mod:`echomq.events` reads the stream and re-exports these classes.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from typing import Any

from .protocol import fields

logger = logging.getLogger("echomq.events")

# --------------------------------------------------------------------------- event classes


@dataclasses.dataclass(frozen=True, slots=True)
class QueueEvent:
    """Base of every event.

    Attributes:
        event_id: the stream entry id (``<ms>-<seq>``); pass it as ``last_event_id`` to
            resume after this event.
    """

    event_id: str

    @property
    def name(self) -> str:
        """The event's wire name (``completed``, ``retries-exhausted``, ...)."""
        return _NAME_OF_CLASS[type(self)]


@dataclasses.dataclass(frozen=True, slots=True)
class Added(QueueEvent):
    """A job was added (``job_name`` is the job's name)."""

    job_id: str
    job_name: str


@dataclasses.dataclass(frozen=True, slots=True)
class Waiting(QueueEvent):
    """A job became ready to run; ``prev`` is its former state, None for a new job."""

    job_id: str
    prev: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class Delayed(QueueEvent):
    """A job was delayed until ``delay_until`` (an aware UTC datetime)."""

    job_id: str
    delay_until: datetime


@dataclasses.dataclass(frozen=True, slots=True)
class Active(QueueEvent):
    """A worker took a job."""

    job_id: str
    prev: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class Progress(QueueEvent):
    """A job reported progress; ``data`` is the decoded JSON value."""

    job_id: str
    data: Any


@dataclasses.dataclass(frozen=True, slots=True)
class Completed(QueueEvent):
    """A job completed; ``return_value`` is the decoded JSON value."""

    job_id: str
    return_value: Any
    prev: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class Failed(QueueEvent):
    """A job failed for good (a retried attempt emits ``delayed`` or ``waiting`` instead)."""

    job_id: str
    failed_reason: str
    prev: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class RetriesExhausted(QueueEvent):
    """A job failed after using all its attempts."""

    job_id: str
    attempts_made: int


@dataclasses.dataclass(frozen=True, slots=True)
class Stalled(QueueEvent):
    """A job's lock expired while active; it was moved back to waiting."""

    job_id: str


@dataclasses.dataclass(frozen=True, slots=True)
class Removed(QueueEvent):
    """A job was removed; ``prev`` is the key suffix it was removed from (``wait``, ...)."""

    job_id: str
    prev: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class Drained(QueueEvent):
    """The queue has no waiting, prioritized or active job left."""


@dataclasses.dataclass(frozen=True, slots=True)
class Paused(QueueEvent):
    """The queue was paused."""


@dataclasses.dataclass(frozen=True, slots=True)
class Resumed(QueueEvent):
    """The queue was resumed."""


@dataclasses.dataclass(frozen=True, slots=True)
class Duplicated(QueueEvent):
    """An add named an existing custom job id; nothing was added."""

    job_id: str


@dataclasses.dataclass(frozen=True, slots=True)
class Deduplicated(QueueEvent):
    """An add was deduplicated against ``deduplicated_job_id``."""

    job_id: str
    deduplication_id: str
    deduplicated_job_id: str


@dataclasses.dataclass(frozen=True, slots=True)
class WaitingChildren(QueueEvent):
    """A job is waiting for its children."""

    job_id: str
    prev: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class Cleaned(QueueEvent):
    """``count`` jobs were removed by a clean."""

    count: int


@dataclasses.dataclass(frozen=True, slots=True)
class Unknown(QueueEvent):
    """An event this version does not model (custom events), or a malformed entry.

    Attributes:
        name: the event's wire name.
        fields: every field of the entry but ``event``, as text.
    """

    # An explicit field(): a bare annotation would take the base's ``name`` property as default.
    name: str = dataclasses.field()
    fields: Mapping[str, str] = dataclasses.field()


# --------------------------------------------------------------------------- wire table


class _Malformed(ValueError):
    """An entry lacks a field its event needs, or has one that does not parse."""


def _text(value: str | None) -> str:
    if value is None:
        raise _Malformed("missing field")
    return value


def _optional_text(value: str | None) -> str | None:
    return value


def _json(value: str | None) -> Any:
    # Node's QueueEvents would throw on non-JSON here; we keep the raw text instead.
    if value is None:
        return None
    try:
        return fields.loads(value)
    except ValueError:
        return value


def _integer(value: str | None) -> int:
    try:
        return int(float(_text(value)))
    except (TypeError, ValueError, OverflowError):
        raise _Malformed(f"not a number: {value!r}") from None


def _ms_datetime(value: str | None) -> datetime:
    try:
        return datetime.fromtimestamp(_integer(value) / 1000, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        raise _Malformed(f"not a timestamp: {value!r}") from None


_Field = tuple[str, Callable[[str | None], Any]]

#: Event wire name -> (class, its fields after ``event_id`` as (wire field, converter), in order).
_SPECS: dict[str, tuple[type[QueueEvent], tuple[_Field, ...]]] = {
    "added": (Added, (("jobId", _text), ("name", _text))),
    "waiting": (Waiting, (("jobId", _text), ("prev", _optional_text))),
    "delayed": (Delayed, (("jobId", _text), ("delay", _ms_datetime))),
    "active": (Active, (("jobId", _text), ("prev", _optional_text))),
    "progress": (Progress, (("jobId", _text), ("data", _json))),
    "completed": (
        Completed,
        (("jobId", _text), ("returnvalue", _json), ("prev", _optional_text)),
    ),
    "failed": (Failed, (("jobId", _text), ("failedReason", _text), ("prev", _optional_text))),
    "retries-exhausted": (RetriesExhausted, (("jobId", _text), ("attemptsMade", _integer))),
    "stalled": (Stalled, (("jobId", _text),)),
    "removed": (Removed, (("jobId", _text), ("prev", _optional_text))),
    "drained": (Drained, ()),
    "paused": (Paused, ()),
    "resumed": (Resumed, ()),
    "duplicated": (Duplicated, (("jobId", _text),)),
    "deduplicated": (
        Deduplicated,
        (("jobId", _text), ("deduplicationId", _text), ("deduplicatedJobId", _text)),
    ),
    "waiting-children": (WaitingChildren, (("jobId", _text), ("prev", _optional_text))),
    "cleaned": (Cleaned, (("count", _integer),)),
}

_NAME_OF_CLASS: dict[type[QueueEvent], str] = {cls: name for name, (cls, _) in _SPECS.items()}


#: Names Node's ``QueueEvents`` emits itself (an entry named ``error`` would be thrown there).
_OTHER_BUILTIN = frozenset({"error", "ready", "closing", "closed"})


def is_builtin_event(name: str) -> bool:
    """Whether ``name`` is an event the protocol or Node's ``QueueEvents`` emits
    (docs/protocol/events.md#custom-events), which a custom event must not take."""
    return name in _SPECS or name in _OTHER_BUILTIN


def parse_entry(event_id: str, entry: Mapping[str, str]) -> QueueEvent:
    """Build the typed event of one stream entry (its fields as text); never raises."""
    name = entry.get("event", "")
    rest = {k: v for k, v in entry.items() if k != "event"}
    spec = _SPECS.get(name)
    if spec is not None:
        cls, spec_fields = spec
        try:
            values = [convert(rest.get(wire)) for wire, convert in spec_fields]
        except _Malformed:
            logger.warning("malformed %r event %s: %r", name, event_id, rest)
        else:
            build: Callable[..., QueueEvent] = cls
            return build(event_id, *values)
    return Unknown(event_id, name, rest)
