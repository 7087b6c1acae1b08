"""The job model: a slotted dataclass decoded from the job hash, and the job's states.

:class:`Job` carries the fields of one job as read at one moment, plus the binding (queue keys
and connection) its methods use. It holds no state of its own: every method reads or writes
Redis through one protocol operation.
"""

from __future__ import annotations

import dataclasses
import enum
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from .options import JobOptions
from .protocol import fields
from .protocol.keys import QueueKeys

if TYPE_CHECKING:
    from ._connection import AsyncConn


class JobState(str, enum.Enum):
    """Where a job is. ``UNKNOWN`` means in no state set (removed, or never existed)."""

    WAITING = "waiting"
    PRIORITIZED = "prioritized"
    DELAYED = "delayed"
    ACTIVE = "active"
    COMPLETED = "completed"
    FAILED = "failed"
    WAITING_CHILDREN = "waiting-children"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value


def ms_to_datetime(ms: int | None) -> datetime | None:
    """Epoch milliseconds as an aware UTC datetime (None stays None)."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def _int(value: str | None, default: int = 0) -> int:
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        try:
            return int(float(value))
        except ValueError:
            return default


def _opt_int(value: str | None) -> int | None:
    return None if value is None or value == "" else _int(value)


@dataclasses.dataclass(frozen=True, slots=True)
class ParentRef:
    """The parent of a child job: its id and qualified queue name (``prefix:name``)."""

    id: str
    queue_key: str


@dataclasses.dataclass(slots=True, eq=False)
class JobData:
    """The fields of a job. Times are aware UTC datetimes; durations are seconds."""

    id: str
    name: str
    data: Any
    queue_name: str
    timestamp: datetime
    delay: float = 0.0
    priority: int = 0
    attempts_made: int = 0
    attempts_started: int = 0
    stalled_counter: int = 0
    processed_on: datetime | None = None
    finished_on: datetime | None = None
    processed_by: str | None = None
    return_value: Any = None
    failed_reason: str | None = None
    stacktrace: list[str] = dataclasses.field(default_factory=list)
    progress: Any = 0
    parent: ParentRef | None = None
    parent_key: str | None = None
    repeat_job_key: str | None = None
    deduplication_id: str | None = None
    deferred_failure: str | None = None
    wire_options: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)

    @property
    def options(self) -> JobOptions:
        """The job's options, decoded from its stored ``opts``."""
        return fields.options_from_wire(self.wire_options)

    @property
    def attempts(self) -> int:
        """The total number of tries allowed (``opts.attempts``; 0 and 1 mean one try)."""
        value = self.wire_options.get("attempts", 0)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    def _fill_from_hash(self, h: dict[str, str]) -> None:
        """Overwrite the fields with those of a job hash (HGETALL as str dict)."""
        self.name = h.get(fields.NAME, "")
        self.data = fields.loads_or(h.get(fields.DATA), {})
        opts = fields.loads_or(h.get(fields.OPTS), {})
        self.wire_options = opts if isinstance(opts, dict) else {}
        self.timestamp = ms_to_datetime(_int(h.get(fields.TIMESTAMP))) or self.timestamp
        self.delay = _int(h.get(fields.DELAY)) / 1000
        self.priority = _int(h.get(fields.PRIORITY))
        atm = h.get(fields.ATTEMPTS_MADE)
        if atm is None:
            atm = h.get(fields.LEGACY_ATTEMPTS_MADE)
        self.attempts_made = _int(atm)
        self.attempts_started = _int(h.get(fields.ATTEMPTS_STARTED))
        self.stalled_counter = _int(h.get(fields.STALLED_COUNTER))
        self.processed_on = ms_to_datetime(_opt_int(h.get(fields.PROCESSED_ON)))
        self.finished_on = ms_to_datetime(_opt_int(h.get(fields.FINISHED_ON)))
        self.processed_by = h.get(fields.PROCESSED_BY)
        rv = h.get(fields.RETURN_VALUE)
        self.return_value = fields.loads_or(rv, None)
        self.failed_reason = h.get(fields.FAILED_REASON)
        st = fields.loads_or(h.get(fields.STACKTRACE), [])
        self.stacktrace = [str(s) for s in st] if isinstance(st, list) else []
        self.progress = fields.loads_or(h.get(fields.PROGRESS), 0)
        parent = fields.loads_or(h.get(fields.PARENT), None)
        if isinstance(parent, dict) and "id" in parent:
            self.parent = ParentRef(str(parent["id"]), str(parent.get("queueKey", "")))
        else:
            self.parent = None
        self.parent_key = h.get(fields.PARENT_KEY)
        self.repeat_job_key = h.get(fields.REPEAT_JOB_KEY)
        self.deduplication_id = h.get(fields.DEDUP_ID)
        self.deferred_failure = h.get(fields.DEFERRED_FAILURE)


_EPOCH = datetime.fromtimestamp(0, tz=timezone.utc)


@dataclasses.dataclass(slots=True, eq=False)
class Job(JobData):
    """A job of a queue, bound to the connection it was read or added with.

    Its methods are coroutines that act on Redis; the fields are a snapshot (call
    :meth:`refresh` to read them again).
    """

    _keys: QueueKeys | None = dataclasses.field(default=None, repr=False)
    _conn: AsyncConn | None = dataclasses.field(default=None, repr=False)

    @classmethod
    def from_hash(
        cls,
        job_id: str,
        h: dict[str, str],
        keys: QueueKeys,
        conn: AsyncConn | None,
    ) -> Job:
        """Decode a job hash into a bound Job."""
        job = cls(id=job_id, name="", data=None, queue_name=keys.name, timestamp=_EPOCH)
        job._fill_from_hash(h)
        job._keys = keys
        job._conn = conn
        return job

    def _bound(self) -> tuple[QueueKeys, Any]:
        if self._keys is None or self._conn is None:
            from .errors import ConnectionNotOpenError

            raise ConnectionNotOpenError(
                f"job {self.id} is not bound to a connection; read it through a Queue"
            )
        return self._keys, self._conn.client
