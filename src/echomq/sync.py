"""The synchronous producer API over a ``redis.Redis`` client, for Django, Flask and scripts.

The sync twin of :mod:`echomq.queue` (module-level functions and :class:`Queue`) and of the
producer-side methods of :class:`echomq.Job`. Each function or method builds the same
:mod:`echomq.ops` operation as its async twin and runs it with ``run_sync`` (or
``run_plan_sync``), so validation, keys, scripts and Redis effects are identical, and a refused
call writes nothing. Nothing here creates, runs or looks up an event loop: it is plain blocking
redis-py, usable from any thread, including one that runs an event loop (where, like any
blocking I/O, it holds that loop while it waits for Redis).

Connections: pass a ``redis.Redis`` you own (never closed here; any ``decode_responses``) or a
URL. A module-level call opens a URL's client and closes it before returning; a :class:`Queue`
closes the client it opened on :meth:`Queue.close` or at the end of its ``with`` block. Jobs
returned by a URL call are bound to a closed client: read them through a ``Queue`` to call their
methods.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar

import redis
from typing_extensions import Unpack

from . import ops
from ._connection import SyncConn, SyncConnection
from .errors import ConnectionNotOpenError, error_for_code
from .job import _EPOCH, JobData, JobState
from .ops import BulkItem
from .options import Duration, JobOptions, JobOptionsDict, coerce_options, to_seconds
from .protocol import codes
from .protocol.keys import DEFAULT_PREFIX, QueueKeys, queue_keys
from .queue import job_from_prepared

__all__ = [
    "Job",
    "Queue",
    "add",
    "add_bulk",
    "clean",
    "count",
    "drain",
    "get_job",
    "get_job_counts",
    "get_job_logs",
    "get_jobs",
    "get_state",
    "get_workers",
    "is_paused",
    "obliterate",
    "pause",
    "promote_jobs",
    "remove",
    "resume",
    "retry_jobs",
    "trim_events",
]

T = TypeVar("T")


@dataclasses.dataclass(slots=True, eq=False)
class Job(JobData):
    """Sync twin of :class:`echomq.Job`: the same fields, with blocking producer-side methods.

    The fields are a snapshot; :meth:`refresh` reads them again.
    """

    _keys: QueueKeys | None = dataclasses.field(default=None, repr=False)
    _conn: SyncConn | None = dataclasses.field(default=None, repr=False)

    @classmethod
    def _from_hash(cls, job_id: str, h: dict[str, str], keys: QueueKeys, conn: SyncConn) -> Job:
        job = cls(id=job_id, name="", data=None, queue_name=keys.name, timestamp=_EPOCH)
        job._fill_from_hash(h)
        job._keys, job._conn = keys, conn
        return job

    def _run(self, op: ops.Op[T]) -> T:
        if self._keys is None or self._conn is None:
            raise ConnectionNotOpenError(
                f"job {self.id} is not bound to a connection; read it through a Queue"
            )
        return op.run_sync(self._conn.client)

    @property
    def _k(self) -> QueueKeys:
        if self._keys is None:
            self._run(ops.is_paused(queue_keys("unbound")))  # raises ConnectionNotOpenError
        assert self._keys is not None
        return self._keys

    def get_state(self) -> JobState:
        """Sync twin of :meth:`echomq.Job.get_state`."""
        return JobState(self._run(ops.get_state(self._k, self.id)))

    def is_completed(self) -> bool:
        """Sync twin of :meth:`echomq.Job.is_completed`."""
        return self.get_state() is JobState.COMPLETED

    def is_failed(self) -> bool:
        """Sync twin of :meth:`echomq.Job.is_failed`."""
        return self.get_state() is JobState.FAILED

    def refresh(self) -> None:
        """Sync twin of :meth:`echomq.Job.refresh`.

        Raises:
            JobNotFoundError: the job no longer exists.
        """
        h = self._run(ops.get_job_hash(self._k, self.id))
        if h is None:
            raise error_for_code(codes.JOB_NOT_EXIST, job_id=self.id, command="refresh")
        self._fill_from_hash(h)

    def get_logs(self, start: int = 0, end: int = -1, asc: bool = True) -> tuple[list[str], int]:
        """Sync twin of :meth:`echomq.Job.get_logs`."""
        return self._run(ops.get_logs(self._k, self.id, start, end, asc))

    def log(self, line: str) -> int:
        """Sync twin of :meth:`echomq.Job.log`; returns how many lines the log holds now."""
        kl = self.wire_options.get("kl")
        keep = kl if isinstance(kl, int) and not isinstance(kl, bool) and kl > 0 else None
        return self._run(ops.add_log(self._k, self.id, line, keep))

    def update_data(self, data: Any) -> None:
        """Sync twin of :meth:`echomq.Job.update_data`."""
        self._run(ops.update_data(self._k, self.id, data))
        self.data = data

    def update_progress(self, progress: float | dict[str, Any]) -> None:
        """Sync twin of :meth:`echomq.Job.update_progress`."""
        self._run(ops.update_progress(self._k, self.id, progress))
        self.progress = progress

    def retry(
        self,
        state: str = "failed",
        *,
        reset_attempts_made: bool = False,
        reset_attempts_started: bool = False,
    ) -> None:
        """Sync twin of :meth:`echomq.Job.retry`."""
        op = ops.reprocess_job(
            self._k,
            self.id,
            str(state),
            lifo=self.wire_options.get("lifo") is True,
            reset_attempts_made=reset_attempts_made,
            reset_attempts_started=reset_attempts_started,
        )
        self._run(op)
        self.finished_on = self.processed_on = None
        self.failed_reason = self.return_value = None
        if reset_attempts_made:
            self.attempts_made = 0
        if reset_attempts_started:
            self.attempts_started = 0

    def promote(self) -> None:
        """Sync twin of :meth:`echomq.Job.promote`."""
        self._run(ops.promote_job(self._k, self.id))
        self.delay = 0.0

    def change_priority(self, priority: int, *, lifo: bool = False) -> None:
        """Sync twin of :meth:`echomq.Job.change_priority`."""
        self._run(ops.change_priority(self._k, self.id, priority, lifo=lifo))
        self.priority = priority

    def change_delay(self, delay: Duration) -> None:
        """Sync twin of :meth:`echomq.Job.change_delay`."""
        self._run(ops.change_delay(self._k, self.id, delay))
        self.delay = to_seconds(delay, "delay")

    def remove(self, *, remove_children: bool = True) -> bool:
        """Sync twin of :meth:`echomq.Job.remove`; True if the job existed."""
        return self._run(ops.remove_job(self._k, self.id, remove_children=remove_children))


class Queue:
    """Sync twin of :class:`echomq.Queue`: remembers a name, prefix, connection and defaults.

    ``with Queue(...)`` or :meth:`close` closes the client if the queue opened it from a URL; a
    ``redis.Redis`` you pass is never closed.

    Args:
        name: the queue name (no ``:``).
        connection: a ``redis.Redis`` you own, or a URL.
        prefix: the key prefix.
        default_job_options: options applied to every job added through this queue.
    """

    def __init__(
        self,
        name: str,
        *,
        connection: SyncConnection,
        prefix: str = DEFAULT_PREFIX,
        default_job_options: JobOptions | Mapping[str, Any] | None = None,
    ) -> None:
        self._keys = queue_keys(name, prefix)
        self._defaults = coerce_options(default_job_options)
        self._conn = SyncConn(connection)

    @property
    def name(self) -> str:
        """The queue name."""
        return self._keys.name

    @property
    def prefix(self) -> str:
        """The key prefix."""
        return self._keys.prefix

    @property
    def default_job_options(self) -> JobOptions:
        """Options applied to every job added through this queue."""
        return self._defaults

    def _run(self, op: ops.Op[T]) -> T:
        return op.run_sync(self._conn.client)

    def _plan(self, plan: ops.Plan[T]) -> T:
        return ops.run_plan_sync(self._conn.client, plan)

    def _added(self, job_id: str, prepared: ops.PreparedJob) -> Job:
        job = job_from_prepared(Job, job_id, prepared, self._keys.name)
        job._keys, job._conn = self._keys, self._conn
        return job

    def add(self, name: str, data: Any = None, **options: Unpack[JobOptionsDict]) -> Job:
        """Sync twin of :meth:`echomq.Queue.add`; per-call options override the defaults."""
        prepared = ops.prepare_job(name, data, self._defaults.merged(JobOptions.build(options)))
        return self._added(self._run(ops.add_job(self._keys, prepared)), prepared)

    def add_bulk(self, jobs: Iterable[BulkItem]) -> list[Job]:
        """Sync twin of :meth:`echomq.Queue.add_bulk`: one MULTI/EXEC, all or nothing."""
        prepared = ops.prepare_bulk(jobs, self._defaults)
        if not prepared:
            return []
        job_ids = self._run(ops.add_jobs(self._keys, prepared))
        return [self._added(job_id, p) for job_id, p in zip(job_ids, prepared)]

    def get_job(self, job_id: str) -> Job | None:
        """Sync twin of :meth:`echomq.Queue.get_job`."""
        h = self._run(ops.get_job_hash(self._keys, job_id))
        return None if h is None else Job._from_hash(job_id, h, self._keys, self._conn)

    def get_state(self, job_id: str) -> JobState:
        """Sync twin of :meth:`echomq.Queue.get_state`."""
        return JobState(self._run(ops.get_state(self._keys, job_id)))

    def get_jobs(
        self,
        states: str | Iterable[str] | None = None,
        start: int = 0,
        end: int = -1,
        asc: bool = False,
    ) -> list[Job]:
        """Sync twin of :meth:`echomq.Queue.get_jobs`."""
        types = ops.normalize_types(states, ops.DEFAULT_COUNT_TYPES)
        pairs = self._plan(ops.get_jobs_plan(self._keys, types, start, end, asc))
        return [Job._from_hash(i, h, self._keys, self._conn) for i, h in pairs]

    def get_waiting(self, start: int = 0, end: int = -1) -> list[Job]:
        """Waiting jobs, next to run first."""
        return self.get_jobs("waiting", start, end, asc=True)

    def get_prioritized(self, start: int = 0, end: int = -1) -> list[Job]:
        """Prioritized jobs, next to run first."""
        return self.get_jobs("prioritized", start, end, asc=True)

    def get_delayed(self, start: int = 0, end: int = -1) -> list[Job]:
        """Delayed jobs, soonest due first."""
        return self.get_jobs("delayed", start, end, asc=True)

    def get_active(self, start: int = 0, end: int = -1) -> list[Job]:
        """Active jobs, longest running first."""
        return self.get_jobs("active", start, end, asc=True)

    def get_completed(self, start: int = 0, end: int = -1) -> list[Job]:
        """Completed jobs, most recently finished first."""
        return self.get_jobs("completed", start, end, asc=False)

    def get_failed(self, start: int = 0, end: int = -1) -> list[Job]:
        """Failed jobs, most recently finished first."""
        return self.get_jobs("failed", start, end, asc=False)

    def get_waiting_children(self, start: int = 0, end: int = -1) -> list[Job]:
        """Parent jobs waiting for their children, oldest first."""
        return self.get_jobs("waiting-children", start, end, asc=True)

    def get_job_counts(self, *states: str) -> dict[str, int]:
        """Sync twin of :meth:`echomq.Queue.get_job_counts`."""
        types = ops.normalize_types(states or None, ops.DEFAULT_COUNT_TYPES)
        return self._run(ops.get_counts(self._keys, types))

    def count(self) -> int:
        """Sync twin of :meth:`echomq.Queue.count`."""
        return sum(self._run(ops.get_counts(self._keys, ops.PENDING_TYPES)).values())

    def get_job_logs(
        self, job_id: str, start: int = 0, end: int = -1, asc: bool = True
    ) -> tuple[list[str], int]:
        """Sync twin of :meth:`echomq.Queue.get_job_logs`."""
        return self._run(ops.get_logs(self._keys, job_id, start, end, asc))

    def is_paused(self) -> bool:
        """Sync twin of :meth:`echomq.Queue.is_paused`."""
        return self._run(ops.is_paused(self._keys))

    def pause(self) -> None:
        """Sync twin of :meth:`echomq.Queue.pause`."""
        self._run(ops.pause_queue(self._keys, True))

    def resume(self) -> None:
        """Sync twin of :meth:`echomq.Queue.resume`."""
        self._plan(ops.resume_plan(self._keys))

    def get_workers(self) -> list[dict[str, str]]:
        """Sync twin of :meth:`echomq.Queue.get_workers`."""
        return self._run(ops.get_workers(self._keys))

    def trim_events(self, max_len: int) -> int:
        """Sync twin of :meth:`echomq.Queue.trim_events`."""
        return self._run(ops.trim_events(self._keys, max_len))

    def remove(self, job_id: str, *, remove_children: bool = True) -> bool:
        """Sync twin of :meth:`echomq.Queue.remove`."""
        return self._run(ops.remove_job(self._keys, job_id, remove_children=remove_children))

    def drain(self, *, delayed: bool = False) -> None:
        """Sync twin of :meth:`echomq.Queue.drain`."""
        self._plan(ops.drain_plan(self._keys, delayed=delayed))

    def clean(self, grace: Duration, limit: int = 0, state: str = "completed") -> list[str]:
        """Sync twin of :meth:`echomq.Queue.clean`."""
        return self._plan(ops.clean_plan(self._keys, grace, limit, state))

    def obliterate(self, *, force: bool = False) -> None:
        """Sync twin of :meth:`echomq.Queue.obliterate`."""
        self._plan(ops.obliterate_plan(self._keys, force=force))

    def retry_jobs(
        self,
        state: str = "failed",
        count: int = ops.admin.BATCH,
        timestamp: datetime | float | None = None,
    ) -> None:
        """Sync twin of :meth:`echomq.Queue.retry_jobs`."""
        self._plan(ops.retry_jobs_plan(self._keys, state, count, timestamp))

    def promote_jobs(self, count: int = ops.admin.BATCH) -> None:
        """Sync twin of :meth:`echomq.Queue.promote_jobs`."""
        self._plan(ops.promote_jobs_plan(self._keys, count))

    def close(self) -> None:
        """Close the connection if this queue opened it."""
        self._conn.close()

    def __enter__(self) -> Queue:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Queue({self.name!r}, prefix={self.prefix!r})"


# -- module-level functions: each runs its Queue twin on a per-call Queue ------------------
# A per-call Queue closes a client it opened from a URL and never one the caller passed.

Connection = redis.Redis | str


def add(
    queue: str,
    name: str,
    data: Any = None,
    *,
    connection: Connection,
    prefix: str = DEFAULT_PREFIX,
    **options: Unpack[JobOptionsDict],
) -> Job:
    """Sync twin of :func:`echomq.add`.

    Raises:
        ValidationError: bad name, id, option or payload; nothing was written.
    """
    with Queue(queue, connection=connection, prefix=prefix) as q:
        return q.add(name, data, **options)


def add_bulk(
    queue: str, jobs: Iterable[BulkItem], *, connection: Connection, prefix: str = DEFAULT_PREFIX
) -> list[Job]:
    """Sync twin of :func:`echomq.add_bulk`: one MULTI/EXEC, all jobs or none."""
    with Queue(queue, connection=connection, prefix=prefix) as q:
        return q.add_bulk(jobs)


def get_job(
    queue: str, job_id: str, *, connection: Connection, prefix: str = DEFAULT_PREFIX
) -> Job | None:
    """Sync twin of :func:`echomq.get_job` (with a URL the job's client is closed on return)."""
    with Queue(queue, connection=connection, prefix=prefix) as q:
        return q.get_job(job_id)


def get_state(
    queue: str, job_id: str, *, connection: Connection, prefix: str = DEFAULT_PREFIX
) -> JobState:
    """Sync twin of :func:`echomq.get_state`."""
    with Queue(queue, connection=connection, prefix=prefix) as q:
        return q.get_state(job_id)


def get_jobs(
    queue: str,
    states: str | Iterable[str] | None = None,
    start: int = 0,
    end: int = -1,
    asc: bool = False,
    *,
    connection: Connection,
    prefix: str = DEFAULT_PREFIX,
) -> list[Job]:
    """Sync twin of :func:`echomq.get_jobs`."""
    with Queue(queue, connection=connection, prefix=prefix) as q:
        return q.get_jobs(states, start, end, asc)


def get_job_counts(
    queue: str, *states: str, connection: Connection, prefix: str = DEFAULT_PREFIX
) -> dict[str, int]:
    """Sync twin of :func:`echomq.get_job_counts`."""
    with Queue(queue, connection=connection, prefix=prefix) as q:
        return q.get_job_counts(*states)


def count(queue: str, *, connection: Connection, prefix: str = DEFAULT_PREFIX) -> int:
    """Sync twin of :func:`echomq.count`."""
    with Queue(queue, connection=connection, prefix=prefix) as q:
        return q.count()


def get_job_logs(
    queue: str,
    job_id: str,
    start: int = 0,
    end: int = -1,
    asc: bool = True,
    *,
    connection: Connection,
    prefix: str = DEFAULT_PREFIX,
) -> tuple[list[str], int]:
    """Sync twin of :func:`echomq.get_job_logs`."""
    with Queue(queue, connection=connection, prefix=prefix) as q:
        return q.get_job_logs(job_id, start, end, asc)


def is_paused(queue: str, *, connection: Connection, prefix: str = DEFAULT_PREFIX) -> bool:
    """Sync twin of :func:`echomq.is_paused`."""
    with Queue(queue, connection=connection, prefix=prefix) as q:
        return q.is_paused()


def pause(queue: str, *, connection: Connection, prefix: str = DEFAULT_PREFIX) -> None:
    """Sync twin of :func:`echomq.pause`."""
    with Queue(queue, connection=connection, prefix=prefix) as q:
        q.pause()


def resume(queue: str, *, connection: Connection, prefix: str = DEFAULT_PREFIX) -> None:
    """Sync twin of :func:`echomq.resume`."""
    with Queue(queue, connection=connection, prefix=prefix) as q:
        q.resume()


def get_workers(
    queue: str, *, connection: Connection, prefix: str = DEFAULT_PREFIX
) -> list[dict[str, str]]:
    """Sync twin of :func:`echomq.get_workers`."""
    with Queue(queue, connection=connection, prefix=prefix) as q:
        return q.get_workers()


def trim_events(
    queue: str, max_len: int, *, connection: Connection, prefix: str = DEFAULT_PREFIX
) -> int:
    """Sync twin of :func:`echomq.trim_events`."""
    with Queue(queue, connection=connection, prefix=prefix) as q:
        return q.trim_events(max_len)


def remove(
    queue: str,
    job_id: str,
    *,
    remove_children: bool = True,
    connection: Connection,
    prefix: str = DEFAULT_PREFIX,
) -> bool:
    """Sync twin of :func:`echomq.remove`."""
    with Queue(queue, connection=connection, prefix=prefix) as q:
        return q.remove(job_id, remove_children=remove_children)


def drain(
    queue: str, *, delayed: bool = False, connection: Connection, prefix: str = DEFAULT_PREFIX
) -> None:
    """Sync twin of :func:`echomq.drain`."""
    with Queue(queue, connection=connection, prefix=prefix) as q:
        q.drain(delayed=delayed)


def clean(
    queue: str,
    grace: Duration,
    limit: int = 0,
    state: str = "completed",
    *,
    connection: Connection,
    prefix: str = DEFAULT_PREFIX,
) -> list[str]:
    """Sync twin of :func:`echomq.clean`."""
    with Queue(queue, connection=connection, prefix=prefix) as q:
        return q.clean(grace, limit, state)


def obliterate(
    queue: str, *, force: bool = False, connection: Connection, prefix: str = DEFAULT_PREFIX
) -> None:
    """Sync twin of :func:`echomq.obliterate`."""
    with Queue(queue, connection=connection, prefix=prefix) as q:
        q.obliterate(force=force)


def retry_jobs(
    queue: str,
    state: str = "failed",
    count: int = ops.admin.BATCH,
    timestamp: datetime | float | None = None,
    *,
    connection: Connection,
    prefix: str = DEFAULT_PREFIX,
) -> None:
    """Sync twin of :func:`echomq.retry_jobs`."""
    with Queue(queue, connection=connection, prefix=prefix) as q:
        q.retry_jobs(state, count, timestamp)


def promote_jobs(
    queue: str, count: int = ops.admin.BATCH, *, connection: Connection, prefix: str = DEFAULT_PREFIX
) -> None:
    """Sync twin of :func:`echomq.promote_jobs`."""
    with Queue(queue, connection=connection, prefix=prefix) as q:
        q.promote_jobs(count)
