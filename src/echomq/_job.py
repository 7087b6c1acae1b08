"""``Job``: the fields of :class:`~echomq.JobData` bound to a queue and a connection.

``scripts/unasync.py`` generates ``echomq/sync/_job.py`` (the blocking ``echomq.sync.Job``) from
``echomq/_job.py``, the one definition of both: edit the latter. Each method builds one
:mod:`echomq.ops` operation, runs it on the job's connection and updates the snapshot; keep them
that thin, and keep what only an event loop can do between ``unasync: async-only`` markers.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from . import ops
from ._job_model import JobData, JobState
from .errors import ConnectionNotOpenError, ValidationError, error_for_code
from .ops import worker as wops
from .options import Duration, moment_to_ms, to_seconds
from .protocol import codes
from .protocol.keys import QueueKeys

# unasync: async-only
if TYPE_CHECKING:
    from .events import QueueEvents
# unasync: end

T = TypeVar("T")


class Runner(Protocol):
    """What a job needs of its connection: run an operation or a multi-step plan."""

    async def run(self, op: ops.Op[T]) -> T:
        """Run one operation."""
        ...

    async def run_plan(self, plan: ops.Plan[T]) -> T:
        """Drive a multi-step plan."""
        ...


@dataclasses.dataclass(slots=True, eq=False)
class Job(JobData):
    """A job of a queue, bound to the connection it was read or added with.

    Its methods act on Redis; the fields are a snapshot (call :meth:`refresh` to read them
    again).
    """

    _keys: QueueKeys | None = dataclasses.field(default=None, repr=False)
    _conn: Runner | None = dataclasses.field(default=None, repr=False)
    _token: str | None = dataclasses.field(default=None, repr=False)

    @classmethod
    def from_hash(cls, job_id: str, h: dict[str, str], keys: QueueKeys, conn: Runner | None) -> Job:
        """Decode a job hash into a bound Job."""
        job = cls._decoded(job_id, h, keys.name)
        job._keys = keys
        job._conn = conn
        return job

    @classmethod
    def _added(cls, job_id: str, p: ops.PreparedJob, keys: QueueKeys, conn: Runner | None) -> Job:
        """The job just added as ``job_id`` from ``p``, bound to ``conn``."""
        job = cls._prepared(job_id, p, keys.name)
        job._keys = keys
        job._conn = conn
        return job

    @property
    def token(self) -> str | None:
        """The lock token of this job while a worker processes it (None otherwise)."""
        return self._token

    def _bound(self) -> tuple[QueueKeys, Runner]:
        if self._keys is None or self._conn is None:
            raise ConnectionNotOpenError(
                f"job {self.id} has no open connection: it was built unbound, or read with a URL"
                " connection that the call closed before returning; read it through a Queue"
                " that is still open, or pass a client you own as connection="
            )
        return self._keys, self._conn

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
        keys, conn = self._bound()
        lock = token or self._token or "0"
        now = ops.now_ms()
        delay = max(moment_to_ms(timestamp, "timestamp") - now, 0)
        item = wops.finish_item(wops.DELAY, self.id, lock, delay_ms=delay, flag=True)
        params = wops.FetchParams(token_prefix="", lock_ms=0)
        reply = await conn.run(wops.finish_and_fetch(keys, [item], 0, 0, params, now))
        ops.check_code(reply.codes[0], job_id=self.id, command="move_to_delayed", state="active")
        self.delay = delay / 1000

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
        """Delete the job, from whatever state holds it (see :meth:`Queue.remove`).

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

    # unasync: async-only
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
            raise ValidationError(
                f"job {self.id} is in queue {self.queue_name!r} but the QueueEvents reads"
                f" {events.name!r}"
            )
        return await events.wait_for_job(self.id, timeout)

    # unasync: end
