# Generated from src/echomq/_job.py by scripts/unasync.py: do not edit.
# Edit the source, then run `python scripts/unasync.py` (scripts/check fails while this
# file is stale).
"""``Job``: the fields of :class:`~echomq.JobData` bound to a queue and a connection.

``scripts/unasync.py`` generates ``echomq/sync/_job.py`` (the blocking ``echomq.sync.Job``) from
``echomq/_job.py``, the one definition of both: edit the latter. Each method builds one
:mod:`echomq._ops` operation, runs it on the job's connection and updates the snapshot; keep them
that thin, and keep what only an event loop can do between ``unasync: async-only`` markers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol, TypeVar

from .. import _ops as ops
from .._job_model import JobData, JobState
from .._json import dumps
from .._ops import flows as flow_ops
from .._ops import worker as wops
from .._ops.flows import Dependencies, DependencyCounts, DependencyPage
from .._run_state import RunState
from ..errors import (
    ConnectionNotOpenError,
    JobCancelledError,
    UnrecoverableError,
    ValidationError,
    error_for_code,
)
from ..options import Duration, moment_to_ms, to_seconds
from ..protocol import codes
from ..protocol.keys import QueueKeys

T = TypeVar("T")


class Runner(Protocol):
    """What a job needs of its connection: run an operation or a multi-step plan."""

    def run(self, op: ops.Op[T]) -> T:
        """Run one operation."""
        ...

    def run_plan(self, plan: ops.Plan[T]) -> T:
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
    _run: RunState | None = dataclasses.field(default=None, repr=False)

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
    def queue_qualified_name(self) -> str:
        """The job's queue as ``"<prefix>:<name>"``: what ``parent=`` names a parent by."""
        if self._keys is None:
            raise ValidationError(f"job {self.id} was built unbound: its queue is not known")
        return self._keys.qualified

    @property
    def token(self) -> str | None:
        """The lock token of this job while a worker processes it (None otherwise)."""
        return self._token

    @property
    def cancelled(self) -> bool:
        """Whether the worker running this job was asked to cancel it (``cancel_job``, or the
        worker closing after its grace period); a sync processor checks it to stop early."""
        return self._run is not None and self._run.cancelled

    def raise_if_cancelled(self) -> None:
        """From a processor: raise :class:`~echomq.JobCancelledError` if the job was cancelled.

        A sync processor calls it between steps (a thread cannot be interrupted); an async
        processor is cancelled at its next ``await`` without it.

        Raises:
            JobCancelledError: the job was cancelled; let it propagate.
        """
        run = self._run
        if run is not None and run.cancelled:
            raise JobCancelledError(run.reason, job_id=self.id)

    def _bound(self) -> tuple[QueueKeys, Runner]:
        if self._keys is None or self._conn is None:
            raise ConnectionNotOpenError(
                f"job {self.id} has no open connection: it was built unbound, or read with a URL"
                " connection that the call closed before returning; read it through a Queue"
                " that is still open, or pass a client you own as connection="
            )
        return self._keys, self._conn

    def move_to_delayed(self, timestamp: datetime | float, token: str | None = None) -> None:
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
        item = wops.finish_item(
            wops.DELAY, self.id, lock, delay_ms=delay, flag=True, group=self.group
        )
        params = wops.FetchParams(token_prefix="", lock_ms=0)
        reply = conn.run(wops.finish_and_fetch(keys, [item], 0, 0, params, now))
        ops.check_code(reply.codes[0], job_id=self.id, command="move_to_delayed", state="active")
        self.delay = delay / 1000

    # -- manual processing (a job taken with Worker.get_next_job) ------------------------------

    def _lock(self, token: str | None) -> str:
        lock = token or self._token
        if not lock:
            raise ValidationError(
                f"job {self.id}: no lock token; pass the token the job was taken with"
            )
        return lock

    def _finish(self, item: list[Any], command: str) -> None:
        keys, conn = self._bound()
        params = wops.FetchParams(token_prefix="", lock_ms=0)
        reply = conn.run(wops.finish_and_fetch(keys, [item], 0, 0, params, ops.now_ms()))
        ops.check_code(reply.codes[0], job_id=self.id, command=command, state="active")
        self._token = None

    def move_to_completed(self, value: Any = None, token: str | None = None) -> None:
        """Record this active job as completed with the return value ``value``.

        For jobs taken with :meth:`Worker.get_next_job`; a worker's processor returns instead.
        The job's ``removeOnComplete`` option applies (else all completed jobs are kept).

        Args:
            value: the return value, JSON-serialisable.
            token: the lock token the job was taken with (default: the job's own).

        Raises:
            PayloadError: ``value`` is not JSON; nothing was written.
            LockError: the lock is no longer ``token``; JobNotInStateError: the job is not
                active; PendingChildrenError / FailedChildrenError: its children forbid it.
        """
        lock = self._lock(token)
        text = dumps(value, "return value")
        keep = wops.keep_of(self.wire_options, completed=True)
        item = wops.finish_item(
            wops.COMPLETE, self.id, lock, text, attempts=self.attempts, keep=keep, group=self.group
        )
        self._finish(item, "move_to_completed")
        self.return_value = value

    def move_to_failed(self, error: BaseException, token: str | None = None) -> str:
        """Record a failed attempt of this active job, as a worker would.

        With attempts left (and not an :class:`~echomq.UnrecoverableError`), the job is retried
        under its built-in backoff (to ``wait``, or ``delayed``); otherwise it fails. A custom
        backoff type cannot be resolved here: the job then fails.

        Args:
            error: what the attempt failed with (its message becomes ``failed_reason``).
            token: the lock token the job was taken with (default: the job's own).

        Returns:
            ``"failed"``, ``"retry"`` (back to wait) or ``"delayed"`` (retry after a delay).

        Raises:
            LockError: the lock is no longer ``token``; JobNotInStateError: the job is not
                active.
        """
        lock = self._lock(token)
        attempts_made = self.attempts_made + 1
        reason, traces, update = wops.failure_update(
            error, self.stacktrace, self.wire_options.get("stackTraceLimit")
        )
        delay = None
        if not isinstance(error, UnrecoverableError) and attempts_made < self.attempts:
            delay = wops.backoff_delay_ms(self.wire_options, attempts_made)
        if delay is None:
            keep = wops.keep_of(self.wire_options, completed=False)
            item = wops.finish_item(
                wops.FAIL,
                self.id,
                lock,
                reason,
                attempts=self.attempts,
                keep=keep,
                fields=update,
                group=self.group,
            )
            outcome = "failed"
        elif delay > 0:
            item = wops.finish_item(
                wops.DELAY, self.id, lock, fields=update, delay_ms=delay, group=self.group
            )
            outcome = "delayed"
        else:
            lifo = self.wire_options.get("lifo") is True
            item = wops.finish_item(
                wops.RETRY, self.id, lock, fields=update, flag=lifo, group=self.group
            )
            outcome = "retry"
        self._finish(item, "move_to_failed")
        self.failed_reason = reason
        self.stacktrace = traces
        return outcome

    def move_to_wait(self, token: str | None = None) -> None:
        """Put this active job back at the front of ``wait``, its attempt not counted.

        Args:
            token: the lock token the job was taken with (default: the job's own).

        Raises:
            LockError: the lock is no longer ``token``; JobNotFoundError: the job is gone.
        """
        keys, conn = self._bound()
        lock = self._lock(token)
        code = conn.run(wops.move_job_from_active_to_wait(keys, self.id, lock))
        if code < 0:
            raise error_for_code(code, job_id=self.id, command="move_to_wait", state="active")
        self._token = None

    def extend_lock(self, token: str | None, duration: Duration) -> bool:
        """Keep this job's lock for ``duration`` (seconds or timedelta) from now.

        Args:
            token: the lock token the job was taken with (None: the job's own).
            duration: how long the lock lives without another renewal.

        Returns:
            True if the lock was ``token``'s and was extended; False if it was lost.
        """
        keys, conn = self._bound()
        lock = self._lock(token)
        lock_ms = max(round(to_seconds(duration, "duration") * 1000), 1)
        lost = conn.run(wops.extend_locks(keys, [self.id], [lock], lock_ms))
        return not lost

    def get_state(self) -> JobState:
        """The state the job is in now (``JobState.UNKNOWN`` once it was removed)."""
        keys, conn = self._bound()
        state: str = conn.run(ops.get_state(keys, self.id))
        return JobState(state)

    def is_completed(self) -> bool:
        """Whether the job is in the completed state."""
        return self.get_state() is JobState.COMPLETED

    def is_failed(self) -> bool:
        """Whether the job is in the failed state."""
        return self.get_state() is JobState.FAILED

    def is_active(self) -> bool:
        """Whether the job is in the active state (a worker holds it)."""
        return self.get_state() is JobState.ACTIVE

    def is_delayed(self) -> bool:
        """Whether the job is in the delayed state."""
        return self.get_state() is JobState.DELAYED

    def is_waiting(self) -> bool:
        """Whether the job is in the waiting state (the ``wait`` list, or ``paused`` while the
        queue is paused); a prioritized job is not waiting, as in BullMQ's ``isWaiting``."""
        return self.get_state() is JobState.WAITING

    def is_waiting_children(self) -> bool:
        """Whether the job is in the waiting-children state (a parent whose children are
        pending)."""
        return self.get_state() is JobState.WAITING_CHILDREN

    def refresh(self) -> None:
        """Read the job's fields again, in place.

        Raises:
            JobNotFoundError: the job no longer exists.
        """
        keys, conn = self._bound()
        h = conn.run(ops.get_job_hash(keys, self.id))
        if h is None:
            raise error_for_code(codes.JOB_NOT_EXIST, job_id=self.id, command="refresh")
        self._fill_from_hash(h)

    def get_logs(self, start: int = 0, end: int = -1, asc: bool = True) -> tuple[list[str], int]:
        """A slice of the job's log lines (oldest first unless ``asc`` is False) and their total."""
        keys, conn = self._bound()
        return conn.run(ops.get_logs(keys, self.id, start, end, asc))

    def log(self, line: str) -> int:
        """Append a line to the job's log, keeping only the newest ``keep_logs`` lines if set.

        Returns:
            How many lines the log holds now.

        Raises:
            JobNotFoundError: the job no longer exists.
        """
        keys, conn = self._bound()
        return conn.run(ops.add_log(keys, self.id, line, self._keep_logs()))

    def clear_logs(self, keep_logs: int | None = None) -> None:
        """Delete the job's log lines, or keep only the newest ``keep_logs`` of them.

        Args:
            keep_logs: how many of the newest lines to keep; None or 0 deletes them all.

        Raises:
            ValidationError: ``keep_logs`` is not None or an int >= 0; nothing was deleted.
        """
        keys, conn = self._bound()
        conn.run(ops.clear_logs(keys, self.id, keep_logs))

    def update_data(self, data: Any) -> None:
        """Replace the job's payload (no event is emitted).

        Raises:
            PayloadError: ``data`` is not JSON-serialisable; nothing was written.
            JobNotFoundError: the job no longer exists.
        """
        keys, conn = self._bound()
        conn.run(ops.update_data(keys, self.id, data))
        self.data = data

    def update_progress(self, progress: float | dict[str, Any]) -> None:
        """Record the job's progress (a number or a JSON object) and emit a ``progress`` event.

        Raises:
            ValidationError: ``progress`` is neither a number nor a JSON object.
            JobNotFoundError: the job no longer exists.
        """
        keys, conn = self._bound()
        conn.run(ops.update_progress(keys, self.id, progress))
        self.progress = progress
        if self._run is not None:
            self._run.progress(progress)

    def retry(
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
        conn.run(self._retry_op(keys, state, reset_attempts_made, reset_attempts_started))
        self._reset_for_retry(reset_attempts_made, reset_attempts_started)

    def promote(self) -> None:
        """Run a delayed job now: it moves to ``wait`` (or ``prioritized``).

        Raises:
            JobNotInStateError: the job is not delayed.
        """
        keys, conn = self._bound()
        conn.run(ops.promote_job(keys, self.id))
        self.delay = 0.0

    def change_priority(self, priority: int, *, lifo: bool = False) -> None:
        """Change the job's priority (0 = none, lower runs first; at most 2**21 - 1).

        A waiting job moves between ``wait`` and ``prioritized``; with ``lifo`` it goes to the
        front of its priority. A delayed job keeps the new priority for when it is due.

        Raises:
            ValidationError: ``priority`` is out of range.
            JobNotFoundError: the job no longer exists.
        """
        keys, conn = self._bound()
        conn.run(ops.change_priority(keys, self.id, priority, lifo=lifo))
        self.priority = priority

    def change_delay(self, delay: Duration) -> None:
        """Reschedule a delayed job to run ``delay`` (seconds or timedelta) from now.

        Raises:
            InvalidOptionError: ``delay`` is negative or not a duration.
            JobNotFoundError: the job no longer exists.
            JobNotInStateError: the job is not delayed.
        """
        keys, conn = self._bound()
        conn.run(ops.change_delay(keys, self.id, delay))
        self.delay = to_seconds(delay, "delay")

    def remove(self, *, remove_children: bool = True) -> bool:
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
        return conn.run(ops.remove_job(keys, self.id, remove_children=remove_children))

    # -- flows: this job as a parent ------------------------------------------------------

    def remove_deduplication_key(self) -> bool:
        """Close this job's deduplication window now, if this job still owns it.

        A later add with the same deduplication id is then added instead of deduplicated. The
        window of another job (one that took the id after this job's window closed) is left
        alone, unlike :meth:`echomq.Queue.remove_deduplication_key`.

        Returns:
            True if the window was this job's and was closed; False if the job was added
            without ``deduplication=``, or its window is closed or owned by another job.
        """
        if not self.deduplication_id:
            return False
        keys, conn = self._bound()
        op = ops.remove_own_deduplication_key(keys, self.deduplication_id, self.id)
        return conn.run(op)

    def get_children_values(self) -> dict[str, Any]:
        """The return values of this job's completed children.

        Returns:
            Full child job key (``prefix:queue:id``, children may live in other queues) ->
            the child's decoded return value.
        """
        keys, conn = self._bound()
        return conn.run(flow_ops.get_children_values(keys, self.id))

    def get_ignored_children_failures(self) -> dict[str, str]:
        """The children whose final failure this job ignores (those added with
        ``ignore_dependency_on_failure`` or ``continue_parent_on_failure``).

        Returns:
            Full child job key -> the child's failed reason, as stored.
        """
        keys, conn = self._bound()
        return conn.run(flow_ops.get_ignored_children_failures(keys, self.id))

    def get_failed_children_values(self) -> dict[str, str]:
        """Deprecated alias of :meth:`get_ignored_children_failures` (BullMQ's old name).

        Beware the name: this returns the *ignored* failures, not the children whose failure
        fails this job (``fail_parent_on_failure``); those are
        ``(job.get_dependencies()).failed``.

        Returns:
            Full child job key -> the child's failed reason, as stored.
        """
        return self.get_ignored_children_failures()

    def get_dependencies(
        self,
        *,
        processed: DependencyPage | bool | None = None,
        unprocessed: DependencyPage | bool | None = None,
        failed: DependencyPage | bool | None = None,
        ignored: DependencyPage | bool | None = None,
    ) -> Dependencies:
        """This job's children: completed, pending, failed and ignored.

        Called without arguments it reads all four parts whole. Pass a part as ``True`` (the
        first page of 20) or as a :class:`~echomq.DependencyPage` to read a page of it; only
        the parts passed are read, and each comes with the cursor of its next page (0 when
        it was read to the end)::

            page = job.get_dependencies(unprocessed=DependencyPage(count=100))
            while page.next_unprocessed_cursor:
                cursor = DependencyPage(page.next_unprocessed_cursor, 100)
                page = job.get_dependencies(unprocessed=cursor)

        Args:
            processed: completed children and their return values.
            unprocessed: children still pending.
            failed: children whose failure fails this job (``fail_parent_on_failure``).
            ignored: children whose failure was ignored, with their failed reasons.

        Returns:
            The parts read; a part not asked for is None.

        Raises:
            ValidationError: a part is neither a bool, None nor a DependencyPage, or every
                part is False.
        """
        keys, conn = self._bound()
        parts = (processed, unprocessed, failed, ignored)
        return conn.run(flow_ops.get_dependencies(keys, self.id, parts))

    def get_dependencies_count(
        self,
        *,
        processed: bool = True,
        unprocessed: bool = True,
        failed: bool = True,
        ignored: bool = True,
    ) -> DependencyCounts:
        """How many children this job has in each part, read at one moment.

        Args:
            processed: count the completed children.
            unprocessed: count the pending children.
            failed: count the children whose failure fails this job.
            ignored: count the children whose failure was ignored.

        Returns:
            The counts; a part not counted is None.

        Raises:
            ValidationError: every part is False.
        """
        keys, conn = self._bound()
        asked = (processed, unprocessed, failed, ignored)
        return conn.run(flow_ops.get_dependency_counts(keys, self.id, asked))

    def move_to_waiting_children(
        self, token: str | None = None, *, child: Mapping[str, str] | None = None
    ) -> bool:
        """From a processor: park this active job until its pending children finish.

        The "step job" pattern: the processor adds children with this job as their parent,
        calls this method and, when it returns True, raises
        :class:`~echomq.WaitingChildrenError` so the worker moves on without recording an
        outcome. The job runs again (from the start of the processor) once its last pending
        child finishes. The ignored failures of children do not hold it back.

        Args:
            token: the lock token; defaults to the one the worker took the job with
                (:attr:`token`). With neither, ``"0"`` skips the lock check.
            child: wait only if this one child is still pending:
                ``{"id": child.id, "queue": child.queue_qualified_name}``.

        Returns:
            True when the job now waits in ``waiting-children``; False when there is nothing
            to wait for (no pending child, or ``child`` is not pending): the job stays active
            and the processor should go on.

        Raises:
            JobNotFoundError: the job no longer exists.
            FailedChildrenError: a child whose failure fails this job has failed.
            LockMismatchError: another worker holds the job's lock.
            LockMissingError: the job's lock expired.
            JobNotInStateError: the job is not active.
            ValidationError: ``child`` is malformed.
        """
        keys, conn = self._bound()
        child_key = "" if child is None else flow_ops.child_key(child)
        lock = token or self._token or "0"
        op = flow_ops.move_to_waiting_children(keys, self.id, lock, child_key, ops.now_ms())
        return conn.run(op)

    def remove_unprocessed_children(self) -> None:
        """Delete this job's pending children, and their own pending children, recursively.

        Children that completed or failed for good are kept, and so are pending children a
        worker holds (locked) or that are in their queue's ``failed`` state. Each child
        removed is unlinked as :meth:`remove_child_dependency` does, so a waiting job whose
        last pending child goes is released to ``wait``; called from this job's own processor
        it only deletes children.
        """
        keys, conn = self._bound()
        conn.run(flow_ops.remove_unprocessed_children(keys, self.id))

    # -- flows: this job as a child -------------------------------------------------------

    def remove_child_dependency(self) -> bool:
        """Stop this pending child from being a dependency of its parent.

        The parent no longer waits for it: if it was the parent's last pending child and the
        parent is waiting for children, the parent moves to the front of its queue's ``wait``
        (its priority and delay are not applied). This job stays where it is, without a
        parent (its ``parent`` fields are deleted from Redis and from this snapshot).

        Returns:
            True when it was removed; False when it was no longer a pending child (it
            completed, or failed with a failure option such as
            ``ignore_dependency_on_failure``).

        Raises:
            JobNotFoundError: the job no longer exists.
            ParentNotFoundError: the job has no parent, or its parent no longer exists.
        """
        keys, conn = self._bound()
        removed = conn.run(flow_ops.remove_child_dependency(keys, self.id))
        if removed:
            self.parent = self.parent_key = None
        return removed
