# Generated from src/echomq/_queue.py by scripts/unasync.py: do not edit.
# Edit the source, then run `python scripts/unasync.py` (scripts/check fails while this
# file is stale).
"""``Queue``: a convenience over one queue, and the helpers it shares with the module-level
functions of :mod:`echomq.queue` (which re-exports it).

``scripts/unasync.py`` generates ``echomq/sync/_queue.py`` (the blocking ``echomq.sync.Queue``)
from ``echomq/_queue.py``, the one definition of both: edit the latter. Each method builds an
:mod:`echomq._ops` operation (or plan) and runs it on the queue's connection.

A ``Queue`` remembers a name, a prefix, a connection and default job options; it holds no job.
Everything is validated before a connection is opened. Producers fail fast: a connection error
or timeout of ``add`` / ``add_bulk`` is raised as :class:`~echomq.errors.RedisUnavailableError`
naming the server, and a queue made from a URL gives each connect ``connect_timeout``. After its
first call that succeeds, a queue checks its server once per process (``_redis.server_checks``).

Replicated adds: with ``wait_replicas`` above 0, an add is followed by Redis ``WAIT`` on the
connection that wrote it (``_ops.replicated``); fewer acknowledgements than asked for raise
:class:`~echomq.errors.ReplicationError`, which carries the jobs that were added.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar

from redis.exceptions import RedisError, ResponseError
from typing_extensions import Unpack

from .. import _ops as ops
from .._keys import queue_keys
from .._ops import BulkItem, Metrics, QueueMeta, RateLimit, prepare_bulk
from .._ops import groups as gops
from .._ops import prometheus as prom
from .._ops import schedulers as sops
from .._ops import worker as wops
from .._ops import workers as worker_registry
from .._ops.flows import ChildrenPage, children_page_plan
from .._ops.groups import GroupInfo
from .._ops.replicated import NO_WAIT, ReplicaWait, check_replicated, replicated
from .._ops.workers import WorkerInfo
from .._redis import restricted
from .._redis.connection_sync import SyncConn, SyncConnection, resolve_connection
from .._redis.fail_fast import (
    DEFAULT_CONNECT_TIMEOUT,
    UNREACHABLE,
    connect_budget,
    raise_unavailable,
)
from .._redis.server_checks_sync import check_on_first_use_sync
from .._redis.topology import check_cluster_flow, check_cluster_keys
from ..job import JobState
from ..options import UNSET, Duration, JobOptions, JobOptionsDict, _Unset, coerce_options
from ..protocol.keys import DEFAULT_PREFIX, QueueKeys
from ..schedulers import JobScheduler, Schedule, ScheduleDict, SchedulerTemplate
from ..telemetry import JOB_ID, JOB_NAME, Telemetry
from ._job import Job

T = TypeVar("T")
#: What ``WAIT`` answered after an add: how many replicas acknowledged it, or its error.
Acked = int | RedisError


def _add(
    conn: SyncConn,
    keys: QueueKeys,
    name: str,
    data: Any,
    options: JobOptions,
    wait: ReplicaWait = NO_WAIT,
) -> Job:
    prepared = ops.prepare_job(name, data, options)
    if options.parent is not UNSET:  # its scripts touch the parent's queue too
        parent = options.parent
        check_cluster_flow(conn.client, [keys, queue_keys(parent.queue_name, parent.prefix)])
    outcome, acked = _run_add(conn, ops.add_job_outcome(keys, prepared), wait)
    job = _added(conn, keys, outcome, prepared)
    check_replicated(wait, acked, [job], job)
    return job


def _run_add(conn: SyncConn, op: ops.Op[T], wait: ReplicaWait) -> tuple[T, Acked]:
    """Run an add's ``op``, followed by ``WAIT`` when ``wait`` asks for replicas; a connection
    error or refusal is raised as a producer's (``raise_unavailable``)."""
    try:
        if wait.replicas == 0:
            return conn.run(op), 0
        return conn.run(replicated(op, wait))
    except UNREACHABLE as exc:
        raise_unavailable(exc, conn.address)


def _added(
    conn: SyncConn, keys: QueueKeys, outcome: ops.AddOutcome, prepared: ops.PreparedJob
) -> Job:
    """The job an add returns: the one it stored, or for a deduplicated add the job that owns
    the window, read back (``deduplicated`` set; built from the add if it is already gone)."""
    if not outcome.deduplicated:
        return Job._added(outcome.job_id, prepared, keys, conn)
    owner = _get_job(conn, keys, outcome.job_id)
    job = owner if owner is not None else Job._added(outcome.job_id, prepared, keys, conn)
    job.deduplicated = True
    return job


def _add_bulk(
    conn: SyncConn,
    keys: QueueKeys,
    items: Iterable[BulkItem],
    defaults: JobOptions,
    wait: ReplicaWait = NO_WAIT,
) -> list[Job]:
    prepared = prepare_bulk(items, defaults)
    if not prepared:
        return []
    outcomes, acked = _run_add(conn, ops.add_jobs(keys, prepared), wait)
    jobs = [_added(conn, keys, o, p) for o, p in zip(outcomes, prepared)]
    check_replicated(wait, acked, jobs, jobs)
    return jobs


def _get_job(conn: SyncConn, keys: QueueKeys, job_id: str) -> Job | None:
    h = conn.run(ops.get_job_hash(keys, job_id))
    return None if h is None else Job.from_hash(job_id, h, keys, conn)


def _get_workers(conn: SyncConn, keys: QueueKeys) -> list[WorkerInfo]:
    """The registry's workers merged with ``CLIENT LIST`` (the registry alone where Redis
    refuses ``CLIENT LIST``, which is then logged once)."""
    registry = conn.run_plan(worker_registry.read_registry(keys, ops.now_ms()))
    try:
        clients: list[dict[str, str]] | None = conn.run(ops.get_workers(keys))
    except ResponseError as exc:
        if not restricted.report("CLIENT LIST", conn.server, exc):
            raise
        clients = None
    return worker_registry.merge_workers(registry, clients)


def _get_jobs(
    conn: SyncConn,
    keys: QueueKeys,
    states: str | Iterable[str] | None,
    start: int,
    end: int,
    asc: bool,
) -> list[Job]:
    types = ops.normalize_types(states, ops.DEFAULT_COUNT_TYPES)
    pairs = conn.run_plan(ops.get_jobs_plan(keys, types, start, end, asc))
    return [Job.from_hash(i, h, keys, conn) for i, h in pairs]


def _get_group_jobs(conn: SyncConn, keys: QueueKeys, group: str, start: int, end: int) -> list[Job]:
    pairs = conn.run_plan(gops.get_group_jobs_plan(keys, group, start, end))
    return [Job.from_hash(i, h, keys, conn) for i, h in pairs]


def _resume(conn: SyncConn, keys: QueueKeys) -> None:
    conn.run_plan(ops.resume_plan(keys))


class Queue:
    """A convenience that remembers a queue's name, prefix, connection and default options.

    It holds no job. Its calls (adds, job methods) go through a connection of its own (in the
    async API, one pipelined channel opened on first use with the client's settings).
    ``with Queue(...)`` or ``queue.close()`` closes it, and the client if the queue
    opened it from a URL; a client you pass is never closed.

    Args:
        name: the queue name (no ``:``).
        connection: a ``redis.Redis`` you own, or a URL. None (default): the connection
            rule, see :func:`echomq.set_default_connection`.
        prefix: the key prefix.
        default_job_options: options applied to every job added through this queue.
        connect_timeout: with a URL, seconds (or a timedelta) each connection has to connect
            (TCP and handshake) before :class:`~echomq.RedisUnavailableError`; ignored for a
            client you pass, whose own settings apply.
        telemetry: an OpenTelemetry ``Tracer`` or ``TracerProvider``: adds make PRODUCER
            spans and carry their trace context in the job (``pip install 'echomq[otel]'``;
            see docs/operations.md, "OpenTelemetry"). None (default): no telemetry.
        wait_replicas: the default of :meth:`add` and :meth:`add_bulk`: after each add, wait
            until this many replicas have it (Redis ``WAIT``), else raise
            :class:`~echomq.ReplicationError`; 0 (default) waits for none.
        wait_timeout: how long an add waits for those replicas (seconds or a timedelta).

    Raises:
        InvalidOptionError: ``connect_timeout`` is not a positive duration, ``wait_replicas``
            not an int >= 0, or ``wait_timeout`` not a positive duration.
        ImportError: ``telemetry`` is given but opentelemetry-api is not installed.
    """

    def __init__(
        self,
        name: str,
        *,
        connection: SyncConnection | None = None,
        prefix: str = DEFAULT_PREFIX,
        default_job_options: JobOptions | Mapping[str, Any] | None = None,
        connect_timeout: Duration = DEFAULT_CONNECT_TIMEOUT,
        telemetry: Any = None,
        wait_replicas: int = 0,
        wait_timeout: Duration = 1.0,
    ) -> None:
        self._keys = queue_keys(name, prefix)
        self._defaults = coerce_options(default_job_options)
        self._wait = ReplicaWait.build(wait_replicas, wait_timeout)
        self._telemetry = Telemetry.coerce(telemetry)
        budget = connect_budget(connect_timeout)
        connection = resolve_connection(connection)
        check_cluster_keys(connection, self._keys)
        self._conn = SyncConn(connection, connect_timeout=budget)
        check_on_first_use_sync(self._conn)

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

    @property
    def wait_replicas(self) -> int:
        """How many replicas an add waits for by default (0: none)."""
        return self._wait.replicas

    @property
    def wait_timeout(self) -> float:
        """How long an add waits for them by default, in seconds."""
        return self._wait.timeout

    def add(
        self,
        name: str,
        data: Any = UNSET,
        *,
        wait_replicas: int | _Unset = UNSET,
        wait_timeout: Duration | _Unset = UNSET,
        **options: Unpack[JobOptionsDict],
    ) -> Job:
        """Add one job; per-call options (and ``wait_replicas`` / ``wait_timeout``) override
        the queue's defaults. See :func:`add`."""
        merged = self._defaults.merged(JobOptions.build(options))
        wait = self._wait.merged(wait_replicas, wait_timeout)
        tel = self._telemetry
        if tel is None:
            return _add(self._conn, self._keys, name, data, merged, wait)
        with tel.producing(self.name, "add", f"{self.name}.{name}") as span:
            merged = tel.stamp(merged, tel.context_json())
            job = _add(self._conn, self._keys, name, data, merged, wait)
            span.set_attributes({JOB_NAME: name, JOB_ID: job.id})
        return job

    def add_bulk(
        self,
        jobs: Iterable[BulkItem],
        *,
        wait_replicas: int | _Unset = UNSET,
        wait_timeout: Duration | _Unset = UNSET,
    ) -> list[Job]:
        """Add many jobs in one MULTI/EXEC (then one ``WAIT`` when waiting for replicas).
        See :func:`add_bulk`."""
        wait = self._wait.merged(wait_replicas, wait_timeout)
        tel = self._telemetry
        if tel is None:
            return _add_bulk(self._conn, self._keys, jobs, self._defaults, wait)
        with tel.producing(self.name, "addBulk", self.name) as span:
            items = tel.stamp_bulk(jobs, self._defaults, tel.context_json())
            tel.bulk_attributes(span, [str(item[0]) for item in items if isinstance(item, tuple)])
            return _add_bulk(self._conn, self._keys, items, self._defaults, wait)

    def get_job(self, job_id: str) -> Job | None:
        """Read one job, or None when it does not exist."""
        return _get_job(self._conn, self._keys, job_id)

    def get_state(self, job_id: str) -> JobState:
        """The state a job is in. See :func:`get_state`."""
        state: str = self._conn.run(ops.get_state(self._keys, job_id))
        return JobState(state)

    def get_job_state(self, job_id: str) -> JobState:
        """The state a job is in, without reading the job (BullMQ's ``getJobState``; the same
        call as :meth:`get_state`)."""
        return self.get_state(job_id)

    def get_jobs(
        self,
        states: str | Iterable[str] | None = None,
        start: int = 0,
        end: int = -1,
        asc: bool = False,
    ) -> list[Job]:
        """Read the jobs in some states, newest first unless ``asc``. See :func:`get_jobs`."""
        return _get_jobs(self._conn, self._keys, states, start, end, asc)

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

    def get_dependencies(
        self, parent_id: str, type: str = "pending", start: int = 0, end: int = -1
    ) -> ChildrenPage[Job]:
        """A page of the completed or pending children of parent job ``parent_id`` of this
        queue, with the children read as jobs (BullMQ's ``Queue.getDependencies``).

        The children are sorted by their full key; :meth:`Job.get_dependencies
        <echomq.Job.get_dependencies>` reads every part of a parent, by cursor pages.

        Args:
            parent_id: the parent job's id.
            type: ``"processed"`` (completed children, with their return values) or
                ``"pending"`` (children not finished yet).
            start: index of the first child of the page (negative counts from the end).
            end: index of the last child of the page, inclusive (-1: the last one).

        Returns:
            The page: child keys, return values (``"processed"``), jobs and the part's total;
            empty when the parent has no children of that kind or does not exist.

        Raises:
            ValidationError: ``type`` is neither ``"processed"`` nor ``"pending"``, or
                ``start``/``end`` is not an int.
        """
        plan = children_page_plan(self._keys, parent_id, type, start, end)
        items, values, raw, total = self._conn.run_plan(plan)
        jobs = [Job.from_hash(i, h, k, self._conn) for k, i, h in raw]
        return ChildrenPage(items, values, jobs, total)

    def get_job_counts(self, *states: str) -> dict[str, int]:
        """How many jobs each state holds. See :func:`get_job_counts`."""
        types = ops.normalize_types(states or None, ops.DEFAULT_COUNT_TYPES)
        return self._conn.run(ops.get_counts(self._keys, types))

    def count(self) -> int:
        """How many jobs have not started yet. See :func:`count`."""
        counts = self._conn.run(ops.get_counts(self._keys, ops.PENDING_TYPES))
        return sum(counts.values())

    def get_job_logs(
        self, job_id: str, start: int = 0, end: int = -1, asc: bool = True
    ) -> tuple[list[str], int]:
        """A slice of a job's log lines and their total. See :func:`get_job_logs`."""
        op = ops.get_logs(self._keys, job_id, start, end, asc)
        return self._conn.run(op)

    def add_job_log(self, job_id: str, line: str, keep_logs: int | None = None) -> int:
        """Append a line to job ``job_id``'s log without reading the job (BullMQ's
        ``addJobLog``); :meth:`Job.log <echomq.Job.log>` does the same on a job in hand.

        Args:
            job_id: the job.
            line: the log line.
            keep_logs: keep only the newest this many lines; None or 0 keeps them all.

        Returns:
            How many lines the log holds now.

        Raises:
            ValidationError: ``line`` is not a str, or ``keep_logs`` is not None or an int >= 0.
            JobNotFoundError: the job does not exist; nothing was written.
        """
        return self._conn.run(ops.add_log(self._keys, job_id, line, keep_logs))

    def update_job_progress(self, job_id: str, progress: float | dict[str, Any]) -> None:
        """Record job ``job_id``'s progress and emit a ``progress`` event, without reading the
        job (BullMQ's ``updateJobProgress``); see :meth:`Job.update_progress
        <echomq.Job.update_progress>`.

        Raises:
            ValidationError: ``progress`` is neither a number nor a JSON object.
            PayloadError: ``progress`` is not JSON-serialisable; nothing was written.
            JobNotFoundError: the job does not exist.
        """
        self._conn.run(ops.update_progress(self._keys, job_id, progress))

    def get_metrics(self, kind: str = "completed", start: int = 0, end: int = -1) -> Metrics:
        """Per-minute finish counts of the queue's workers. See :func:`get_metrics`."""
        return self._conn.run(ops.get_metrics(self._keys, kind, start, end))

    def export_prometheus_metrics(self, global_labels: Mapping[str, str] | None = None) -> str:
        """The queue's counts as Prometheus text, as BullMQ's ``exportPrometheusMetrics``.

        ``bullmq_job_count`` (per state), ``bullmq_job_completed_total`` and
        ``bullmq_job_failed_total`` (the running counts of the metrics that workers with metrics
        enabled keep), each labelled ``queue`` and then ``global_labels``. See
        docs/operations.md#prometheus.

        Raises:
            InvalidOptionError: a global label name is invalid or reserved.
        """
        prom.check_global_labels(global_labels)
        return prom.render([self._prometheus_sample()], global_labels)

    def _prometheus_sample(self) -> prom.QueueSample:
        """What the Prometheus export reads of this queue (the plan ``echomq metrics`` and the
        dashboard also run for every queue)."""
        return self._conn.run_plan(prom.sample_plan(self._keys))

    def is_paused(self) -> bool:
        """Whether the queue is globally paused."""
        return self._conn.run(ops.is_paused(self._keys))

    def pause(self) -> None:
        """Pause the queue. See :func:`pause`."""
        self._conn.run(ops.pause_queue(self._keys, True))

    def resume(self) -> None:
        """Resume the queue. See :func:`resume`."""
        _resume(self._conn, self._keys)

    def get_workers(self) -> list[WorkerInfo]:
        """This queue's workers (echomq's registry and BullMQ's connections). See
        :func:`get_workers`."""
        return _get_workers(self._conn, self._keys)

    def get_workers_count(self) -> int:
        """How many workers :meth:`get_workers` lists (BullMQ's ``getWorkersCount``)."""
        return len(self.get_workers())

    def trim_events(self, max_len: int) -> int:
        """Trim the events stream to about ``max_len`` entries. See :func:`trim_events`."""
        return self._conn.run(ops.trim_events(self._keys, max_len))

    def remove(self, job_id: str, *, remove_children: bool = True) -> bool:
        """Delete one job (and by default its children). See :func:`remove`."""
        op = ops.remove_job(self._keys, job_id, remove_children=remove_children)
        return self._conn.run(op)

    def get_deduplication_job_id(self, dedup_id: str) -> str | None:
        """The id of the job that owns deduplication window ``dedup_id``, or None. See
        :func:`get_deduplication_job_id`."""
        return self._conn.run(ops.get_deduplication_job_id(self._keys, dedup_id))

    def remove_deduplication_key(self, dedup_id: str) -> bool:
        """Close deduplication window ``dedup_id`` now. See :func:`remove_deduplication_key`."""
        return self._conn.run(ops.remove_deduplication_key(self._keys, dedup_id))

    def cancel_job(self, job_id: str, reason: str | None = None, *, requeue: bool = False) -> bool:
        """Ask the worker running ``job_id``, in any process, to cancel it.

        The request goes over the queue's control channel (a Redis pub/sub channel, see
        docs/protocol/control-channel.md) and reaches the echomq worker holding the job within
        milliseconds; that worker cancels it as :meth:`Worker.cancel_job` does: the job fails
        with ``reason`` (no retry) or, with ``requeue``, goes back to ``wait``. A Node worker
        ignores the request. Watch the job's state or events to see the outcome.

        Args:
            job_id: the job.
            reason: its failed reason (default ``"cancelled"``).
            requeue: put the job back in wait instead of failing it.

        Returns:
            True if the job is held by a worker (it is locked) and at least one echomq worker
            of the queue received the request; False otherwise (unknown, waiting or finished
            job, or no echomq worker listening), and then nothing was sent.
        """
        if not self._conn.run(wops.lock_exists(self._keys, job_id)):
            return False
        op = wops.send_cancel(self._keys, job_id, reason, requeue)
        return self._conn.run(op) > 0

    def drain(self, *, delayed: bool = False) -> None:
        """Delete every job waiting to run. See :func:`drain`."""
        self._conn.run_plan(ops.drain_plan(self._keys, delayed=delayed))

    def clean(self, grace: Duration, limit: int = 0, state: str = "completed") -> list[str]:
        """Delete jobs of ``state`` older than ``grace``. See :func:`clean`."""
        plan = ops.clean_plan(self._keys, grace, limit, state)
        return self._conn.run_plan(plan)

    def obliterate(self, *, force: bool = False) -> None:
        """Pause the queue and delete all of it. See :func:`obliterate`."""
        self._conn.run_plan(ops.obliterate_plan(self._keys, force=force))

    def retry_jobs(
        self,
        state: str = "failed",
        count: int = ops.admin.BATCH,
        timestamp: datetime | float | None = None,
    ) -> None:
        """Move failed (or completed) jobs back to wait. See :func:`retry_jobs`."""
        plan = ops.retry_jobs_plan(self._keys, state, count, timestamp)
        self._conn.run_plan(plan)

    def promote_jobs(self, count: int = ops.admin.BATCH) -> None:
        """Move every delayed job to wait now. See :func:`promote_jobs`."""
        self._conn.run_plan(ops.promote_jobs_plan(self._keys, count))

    # -- global limits (see the functions of the same names) --------------------------------

    def set_global_concurrency(self, concurrency: int) -> None:
        """Cap the jobs active at once, queue-wide. See :func:`set_global_concurrency`."""
        self._conn.run(ops.set_global_concurrency(self._keys, concurrency))

    def get_global_concurrency(self) -> int | None:
        """The global concurrency, or None. See :func:`get_global_concurrency`."""
        return self._conn.run(ops.get_global_concurrency(self._keys))

    def remove_global_concurrency(self) -> bool:
        """Remove the global concurrency. See :func:`remove_global_concurrency`."""
        return self._conn.run(ops.remove_global_concurrency(self._keys))

    def set_global_rate_limit(self, max: int, duration: Duration) -> None:
        """Let at most ``max`` jobs start per ``duration``. See :func:`set_global_rate_limit`."""
        self._conn.run(ops.set_global_rate_limit(self._keys, max, duration))

    def get_global_rate_limit(self) -> RateLimit | None:
        """The global rate limit, or None. See :func:`get_global_rate_limit`."""
        return self._conn.run(ops.get_global_rate_limit(self._keys))

    def remove_global_rate_limit(self) -> bool:
        """Remove the global rate limit. See :func:`remove_global_rate_limit`."""
        return self._conn.run(ops.remove_global_rate_limit(self._keys))

    def rate_limit(self, duration: Duration) -> None:
        """Rate-limit the queue for ``duration``. See :func:`rate_limit`."""
        self._conn.run(ops.rate_limit(self._keys, duration))

    def get_rate_limit_ttl(self, max_jobs: int | None = None) -> float:
        """Seconds until the rate limit lifts. See :func:`get_rate_limit_ttl`."""
        return self._conn.run(ops.get_rate_limit_ttl(self._keys, max_jobs))

    def remove_rate_limit_key(self) -> bool:
        """Delete the rate-limiter key. See :func:`remove_rate_limit_key`."""
        return self._conn.run(ops.remove_rate_limit_key(self._keys))

    def is_maxed(self) -> bool:
        """Whether the global concurrency is reached. See :func:`is_maxed`."""
        return self._conn.run(ops.is_maxed(self._keys))

    def get_counts_per_priority(self, priorities: Iterable[int]) -> dict[int, int]:
        """Waiting jobs per priority. See :func:`get_counts_per_priority`."""
        return self._conn.run(ops.get_counts_per_priority(self._keys, priorities))

    def get_meta(self) -> QueueMeta:
        """The queue's settings from its meta hash. See :func:`get_meta`."""
        return self._conn.run(ops.get_meta(self._keys))

    # -- groups (docs/groups.md; see the functions of the same names) ------------------------

    def set_group_concurrency(self, concurrency: int, group: str | None = None) -> None:
        """Let each group (or ``group``) run at most ``concurrency`` jobs at once, across all
        workers. See :func:`set_group_concurrency`."""
        self._conn.run_plan(gops.set_group_concurrency(self._keys, concurrency, group))

    def get_group_concurrency(self, group: str | None = None) -> int | None:
        """The default group concurrency, or ``group``'s own; None when not set. See
        :func:`get_group_concurrency`."""
        return self._conn.run(gops.get_group_concurrency(self._keys, group))

    def remove_group_concurrency(self, group: str | None = None) -> bool:
        """Remove the default group concurrency, or ``group``'s own. See
        :func:`remove_group_concurrency`."""
        return self._conn.run_plan(gops.remove_group_concurrency(self._keys, group))

    def set_group_rate_limit(self, max: int, duration: Duration, group: str | None = None) -> None:
        """Let each group (or ``group``) start and end at most ``max`` jobs per ``duration``. See
        :func:`set_group_rate_limit`."""
        self._conn.run_plan(gops.set_group_rate_limit(self._keys, max, duration, group))

    def get_group_rate_limit(self, group: str | None = None) -> RateLimit | None:
        """The default group rate limit, or ``group``'s own; None when not set. See
        :func:`get_group_rate_limit`."""
        return self._conn.run(gops.get_group_rate_limit(self._keys, group))

    def remove_group_rate_limit(self, group: str | None = None) -> bool:
        """Remove the default group rate limit, or ``group``'s own. See
        :func:`remove_group_rate_limit`."""
        return self._conn.run_plan(gops.remove_group_rate_limit(self._keys, group))

    def pause_group(self, group: str) -> None:
        """Stop workers taking jobs of ``group``. See :func:`pause_group`."""
        self._conn.run_plan(gops.pause_group(self._keys, group))

    def resume_group(self, group: str) -> None:
        """Let workers take jobs of ``group`` again. See :func:`resume_group`."""
        self._conn.run_plan(gops.resume_group(self._keys, group))

    def get_groups(self, start: int = 0, end: int = -1) -> list[GroupInfo]:
        """The groups with waiting or active jobs, most waiting first. See :func:`get_groups`."""
        return self._conn.run_plan(gops.get_groups_plan(self._keys, start, end))

    def get_group_job_counts(self, group: str) -> dict[str, int]:
        """How many jobs ``group`` has waiting, active and delayed. See
        :func:`get_group_job_counts`."""
        return self._conn.run_plan(gops.get_group_job_counts_plan(self._keys, group))

    def get_group_jobs(self, group: str, start: int = 0, end: int = -1) -> list[Job]:
        """``group``'s waiting jobs, next to run first. See :func:`get_group_jobs`."""
        return _get_group_jobs(self._conn, self._keys, group, start, end)

    def remove_group_jobs(self, group: str) -> int:
        """Delete ``group``'s waiting jobs. See :func:`remove_group_jobs`."""
        return self._conn.run_plan(gops.remove_group_jobs_plan(self._keys, group))

    # -- job schedulers (docs/schedulers.md) ------------------------------------------------

    def upsert_job_scheduler(
        self,
        scheduler_id: str,
        *,
        template: SchedulerTemplate | Mapping[str, Any] | None = None,
        **schedule: Unpack[ScheduleDict],
    ) -> Job | None:
        """Create job scheduler ``scheduler_id``, or replace its definition and next iteration.

        Exactly one of ``every`` and ``pattern`` is given. Upserting again replaces the pending
        next iteration (it is never doubled) and keeps the iteration count.

        Args:
            scheduler_id: the scheduler's id (any non-empty text).
            template: ``{"name", "data", "opts"}`` (or a SchedulerTemplate): each iteration's
                job name (default: the id), payload and options (those of :meth:`add`, merged
                over the queue's defaults; not ``job_id``, ``delay``, ``timestamp``, ``parent``).
            **schedule: when it runs, the fields of :class:`~echomq.Schedule`: ``every``
                (seconds) or ``pattern`` (cron), and ``tz``, ``start_date``, ``end_date``,
                ``limit``, ``immediately``, ``offset``.

        Returns:
            The first iteration, or None when a cron scheduler has no run before ``end_date``.

        Raises:
            InvalidOptionError: a malformed or unsupported cron expression, an unknown time
                zone, ``every`` not positive, both or neither of ``every`` and ``pattern``,
                ``end_date`` not after ``start_date`` or not in the future, ``limit`` below 1,
                an unknown field, or a bad template; nothing was written.
        """
        op = sops.prepare_upsert(
            self._keys, self._defaults, scheduler_id, template, Schedule.build(schedule)
        )
        if op is None:
            return None
        upserted = self._conn.run(op)
        return Job.from_hash(upserted.job_id, upserted.hash, self._keys, self._conn)

    def get_job_scheduler(self, scheduler_id: str) -> JobScheduler | None:
        """One job scheduler, or None when there is no such id."""
        return self._conn.run(sops.get_job_scheduler(self._keys, scheduler_id))

    def get_job_schedulers(
        self, start: int = 0, end: int = -1, asc: bool = False
    ) -> list[JobScheduler]:
        """Job schedulers (and BullMQ 5 repeatable jobs) by next run, latest first unless
        ``asc``; ``start``..``end`` is an inclusive index range."""
        plan = sops.get_job_schedulers_plan(self._keys, start, end, asc)
        return self._conn.run_plan(plan)

    def get_job_schedulers_count(self) -> int:
        """How many job schedulers (and BullMQ 5 repeatable jobs) the queue has."""
        return self._conn.run(sops.get_job_schedulers_count(self._keys))

    def remove_job_scheduler(self, scheduler_id: str) -> bool:
        """Delete a job scheduler (or a BullMQ 5 repeatable job) and its delayed next
        iteration; an iteration already waiting runs once more. True when it existed."""
        return self._conn.run(sops.remove_job_scheduler(self._keys, scheduler_id))

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
