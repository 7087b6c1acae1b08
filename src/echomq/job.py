"""The job model: a slotted dataclass decoded from the job hash, and the job's states.

:class:`Job` carries the fields of one job as read at one moment, plus the binding (queue keys
and connection) its methods use. It holds no state of its own: every method reads or writes
Redis through one protocol operation.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any

from typing_extensions import Self

from . import ops
from .errors import error_for_code
from .options import Duration, JobOptions, to_seconds
from .protocol import codes, fields
from .protocol.keys import QueueKeys

if TYPE_CHECKING:
    from ._connection import AsyncConn
    from .events import QueueEvents


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


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


#: Decodes ``data`` and ``opts``: strict JSON, so NaN / Infinity (which JavaScript's parser
#: rejects) count as invalid. As fast as ``json.loads``: the hook runs only on those words.
_decode_strict = json.JSONDecoder(parse_constant=_no_constant).decode

#: Fields every add writes (BullMQ's, echomq's, and the smallest foreign producers BullMQ
#: workers accept). A hash without them is no job a worker can run: typically one left
#: behind by a stray write to a removed job. ``opts`` is not required: BullMQ reads a
#: missing one as ``{}`` and processes the job.
_REQUIRED_FIELDS = (fields.NAME, fields.DATA, fields.TIMESTAMP)

_JSON_TYPES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean"}


def _lenient(text: str) -> Any:
    """What getters show for unreadable JSON: Python's reading if it has one, else ``{}``."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return {}


def _read_payload(h: dict[str, str]) -> tuple[Any, dict[str, Any], str | None]:
    """The job's data, its opts, and why a worker must not run it (None when it may).

    Each field is decoded once; the values returned for an unfit job are the lenient ones
    getters show.
    """
    data_text, opts_text = h.get(fields.DATA), h.get(fields.OPTS)
    problems: list[str] = []
    if data_text is None or fields.NAME not in h or fields.TIMESTAMP not in h:
        missing = ", ".join(f for f in _REQUIRED_FIELDS if f not in h)
        problems.append(f"job hash is missing required field(s): {missing}")
    data: Any = {}
    if data_text is not None:
        try:
            data = _decode_strict(data_text)
        except (ValueError, RecursionError) as exc:
            problems.append(f"job data is not valid JSON: {exc}")
            data = _lenient(data_text)
    opts: Any = {}
    if opts_text is not None:
        try:
            opts = _decode_strict(opts_text)
        except (ValueError, RecursionError) as exc:
            problems.append(f"job opts is not valid JSON: {exc}")
            opts = _lenient(opts_text)
        else:
            if not isinstance(opts, dict):
                kind = "null" if opts is None else _JSON_TYPES[type(opts)]
                problems.append(f"job opts is not a JSON object: got {kind}")
    wire = opts if isinstance(opts, dict) else {}
    return data, wire, "; ".join(problems) if problems else None


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
    #: Why a worker must not run this job (unreadable ``data`` / ``opts``, or required fields
    #: missing), or None. Getters ignore it and read such a job leniently.
    _corruption: str | None = dataclasses.field(default=None, init=False, repr=False)

    @property
    def options(self) -> JobOptions:
        """The job's options, decoded from its stored ``opts``."""
        return fields.options_from_wire(self.wire_options)

    @property
    def attempts(self) -> int:
        """The total number of tries allowed (``opts.attempts``; 0 and 1 mean one try)."""
        value = self.wire_options.get("attempts", 0)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    def _keep_logs(self) -> int | None:
        """How many log lines the job keeps (its ``kl`` option; 0 or unset keeps all)."""
        kl = self.wire_options.get("kl")
        return kl if isinstance(kl, int) and not isinstance(kl, bool) and kl > 0 else None

    def _retry_op(
        self, keys: QueueKeys, state: str, attempts_made: bool, attempts_started: bool
    ) -> ops.ScriptOp[None]:
        """The script call of ``retry`` (shared by the async and sync Job)."""
        return ops.reprocess_job(
            keys,
            self.id,
            str(state),
            lifo=self.wire_options.get("lifo") is True,
            reset_attempts_made=attempts_made,
            reset_attempts_started=attempts_started,
        )

    def _reset_for_retry(self, attempts_made: bool, attempts_started: bool) -> None:
        """The local fields after a retry (Redis was updated the same way)."""
        self.finished_on = self.processed_on = None
        self.failed_reason = self.return_value = None
        if attempts_made:
            self.attempts_made = 0
        if attempts_started:
            self.attempts_started = 0

    @classmethod
    def _decoded(cls, job_id: str, h: dict[str, str], queue_name: str) -> Self:
        """A job of this class with the fields of hash ``h`` (not bound to a connection)."""
        job = cls(id=job_id, name="", data=None, queue_name=queue_name, timestamp=_EPOCH)
        job._fill_from_hash(h)
        return job

    def _fill_from_hash(self, h: dict[str, str]) -> None:
        """Overwrite the fields with those of a job hash (HGETALL as str dict).

        Decoding is lenient, as Node's: a missing or unreadable field gets its default.
        Fields absent from the hash (most of them, for a job just taken) cost one lookup.
        What makes the job unfit to run is noted in ``_corruption`` on the way (``data`` and
        ``opts`` are decoded once, here), for the worker to fail it instead of running it.
        """
        get = h.get
        loads = fields.loads_or
        self.data, self.wire_options, self._corruption = _read_payload(h)
        self.name = get(fields.NAME, "")
        self.timestamp = ms_to_datetime(_int(get(fields.TIMESTAMP))) or self.timestamp
        self.delay = _int(get(fields.DELAY)) / 1000
        self.priority = _int(get(fields.PRIORITY))
        atm = get(fields.ATTEMPTS_MADE)
        if atm is None:
            atm = get(fields.LEGACY_ATTEMPTS_MADE)
        self.attempts_made = _int(atm)
        self.attempts_started = _int(get(fields.ATTEMPTS_STARTED))
        self.stalled_counter = _int(get(fields.STALLED_COUNTER))
        self.processed_on = ms_to_datetime(_opt_int(get(fields.PROCESSED_ON)))
        finished = get(fields.FINISHED_ON)
        self.finished_on = None if finished is None else ms_to_datetime(_opt_int(finished))
        self.processed_by = get(fields.PROCESSED_BY)
        rv = get(fields.RETURN_VALUE)
        self.return_value = None if rv is None else loads(rv, None)
        self.failed_reason = get(fields.FAILED_REASON)
        st = get(fields.STACKTRACE)
        stack = [] if st is None else loads(st, [])
        self.stacktrace = [str(s) for s in stack] if isinstance(stack, list) else []
        progress = get(fields.PROGRESS)
        self.progress = 0 if progress is None else loads(progress, 0)
        parent = get(fields.PARENT)
        ref = None if parent is None else loads(parent, None)
        if isinstance(ref, dict) and "id" in ref:
            self.parent = ParentRef(str(ref["id"]), str(ref.get("queueKey", "")))
        else:
            self.parent = None
        self.parent_key = get(fields.PARENT_KEY)
        self.repeat_job_key = get(fields.REPEAT_JOB_KEY)
        self.deduplication_id = get(fields.DEDUP_ID)
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
    _token: str | None = dataclasses.field(default=None, repr=False)

    @classmethod
    def from_hash(
        cls,
        job_id: str,
        h: dict[str, str],
        keys: QueueKeys,
        conn: AsyncConn | None,
    ) -> Job:
        """Decode a job hash into a bound Job."""
        job = cls._decoded(job_id, h, keys.name)
        job._keys = keys
        job._conn = conn
        return job

    @property
    def token(self) -> str | None:
        """The lock token of this job while a worker processes it (None otherwise)."""
        return self._token

    async def move_to_delayed(self, timestamp: datetime | float, token: str | None = None) -> None:
        """From a processor: park this active job in delayed until ``timestamp``.

        No attempt is counted. Raise :class:`~echomq.DelayedError` right after, so the worker
        moves on without recording an outcome.

        Args:
            timestamp: when the job may run again (datetime or epoch seconds).
            token: the lock token; defaults to the one the worker took the job with.

        Raises:
            LockError: the lock is no longer ours; JobNotInStateError: the job is not active.
        """
        from .ops import check_code, now_ms
        from .ops import worker as wops
        from .options import moment_to_ms

        keys, conn = self._bound()
        lock = token or self._token or "0"
        now = now_ms()
        delay = max(moment_to_ms(timestamp, "timestamp") - now, 0)
        item = wops.finish_item(wops.DELAY, self.id, lock, delay_ms=delay, flag=True)
        params = wops.FetchParams(token_prefix="", lock_ms=0)
        reply = await conn.run(wops.finish_and_fetch(keys, [item], 0, 0, params, now))
        check_code(reply.codes[0], job_id=self.id, command="move_to_delayed", state="active")
        self.delay = delay / 1000

    def _bound(self) -> tuple[QueueKeys, AsyncConn]:
        if self._keys is None or self._conn is None:
            from .errors import ConnectionNotOpenError

            raise ConnectionNotOpenError(
                f"job {self.id} is not bound to a connection; read it through a Queue"
            )
        return self._keys, self._conn

    async def get_state(self) -> JobState:
        """The state the job is in now (``JobState.UNKNOWN`` once it was removed)."""
        keys, conn = self._bound()
        state: str = await conn.run(ops.get_state(keys, self.id))
        return JobState(state)

    async def is_completed(self) -> bool:
        """Whether the job is in the completed state."""
        return await self.get_state() is JobState.COMPLETED

    async def is_failed(self) -> bool:
        """Whether the job is in the failed state."""
        return await self.get_state() is JobState.FAILED

    async def refresh(self) -> None:
        """Read the job's fields again, in place.

        Raises:
            JobNotFoundError: the job no longer exists.
        """
        keys, conn = self._bound()
        h = await conn.run(ops.get_job_hash(keys, self.id))
        if h is None:
            raise error_for_code(codes.JOB_NOT_EXIST, job_id=self.id, command="refresh")
        self._fill_from_hash(h)

    async def get_logs(
        self, start: int = 0, end: int = -1, asc: bool = True
    ) -> tuple[list[str], int]:
        """A slice of the job's log lines (oldest first unless ``asc`` is False) and their total."""
        keys, conn = self._bound()
        return await conn.run(ops.get_logs(keys, self.id, start, end, asc))

    async def log(self, line: str) -> int:
        """Append a line to the job's log, keeping only the newest ``keep_logs`` lines if set.

        Returns:
            How many lines the log holds now.

        Raises:
            JobNotFoundError: the job no longer exists.
        """
        keys, conn = self._bound()
        return await conn.run(ops.add_log(keys, self.id, line, self._keep_logs()))

    async def update_data(self, data: Any) -> None:
        """Replace the job's payload (no event is emitted).

        Raises:
            PayloadError: ``data`` is not JSON-serialisable; nothing was written.
            JobNotFoundError: the job no longer exists.
        """
        keys, conn = self._bound()
        await conn.run(ops.update_data(keys, self.id, data))
        self.data = data

    async def update_progress(self, progress: float | dict[str, Any]) -> None:
        """Record the job's progress (a number or a JSON object) and emit a ``progress`` event.

        Raises:
            ValidationError: ``progress`` is neither a number nor a JSON object.
            JobNotFoundError: the job no longer exists.
        """
        keys, conn = self._bound()
        await conn.run(ops.update_progress(keys, self.id, progress))
        self.progress = progress

    async def retry(
        self,
        state: str = "failed",
        *,
        reset_attempts_made: bool = False,
        reset_attempts_started: bool = False,
    ) -> None:
        """Send a failed (or completed) job back to be processed again.

        Its result fields, ``finished_on`` and ``processed_on`` are cleared; a job with a
        priority goes to ``prioritized``, any other to ``wait`` (served next if it is lifo).

        Args:
            state: where the job is now: ``"failed"`` or ``"completed"``.
            reset_attempts_made: also reset ``attempts_made`` to 0.
            reset_attempts_started: also reset ``attempts_started`` to 0.

        Raises:
            ValidationError: ``state`` is neither ``"failed"`` nor ``"completed"``.
            JobNotFoundError: the job no longer exists.
            JobNotInStateError: the job is not in ``state``.
        """
        keys, conn = self._bound()
        await conn.run(self._retry_op(keys, state, reset_attempts_made, reset_attempts_started))
        self._reset_for_retry(reset_attempts_made, reset_attempts_started)

    async def promote(self) -> None:
        """Run a delayed job now: it moves to ``wait`` (or ``prioritized``).

        Raises:
            JobNotInStateError: the job is not delayed.
        """
        keys, conn = self._bound()
        await conn.run(ops.promote_job(keys, self.id))
        self.delay = 0.0

    async def change_priority(self, priority: int, *, lifo: bool = False) -> None:
        """Change the job's priority (0 = none, lower runs first; at most 2**21 - 1).

        A waiting job moves between ``wait`` and ``prioritized``; with ``lifo`` it goes to the
        front of its priority. A delayed job keeps the new priority for when it is due.

        Raises:
            ValidationError: ``priority`` is out of range.
            JobNotFoundError: the job no longer exists.
        """
        keys, conn = self._bound()
        await conn.run(ops.change_priority(keys, self.id, priority, lifo=lifo))
        self.priority = priority

    async def change_delay(self, delay: Duration) -> None:
        """Reschedule a delayed job to run ``delay`` (seconds or timedelta) from now.

        Raises:
            InvalidOptionError: ``delay`` is negative or not a duration.
            JobNotFoundError: the job no longer exists.
            JobNotInStateError: the job is not delayed.
        """
        keys, conn = self._bound()
        await conn.run(ops.change_delay(keys, self.id, delay))
        self.delay = to_seconds(delay, "delay")

    async def remove(self, *, remove_children: bool = True) -> bool:
        """Delete the job, from whatever state holds it (see :meth:`echomq.Queue.remove`).

        Args:
            remove_children: also remove the children recorded on it, in any queue.

        Returns:
            True if the job existed, False if it was already gone.

        Raises:
            JobLockedError: a worker holds the job (or a pending child); nothing was removed.
            JobBelongsToSchedulerError: the job is its scheduler's current iteration.
        """
        keys, conn = self._bound()
        return await conn.run(ops.remove_job(keys, self.id, remove_children=remove_children))

    async def wait_until_finished(
        self, events: QueueEvents, timeout: Duration | None = None
    ) -> Any:
        """Wait until the job completes or fails, through a shared :class:`~echomq.QueueEvents`.

        A job that had already finished returns (or raises) at once.

        Args:
            events: a QueueEvents of the job's queue; many waiters share its one reader.
            timeout: seconds (or a timedelta) to wait at most; None waits without limit.

        Returns:
            The job's return value (decoded JSON).

        Raises:
            ValidationError: ``events`` reads another queue.
            JobFailedError: the job failed; ``reason`` is its failed reason.
            JobNotFoundError: the job no longer exists and was not seen to finish.
            asyncio.TimeoutError: ``timeout`` passed first.
        """
        if events.name != self.queue_name:
            from .errors import ValidationError

            raise ValidationError(
                f"job {self.id} is in queue {self.queue_name!r} but the QueueEvents reads"
                f" {events.name!r}"
            )
        return await events.wait_for_job(self.id, timeout)
