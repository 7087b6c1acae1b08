"""What each dashboard page shows, read through the public API (and, for the groups tab, the
counts of ``_ops/groups.py`` run on the dashboard's client).

Every read takes a bounded range: a state tab reads one page of jobs (``get_jobs`` with a
start and an end), counts come from ``get_job_counts`` (one ``LLEN``/``ZCARD``/``SCARD`` per
state), a job's children and logs are read a page at a time. The groups tab reads one page of
groups (``get_groups``), and a group's page one page of its waiting jobs (``get_group_jobs``);
their totals are one ``ZCARD`` each. Nothing reads a whole set, so a page costs the same with
ten jobs or ten million, ten groups or a million.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

import redis.asyncio
import redis.exceptions

from .. import queue as api
from .._job import Job
from .._keys import queue_keys
from .._ops.flows import DependencyPage
from .._ops.groups import GroupInfo, GroupSummary, count_groups, group_summary
from .._redis.run import run_op
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
#: The tab of a queue's groups (``?state=groups``), after the state tabs.
GROUPS = "groups"
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
    #: registered echomq workers, and the connections of others (``get_workers``)
    workers: int
    completed_per_minute: list[int]
    failed_per_minute: list[int]
    error: str | None = None
    #: whether any worker recorded per-minute metrics for the queue (a metrics hash exists)
    has_metrics: bool = False


@dataclass
class JobLink:
    """A job key shown as text, with a link when it is a queue under the dashboard's prefix."""

    key: str
    queue: str | None = None
    job_id: str | None = None


@dataclass(frozen=True)
class GroupLimits:
    """The group limits a groups tab shows: the defaults, or one group's own or else the
    default (``own`` saying which)."""

    concurrency: int | None
    rate_limit: Any
    own_concurrency: bool = False
    own_rate_limit: bool = False


@dataclass
class QueuePage:
    """One tab of one queue: a state, its groups, or one group's waiting jobs."""

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
    #: how many groups have waiting or active jobs (the groups tab's count)
    group_count: int = 0
    #: the page of groups, most waiting jobs first (the groups tab)
    groups: list[GroupInfo] = field(default_factory=list)
    #: the group whose waiting jobs are listed (``?state=groups&group=ID``)
    group: GroupSummary | None = None
    #: on the groups tab, the default group limits, or that group's
    group_limits: GroupLimits | None = None


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
    now_ms = int(time.time() * 1000)
    return QueueSummary(
        name,
        counts,
        paused,
        workers,
        per_minute(done, now_ms),
        per_minute(failed, now_ms),
        has_metrics=bool(done.meta.prev_ts or failed.meta.prev_ts),
    )


def per_minute(metrics: api.Metrics, now_ms: int) -> list[int]:
    """Jobs finished per minute, the current minute first, over :data:`CHART_MINUTES` minutes.

    The stored data points (BullMQ's layout) hold only minutes rolled over by a later finish;
    the jobs finished since the last roll-over (``meta.count - meta.prev_count``) are counted
    in the minute of that roll-over (``meta.prev_ts``), with the minutes after it at zero, as
    the next finish will store them. So a queue busy for less than a minute shows its work.
    """
    meta = metrics.meta
    if not meta.prev_ts:
        return list(metrics.data)
    since = max(0, now_ms // 60_000 - meta.prev_ts // 60_000)
    pending = max(0, meta.count - meta.prev_count)
    return ([0] * since + [pending] + list(metrics.data))[:CHART_MINUTES]


async def worker_count(client: redis.asyncio.Redis, prefix: str, name: str) -> int:
    """How many workers queue ``name`` has (``get_workers``: where Redis refuses ``CLIENT
    LIST``, as managed services may, the echomq workers of the registry alone)."""
    return len(await api.get_workers(name, connection=client, prefix=prefix))


@dataclass
class WorkerRow:
    """One worker on a queue's workers page."""

    kind: str
    #: the registry's worker id, or the connection's client id
    id: str
    name: str | None
    host: str
    pid: int | None
    concurrency: int | None
    started_at: datetime | None
    heartbeat_at: datetime | None
    #: the jobs it held at its last heartbeat (None: not known, a connection only)
    jobs: list[str] | None
    version: str
    #: the connection's address (``CLIENT LIST`` entries only)
    addr: str


async def workers_page(queue: Queue) -> list[WorkerRow]:
    """The rows of a queue's workers page: registry workers, then other connections."""
    rows = []
    for info in await queue.get_workers():
        registered = "heartbeat_at" in info
        rows.append(
            WorkerRow(
                kind=info.get("kind", "bullmq"),
                id=str(info.get("id", "")),
                name=info.get("worker_name") if registered else _worker_name(info),
                host=info.get("host", ""),
                pid=info.get("pid"),
                concurrency=info.get("concurrency"),
                started_at=info.get("started_at"),
                heartbeat_at=info.get("heartbeat_at"),
                jobs=info.get("jobs") if registered else None,
                version=info.get("version", ""),
                addr=info.get("addr", ""),
            )
        )
    return rows


def _worker_name(info: api.WorkerInfo) -> str | None:
    """The worker name in a connection name ``P:<base64 queue>:w:<name>``, if any."""
    _, sep, name = info.get("rawname", "").partition(":w:")
    return name if sep and name else None


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


def first_tab(counts: dict[str, int], group_count: int) -> str:
    """The tab a queue page opens on without ``?state=``: the first, in the page's tab order
    (:data:`STATES`, then :data:`GROUPS`), that holds jobs; the first tab when none does."""
    for state in STATES:
        if counts.get(state, 0):
            return state
    return GROUPS if group_count else STATES[0]


async def queue_page(
    queue: Queue,
    client: redis.asyncio.Redis,
    state: str | None,
    page: int,
    group: str | None = None,
) -> QueuePage:
    """One page of the ``state`` tab of ``queue``, with its schedulers and limits.

    ``state`` may also be :data:`GROUPS`: a page of the queue's groups, most waiting jobs first,
    or with ``group`` a page of that group's waiting jobs in the order they will run. None: the
    :func:`first_tab` that holds jobs.

    Raises:
        InvalidOptionError: ``group`` is not a group id.
    """
    keys = queue_keys(queue.name, queue.prefix)
    one = group_summary(keys, group) if group is not None else None  # checks the id first
    head, group_count, shown = await asyncio.gather(
        summary(client, queue.prefix, queue.name),
        run_op(client, count_groups(keys)),
        run_op(client, one) if one is not None else _none(),
    )
    if state is None:
        state = first_tab(head.counts, group_count)
    if state != GROUPS:
        total = head.counts.get(state, 0)
    else:
        total = group_count if shown is None else shown.waiting
    pages = max(1, math.ceil(total / PAGE_SIZE))
    page = min(max(1, page), pages)
    start, end = (page - 1) * PAGE_SIZE, page * PAGE_SIZE - 1

    async def listing() -> tuple[list[Job], list[GroupInfo], GroupLimits | None]:
        if state != GROUPS:
            return await queue.get_jobs(state, start, end), [], None
        gid = None if shown is None else shown.id
        if gid is None:
            listed, limits = await asyncio.gather(queue.get_groups(start, end), group_limits(queue))
            return [], listed, limits
        jobs, limits = await asyncio.gather(
            queue.get_group_jobs(gid, start, end), group_limits(queue, gid)
        )
        return jobs, [], limits

    listed, schedulers, scheduler_count, concurrency, rate_limit, meta = await asyncio.gather(
        listing(),
        queue.get_job_schedulers(0, SCHEDULERS_SHOWN - 1, asc=True),
        queue.get_job_schedulers_count(),
        queue.get_global_concurrency(),
        queue.get_global_rate_limit(),
        queue.get_meta(),
    )
    jobs, groups, limits = listed
    return QueuePage(
        head,
        state,
        page,
        pages,
        jobs,
        schedulers,
        scheduler_count,
        concurrency,
        rate_limit,
        meta,
        group_count,
        groups,
        shown,
        limits,
    )


async def group_limits(queue: Queue, group: str | None = None) -> GroupLimits:
    """The default group limits, or ``group``'s: its own where set, else the default."""
    concurrency, rate_limit, own_c, own_r = await asyncio.gather(
        queue.get_group_concurrency(),
        queue.get_group_rate_limit(),
        queue.get_group_concurrency(group) if group is not None else _none(),
        queue.get_group_rate_limit(group) if group is not None else _none(),
    )
    return GroupLimits(
        own_c if own_c is not None else concurrency,
        own_r if own_r is not None else rate_limit,
        own_c is not None,
        own_r is not None,
    )


async def _none() -> None:
    return None


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


def allowed_attempts(job: Job) -> int:
    """How many tries ``job`` has: its ``attempts`` option, where 0 (what every producer,
    echomq and BullMQ alike, stores when none was given) means one try, as 1 does. The pages
    show ``attempts_made/allowed_attempts``, as ``echomq queue NAME jobs`` prints it."""
    return max(job.attempts, 1)


def given_options(job: Job) -> dict[str, Any]:
    """The job's stored options (wire names) as its producer gave them: the ``attempts: 0``
    stored when none was given is left out, since the page says how many tries the job has
    (as ``echomq queue NAME job ID`` leaves it out)."""
    if job.wire_options.get("attempts") == 0:
        return {k: v for k, v in job.wire_options.items() if k != "attempts"}
    return job.wire_options


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
    queue younger than an hour) count as zero. A queue without metrics at all gets no chart
    but a sentence saying so (``QueueSummary.has_metrics``).
    """
    recent = list(reversed(values[:CHART_MINUTES]))
    series = [0] * (CHART_MINUTES - len(recent)) + recent
    top = max(series) or 1
    step = width / (CHART_MINUTES - 1)
    return " ".join(
        f"{i * step:.1f},{height - (v / top) * (height - 2) - 1:.1f}" for i, v in enumerate(series)
    )
