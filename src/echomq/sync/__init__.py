"""The synchronous producer API over a ``redis.Redis`` client, for Django, Flask and scripts.

The blocking twin of :mod:`echomq.queue` (module-level functions and :class:`Queue`), of
:class:`echomq.Job` and of :mod:`echomq.flows` (:class:`FlowProducer`), generated from them by
``scripts/unasync.py``: ``_api`` from ``echomq/queue.py``, ``_queue`` from ``echomq/_queue.py``,
``_job`` from ``echomq/_job.py``, ``_flows`` from ``echomq/flows.py`` (never edit those four by
hand; ``scripts/check`` fails while they are stale). Each function or method builds the same
:mod:`echomq._ops` operation as its async twin and runs it with the generated twin of
``echomq._redis.run`` (``_redis/run_sync.py``), so validation, keys, scripts and Redis effects
are identical, and a refused call writes nothing. Nothing here creates, runs or looks up an event
loop: it is plain blocking redis-py, usable from any thread, including one that runs an event
loop (where, like any blocking I/O, it holds that loop while it waits for Redis).

Connections: pass a ``redis.Redis`` you own (never closed here; any ``decode_responses``) or a
URL. A module-level call opens a URL's client and closes it before returning; a :class:`Queue`
closes the client it opened on :meth:`Queue.close` or at the end of its ``with`` block. Jobs
returned by a URL call keep their fields, but their methods raise
:class:`~echomq.ConnectionNotOpenError`: read them through a ``Queue`` to call them. A client
opened from a URL, or made by :func:`client_from_url`, fails fast: each connect has
``connect_timeout`` (1 s by default) before :class:`~echomq.RedisUnavailableError`.

A synchronous processor (``def f(job)``) run by an :class:`echomq.Worker` receives a
:class:`Job` of this module whose methods run on the worker's connection and event loop.
"""

from .._flow_job import FlowJob
from ._api import (
    add,
    add_bulk,
    clean,
    client_from_url,
    count,
    drain,
    get_counts_per_priority,
    get_deduplication_job_id,
    get_global_concurrency,
    get_global_rate_limit,
    get_group_concurrency,
    get_group_job_counts,
    get_group_jobs,
    get_group_rate_limit,
    get_groups,
    get_job,
    get_job_counts,
    get_job_logs,
    get_jobs,
    get_meta,
    get_metrics,
    get_rate_limit_ttl,
    get_state,
    get_workers,
    is_maxed,
    is_paused,
    obliterate,
    pause,
    pause_group,
    promote_jobs,
    rate_limit,
    remove,
    remove_deduplication_key,
    remove_global_concurrency,
    remove_global_rate_limit,
    remove_group_concurrency,
    remove_group_jobs,
    remove_group_rate_limit,
    remove_rate_limit_key,
    resume,
    resume_group,
    retry_jobs,
    set_global_concurrency,
    set_global_rate_limit,
    set_group_concurrency,
    set_group_rate_limit,
    trim_events,
)
from ._flows import FlowProducer, JobNode
from ._job import Job
from ._queue import Queue

__all__ = [
    "FlowJob",
    "FlowProducer",
    "Job",
    "JobNode",
    "Queue",
    "add",
    "add_bulk",
    "clean",
    "client_from_url",
    "count",
    "drain",
    "get_counts_per_priority",
    "get_deduplication_job_id",
    "get_global_concurrency",
    "get_global_rate_limit",
    "get_group_concurrency",
    "get_group_job_counts",
    "get_group_jobs",
    "get_group_rate_limit",
    "get_groups",
    "get_job",
    "get_job_counts",
    "get_job_logs",
    "get_jobs",
    "get_meta",
    "get_metrics",
    "get_rate_limit_ttl",
    "get_state",
    "get_workers",
    "is_maxed",
    "is_paused",
    "obliterate",
    "pause",
    "pause_group",
    "promote_jobs",
    "rate_limit",
    "remove",
    "remove_deduplication_key",
    "remove_global_concurrency",
    "remove_global_rate_limit",
    "remove_group_concurrency",
    "remove_group_jobs",
    "remove_group_rate_limit",
    "remove_rate_limit_key",
    "resume",
    "resume_group",
    "retry_jobs",
    "set_global_concurrency",
    "set_global_rate_limit",
    "set_group_concurrency",
    "set_group_rate_limit",
    "trim_events",
]
