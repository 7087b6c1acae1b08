"""OpenTelemetry traces of adds and job runs, joined with BullMQ's (npm ``bullmq-otel``).

``Queue(..., telemetry=t)`` and ``Worker(..., telemetry=t)`` take an OpenTelemetry ``Tracer`` or
``TracerProvider`` (``pip install 'echomq[otel]'``); nothing falls back to the global provider.
Without one, queues and workers do no telemetry work at all beyond a ``None`` check.

What travels with a job is what BullMQ's telemetry writes: the producer's span context, injected
with the globally configured propagator (W3C ``traceparent`` by default) into a carrier dict,
stored as JSON *text* in the job's ``opts`` under ``tm`` (the ``metadata`` of the per-job
:class:`~echomq.JobTelemetry` option); ``omc`` stores its ``omit_context``. A worker extracts
that context and starts its ``process <queue>`` span as a child of the producer's span, then
runs the processor inside it, so jobs the processor adds continue the same trace.

Span names and attributes follow BullMQ's: ``add <queue>.<name>`` and ``addBulk <queue>``
(PRODUCER), ``process <queue>`` (CONSUMER), and under it ``complete``, ``retry``, ``delay`` or
``fail <queue>`` (INTERNAL) for the outcome; attributes ``bullmq.queue.name``,
``bullmq.queue.operation``, ``bullmq.job.id``, ``bullmq.job.name``,
``bullmq.job.attempts.made`` and so on.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Final

from .options import EMPTY_OPTIONS, UNSET, JobOptions, JobTelemetry, coerce_options

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

    from ._ops import BulkItem

INSTALL_HINT: Final = "OpenTelemetry support needs opentelemetry-api: pip install 'echomq[otel]'"

QUEUE_NAME: Final = "bullmq.queue.name"
QUEUE_OPERATION: Final = "bullmq.queue.operation"
JOB_NAME: Final = "bullmq.job.name"
JOB_ID: Final = "bullmq.job.id"
JOB_ATTEMPTS_MADE: Final = "bullmq.job.attempts.made"
BULK_NAMES: Final = "bullmq.job.bulk.names"
BULK_COUNT: Final = "bullmq.job.bulk.count"
WORKER_ID: Final = "bullmq.worker.id"
WORKER_NAME: Final = "bullmq.worker.name"
JOB_FAILED_REASON: Final = "bullmq.job.failed.reason"
#: echomq's own: the number of this attempt (1 for the first run).
JOB_ATTEMPT: Final = "echomq.job.attempt"

#: The outcome span's operation, by a job outcome's status (as BullMQ names them).
OUTCOME_OPERATIONS: Final = {
    "completed": "complete",
    "failed": "fail",
    "cancelled": "fail",
    "retry": "retry",
    "retry-delayed": "delay",
}


class Telemetry:
    """The tracer of one queue or worker, and the span helpers around its operations."""

    __slots__ = ("_propagate", "_trace", "tracer")

    def __init__(self, tracer: Tracer) -> None:
        from opentelemetry import propagate, trace

        self.tracer = tracer
        self._trace = trace
        self._propagate = propagate

    @classmethod
    def coerce(cls, value: object) -> Telemetry | None:
        """A Telemetry from a ``Tracer`` or ``TracerProvider`` (None: telemetry off).

        Raises:
            ImportError: opentelemetry-api is not installed (the message names the pip command).
            TypeError: ``value`` is neither.
        """
        if value is None:
            return None
        if isinstance(value, Telemetry):
            return value
        try:
            from opentelemetry import trace
        except ImportError as exc:
            raise ImportError(INSTALL_HINT) from exc
        if isinstance(value, trace.TracerProvider):
            return cls(value.get_tracer("echomq"))
        if isinstance(value, trace.Tracer):
            return cls(value)
        raise TypeError(
            f"telemetry must be an OpenTelemetry Tracer or TracerProvider, got {value!r}"
        )

    def stamp(self, options: JobOptions, context_json: str) -> JobOptions:
        """``options`` with the producer's context in ``telemetry.metadata``, unless the job
        sets its own metadata or ``omit_context``."""
        own = options.telemetry
        if own is not UNSET and (own.metadata is not None or own.omit_context):
            return options
        return options.merged(JobOptions(telemetry=JobTelemetry(metadata=context_json)))

    @contextmanager
    def producing(self, queue: str, operation: str, destination: str) -> Iterator[Span]:
        """A PRODUCER span ``<operation> <destination>``, current while the body runs;
        an exception is recorded on it (the SDK does that when it leaves ``use_span``)."""
        span = self.tracer.start_span(
            f"{operation} {destination}",
            kind=self._trace.SpanKind.PRODUCER,
            attributes={QUEUE_NAME: queue, QUEUE_OPERATION: operation},
        )
        with self._trace.use_span(span, end_on_exit=True, record_exception=True):
            yield span

    def context_json(self) -> str:
        """The current context as BullMQ stores it: JSON text of a propagation carrier."""
        carrier: dict[str, str] = {}
        self._propagate.inject(carrier)
        return json.dumps(carrier, separators=(",", ":"))

    def stamp_bulk(
        self, items: Iterable[BulkItem], defaults: JobOptions, context_json: str
    ) -> list[BulkItem]:
        """The items of a bulk add, each stamped as :meth:`stamp` does (malformed items are
        left for the add to refuse)."""
        out: list[BulkItem] = []
        for item in items:
            if isinstance(item, tuple) and len(item) in (2, 3):
                own = coerce_options(item[2]) if len(item) == 3 else EMPTY_OPTIONS
                effective = defaults.merged(own)
                if self.stamp(effective, context_json) is not effective:
                    own = own.merged(JobOptions(telemetry=JobTelemetry(metadata=context_json)))
                item = (item[0], item[1], own)
            out.append(item)
        return out

    @staticmethod
    def bulk_attributes(span: Span, names: Sequence[str]) -> None:
        span.set_attributes({BULK_NAMES: list(names), BULK_COUNT: len(names)})

    @contextmanager
    def processing(
        self, queue: str, metadata: str | None, attributes: dict[str, Any]
    ) -> Iterator[Span]:
        """The CONSUMER span ``process <queue>``: a child of the context in ``metadata`` (the
        job's ``tm``) when there is one, current while the processor runs."""
        parent = None
        if metadata:
            try:
                carrier = json.loads(metadata)
            except ValueError:
                carrier = None
            if isinstance(carrier, dict):
                parent = self._propagate.extract(carrier)
        span = self.tracer.start_span(
            f"process {queue}",
            context=parent,
            kind=self._trace.SpanKind.CONSUMER,
            attributes={QUEUE_NAME: queue, QUEUE_OPERATION: "process", **attributes},
        )
        with self._trace.use_span(span, end_on_exit=True, record_exception=True):
            yield span

    def outcome(
        self,
        span: Span,
        queue: str,
        status: str,
        attempts_made: int,
        error: BaseException | None,
    ) -> None:
        """Record a job's outcome: an INTERNAL child span named as BullMQ names it, and on both
        spans the exception of a failed or retried attempt."""
        span.set_attribute(JOB_ATTEMPTS_MADE, attempts_made)
        operation = OUTCOME_OPERATIONS.get(status)
        if operation is None:  # moved, rate-limited, requeued: no outcome of its own
            return
        child = self.tracer.start_span(
            f"{operation} {queue}",
            kind=self._trace.SpanKind.INTERNAL,
            attributes={QUEUE_NAME: queue, QUEUE_OPERATION: operation},
        )
        if error is not None:
            child.set_attribute(JOB_FAILED_REASON, str(error) or type(error).__name__)
            child.record_exception(error)
            span.record_exception(error)
            if operation == "fail":
                status_error = self._trace.Status(self._trace.StatusCode.ERROR, str(error))
                child.set_status(status_error)
                span.set_status(status_error)
        child.end()
