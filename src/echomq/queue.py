"""The async producer API: module-level functions over a caller's connection, and ``Queue``.

A queue name is a coordinate, not a container: ``await add("emails", "send", data,
connection=redis)`` writes the job with one script call and keeps nothing in memory. ``Queue``
only remembers a name, a prefix, a connection and default job options.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar

from typing_extensions import Unpack

from . import ops
from ._connection import AsyncConn, AsyncConnection, check_cluster_keys
from .job import Job, JobData, JobState, ms_to_datetime
from .ops import BulkItem as BulkItem
from .ops import Metrics as Metrics
from .ops import MetricsMeta as MetricsMeta
from .ops import prepare_bulk as prepare_bulk
from .options import EMPTY_OPTIONS, UNSET, Duration, JobOptions, JobOptionsDict, coerce_options
from .protocol import fields
from .protocol.keys import DEFAULT_PREFIX, QueueKeys, queue_keys

T = TypeVar("T")
JobT = TypeVar("JobT", bound=JobData)


def job_from_prepared(cls: type[JobT], job_id: str, p: ops.PreparedJob, queue_name: str) -> JobT:
    """An unbound job of ``cls`` for ``p``, just added as ``job_id`` (shared with the sync API)."""
    return cls(
        id=job_id,
        name=p.name,
        data=p.data,
        queue_name=queue_name,
        timestamp=ms_to_datetime(p.timestamp_ms),  # type: ignore[arg-type]
        delay=p.delay_ms / 1000,
        priority=p.priority,
        wire_options=fields.loads(p.opts_json),
    )


def _job_from_prepared(job_id: str, p: ops.PreparedJob, keys: QueueKeys, conn: AsyncConn) -> Job:
    job = job_from_prepared(Job, job_id, p, keys.name)
    job._keys = keys
    job._conn = conn
    return job


async def _add(conn: AsyncConn, keys: QueueKeys, name: str, data: Any, options: JobOptions) -> Job:
    prepared = ops.prepare_job(name, data, options)
    job_id = await conn.run(ops.add_job(keys, prepared))
    return _job_from_prepared(job_id, prepared, keys, conn)


async def _add_bulk(
    conn: AsyncConn, keys: QueueKeys, items: Iterable[BulkItem], defaults: JobOptions
) -> list[Job]:
    prepared = prepare_bulk(items, defaults)
    if not prepared:
        return []
    job_ids = await conn.run(ops.add_jobs(keys, prepared))
    return [_job_from_prepared(i, p, keys, conn) for i, p in zip(job_ids, prepared)]


async def add(
    queue: str,
    name: str,
    data: Any = UNSET,
    *,
    connection: AsyncConnection,
    prefix: str = DEFAULT_PREFIX,
    **options: Unpack[JobOptionsDict],
) -> Job:
    """Add one job to ``queue``; nothing but Redis holds it afterwards.

    Args:
        queue: the queue name (no ``:``).
        name: the job name, given to the processor.
        data: the payload; any JSON-serialisable value (``{}`` when omitted, as in Node).
        connection: a ``redis.asyncio.Redis`` you own, or a URL (opened and closed here).
        prefix: the key prefix (``bull`` is BullMQ's default).
        **options: job options, see :class:`~echomq.JobOptions`.

    Returns:
        The added job (its ``id`` is the generated or custom id).

    Raises:
        ValidationError: bad name, id, option or payload; nothing was written.
    """
    keys = queue_keys(queue, prefix)
    job_options = JobOptions.build(options)
    async with _connected(connection) as conn:
        return await _add(conn, keys, name, data, job_options)


async def add_bulk(
    queue: str,
    jobs: Iterable[BulkItem],
    *,
    connection: AsyncConnection,
    prefix: str = DEFAULT_PREFIX,
) -> list[Job]:
    """Add many jobs in one MULTI/EXEC: all of them land, or none.

    Args:
        queue: the queue name.
        jobs: items ``(name, data)`` or ``(name, data, options)``; options are a
            :class:`~echomq.JobOptions` or a mapping of option keywords.
        connection: a ``redis.asyncio.Redis`` you own, or a URL.
        prefix: the key prefix.

    Returns:
        The jobs, in the order given.

    Raises:
        ValidationError: any item is invalid; nothing was written.
    """
    keys = queue_keys(queue, prefix)
    async with _connected(connection) as conn:
        return await _add_bulk(conn, keys, jobs, EMPTY_OPTIONS)


async def get_job(
    queue: str,
    job_id: str,
    *,
    connection: AsyncConnection,
    prefix: str = DEFAULT_PREFIX,
) -> Job | None:
    """Read one job, or None when it does not exist.

    The returned job is bound to ``connection``; with a URL connection it is closed on return,
    so use a ``Queue`` or your own client to call the job's methods afterwards.
    """
    keys = queue_keys(queue, prefix)
    async with _connected(connection) as conn:
        return await _get_job(conn, keys, job_id)


async def _get_job(conn: AsyncConn, keys: QueueKeys, job_id: str) -> Job | None:
    h = await conn.run(ops.get_job_hash(keys, job_id))
    return None if h is None else Job.from_hash(job_id, h, keys, conn)


@contextlib.asynccontextmanager
async def _connected(connection: AsyncConnection) -> AsyncIterator[AsyncConn]:
    """The connection for one module-level call; a client opened from a URL is closed on exit.

    A client the caller passed stays usable, so jobs returned through it keep working.
    """
    conn = AsyncConn(connection)
    try:
        yield conn
    finally:
        if conn.owned:
            await conn.aclose()


async def _run(connection: AsyncConnection, op: ops.Op[T]) -> T:
    async with _connected(connection) as conn:
        return await conn.run(op)


async def _get_jobs(
    conn: AsyncConn,
    keys: QueueKeys,
    states: str | Iterable[str] | None,
    start: int,
    end: int,
    asc: bool,
) -> list[Job]:
    types = ops.normalize_types(states, ops.DEFAULT_COUNT_TYPES)
    pairs = await conn.run_plan(ops.get_jobs_plan(keys, types, start, end, asc))
    return [Job.from_hash(i, h, keys, conn) for i, h in pairs]


async def _resume(conn: AsyncConn, keys: QueueKeys) -> None:
    await conn.run_plan(ops.resume_plan(keys))


async def get_state(
    queue: str,
    job_id: str,
    *,
    connection: AsyncConnection,
    prefix: str = DEFAULT_PREFIX,
) -> JobState:
    """The state a job is in (``JobState.UNKNOWN`` when no state holds it).

    Args:
        queue: the queue name.
        job_id: the job.
        connection: a ``redis.asyncio.Redis`` you own, or a URL (opened and closed here).
        prefix: the key prefix.
    """
    state = await _run(connection, ops.get_state(queue_keys(queue, prefix), job_id))
    return JobState(state)


async def get_jobs(
    queue: str,
    states: str | Iterable[str] | None = None,
    start: int = 0,
    end: int = -1,
    asc: bool = False,
    *,
    connection: AsyncConnection,
    prefix: str = DEFAULT_PREFIX,
) -> list[Job]:
    """Read the jobs in some states, newest first unless ``asc``.

    Each state is sliced ``[start, end]`` (inclusive, negative from the end) and the slices
    are concatenated in the order of ``states``; a job removed meanwhile is skipped.

    Args:
        queue: the queue name.
        states: one or more of ``waiting``, ``prioritized``, ``delayed``, ``active``,
            ``completed``, ``failed``, ``waiting-children`` and the legacy v5 ``paused`` list;
            ``None`` means all but ``paused``.
        start: first index of each state's slice.
        end: last index (``-1``: to the end).
        asc: oldest first.
        connection: a ``redis.asyncio.Redis`` you own, or a URL (the jobs returned are then
            bound to a closed connection; read them through a ``Queue`` to call their methods).
        prefix: the key prefix.

    Raises:
        ValidationError: an unknown state name, or a non-integer index.
    """
    keys = queue_keys(queue, prefix)
    async with _connected(connection) as conn:
        return await _get_jobs(conn, keys, states, start, end, asc)


async def get_job_counts(
    queue: str,
    *states: str,
    connection: AsyncConnection,
    prefix: str = DEFAULT_PREFIX,
) -> dict[str, int]:
    """How many jobs each state holds.

    Args:
        queue: the queue name.
        *states: state names (see :func:`get_jobs`); none given means ``active``, ``completed``,
            ``delayed``, ``failed``, ``prioritized``, ``waiting``, ``waiting-children``.
            ``waiting`` counts the ``wait`` list; ``paused`` the legacy v5 list.
        connection: a ``redis.asyncio.Redis`` you own, or a URL.
        prefix: the key prefix.

    Returns:
        State name to count, in the order asked.
    """
    types = ops.normalize_types(states or None, ops.DEFAULT_COUNT_TYPES)
    return await _run(connection, ops.get_counts(queue_keys(queue, prefix), types))


async def count(queue: str, *, connection: AsyncConnection, prefix: str = DEFAULT_PREFIX) -> int:
    """How many jobs have not started yet: waiting, delayed, prioritized and waiting-children."""
    counts = await _run(connection, ops.get_counts(queue_keys(queue, prefix), ops.PENDING_TYPES))
    return sum(counts.values())


async def get_job_logs(
    queue: str,
    job_id: str,
    start: int = 0,
    end: int = -1,
    asc: bool = True,
    *,
    connection: AsyncConnection,
    prefix: str = DEFAULT_PREFIX,
) -> tuple[list[str], int]:
    """A slice of a job's log lines and the total number of lines.

    Args:
        queue: the queue name.
        job_id: the job.
        start: first index (of the oldest-first order with ``asc``, else newest-first).
        end: last index (``-1``: to the end).
        asc: oldest line first.
        connection: a ``redis.asyncio.Redis`` you own, or a URL.
        prefix: the key prefix.
    """
    op = ops.get_logs(queue_keys(queue, prefix), job_id, start, end, asc)
    return await _run(connection, op)


async def get_metrics(
    queue: str,
    kind: str = "completed",
    start: int = 0,
    end: int = -1,
    *,
    connection: AsyncConnection,
    prefix: str = DEFAULT_PREFIX,
) -> Metrics:
    """The per-minute metrics workers with ``metrics_max_data_points`` write (as BullMQ's
    ``Queue.getMetrics``; BullMQ workers write the same keys).

    Args:
        queue: the queue name.
        kind: ``"completed"`` or ``"failed"``.
        start: first data point (0 = the most recent minute).
        end: last data point (``-1``: to the oldest).
        connection: a ``redis.asyncio.Redis`` you own, or a URL.
        prefix: the key prefix.
    """
    return await _run(connection, ops.get_metrics(queue_keys(queue, prefix), kind, start, end))


async def is_paused(
    queue: str, *, connection: AsyncConnection, prefix: str = DEFAULT_PREFIX
) -> bool:
    """Whether the queue is globally paused."""
    return await _run(connection, ops.is_paused(queue_keys(queue, prefix)))


async def pause(queue: str, *, connection: AsyncConnection, prefix: str = DEFAULT_PREFIX) -> None:
    """Pause the queue: workers stop taking jobs; jobs stay where they are.

    Emits a ``paused`` event. Jobs added meanwhile wait for :func:`resume`.
    """
    await _run(connection, ops.pause_queue(queue_keys(queue, prefix), True))


async def resume(queue: str, *, connection: AsyncConnection, prefix: str = DEFAULT_PREFIX) -> None:
    """Resume a paused queue and wake its workers; emits a ``resumed`` event.

    Jobs a BullMQ v5 producer left in the legacy ``paused`` list are moved to ``wait``.
    """
    keys = queue_keys(queue, prefix)
    async with _connected(connection) as conn:
        await _resume(conn, keys)


async def get_workers(
    queue: str, *, connection: AsyncConnection, prefix: str = DEFAULT_PREFIX
) -> list[dict[str, str]]:
    """The connections of this queue's workers (echomq or BullMQ), from ``CLIENT LIST``.

    Each entry holds that connection's CLIENT LIST fields, with ``name`` set to the queue name
    and ``rawname`` to the connection's own name. Only the server ``connection`` points to is
    asked.
    """
    return await _run(connection, ops.get_workers(queue_keys(queue, prefix)))


async def trim_events(
    queue: str,
    max_len: int,
    *,
    connection: AsyncConnection,
    prefix: str = DEFAULT_PREFIX,
) -> int:
    """Trim the events stream to about ``max_len`` entries; returns how many were deleted."""
    return await _run(connection, ops.trim_events(queue_keys(queue, prefix), max_len))


class QueueBase:
    """What the async and sync ``Queue`` share: a queue's keys and default job options.

    Everything is validated here, before a connection is opened.
    """

    def __init__(
        self,
        name: str,
        prefix: str,
        default_job_options: JobOptions | Mapping[str, Any] | None,
        connection: object,
    ) -> None:
        self._keys = queue_keys(name, prefix)
        self._defaults = coerce_options(default_job_options)
        check_cluster_keys(connection, self._keys)

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


class Queue(QueueBase):
    """A convenience that remembers a queue's name, prefix, connection and default options.

    It holds no job. ``async with Queue(...)`` or ``await queue.aclose()`` closes the
    connection if the queue opened it from a URL; a client you pass is never closed.

    Args:
        name: the queue name (no ``:``).
        connection: a ``redis.asyncio.Redis`` you own, or a URL.
        prefix: the key prefix.
        default_job_options: options applied to every job added through this queue.
    """

    def __init__(
        self,
        name: str,
        *,
        connection: AsyncConnection,
        prefix: str = DEFAULT_PREFIX,
        default_job_options: JobOptions | Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(name, prefix, default_job_options, connection)
        self._conn = AsyncConn(connection, pipelined=True)

    async def add(self, name: str, data: Any = UNSET, **options: Unpack[JobOptionsDict]) -> Job:
        """Add one job; per-call options override the queue's defaults. See :func:`add`."""
        merged = self._defaults.merged(JobOptions.build(options))
        return await _add(self._conn, self._keys, name, data, merged)

    async def add_bulk(self, jobs: Sequence[BulkItem]) -> list[Job]:
        """Add many jobs in one MULTI/EXEC. See :func:`add_bulk`."""
        return await _add_bulk(self._conn, self._keys, jobs, self._defaults)

    async def get_job(self, job_id: str) -> Job | None:
        """Read one job, or None when it does not exist."""
        return await _get_job(self._conn, self._keys, job_id)

    async def get_state(self, job_id: str) -> JobState:
        """The state a job is in. See :func:`get_state`."""
        state: str = await self._conn.run(ops.get_state(self._keys, job_id))
        return JobState(state)

    async def get_jobs(
        self,
        states: str | Iterable[str] | None = None,
        start: int = 0,
        end: int = -1,
        asc: bool = False,
    ) -> list[Job]:
        """Read the jobs in some states, newest first unless ``asc``. See :func:`get_jobs`."""
        return await _get_jobs(self._conn, self._keys, states, start, end, asc)

    async def get_waiting(self, start: int = 0, end: int = -1) -> list[Job]:
        """Waiting jobs, next to run first."""
        return await self.get_jobs("waiting", start, end, asc=True)

    async def get_prioritized(self, start: int = 0, end: int = -1) -> list[Job]:
        """Prioritized jobs, next to run first."""
        return await self.get_jobs("prioritized", start, end, asc=True)

    async def get_delayed(self, start: int = 0, end: int = -1) -> list[Job]:
        """Delayed jobs, soonest due first."""
        return await self.get_jobs("delayed", start, end, asc=True)

    async def get_active(self, start: int = 0, end: int = -1) -> list[Job]:
        """Active jobs, longest running first."""
        return await self.get_jobs("active", start, end, asc=True)

    async def get_completed(self, start: int = 0, end: int = -1) -> list[Job]:
        """Completed jobs, most recently finished first."""
        return await self.get_jobs("completed", start, end, asc=False)

    async def get_failed(self, start: int = 0, end: int = -1) -> list[Job]:
        """Failed jobs, most recently finished first."""
        return await self.get_jobs("failed", start, end, asc=False)

    async def get_waiting_children(self, start: int = 0, end: int = -1) -> list[Job]:
        """Parent jobs waiting for their children, oldest first."""
        return await self.get_jobs("waiting-children", start, end, asc=True)

    async def get_job_counts(self, *states: str) -> dict[str, int]:
        """How many jobs each state holds. See :func:`get_job_counts`."""
        types = ops.normalize_types(states or None, ops.DEFAULT_COUNT_TYPES)
        return await self._conn.run(ops.get_counts(self._keys, types))

    async def count(self) -> int:
        """How many jobs have not started yet. See :func:`count`."""
        counts = await self._conn.run(ops.get_counts(self._keys, ops.PENDING_TYPES))
        return sum(counts.values())

    async def get_job_logs(
        self, job_id: str, start: int = 0, end: int = -1, asc: bool = True
    ) -> tuple[list[str], int]:
        """A slice of a job's log lines and their total. See :func:`get_job_logs`."""
        op = ops.get_logs(self._keys, job_id, start, end, asc)
        return await self._conn.run(op)

    async def get_metrics(self, kind: str = "completed", start: int = 0, end: int = -1) -> Metrics:
        """Per-minute finish counts of the queue's workers. See :func:`get_metrics`."""
        return await self._conn.run(ops.get_metrics(self._keys, kind, start, end))

    async def is_paused(self) -> bool:
        """Whether the queue is globally paused."""
        return await self._conn.run(ops.is_paused(self._keys))

    async def pause(self) -> None:
        """Pause the queue. See :func:`pause`."""
        await self._conn.run(ops.pause_queue(self._keys, True))

    async def resume(self) -> None:
        """Resume the queue. See :func:`resume`."""
        await _resume(self._conn, self._keys)

    async def get_workers(self) -> list[dict[str, str]]:
        """The connections of this queue's workers. See :func:`get_workers`."""
        return await self._conn.run(ops.get_workers(self._keys))

    async def trim_events(self, max_len: int) -> int:
        """Trim the events stream to about ``max_len`` entries. See :func:`trim_events`."""
        return await self._conn.run(ops.trim_events(self._keys, max_len))

    async def remove(self, job_id: str, *, remove_children: bool = True) -> bool:
        """Delete one job (and by default its children). See :func:`remove`."""
        op = ops.remove_job(self._keys, job_id, remove_children=remove_children)
        return await self._conn.run(op)

    async def drain(self, *, delayed: bool = False) -> None:
        """Delete every job waiting to run. See :func:`drain`."""
        await self._conn.run_plan(ops.drain_plan(self._keys, delayed=delayed))

    async def clean(self, grace: Duration, limit: int = 0, state: str = "completed") -> list[str]:
        """Delete jobs of ``state`` older than ``grace``. See :func:`clean`."""
        plan = ops.clean_plan(self._keys, grace, limit, state)
        return await self._conn.run_plan(plan)

    async def obliterate(self, *, force: bool = False) -> None:
        """Pause the queue and delete all of it. See :func:`obliterate`."""
        await self._conn.run_plan(ops.obliterate_plan(self._keys, force=force))

    async def retry_jobs(
        self,
        state: str = "failed",
        count: int = ops.admin.BATCH,
        timestamp: datetime | float | None = None,
    ) -> None:
        """Move failed (or completed) jobs back to wait. See :func:`retry_jobs`."""
        plan = ops.retry_jobs_plan(self._keys, state, count, timestamp)
        await self._conn.run_plan(plan)

    async def promote_jobs(self, count: int = ops.admin.BATCH) -> None:
        """Move every delayed job to wait now. See :func:`promote_jobs`."""
        await self._conn.run_plan(ops.promote_jobs_plan(self._keys, count))

    async def aclose(self) -> None:
        """Close the connection if this queue opened it."""
        await self._conn.aclose()

    async def __aenter__(self) -> Queue:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"Queue({self.name!r}, prefix={self.prefix!r})"


# -- queue-wide removal and moves ------------------------------------------------------------


async def remove(
    queue: str,
    job_id: str,
    *,
    remove_children: bool = True,
    connection: AsyncConnection,
    prefix: str = DEFAULT_PREFIX,
) -> bool:
    """Delete one job from whatever state holds it, with its logs and dependency keys.

    If it was the last pending child of a parent in ``waiting-children``, the parent moves to
    the front of its queue's ``wait`` (``waiting`` event). A ``removed`` event is emitted for
    each job hash deleted.

    Args:
        queue: the queue name.
        job_id: the job.
        remove_children: also remove every child recorded on the job (processed, failed,
            ignored or pending), recursively and in any queue.
        connection: a ``redis.asyncio.Redis`` you own, or a URL (opened and closed here).
        prefix: the key prefix.

    Returns:
        True if the job existed, False if there was no such job.

    Raises:
        JobLockedError: a worker holds the job (or, with children, a pending child); nothing
            was removed.
        JobBelongsToSchedulerError: the job is its scheduler's current iteration; remove the
            scheduler instead.
    """
    op = ops.remove_job(queue_keys(queue, prefix), job_id, remove_children=remove_children)
    return await _run(connection, op)


async def drain(
    queue: str,
    *,
    delayed: bool = False,
    connection: AsyncConnection,
    prefix: str = DEFAULT_PREFIX,
) -> None:
    """Delete every job waiting to run: ``wait`` and ``prioritized`` (and ``delayed`` if asked).

    Active, completed, failed and waiting-children jobs stay, and so do the current
    iterations of job schedulers. Runs as several short script calls (at most 1000 jobs
    each), so jobs added meanwhile may or may not be removed. A parent in the same queue whose
    last pending child is drained is deleted too; one in another queue moves to its ``wait``.

    Args:
        queue: the queue name.
        delayed: also delete delayed jobs.
        connection: a ``redis.asyncio.Redis`` you own, or a URL (opened and closed here).
        prefix: the key prefix.
    """
    plan = ops.drain_plan(queue_keys(queue, prefix), delayed=delayed)
    async with _connected(connection) as conn:
        await conn.run_plan(plan)


async def clean(
    queue: str,
    grace: Duration,
    limit: int = 0,
    state: str = "completed",
    *,
    connection: AsyncConnection,
    prefix: str = DEFAULT_PREFIX,
) -> list[str]:
    """Delete the jobs of one state that are older than ``grace``.

    A job's age is taken from its ``finished_on``, else ``processed_on``, else ``timestamp``
    (completed and failed: the finish time; delayed: processed_on, else timestamp;
    prioritized: timestamp). Active jobs are only deleted while no worker holds their lock;
    current scheduler iterations are kept. Runs in calls of at most 1000 jobs, each emitting
    a ``cleaned`` event with its count.

    Args:
        queue: the queue name.
        grace: seconds or a timedelta; jobs newer than this are kept.
        limit: the most jobs to delete; 0 for no limit.
        state: ``completed``, ``failed``, ``wait`` (or ``waiting``), ``active``, ``paused``,
            ``prioritized`` or ``delayed``.
        connection: a ``redis.asyncio.Redis`` you own, or a URL (opened and closed here).
        prefix: the key prefix.

    Returns:
        The ids of the deleted jobs (parents deleted with their last child are not listed).

    Raises:
        ValidationError: bad ``state``, negative ``grace`` or ``limit``; nothing was written.
    """
    plan = ops.clean_plan(queue_keys(queue, prefix), grace, limit, state)
    async with _connected(connection) as conn:
        return await conn.run_plan(plan)


async def obliterate(
    queue: str,
    *,
    force: bool = False,
    connection: AsyncConnection,
    prefix: str = DEFAULT_PREFIX,
) -> None:
    """Delete a whole queue: its jobs, schedulers, events, counters and metadata.

    The queue is paused first (``paused`` event), atomically with the check for active jobs,
    then deleted in calls of at most 1000 jobs. Jobs in ``waiting-children`` (and their keys),
    the rate limiter and dedup keys of already-deleted jobs are not touched, as in BullMQ.

    Args:
        queue: the queue name.
        force: also delete active jobs (their workers will fail to finish them).
        connection: a ``redis.asyncio.Redis`` you own, or a URL (opened and closed here).
        prefix: the key prefix.

    Raises:
        ActiveJobsError: the queue has active jobs and ``force`` is False; nothing was written.
        QueueNotPausedError: the queue was resumed while it was being deleted.
    """
    plan = ops.obliterate_plan(queue_keys(queue, prefix), force=force)
    async with _connected(connection) as conn:
        await conn.run_plan(plan)


async def retry_jobs(
    queue: str,
    state: str = "failed",
    count: int = ops.admin.BATCH,
    timestamp: datetime | float | None = None,
    *,
    connection: AsyncConnection,
    prefix: str = DEFAULT_PREFIX,
) -> None:
    """Move failed (or completed) jobs that finished at or before ``timestamp`` back to ``wait``.

    Their result, ``finished_on`` and ``processed_on`` are cleared, each gets a ``waiting``
    event, and all go to ``wait`` whatever their priority.

    Args:
        queue: the queue name.
        state: ``failed`` or ``completed``.
        count: jobs moved per script call.
        timestamp: a datetime or epoch seconds; default now.
        connection: a ``redis.asyncio.Redis`` you own, or a URL (opened and closed here).
        prefix: the key prefix.

    Raises:
        ValidationError: bad ``state``, ``count`` or ``timestamp``; nothing was written.
    """
    plan = ops.retry_jobs_plan(queue_keys(queue, prefix), state, count, timestamp)
    async with _connected(connection) as conn:
        await conn.run_plan(plan)


async def promote_jobs(
    queue: str,
    count: int = ops.admin.BATCH,
    *,
    connection: AsyncConnection,
    prefix: str = DEFAULT_PREFIX,
) -> None:
    """Move every delayed job to ``wait`` now (priority ignored), ``count`` per script call.

    Raises:
        ValidationError: bad ``count``; nothing was written.
    """
    plan = ops.promote_jobs_plan(queue_keys(queue, prefix), count)
    async with _connected(connection) as conn:
        await conn.run_plan(plan)
