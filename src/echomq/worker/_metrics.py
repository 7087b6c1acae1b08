"""Worker-side Prometheus metrics: ``Worker(..., metrics_registry=registry)``.

Given a ``prometheus_client`` ``CollectorRegistry``, a worker registers hooks (``_hooks``) that
update these metrics (docs/operations.md#prometheus):

- ``echomq_job_duration_seconds`` (histogram; ``queue``, ``name``): processing time of each
  attempt that completed or failed, from the ``active`` hook to its outcome.
- ``echomq_jobs_completed_total`` / ``echomq_jobs_failed_total`` (counters; ``queue``,
  ``name``): attempts recorded as completed / failed (a failed attempt that is retried counts).
- ``echomq_jobs_active`` (gauge; ``queue``): jobs whose processor is running.
- ``echomq_lock_renewals_failed_total`` (counter; ``queue``): job locks a renewal found lost.

Workers that share a registry share its metrics (created once per registry). ``prometheus_client``
is imported only here, when a registry is given (``pip install 'echomq[prometheus]'``); without
one a worker registers no hook, so metrics cost nothing.
"""

from __future__ import annotations

import time
import weakref
from typing import TYPE_CHECKING, Any

from ..job import Job

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

    from ._hooks import Hooks

_INSTALL = "pip install 'echomq[prometheus]'"

#: Duration buckets in seconds: 5 ms to 5 minutes.
BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
)


class WorkerMetrics:
    """The metrics of one registry, shared by the workers given it."""

    def __init__(self, registry: CollectorRegistry) -> None:
        try:
            from prometheus_client import Counter, Gauge, Histogram
        except ImportError as exc:  # pragma: no cover - the extra is installed in the test env
            raise ImportError(f"worker metrics need prometheus-client: {_INSTALL}") from exc
        self.duration: Histogram = Histogram(
            "echomq_job_duration_seconds",
            "Processing time of job attempts that completed or failed",
            ("queue", "name"),
            registry=registry,
            buckets=BUCKETS,
        )
        self.completed: Counter = Counter(
            "echomq_jobs_completed",
            "Job attempts recorded as completed",
            ("queue", "name"),
            registry=registry,
        )
        self.failed: Counter = Counter(
            "echomq_jobs_failed",
            "Job attempts recorded as failed (retried or final)",
            ("queue", "name"),
            registry=registry,
        )
        self.active: Gauge = Gauge(
            "echomq_jobs_active", "Jobs whose processor is running", ("queue",), registry=registry
        )
        self.lock_renewals_failed: Counter = Counter(
            "echomq_lock_renewals_failed",
            "Job locks a lock renewal found lost",
            ("queue",),
            registry=registry,
        )


_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, WorkerMetrics] = (
    weakref.WeakKeyDictionary()
)


def metrics_for(registry: CollectorRegistry) -> WorkerMetrics:
    """The metrics of ``registry``, created on first use.

    Raises:
        ImportError: prometheus-client is not installed.
        TypeError: ``registry`` is not a ``prometheus_client.CollectorRegistry``.
    """
    try:
        from prometheus_client import CollectorRegistry
    except ImportError as exc:
        raise ImportError(f"metrics_registry needs prometheus-client: {_INSTALL}") from exc
    if not isinstance(registry, CollectorRegistry):
        raise TypeError(
            f"metrics_registry must be a prometheus_client.CollectorRegistry, got {registry!r}"
        )
    found = _BY_REGISTRY.get(registry)
    if found is None:
        found = _BY_REGISTRY[registry] = WorkerMetrics(registry)
    return found


def install(hooks: Hooks, queue: str, registry: CollectorRegistry) -> None:
    """Register, on ``hooks``, the callbacks that update ``registry``'s metrics for ``queue``."""
    m = metrics_for(registry)
    active = m.active.labels(queue=queue)
    renewals = m.lock_renewals_failed.labels(queue=queue)
    started: dict[int, float] = {}  # id(job) -> monotonic time its processor started

    def on_active(job: Job) -> None:
        started[id(job)] = time.monotonic()
        active.inc()

    def finished(job: Job, counter: Counter) -> None:
        start = started.pop(id(job), None)
        if start is None:
            return
        active.dec()
        m.duration.labels(queue=queue, name=job.name).observe(time.monotonic() - start)
        counter.labels(queue=queue, name=job.name).inc()

    def on_completed(job: Job, _result: Any) -> None:
        finished(job, m.completed)

    def on_failed(job: Job, _error: BaseException) -> None:
        finished(job, m.failed)

    def on_lost(job_ids: list[str]) -> None:
        renewals.inc(len(job_ids))

    def on_closed() -> None:  # jobs that ended without an outcome (handed back, cancelled)
        active.dec(len(started))
        started.clear()

    hooks.on("active", on_active)
    hooks.on("completed", on_completed)
    hooks.on("failed", on_failed)
    hooks.on("lock_renewal_failed", on_lost)
    hooks.on("closed", on_closed)
