"""The producer API: module-level functions over a caller's connection, and ``Queue``.

A queue name is a coordinate, not a container: ``await add("emails", "send", data,
connection=redis)`` writes the job with one script call and keeps nothing in memory. ``Queue``
(defined in ``_queue``, re-exported here) only remembers a name, a prefix, a connection and
default job options.

``connection`` is optional everywhere: without it a call uses the connection rule
(``_redis.default``): the connection given to :func:`echomq.set_default_connection`, else
``$ECHOMQ_REDIS_URL``, else the embedded Redis if it is running (said once on stderr), else
:class:`~echomq.ConnectionNotOpenError`. A URL found that way is opened and closed like one
passed in.

``scripts/unasync.py`` generates ``echomq/sync/_api.py`` (the blocking functions of
``echomq.sync``) from ``echomq/queue.py``, the one definition of both: edit the latter.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable
from datetime import datetime
from typing import Any, TypeVar

import redis.asyncio
from typing_extensions import Unpack

from . import _ops as ops
from ._job import Job
from ._keys import queue_keys
from ._ops import BulkItem as BulkItem
from ._ops import Metrics as Metrics
from ._ops import MetricsMeta as MetricsMeta
from ._ops import QueueMeta as QueueMeta
from ._ops import RateLimit as RateLimit
from ._ops import groups as gops
from ._ops.groups import GroupInfo as GroupInfo
from ._ops.replicated import ReplicaWait
from ._ops.workers import WorkerInfo as WorkerInfo
from ._queue import Queue as Queue
from ._queue import _add, _add_bulk, _get_group_jobs, _get_job, _get_jobs, _get_workers, _resume
from ._redis.connection import (
    AsyncConn,
    AsyncConnection,
    async_client_from_url,
    resolve_connection,
)
from ._redis.fail_fast import DEFAULT_CONNECT_TIMEOUT
from ._redis.server_checks import check_on_first_use
from .errors import ReplicationError
from .job import JobState
from .options import EMPTY_OPTIONS, UNSET, Duration, JobOptions, JobOptionsDict
from .protocol.keys import DEFAULT_PREFIX

T = TypeVar("T")


async def add(
    queue: str,
    name: str,
    data: Any = UNSET,
    *,
    connection: AsyncConnection | None = None,
    prefix: str = DEFAULT_PREFIX,
    wait_replicas: int = 0,
    wait_timeout: Duration = 1.0,
    **options: Unpack[JobOptionsDict],
) -> Job:
    """Add one job to ``queue``; nothing but Redis holds it afterwards.

    Args:
        queue: the queue name (no ``:``).
        name: the job name, given to the processor.
        data: the payload; any JSON-serialisable value (``{}`` when omitted, as in Node).
        connection: a ``redis.asyncio.Redis`` you own, or a URL (opened and closed here, with a 1 s
            connect timeout; :func:`client_from_url` makes a client with another). None (default):
            the connection rule, see :func:`echomq.set_default_connection`.
        prefix: the key prefix (``bull`` is BullMQ's default).
        wait_replicas: after the add, wait until this many replicas have it (Redis ``WAIT``
            on the connection that wrote it; on a Cluster, the primary of the queue's slot);
            0 (default) returns as soon as the primary has it.
        wait_timeout: how long to wait for those replicas (seconds or a timedelta).
        **options: job options, see :class:`~echomq.JobOptions`.

    Returns:
        The added job (its ``id`` is the generated or custom id).

    Raises:
        ValidationError: bad name, id, option, payload, ``wait_replicas`` or
            ``wait_timeout``; nothing was written.
        ConnectionNotOpenError: no ``connection`` given and none found by the connection
            rule (the message says how to give one); nothing was written.
        RedisUnavailableError: Redis could not be reached or did not answer (the message
            names the server).
        ReplicationError: the job was added on the primary, but fewer than ``wait_replicas``
            replicas acknowledged it within ``wait_timeout``; the error's ``job`` is the job.
    """
    keys = queue_keys(queue, prefix)
    job_options = JobOptions.build(options)
    wait = ReplicaWait.build(wait_replicas, wait_timeout)
    async with _connected(connection) as conn:
        return _detached(conn, await _add(conn, keys, name, data, job_options, wait))


async def add_bulk(
    queue: str,
    jobs: Iterable[BulkItem],
    *,
    connection: AsyncConnection | None = None,
    prefix: str = DEFAULT_PREFIX,
    wait_replicas: int = 0,
    wait_timeout: Duration = 1.0,
) -> list[Job]:
    """Add many jobs in one MULTI/EXEC: all of them land, or none.

    Args:
        queue: the queue name.
        jobs: items ``(name, data)`` or ``(name, data, options)``; options are a
            :class:`~echomq.JobOptions` or a mapping of option keywords.
        connection: a ``redis.asyncio.Redis`` you own, or a URL. None (default): the connection
            rule, see :func:`echomq.set_default_connection`.
        prefix: the key prefix.
        wait_replicas: after the MULTI/EXEC, wait until this many replicas have it (one
            Redis ``WAIT`` for the whole batch); 0 (default) waits for none.
        wait_timeout: how long to wait for those replicas (seconds or a timedelta).

    Returns:
        The jobs, in the order given.

    Raises:
        ValidationError: any item, ``wait_replicas`` or ``wait_timeout`` is invalid; nothing
            was written.
        ConnectionNotOpenError: no ``connection`` given and none found by the connection
            rule; nothing was written.
        RedisUnavailableError: Redis could not be reached or did not answer.
        ReplicationError: the jobs were added on the primary, but fewer than
            ``wait_replicas`` replicas acknowledged them within ``wait_timeout``; the error's
            ``jobs`` are the jobs (``job`` the first).
    """
    keys = queue_keys(queue, prefix)
    wait = ReplicaWait.build(wait_replicas, wait_timeout)
    async with _connected(connection) as conn:
        added = await _add_bulk(conn, keys, jobs, EMPTY_OPTIONS, wait)
        return [_detached(conn, job) for job in added]


async def get_job(
    queue: str,
    job_id: str,
    *,
    connection: AsyncConnection | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> Job | None:
    """Read one job, or None when it does not exist.

    Args:
        queue: the queue name.
        job_id: the job.
        connection: a ``redis.asyncio.Redis`` you own, or a URL (opened and closed here: the job's
            fields are read, but its methods raise :class:`~echomq.ConnectionNotOpenError`; read it
            through a ``Queue`` to call them). None (default): the connection rule, see
            :func:`echomq.set_default_connection`.
        prefix: the key prefix.
    """
    keys = queue_keys(queue, prefix)
    async with _connected(connection) as conn:
        job = await _get_job(conn, keys, job_id)
        return None if job is None else _detached(conn, job)


def client_from_url(
    url: str, *, connect_timeout: Duration = DEFAULT_CONNECT_TIMEOUT, **redis_options: object
) -> redis.asyncio.Redis:
    """A ``redis.asyncio.Redis`` for ``url`` that fails fast, for you to keep and pass as
    ``connection=`` (the client echomq opens for a URL connection is made the same way).

    Every connection it opens has ``connect_timeout`` for TCP, TLS and redis-py's handshake
    (AUTH, SELECT...), else raises :class:`~echomq.RedisUnavailableError` naming the URL with
    its password masked; and redis-py retries nothing on its own (pass ``retry=`` to choose
    otherwise). Replies are waited for as redis-py's ``socket_timeout`` says. Nothing connects
    until the first command; you own the client: ``await client.aclose()``.

    Sentinel and Cluster have URL forms of their own (docs/deployment.md):
    ``redis+sentinel://[user:password@]host:port[,host:port...]/service_name[/db]`` gives a
    Sentinel-managed client (``rediss+sentinel://`` for TLS to the data nodes; the options
    ``sentinel_username`` / ``sentinel_password`` when the Sentinels' credentials differ), and
    ``redis+cluster://[user:password@]host:port[,host:port...]`` (or ``rediss+cluster://``) a
    ``RedisCluster``; ``connect_timeout`` then bounds each TCP connect.

    Args:
        url: a ``redis://``, ``rediss://`` or ``unix://`` URL, or a Sentinel or Cluster URL.
        connect_timeout: seconds or a timedelta; raise it for a slow or distant link.
        **redis_options: more keyword arguments for redis-py's ``Redis.from_url`` (e.g.
            ``decode_responses``, ``socket_timeout``, ``client_name``).

    Raises:
        ValidationError: not one of those URL forms (the message says what is wrong), or a
            ``connection_class`` option.
        InvalidOptionError: ``connect_timeout`` is not a positive duration.
    """
    return async_client_from_url(url, connect_timeout, **redis_options)


@contextlib.asynccontextmanager
async def _connected(connection: AsyncConnection | None) -> AsyncIterator[AsyncConn]:
    """The connection for one module-level call (None: the one the connection rule picks);
    a client opened from a URL (with the default ``connect_timeout``) is closed on exit. The
    first call to a server in this process that succeeds checks it (``_redis.server_checks``).

    A client the caller passed stays usable, so jobs returned through it keep working. The
    jobs a :class:`~echomq.ReplicationError` carries are detached like returned ones.
    """
    conn = AsyncConn(resolve_connection(connection), connect_timeout=DEFAULT_CONNECT_TIMEOUT)
    check_on_first_use(conn)
    try:
        yield conn
    except ReplicationError as exc:
        for job in exc.jobs:
            if isinstance(job, Job):
                _detached(conn, job)
        raise
    finally:
        if conn.owned:
            await conn.aclose()


def _detached(conn: AsyncConn, job: Job) -> Job:
    """``job`` unbound if ``conn`` is a URL's, which the call closes before returning: its
    methods then raise :class:`~echomq.ConnectionNotOpenError` saying what to do instead."""
    if conn.owned:
        job._conn = None
    return job


async def _run(connection: AsyncConnection | None, op: ops.Op[T]) -> T:
    async with _connected(connection) as conn:
        return await conn.run(op)


async def _run_plan(connection: AsyncConnection | None, plan: ops.Plan[T]) -> T:
    async with _connected(connection) as conn:
        return await conn.run_plan(plan)


async def get_state(
    queue: str,
    job_id: str,
    *,
    connection: AsyncConnection | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> JobState:
    """The state a job is in (``JobState.UNKNOWN`` when no state holds it).

    Args:
        queue: the queue name.
        job_id: the job.
        connection: a ``redis.asyncio.Redis`` you own, or a URL (opened and closed here). None
            (default): the connection rule, see :func:`echomq.set_default_connection`.
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
    connection: AsyncConnection | None = None,
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
        connection: a ``redis.asyncio.Redis`` you own, or a URL (opened and closed here: the jobs'
            methods then raise :class:`~echomq.ConnectionNotOpenError`; read them through a
            ``Queue`` to call them). None (default): the connection rule, see
            :func:`echomq.set_default_connection`.
        prefix: the key prefix.

    Raises:
        ValidationError: an unknown state name, or a non-integer index.
    """
    keys = queue_keys(queue, prefix)
    async with _connected(connection) as conn:
        jobs = await _get_jobs(conn, keys, states, start, end, asc)
        return [_detached(conn, job) for job in jobs]


async def get_job_counts(
    queue: str,
    *states: str,
    connection: AsyncConnection | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> dict[str, int]:
    """How many jobs each state holds.

    Args:
        queue: the queue name.
        *states: state names (see :func:`get_jobs`); none given means ``active``, ``completed``,
            ``delayed``, ``failed``, ``prioritized``, ``waiting``, ``waiting-children``.
            ``waiting`` counts the ``wait`` list; ``paused`` the legacy v5 list.
        connection: a ``redis.asyncio.Redis`` you own, or a URL. None (default): the connection
            rule, see :func:`echomq.set_default_connection`.
        prefix: the key prefix.

    Returns:
        State name to count, in the order asked.
    """
    types = ops.normalize_types(states or None, ops.DEFAULT_COUNT_TYPES)
    return await _run(connection, ops.get_counts(queue_keys(queue, prefix), types))


async def count(
    queue: str, *, connection: AsyncConnection | None = None, prefix: str = DEFAULT_PREFIX
) -> int:
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
    connection: AsyncConnection | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> tuple[list[str], int]:
    """A slice of a job's log lines and the total number of lines.

    Args:
        queue: the queue name.
        job_id: the job.
        start: first index (of the oldest-first order with ``asc``, else newest-first).
        end: last index (``-1``: to the end).
        asc: oldest line first.
        connection: a ``redis.asyncio.Redis`` you own, or a URL. None (default): the connection
            rule, see :func:`echomq.set_default_connection`.
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
    connection: AsyncConnection | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> Metrics:
    """The per-minute metrics workers with ``metrics_max_data_points`` write (as BullMQ's
    ``Queue.getMetrics``; BullMQ workers write the same keys).

    Args:
        queue: the queue name.
        kind: ``"completed"`` or ``"failed"``.
        start: first data point (0 = the most recent minute).
        end: last data point (``-1``: to the oldest).
        connection: a ``redis.asyncio.Redis`` you own, or a URL. None (default): the connection
            rule, see :func:`echomq.set_default_connection`.
        prefix: the key prefix.
    """
    return await _run(connection, ops.get_metrics(queue_keys(queue, prefix), kind, start, end))


async def is_paused(
    queue: str, *, connection: AsyncConnection | None = None, prefix: str = DEFAULT_PREFIX
) -> bool:
    """Whether the queue is globally paused."""
    return await _run(connection, ops.is_paused(queue_keys(queue, prefix)))


async def pause(
    queue: str, *, connection: AsyncConnection | None = None, prefix: str = DEFAULT_PREFIX
) -> None:
    """Pause the queue: workers stop taking jobs; jobs stay where they are.

    Emits a ``paused`` event. Jobs added meanwhile wait for :func:`resume`.
    """
    await _run(connection, ops.pause_queue(queue_keys(queue, prefix), True))


async def resume(
    queue: str, *, connection: AsyncConnection | None = None, prefix: str = DEFAULT_PREFIX
) -> None:
    """Resume a paused queue and wake its workers; emits a ``resumed`` event.

    Jobs a BullMQ v5 producer left in the legacy ``paused`` list are moved to ``wait``.
    """
    keys = queue_keys(queue, prefix)
    async with _connected(connection) as conn:
        await _resume(conn, keys)


async def get_workers(
    queue: str, *, connection: AsyncConnection | None = None, prefix: str = DEFAULT_PREFIX
) -> list[WorkerInfo]:
    """This queue's live workers: echomq's worker registry, then BullMQ's from ``CLIENT LIST``.

    Each echomq worker keeps an entry in the queue's registry (``heartbeat_interval``); they
    come first, oldest first, as dicts with ``kind`` ``"echomq"``, ``id`` (the worker's id),
    ``worker_name``, ``host``, ``pid``, ``concurrency``, ``started_at``, ``heartbeat_at``
    (aware datetimes), ``jobs`` (the ids of the jobs it held at its last heartbeat),
    ``version``, and ``name`` (the queue name) and ``rawname`` (its connection's name) as
    before. Then come the connections named as the queue's workers in ``CLIENT LIST`` that no
    registry entry accounts for, with their ``CLIENT LIST`` fields as strings (``id``,
    ``addr``, ``age``...), ``name`` and ``rawname`` as BullMQ's ``getWorkers`` gives them, and
    ``kind`` ``"bullmq"`` (or ``"echomq"`` for a redis-py connection: an echomq worker that
    keeps no entry). Where Redis refuses ``CLIENT LIST`` (a managed service), the registry
    alone is returned and the refusal logged once. Only the server ``connection`` points to is
    asked. See docs/workers.md, "Listing workers".
    """
    async with _connected(connection) as conn:
        return await _get_workers(conn, queue_keys(queue, prefix))


async def trim_events(
    queue: str,
    max_len: int,
    *,
    connection: AsyncConnection | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> int:
    """Trim the events stream to about ``max_len`` entries; returns how many were deleted."""
    return await _run(connection, ops.trim_events(queue_keys(queue, prefix), max_len))


# -- queue-wide removal and moves ------------------------------------------------------------


async def remove(
    queue: str,
    job_id: str,
    *,
    remove_children: bool = True,
    connection: AsyncConnection | None = None,
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
        connection: a ``redis.asyncio.Redis`` you own, or a URL (opened and closed here). None
            (default): the connection rule, see :func:`echomq.set_default_connection`.
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


async def get_deduplication_job_id(
    queue: str,
    dedup_id: str,
    *,
    connection: AsyncConnection | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> str | None:
    """The id of the job that owns deduplication window ``dedup_id`` (the ``deduplication``
    option), or None when the window is closed.

    Args:
        queue: the queue name.
        dedup_id: the deduplication id.
        connection: a ``redis.asyncio.Redis`` you own, or a URL (opened and closed here). None
            (default): the connection rule, see :func:`echomq.set_default_connection`.
        prefix: the key prefix.

    Raises:
        ValidationError: ``dedup_id`` is not a non-empty str.
    """
    return await _run(connection, ops.get_deduplication_job_id(queue_keys(queue, prefix), dedup_id))


async def remove_deduplication_key(
    queue: str,
    dedup_id: str,
    *,
    connection: AsyncConnection | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> bool:
    """Close deduplication window ``dedup_id`` now, whichever job owns it: the next add with
    that id is not deduplicated. The owner job is not touched.

    Args:
        queue: the queue name.
        dedup_id: the deduplication id.
        connection: a ``redis.asyncio.Redis`` you own, or a URL (opened and closed here). None
            (default): the connection rule, see :func:`echomq.set_default_connection`.
        prefix: the key prefix.

    Returns:
        True if the window was open.

    Raises:
        ValidationError: ``dedup_id`` is not a non-empty str.
    """
    return await _run(connection, ops.remove_deduplication_key(queue_keys(queue, prefix), dedup_id))


async def drain(
    queue: str,
    *,
    delayed: bool = False,
    connection: AsyncConnection | None = None,
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
        connection: a ``redis.asyncio.Redis`` you own, or a URL (opened and closed here). None
            (default): the connection rule, see :func:`echomq.set_default_connection`.
        prefix: the key prefix.
    """
    await _run_plan(connection, ops.drain_plan(queue_keys(queue, prefix), delayed=delayed))


async def clean(
    queue: str,
    grace: Duration,
    limit: int = 0,
    state: str = "completed",
    *,
    connection: AsyncConnection | None = None,
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
        connection: a ``redis.asyncio.Redis`` you own, or a URL (opened and closed here). None
            (default): the connection rule, see :func:`echomq.set_default_connection`.
        prefix: the key prefix.

    Returns:
        The ids of the deleted jobs (parents deleted with their last child are not listed).

    Raises:
        ValidationError: bad ``state``, negative ``grace`` or ``limit``; nothing was written.
    """
    return await _run_plan(
        connection, ops.clean_plan(queue_keys(queue, prefix), grace, limit, state)
    )


async def obliterate(
    queue: str,
    *,
    force: bool = False,
    connection: AsyncConnection | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> None:
    """Delete a whole queue: its jobs, schedulers, events, counters and metadata.

    The queue is paused first (``paused`` event), atomically with the check for active jobs,
    then deleted in calls of at most 1000 jobs. Jobs in ``waiting-children`` (and their keys),
    the rate limiter and dedup keys of already-deleted jobs are not touched, as in BullMQ.

    Args:
        queue: the queue name.
        force: also delete active jobs (their workers will fail to finish them).
        connection: a ``redis.asyncio.Redis`` you own, or a URL (opened and closed here). None
            (default): the connection rule, see :func:`echomq.set_default_connection`.
        prefix: the key prefix.

    Raises:
        ActiveJobsError: the queue has active jobs and ``force`` is False; nothing was written.
        QueueNotPausedError: the queue was resumed while it was being deleted.
    """
    await _run_plan(connection, ops.obliterate_plan(queue_keys(queue, prefix), force=force))


async def retry_jobs(
    queue: str,
    state: str = "failed",
    count: int = ops.admin.BATCH,
    timestamp: datetime | float | None = None,
    *,
    connection: AsyncConnection | None = None,
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
        connection: a ``redis.asyncio.Redis`` you own, or a URL (opened and closed here). None
            (default): the connection rule, see :func:`echomq.set_default_connection`.
        prefix: the key prefix.

    Raises:
        ValidationError: bad ``state``, ``count`` or ``timestamp``; nothing was written.
    """
    await _run_plan(
        connection, ops.retry_jobs_plan(queue_keys(queue, prefix), state, count, timestamp)
    )


async def promote_jobs(
    queue: str,
    count: int = ops.admin.BATCH,
    *,
    connection: AsyncConnection | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> None:
    """Move every delayed job to ``wait`` now (priority ignored), ``count`` per script call.

    Raises:
        ValidationError: bad ``count``; nothing was written.
    """
    await _run_plan(connection, ops.promote_jobs_plan(queue_keys(queue, prefix), count))


# -- global limits ---------------------------------------------------------------------------
# Fields of the queue's meta hash (and its limiter key) that every worker, echomq or BullMQ,
# honours when it fetches; written exactly as BullMQ's Queue writes them.


async def set_global_concurrency(
    queue: str,
    concurrency: int,
    *,
    connection: AsyncConnection | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> None:
    """Let at most ``concurrency`` jobs of the queue be active at once, across all workers.

    Workers (echomq and BullMQ) take no job while ``concurrency`` jobs are active, whatever
    their own concurrency; they see a new value at their next fetch (BullMQ's
    ``setGlobalConcurrency``: meta field ``concurrency``). Idle workers are woken with it (the
    queue's marker), so jobs that waited for a slot a raised limit frees start at once.

    Args:
        queue: the queue name.
        concurrency: an int >= 1.
        connection: a ``redis.asyncio.Redis`` you own, or a URL (opened and closed here). None
            (default): the connection rule, see :func:`echomq.set_default_connection`.
        prefix: the key prefix.

    Raises:
        InvalidOptionError: ``concurrency`` is not an int >= 1; nothing was written.
    """
    await _run(connection, ops.set_global_concurrency(queue_keys(queue, prefix), concurrency))


async def get_global_concurrency(
    queue: str, *, connection: AsyncConnection | None = None, prefix: str = DEFAULT_PREFIX
) -> int | None:
    """The queue's global concurrency, or None when none is set."""
    return await _run(connection, ops.get_global_concurrency(queue_keys(queue, prefix)))


async def remove_global_concurrency(
    queue: str, *, connection: AsyncConnection | None = None, prefix: str = DEFAULT_PREFIX
) -> bool:
    """Remove the queue's global concurrency; True if one was set.

    Idle workers are woken with it (the queue's marker) and take the jobs that waited.
    """
    return await _run(connection, ops.remove_global_concurrency(queue_keys(queue, prefix)))


async def set_global_rate_limit(
    queue: str,
    max: int,
    duration: Duration,
    *,
    connection: AsyncConnection | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> None:
    """Let the queue's workers start at most ``max`` jobs per ``duration``, all together.

    It applies to every worker, echomq or BullMQ, with or without a ``limiter`` of its own:
    the global ``max`` takes precedence over a worker's, while a worker's own window takes
    precedence over ``duration`` (as in BullMQ). Stored in milliseconds (BullMQ's
    ``setGlobalRateLimit``: meta fields ``max`` and ``duration``).

    Args:
        queue: the queue name.
        max: jobs per window, an int >= 1.
        duration: the window, seconds or a timedelta (> 0; rounded to whole milliseconds).
        connection: a ``redis.asyncio.Redis`` you own, or a URL (opened and closed here). None
            (default): the connection rule, see :func:`echomq.set_default_connection`.
        prefix: the key prefix.

    Raises:
        InvalidOptionError: ``max`` is not an int >= 1 or ``duration`` is not positive;
            nothing was written.
    """
    op = ops.set_global_rate_limit(queue_keys(queue, prefix), max, duration)
    await _run(connection, op)


async def get_global_rate_limit(
    queue: str, *, connection: AsyncConnection | None = None, prefix: str = DEFAULT_PREFIX
) -> RateLimit | None:
    """The queue's global rate limit (``RateLimit(max, duration)``, duration in seconds), or
    None unless both of its fields are set."""
    return await _run(connection, ops.get_global_rate_limit(queue_keys(queue, prefix)))


async def remove_global_rate_limit(
    queue: str, *, connection: AsyncConnection | None = None, prefix: str = DEFAULT_PREFIX
) -> bool:
    """Remove the queue's global rate limit; True if it was set.

    The window already counted stays in force until it expires (:func:`remove_rate_limit_key`
    ends it now).
    """
    return await _run(connection, ops.remove_global_rate_limit(queue_keys(queue, prefix)))


async def rate_limit(
    queue: str,
    duration: Duration,
    *,
    connection: AsyncConnection | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> None:
    """Stop the queue's rate-limited workers from taking jobs for ``duration``.

    Sets the limiter key as BullMQ's ``Queue.rateLimit`` does. Only workers that have a rate
    limit honour it: one with its own ``limiter``, or any worker while a global rate limit is
    set. Raise :class:`~echomq.RateLimitError` from a processor afterwards to put its job back
    without counting an attempt.

    Args:
        queue: the queue name.
        duration: seconds or a timedelta (> 0; rounded to whole milliseconds).
        connection: a ``redis.asyncio.Redis`` you own, or a URL (opened and closed here). None
            (default): the connection rule, see :func:`echomq.set_default_connection`.
        prefix: the key prefix.

    Raises:
        InvalidOptionError: ``duration`` is not positive; nothing was written.
    """
    await _run(connection, ops.rate_limit(queue_keys(queue, prefix), duration))


async def get_rate_limit_ttl(
    queue: str,
    max_jobs: int | None = None,
    *,
    connection: AsyncConnection | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> float:
    """Seconds until the queue's rate limit lifts, 0.0 when it is not rate limited.

    With ``max_jobs``, or else the global rate limit's ``max``, the queue is limited while the
    jobs counted in the current window have reached it; with neither, any time left on the
    limiter key counts (a manual :func:`rate_limit`). BullMQ's ``getRateLimitTtl`` answers
    milliseconds, and -2 or -1 where this answers 0.0.

    Args:
        queue: the queue name.
        max_jobs: the limit to test the current count against (an int >= 1), e.g. a worker's
            ``limiter.max``.
        connection: a ``redis.asyncio.Redis`` you own, or a URL (opened and closed here). None
            (default): the connection rule, see :func:`echomq.set_default_connection`.
        prefix: the key prefix.

    Raises:
        InvalidOptionError: ``max_jobs`` is not None or an int >= 1.
    """
    return await _run(connection, ops.get_rate_limit_ttl(queue_keys(queue, prefix), max_jobs))


async def remove_rate_limit_key(
    queue: str, *, connection: AsyncConnection | None = None, prefix: str = DEFAULT_PREFIX
) -> bool:
    """Delete the queue's limiter key (the current window's count, or a manual rate limit), so
    workers may take jobs at once; True if it existed."""
    return await _run(connection, ops.remove_rate_limit_key(queue_keys(queue, prefix)))


async def is_maxed(
    queue: str, *, connection: AsyncConnection | None = None, prefix: str = DEFAULT_PREFIX
) -> bool:
    """Whether a global concurrency is set and the queue's active jobs have reached it."""
    return await _run(connection, ops.is_maxed(queue_keys(queue, prefix)))


async def get_counts_per_priority(
    queue: str,
    priorities: Iterable[int],
    *,
    connection: AsyncConnection | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> dict[int, int]:
    """How many jobs wait at each of ``priorities``.

    Priority 0 counts the ``wait`` list (jobs without a priority, wherever a paused queue
    keeps them); any other counts the prioritized jobs of that priority.

    Args:
        queue: the queue name.
        priorities: ints between 0 and 2**21 - 1; repeats are counted once.
        connection: a ``redis.asyncio.Redis`` you own, or a URL. None (default): the connection
            rule, see :func:`echomq.set_default_connection`.
        prefix: the key prefix.

    Returns:
        Priority to count, in the order first given.

    Raises:
        InvalidOptionError: a priority is not such an int.
    """
    op = ops.get_counts_per_priority(queue_keys(queue, prefix), priorities)
    return await _run(connection, op)


async def get_meta(
    queue: str, *, connection: AsyncConnection | None = None, prefix: str = DEFAULT_PREFIX
) -> QueueMeta:
    """The queue's settings from its meta hash (BullMQ's ``getMeta``): paused, global
    concurrency, global rate limit, events stream length and the BullMQ version that last
    opened the queue."""
    return await _run(connection, ops.get_meta(queue_keys(queue, prefix)))


# -- groups ----------------------------------------------------------------------------------
# echomq's own (docs/groups.md, docs/protocol/groups.md): settings in the queue's
# `groups:state` hash that every echomq worker honours when it fetches; BullMQ workers for Node
# never take a grouped job.


async def set_group_concurrency(
    queue: str,
    concurrency: int,
    group: str | None = None,
    *,
    connection: AsyncConnection | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> None:
    """Let each group run at most ``concurrency`` jobs at once, across all workers.

    With ``group`` None this is the default of every group; with a group id, that group's own
    concurrency, which takes precedence over the default. Workers see it at their next fetch.
    A limit raised (or a group's own one set) lets the groups it held back run at once: they
    rejoin the rotation in the same call (a default raised re-checks every group, a thousand
    per script call) and idle workers are woken.

    Args:
        queue: the queue name.
        concurrency: an int >= 1.
        group: a group id (a non-empty str of at most 256 characters), or None for every
            group's default.
        connection: a ``redis.asyncio.Redis`` you own, or a URL (opened and closed here). None
            (default): the connection rule, see :func:`echomq.set_default_connection`.
        prefix: the key prefix.

    Raises:
        InvalidOptionError: ``concurrency`` is not an int >= 1, or ``group`` is not a valid
            group id; nothing was written.
    """
    await _run_plan(
        connection, gops.set_group_concurrency(queue_keys(queue, prefix), concurrency, group)
    )


async def get_group_concurrency(
    queue: str,
    group: str | None = None,
    *,
    connection: AsyncConnection | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> int | None:
    """The default group concurrency (``group`` None), or ``group``'s own; None when it is not
    set (a group without its own follows the default).

    Raises:
        InvalidOptionError: ``group`` is not a valid group id.
    """
    return await _run(connection, gops.get_group_concurrency(queue_keys(queue, prefix), group))


async def remove_group_concurrency(
    queue: str,
    group: str | None = None,
    *,
    connection: AsyncConnection | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> bool:
    """Remove the default group concurrency (``group`` None), or ``group``'s own (it then
    follows the default); True if it was set. Groups it held back run again at once.

    Raises:
        InvalidOptionError: ``group`` is not a valid group id; nothing was written.
    """
    return await _run_plan(
        connection, gops.remove_group_concurrency(queue_keys(queue, prefix), group)
    )


async def set_group_rate_limit(
    queue: str,
    max: int,
    duration: Duration,
    group: str | None = None,
    *,
    connection: AsyncConnection | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> None:
    """Let each group start (and end) at most ``max`` jobs per ``duration``, all workers
    together.

    With ``group`` None this is the default of every group; with a group id, that group's own
    rate limit, which takes precedence over the default. Each start takes one of ``max`` slots,
    free again ``duration`` after its job ends: no interval of ``duration`` holds more than
    ``max`` starts of the group, nor more than ``max`` ends. A group with no free slot waits,
    while the other groups run. Stored as ``"<max>:<ms>"``. A raised ``max`` lets the groups
    held back run at once, as :func:`set_group_concurrency` does.

    Args:
        queue: the queue name.
        max: jobs per window, an int >= 1.
        duration: the window, seconds or a timedelta (> 0; rounded to whole milliseconds).
        group: a group id, or None for every group's default.
        connection: a ``redis.asyncio.Redis`` you own, or a URL (opened and closed here). None
            (default): the connection rule, see :func:`echomq.set_default_connection`.
        prefix: the key prefix.

    Raises:
        InvalidOptionError: ``max`` is not an int >= 1, ``duration`` is not positive, or
            ``group`` is not a valid group id; nothing was written.
    """
    await _run_plan(
        connection, gops.set_group_rate_limit(queue_keys(queue, prefix), max, duration, group)
    )


async def get_group_rate_limit(
    queue: str,
    group: str | None = None,
    *,
    connection: AsyncConnection | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> RateLimit | None:
    """The default group rate limit (``group`` None), or ``group``'s own, as
    ``RateLimit(max, duration)`` with ``duration`` in seconds; None when it is not set.

    Raises:
        InvalidOptionError: ``group`` is not a valid group id.
    """
    return await _run(connection, gops.get_group_rate_limit(queue_keys(queue, prefix), group))


async def remove_group_rate_limit(
    queue: str,
    group: str | None = None,
    *,
    connection: AsyncConnection | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> bool:
    """Remove the default group rate limit (``group`` None), or ``group``'s own; True if it
    was set. Groups whose window it held full run again at once.

    Raises:
        InvalidOptionError: ``group`` is not a valid group id; nothing was written.
    """
    return await _run_plan(
        connection, gops.remove_group_rate_limit(queue_keys(queue, prefix), group)
    )


async def pause_group(
    queue: str,
    group: str,
    *,
    connection: AsyncConnection | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> None:
    """Pause one group: workers take none of its jobs until :func:`resume_group`; its jobs stay
    where they are, its active ones run to their end, jobs added to it wait, and the other
    groups go on.

    Raises:
        InvalidOptionError: ``group`` is not a valid group id; nothing was written.
    """
    await _run_plan(connection, gops.pause_group(queue_keys(queue, prefix), group))


async def resume_group(
    queue: str,
    group: str,
    *,
    connection: AsyncConnection | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> None:
    """Resume a paused group: if it has waiting jobs and its limits allow, it rejoins the
    rotation in the same call and idle workers are woken. Resuming a group that is not paused
    does nothing.

    Raises:
        InvalidOptionError: ``group`` is not a valid group id; nothing was written.
    """
    await _run_plan(connection, gops.resume_group(queue_keys(queue, prefix), group))


async def get_groups(
    queue: str,
    start: int = 0,
    end: int = -1,
    *,
    connection: AsyncConnection | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> list[GroupInfo]:
    """The queue's groups that have waiting or active jobs, most waiting jobs first.

    Args:
        queue: the queue name.
        start: first index of that order.
        end: last index (inclusive; ``-1``: to the end).
        connection: a ``redis.asyncio.Redis`` you own, or a URL (opened and closed here). None
            (default): the connection rule, see :func:`echomq.set_default_connection`.
        prefix: the key prefix.

    Returns:
        A ``GroupInfo(id, waiting, active, paused, limited)`` per group; ``limited`` when its
        active jobs have reached its concurrency or its rate window is full.

    Raises:
        ValidationError: ``start`` or ``end`` is not an int.
    """
    return await _run_plan(connection, gops.get_groups_plan(queue_keys(queue, prefix), start, end))


async def get_group_job_counts(
    queue: str,
    group: str,
    *,
    connection: AsyncConnection | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> dict[str, int]:
    """How many jobs one group has ``waiting``, ``active`` and ``delayed``.

    Delayed jobs of every group share one sorted set, so they are counted by reading it a
    thousand at a time (docs/protocol/groups.md#groups-admin): the cost grows with the queue's
    grouped delayed jobs, and the three counts are not read at one instant.

    Raises:
        InvalidOptionError: ``group`` is not a valid group id.
    """
    return await _run_plan(
        connection, gops.get_group_job_counts_plan(queue_keys(queue, prefix), group)
    )


async def get_group_jobs(
    queue: str,
    group: str,
    start: int = 0,
    end: int = -1,
    *,
    connection: AsyncConnection | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> list[Job]:
    """One group's waiting jobs in the order its turns will take them (priority, then first
    in first out, ``lifo`` jobs first), sliced ``[start, end]``.

    Args:
        queue: the queue name.
        group: the group id.
        start: first index.
        end: last index (inclusive; ``-1``: to the end).
        connection: a ``redis.asyncio.Redis`` you own, or a URL (opened and closed here: the jobs'
            methods then raise :class:`~echomq.ConnectionNotOpenError`). None (default): the
            connection rule, see :func:`echomq.set_default_connection`.
        prefix: the key prefix.

    Raises:
        InvalidOptionError: ``group`` is not a valid group id.
        ValidationError: ``start`` or ``end`` is not an int.
    """
    keys = queue_keys(queue, prefix)
    async with _connected(connection) as conn:
        jobs = await _get_group_jobs(conn, keys, group, start, end)
        return [_detached(conn, job) for job in jobs]


async def remove_group_jobs(
    queue: str,
    group: str,
    *,
    connection: AsyncConnection | None = None,
    prefix: str = DEFAULT_PREFIX,
) -> int:
    """Delete one group's waiting jobs, with their logs; its active and delayed jobs stay, and
    so do the current iterations of job schedulers (as :func:`drain` keeps them).

    Runs as several short script calls (at most 1000 jobs each), so jobs added to the group
    meanwhile may or may not be removed. No events are written (as :func:`drain`).

    Returns:
        How many jobs were deleted.

    Raises:
        InvalidOptionError: ``group`` is not a valid group id; nothing was written.
    """
    return await _run_plan(
        connection, gops.remove_group_jobs_plan(queue_keys(queue, prefix), group)
    )
