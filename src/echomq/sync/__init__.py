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
methods. A client opened from a URL, or made by :func:`client_from_url`, fails fast: each
connect has ``connect_timeout`` (1 s by default) before :class:`~echomq.RedisUnavailableError`.

Modules: ``_job`` (:class:`Job`), ``_queue`` (:class:`Queue`); this one holds the module-level
functions, each running its ``Queue`` twin on a per-call ``Queue``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

import redis
from typing_extensions import Unpack

from .. import ops
from .._connection import SyncConnection
from .._fail_fast import DEFAULT_CONNECT_TIMEOUT, sync_client_from_url
from ..job import JobState
from ..ops import BulkItem, Metrics
from ..options import UNSET, Duration, JobOptionsDict
from ..protocol.keys import DEFAULT_PREFIX
from ._job import Job
from ._queue import Queue

__all__ = [
    "Job",
    "Queue",
    "add",
    "add_bulk",
    "clean",
    "client_from_url",
    "count",
    "drain",
    "get_job",
    "get_job_counts",
    "get_job_logs",
    "get_jobs",
    "get_metrics",
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

# -- module-level functions: each runs its Queue twin on a per-call Queue ------------------
# A per-call Queue closes a client it opened from a URL and never one the caller passed.


def add(
    queue: str,
    name: str,
    data: Any = UNSET,
    *,
    connection: SyncConnection,
    prefix: str = DEFAULT_PREFIX,
    **options: Unpack[JobOptionsDict],
) -> Job:
    """Sync twin of :func:`echomq.add`.

    Raises:
        ValidationError: bad name, id, option or payload; nothing was written.
        RedisUnavailableError: Redis could not be reached or did not answer (the message
            names the server).
    """
    with Queue(queue, connection=connection, prefix=prefix) as q:
        return q.add(name, data, **options)


def add_bulk(
    queue: str,
    jobs: Iterable[BulkItem],
    *,
    connection: SyncConnection,
    prefix: str = DEFAULT_PREFIX,
) -> list[Job]:
    """Sync twin of :func:`echomq.add_bulk`: one MULTI/EXEC, all jobs or none."""
    with Queue(queue, connection=connection, prefix=prefix) as q:
        return q.add_bulk(jobs)


def client_from_url(
    url: str, *, connect_timeout: Duration = DEFAULT_CONNECT_TIMEOUT, **redis_options: object
) -> redis.Redis:
    """Sync twin of :func:`echomq.client_from_url`: a ``redis.Redis`` that fails fast, for you
    to keep (one per process, e.g. in Django settings) and pass as ``connection=``.

    Raises:
        ValidationError: not a ``redis://``, ``rediss://`` or ``unix://`` URL, or a
            ``connection_class`` option.
        InvalidOptionError: ``connect_timeout`` is not a positive duration.
    """
    return sync_client_from_url(url, connect_timeout, **redis_options)


def get_job(
    queue: str, job_id: str, *, connection: SyncConnection, prefix: str = DEFAULT_PREFIX
) -> Job | None:
    """Sync twin of :func:`echomq.get_job` (with a URL the job's client is closed on return)."""
    with Queue(queue, connection=connection, prefix=prefix) as q:
        return q.get_job(job_id)


def get_state(
    queue: str, job_id: str, *, connection: SyncConnection, prefix: str = DEFAULT_PREFIX
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
    connection: SyncConnection,
    prefix: str = DEFAULT_PREFIX,
) -> list[Job]:
    """Sync twin of :func:`echomq.get_jobs`."""
    with Queue(queue, connection=connection, prefix=prefix) as q:
        return q.get_jobs(states, start, end, asc)


def get_job_counts(
    queue: str, *states: str, connection: SyncConnection, prefix: str = DEFAULT_PREFIX
) -> dict[str, int]:
    """Sync twin of :func:`echomq.get_job_counts`."""
    with Queue(queue, connection=connection, prefix=prefix) as q:
        return q.get_job_counts(*states)


def count(queue: str, *, connection: SyncConnection, prefix: str = DEFAULT_PREFIX) -> int:
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
    connection: SyncConnection,
    prefix: str = DEFAULT_PREFIX,
) -> tuple[list[str], int]:
    """Sync twin of :func:`echomq.get_job_logs`."""
    with Queue(queue, connection=connection, prefix=prefix) as q:
        return q.get_job_logs(job_id, start, end, asc)


def get_metrics(
    queue: str,
    kind: str = "completed",
    start: int = 0,
    end: int = -1,
    *,
    connection: SyncConnection,
    prefix: str = DEFAULT_PREFIX,
) -> Metrics:
    """Sync twin of :func:`echomq.get_metrics`."""
    with Queue(queue, connection=connection, prefix=prefix) as q:
        return q.get_metrics(kind, start, end)


def is_paused(queue: str, *, connection: SyncConnection, prefix: str = DEFAULT_PREFIX) -> bool:
    """Sync twin of :func:`echomq.is_paused`."""
    with Queue(queue, connection=connection, prefix=prefix) as q:
        return q.is_paused()


def pause(queue: str, *, connection: SyncConnection, prefix: str = DEFAULT_PREFIX) -> None:
    """Sync twin of :func:`echomq.pause`."""
    with Queue(queue, connection=connection, prefix=prefix) as q:
        q.pause()


def resume(queue: str, *, connection: SyncConnection, prefix: str = DEFAULT_PREFIX) -> None:
    """Sync twin of :func:`echomq.resume`."""
    with Queue(queue, connection=connection, prefix=prefix) as q:
        q.resume()


def get_workers(
    queue: str, *, connection: SyncConnection, prefix: str = DEFAULT_PREFIX
) -> list[dict[str, str]]:
    """Sync twin of :func:`echomq.get_workers`."""
    with Queue(queue, connection=connection, prefix=prefix) as q:
        return q.get_workers()


def trim_events(
    queue: str, max_len: int, *, connection: SyncConnection, prefix: str = DEFAULT_PREFIX
) -> int:
    """Sync twin of :func:`echomq.trim_events`."""
    with Queue(queue, connection=connection, prefix=prefix) as q:
        return q.trim_events(max_len)


def remove(
    queue: str,
    job_id: str,
    *,
    remove_children: bool = True,
    connection: SyncConnection,
    prefix: str = DEFAULT_PREFIX,
) -> bool:
    """Sync twin of :func:`echomq.remove`."""
    with Queue(queue, connection=connection, prefix=prefix) as q:
        return q.remove(job_id, remove_children=remove_children)


def drain(
    queue: str,
    *,
    delayed: bool = False,
    connection: SyncConnection,
    prefix: str = DEFAULT_PREFIX,
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
    connection: SyncConnection,
    prefix: str = DEFAULT_PREFIX,
) -> list[str]:
    """Sync twin of :func:`echomq.clean`."""
    with Queue(queue, connection=connection, prefix=prefix) as q:
        return q.clean(grace, limit, state)


def obliterate(
    queue: str, *, force: bool = False, connection: SyncConnection, prefix: str = DEFAULT_PREFIX
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
    connection: SyncConnection,
    prefix: str = DEFAULT_PREFIX,
) -> None:
    """Sync twin of :func:`echomq.retry_jobs`."""
    with Queue(queue, connection=connection, prefix=prefix) as q:
        q.retry_jobs(state, count, timestamp)


def promote_jobs(
    queue: str,
    count: int = ops.admin.BATCH,
    *,
    connection: SyncConnection,
    prefix: str = DEFAULT_PREFIX,
) -> None:
    """Sync twin of :func:`echomq.promote_jobs`."""
    with Queue(queue, connection=connection, prefix=prefix) as q:
        q.promote_jobs(count)
