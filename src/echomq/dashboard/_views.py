"""What each dashboard page shows, read through the public API only.

Every read takes a bounded range: a state tab reads one page of jobs (``get_jobs`` with a
start and an end), counts come from ``get_job_counts`` (one ``LLEN``/``ZCARD``/``SCARD`` per
state), a job's children and logs are read a page at a time. Nothing reads a whole set, so a
page costs the same with ten jobs or ten million.
"""

from __future__ import annotations

import asyncio
import json
import math
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import redis.asyncio
import redis.exceptions

from .. import queue as api
from .._job import Job
from .._ops.flows import DependencyPage
from .._redis import restricted
from .._redis.fail_fast import server_address
from ..errors import EchoMQError
from ..queue import Queue

#: The state tabs of a queue, in the order a job moves through them.
STATES: tuple[str, ...] = (
    "waiting",
    "prioritized",
    "delayed",
    "active",
    "waiting-children",
    "completed",
    "failed",
)
PAGE_SIZE = 25
#: Queues the queue list reads at once.
LIST_READS = 8
#: Minutes of completed/failed counts the charts show.
CHART_MINUTES = 60
LOG_LINES = 200
CHILDREN_PAGE = 50
SCHEDULERS_SHOWN = 50
#: The most characters of one JSON value (data, options, return value) a page shows.
SHOWN_CHARS = 100_000


@dataclass
class QueueSummary:
    """One row of the queue list."""

    name: str
    counts: dict[str, int]
    paused: bool
    #: None where Redis refuses CLIENT LIST (renamed away, or denied to the ACL user)
    workers: int | None
    completed_per_minute: list[int]
    failed_per_minute: list[int]
    error: str | None = None


@dataclass
class JobLink:
    """A job key shown as text, with a link when it is a queue under the dashboard's prefix."""

    key: str
    queue: str | None = None
    job_id: str | None = None


@dataclass
class QueuePage:
    """One state tab of one queue."""

    summary: QueueSummary
    state: str
    page: int
    pages: int
    jobs: list[Job]
    schedulers: list[Any]
    scheduler_count: int
    concurrency: int | None
    rate_limit: Any
    meta: Any


@dataclass
class JobPage:
    """Everything shown of one job."""

    job: Job
    state: str
    logs: list[str]
    log_count: int
    parent: JobLink | None
    processed: list[tuple[JobLink, Any]] = field(default_factory=list)
    unprocessed: list[JobLink] = field(default_factory=list)
    failed: list[JobLink] = field(default_factory=list)
    ignored: list[tuple[JobLink, str]] = field(default_factory=list)
    more_children: bool = False
    timeline: list[tuple[str, datetime]] = field(default_factory=list)


def link(key: str, prefix: str) -> JobLink:
    """``key`` (``prefix:queue:id``) with its queue and id when ``prefix`` is ours."""
    head = f"{prefix}:"
    if key.startswith(head):
        queue, sep, job_id = key[len(head) :].partition(":")
        if sep and queue and job_id:
            return JobLink(key, queue, job_id)
    return JobLink(key)


async def summary(client: redis.asyncio.Redis, prefix: str, name: str) -> QueueSummary:
    """The queue-list row of queue ``name`` (five reads, sent together over ``client``)."""
    where: dict[str, Any] = {"connection": client, "prefix": prefix}
    counts, paused, workers, done, failed = await asyncio.gather(
        api.get_job_counts(name, *STATES, **where),
        api.is_paused(name, **where),
        worker_count(client, prefix, name),
        api.get_metrics(name, "completed", 0, CHART_MINUTES - 1, **where),
        api.get_metrics(name, "failed", 0, CHART_MINUTES - 1, **where),
    )
    return QueueSummary(name, counts, paused, workers, list(done.data), list(failed.data))


async def worker_count(client: redis.asyncio.Redis, prefix: str, name: str) -> int | None:
    """How many workers queue ``name`` has, or None where Redis refuses ``CLIENT LIST`` (as
    managed services may): the page says unknown, and the refusal is logged once at INFO."""
    try:
        return len(await api.get_workers(name, connection=client, prefix=prefix))
    except redis.exceptions.ResponseError as exc:
        if restricted.report("CLIENT LIST", server_address(client), exc):
            return None
        raise


async def summaries(
    client: redis.asyncio.Redis, prefix: str, names: list[str]
) -> list[QueueSummary]:
    """The rows of the queue list: at most :data:`LIST_READS` queues read at once, and a queue
    that cannot be read (a key of the wrong type, say) gets a row saying why instead of
    failing the page."""
    gate = asyncio.Semaphore(LIST_READS)

    async def row(name: str) -> QueueSummary:
        async with gate:
            try:
                return await summary(client, prefix, name)
            except (redis.exceptions.ResponseError, EchoMQError) as exc:
                return QueueSummary(name, {}, False, 0, [], [], error=str(exc))

    return list(await asyncio.gather(*(row(n) for n in names)))


async def queue_page(queue: Queue, client: redis.asyncio.Redis, state: str, page: int) -> QueuePage:
    """One page of the ``state`` tab of ``queue``, with its schedulers and limits."""
    head = await summary(client, queue.prefix, queue.name)
    total = head.counts.get(state, 0)
    pages = max(1, math.ceil(total / PAGE_SIZE))
    page = min(max(1, page), pages)
    start = (page - 1) * PAGE_SIZE
    jobs, schedulers, scheduler_count, concurrency, rate_limit, meta = await asyncio.gather(
        queue.get_jobs(state, start, start + PAGE_SIZE - 1),
        queue.get_job_schedulers(0, SCHEDULERS_SHOWN - 1, asc=True),
        queue.get_job_schedulers_count(),
        queue.get_global_concurrency(),
        queue.get_global_rate_limit(),
        queue.get_meta(),
    )
    return QueuePage(
        head, state, page, pages, jobs, schedulers, scheduler_count, concurrency, rate_limit, meta
    )


async def job_page(queue: Queue, job: Job) -> JobPage:
    """Everything shown of ``job``."""
    first = DependencyPage(0, CHILDREN_PAGE)
    state, (logs, log_count), deps = await asyncio.gather(
        job.get_state(),
        job.get_logs(0, LOG_LINES - 1),
        job.get_dependencies(processed=first, unprocessed=first, failed=first, ignored=first),
    )
    prefix = queue.prefix
    parent = link(job.parent_key, prefix) if job.parent_key else None
    page = JobPage(job, state, logs, log_count, parent)
    page.processed = [(link(k, prefix), v) for k, v in (deps.processed or {}).items()]
    page.unprocessed = [link(k, prefix) for k in deps.unprocessed or []]
    page.failed = [link(k, prefix) for k in deps.failed or []]
    page.ignored = [(link(k, prefix), v) for k, v in (deps.ignored or {}).items()]
    page.more_children = any(
        bool(c)
        for c in (
            deps.next_processed_cursor,
            deps.next_unprocessed_cursor,
            deps.next_failed_cursor,
            deps.next_ignored_cursor,
        )
    )
    page.timeline = timeline(job)
    return page


def timeline(job: Job) -> list[tuple[str, datetime]]:
    """The moments of a job's life, in order: added, due (when delayed), processed, finished."""
    moments = [("added", job.timestamp)]
    if job.delay:
        due = job.timestamp.timestamp() + job.delay
        moments.append(("due", datetime.fromtimestamp(due, timezone.utc)))
    if job.processed_on is not None:
        moments.append(("processed", job.processed_on))
    if job.finished_on is not None:
        label = "failed" if job.failed_reason is not None else "finished"
        moments.append((label, job.finished_on))
    return sorted(moments, key=lambda m: m[1])


def pretty(value: Any, limit: int = SHOWN_CHARS) -> str:
    """``value`` as indented JSON text (escaped later by the template), cut after ``limit``
    characters so that a huge payload cannot make a page of megabytes."""
    text = json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False, default=str)
    if len(text) > limit:
        return f"{text[:limit]}\n… ({len(text) - limit:,} more characters not shown)"
    return text


def when(moment: datetime | None) -> str:
    """A UTC moment as the pages print it."""
    if moment is None:
        return ""
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def percent(progress: Any) -> float | None:
    """A numeric progress as 0..100 for the bar, else None."""
    if isinstance(progress, bool) or not isinstance(progress, (int, float)):
        return None
    return max(0.0, min(100.0, float(progress)))


def sparkline(values: list[int], width: int = 120, height: int = 24) -> str:
    """SVG polyline points for per-minute counts (most recent first), oldest on the left.

    The series always spans :data:`CHART_MINUTES` minutes: minutes without a data point (a
    queue younger than an hour, or workers without metrics) count as zero.
    """
    recent = list(reversed(values[:CHART_MINUTES]))
    series = [0] * (CHART_MINUTES - len(recent)) + recent
    top = max(series) or 1
    step = width / (CHART_MINUTES - 1)
    return " ".join(
        f"{i * step:.1f},{height - (v / top) * (height - 2) - 1:.1f}" for i, v in enumerate(series)
    )
