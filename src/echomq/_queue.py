"""``Queue``: a convenience over one queue, and the helpers it shares with the module-level
functions of :mod:`echomq.queue` (which re-exports it).

``scripts/unasync.py`` generates ``echomq/sync/_queue.py`` (the blocking ``echomq.sync.Queue``)
from ``echomq/_queue.py``, the one definition of both: edit the latter. Each method builds an
:mod:`echomq.ops` operation (or plan) and runs it on the queue's connection.

A ``Queue`` remembers a name, a prefix, a connection and default job options; it holds no job.
Everything is validated before a connection is opened. Producers fail fast: a connection error
or timeout of ``add`` / ``add_bulk`` is raised as :class:`~echomq.errors.RedisUnavailableError`
naming the server, and a queue made from a URL gives each connect ``connect_timeout``. After its
first call that succeeds, a queue checks its server once per process (``_server_checks``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from types import TracebackType
from typing import Any

from typing_extensions import Unpack

from . import ops
from ._connection import AsyncConn, AsyncConnection, check_cluster_flow, check_cluster_keys
from ._fail_fast import DEFAULT_CONNECT_TIMEOUT, UNREACHABLE, connect_budget, raise_unavailable
from ._job import Job
from ._server_checks import check_on_first_use
from .job import JobState
from .ops import BulkItem, Metrics, QueueMeta, RateLimit, prepare_bulk
from .options import UNSET, Duration, JobOptions, JobOptionsDict, coerce_options
from .protocol.keys import DEFAULT_PREFIX, QueueKeys, queue_keys


async def _add(conn: AsyncConn, keys: QueueKeys, name: str, data: Any, options: JobOptions) -> Job:
    prepared = ops.prepare_job(name, data, options)
    if options.parent is not UNSET:  # its scripts touch the parent's queue too
        parent = options.parent
        check_cluster_flow(conn.client, [keys, queue_keys(parent.queue_name, parent.prefix)])
    try:
        job_id = await conn.run(ops.add_job(keys, prepared))
    except UNREACHABLE as exc:
        raise_unavailable(exc, conn.address)
    return Job._added(job_id, prepared, keys, conn)


async def _add_bulk(
    conn: AsyncConn, keys: QueueKeys, items: Iterable[BulkItem], defaults: JobOptions
) -> list[Job]:
    prepared = prepare_bulk(items, defaults)
    if not prepared:
        return []
    try:
        job_ids = await conn.run(ops.add_jobs(keys, prepared))
    except UNREACHABLE as exc:
        raise_unavailable(exc, conn.address)
    return [Job._added(i, p, keys, conn) for i, p in zip(job_ids, prepared)]


async def _get_job(conn: AsyncConn, keys: QueueKeys, job_id: str) -> Job | None:
    h = await conn.run(ops.get_job_hash(keys, job_id))
    return None if h is None else Job.from_hash(job_id, h, keys, conn)


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


class Queue:
    """A convenience that remembers a queue's name, prefix, connection and default options.

    It holds no job. Its calls (adds, job methods) go through a connection of its own (in the
    async API, one pipelined channel opened on first use with the client's settings).
    ``async with Queue(...)`` or ``await queue.aclose()`` closes it, and the client if the queue
    opened it from a URL; a client you pass is never closed.

    Args:
        name: the queue name (no ``:``).
        connection: a ``redis.asyncio.Redis`` you own, or a URL.
        prefix: the key prefix.
        default_job_options: options applied to every job added through this queue.
        connect_timeout: with a URL, seconds (or a timedelta) each connection has to connect
            (TCP and handshake) before :class:`~echomq.RedisUnavailableError`; ignored for a
            client you pass, whose own settings apply.

    Raises:
        InvalidOptionError: ``connect_timeout`` is not a positive duration.
    """

    def __init__(
        self,
        name: str,
        *,
        connection: AsyncConnection,
        prefix: str = DEFAULT_PREFIX,
        default_job_options: JobOptions | Mapping[str, Any] | None = None,
        connect_timeout: Duration = DEFAULT_CONNECT_TIMEOUT,
    ) -> None:
        self._keys = queue_keys(name, prefix)
        self._defaults = coerce_options(default_job_options)
        check_cluster_keys(connection, self._keys)
        budget = connect_budget(connect_timeout)
        self._conn = AsyncConn(connection, pipelined=True, connect_timeout=budget)
        check_on_first_use(self._conn)

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

    async def add(self, name: str, data: Any = UNSET, **options: Unpack[JobOptionsDict]) -> Job:
        """Add one job; per-call options override the queue's defaults. See :func:`add`."""
        merged = self._defaults.merged(JobOptions.build(options))
        return await _add(self._conn, self._keys, name, data, merged)

    async def add_bulk(self, jobs: Iterable[BulkItem]) -> list[Job]:
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

    # -- global limits (see the functions of the same names) --------------------------------

    async def set_global_concurrency(self, concurrency: int) -> None:
        """Cap the jobs active at once, queue-wide. See :func:`set_global_concurrency`."""
        await self._conn.run(ops.set_global_concurrency(self._keys, concurrency))

    async def get_global_concurrency(self) -> int | None:
        """The global concurrency, or None. See :func:`get_global_concurrency`."""
        return await self._conn.run(ops.get_global_concurrency(self._keys))

    async def remove_global_concurrency(self) -> bool:
        """Remove the global concurrency. See :func:`remove_global_concurrency`."""
        return await self._conn.run(ops.remove_global_concurrency(self._keys))

    async def set_global_rate_limit(self, max: int, duration: Duration) -> None:
        """Let at most ``max`` jobs start per ``duration``. See :func:`set_global_rate_limit`."""
        await self._conn.run(ops.set_global_rate_limit(self._keys, max, duration))

    async def get_global_rate_limit(self) -> RateLimit | None:
        """The global rate limit, or None. See :func:`get_global_rate_limit`."""
        return await self._conn.run(ops.get_global_rate_limit(self._keys))

    async def remove_global_rate_limit(self) -> bool:
        """Remove the global rate limit. See :func:`remove_global_rate_limit`."""
        return await self._conn.run(ops.remove_global_rate_limit(self._keys))

    async def rate_limit(self, duration: Duration) -> None:
        """Rate-limit the queue for ``duration``. See :func:`rate_limit`."""
        await self._conn.run(ops.rate_limit(self._keys, duration))

    async def get_rate_limit_ttl(self, max_jobs: int | None = None) -> float:
        """Seconds until the rate limit lifts. See :func:`get_rate_limit_ttl`."""
        return await self._conn.run(ops.get_rate_limit_ttl(self._keys, max_jobs))

    async def remove_rate_limit_key(self) -> bool:
        """Delete the rate-limiter key. See :func:`remove_rate_limit_key`."""
        return await self._conn.run(ops.remove_rate_limit_key(self._keys))

    async def is_maxed(self) -> bool:
        """Whether the global concurrency is reached. See :func:`is_maxed`."""
        return await self._conn.run(ops.is_maxed(self._keys))

    async def get_counts_per_priority(self, priorities: Iterable[int]) -> dict[int, int]:
        """Waiting jobs per priority. See :func:`get_counts_per_priority`."""
        return await self._conn.run(ops.get_counts_per_priority(self._keys, priorities))

    async def get_meta(self) -> QueueMeta:
        """The queue's settings from its meta hash. See :func:`get_meta`."""
        return await self._conn.run(ops.get_meta(self._keys))

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
