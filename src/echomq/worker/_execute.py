"""Running one job, as a pipeline of small steps (take, check, run, decide, record, log).

The outcome of a job becomes one finishAndFetch item handed to the finisher, so that a
completion and the next fetch share one script call. Control exceptions raised by processors
(:class:`~echomq.ProcessorSignal`) steer the worker instead of failing the job.
"""

from __future__ import annotations

import asyncio
import contextvars
import dataclasses
import enum
import functools
import inspect
import logging
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from .. import _ops as ops
from .._job import Runner
from .._json import dumps
from .._ops import worker as wops
from .._tracebacks import format_failure, stacktrace_limit
from ..errors import (
    DelayedError,
    EchoMQError,
    JobCancelledError,
    PayloadError,
    RateLimitError,
    UnrecoverableError,
    WaitingChildrenError,
)
from ..job import Job, JobData
from ..options import TELEMETRY_KEY, WorkerOptions, to_seconds
from ..protocol import codes, fields
from ..sync import Job as SyncJob
from ..telemetry import JOB_ATTEMPT, JOB_ID, JOB_NAME, WORKER_ID, WORKER_NAME, Telemetry
from ._backoff import NO_RETRY, BackoffStrategy, retry_delay_ms
from ._cancel import absorb_cancel
from ._pool import ProcessPool
from ._timeouts import in_thread_within, timeout_of, within

logger = logging.getLogger("echomq.worker")

T = TypeVar("T")


class Status(str, enum.Enum):
    """What happened to a job's attempt: the ``status`` of its log line (and ``extra``)."""

    COMPLETED = "completed"
    FAILED = "failed"
    RETRY = "retry"
    RETRY_DELAYED = "retry-delayed"
    CANCELLED = "cancelled"
    #: cancelled with ``requeue=True``: the worker puts the job back in wait
    REQUEUED = "cancelled-requeued"
    #: the processor raised RateLimitError: the worker puts the job back and holds off fetching
    RATE_LIMITED = "rate-limited"
    #: the processor moved the job itself (DelayedError, WaitingChildrenError)
    MOVED = "moved"

    def __str__(self) -> str:
        return self.value


class Processor(Protocol):
    """A job processor returning a JSON value: ``async def f(job)``, given an
    :class:`echomq.Job`, or ``def f(job)``, given an :class:`echomq.sync.Job` whose methods
    block (it runs in the worker's thread pool)."""

    def __call__(self, job: Any, /) -> Any: ...


class _OnLoop:
    """The connection of a sync processor's job: runs each operation on the worker's connection
    and event loop, and blocks the processor's thread until it is done."""

    __slots__ = ("_conn", "_loop")

    def __init__(self, conn: Runner, loop: asyncio.AbstractEventLoop) -> None:
        self._conn = conn
        self._loop = loop

    def _check_thread(self) -> None:
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:  # no loop in this thread: the expected case
            return
        if running is self._loop:
            raise RuntimeError(
                "a sync job's methods block until the worker's event loop runs them: call them "
                "from the sync processor's thread, not from that loop"
            )

    def run(self, op: ops.Op[T]) -> T:
        self._check_thread()
        return asyncio.run_coroutine_threadsafe(self._conn.run(op), self._loop).result()

    def run_plan(self, plan: ops.Plan[T]) -> T:
        self._check_thread()
        return asyncio.run_coroutine_threadsafe(self._conn.run_plan(plan), self._loop).result()


def blocking_job(job: Job, loop: asyncio.AbstractEventLoop) -> SyncJob:
    """The job a sync processor receives: the same fields, with methods that block while the
    worker's loop runs them on the worker's connection."""
    twin = SyncJob(
        id=job.id, name=job.name, data=job.data, queue_name=job.queue_name, timestamp=job.timestamp
    )
    for f in dataclasses.fields(JobData):
        setattr(twin, f.name, getattr(job, f.name))
    twin._keys = job._keys
    twin._conn = None if job._conn is None else _OnLoop(job._conn, loop)
    twin._token = job._token
    twin._run = job._run
    return twin


@dataclass(slots=True)
class Outcome:
    """What happened to a job: the finish item to record, if any, and how to log it."""

    item: list[Any] | None
    status: Status
    detail: str = ""
    #: what the attempt failed with (failures, retries and cancels)
    error: BaseException | None = None
    #: the error's traceback as the job's ``stacktrace`` keeps it (None: not formatted)
    trace: str | None = None


class JobRunner:
    """Runs processors and turns their result into a finishAndFetch item."""

    def __init__(
        self,
        processor: Processor,
        options: WorkerOptions,
        backoff_strategy: BackoffStrategy | None,
        executor: Executor | None,
        pool: ProcessPool | None = None,
        telemetry: Telemetry | None = None,
        worker: tuple[str, str | None] = ("", None),
    ) -> None:
        self._processor = processor
        self._telemetry = telemetry
        self._worker = worker  # (id, name), for span attributes
        # Without telemetry a job costs nothing more: ``run`` is the plain pipeline.
        self.run: Callable[[Job, str], Awaitable[Outcome]] = (
            self._run if telemetry is None else self._traced_run
        )
        self._pool = pool  # sync processors run in its children (processes=N)
        self._default_timeout = (
            None if options.job_timeout is None else to_seconds(options.job_timeout, "job_timeout")
        )
        self._is_async = inspect.iscoroutinefunction(processor) or inspect.iscoroutinefunction(
            getattr(processor, "__call__", None)  # noqa: B004
        )
        self._options = options
        self._backoff = backoff_strategy
        self._executor = executor

    async def _call_processor(self, job: Job) -> Any:
        if self._is_async:
            return await self._processor(job)
        if self._pool is not None:
            return await self._pool.run(job)
        return await self.in_thread(self._processor, job)

    def in_thread(self, fn: Callable[[Any], Any], job: Job) -> asyncio.Future[Any]:
        """``fn(job's blocking twin)`` in the worker's threads, with the job's context copied
        (a sync processor's call, and ``RunState.run_blocking``'s)."""
        loop = asyncio.get_running_loop()
        call = functools.partial(contextvars.copy_context().run, fn, blocking_job(job, loop))
        return loop.run_in_executor(self._executor, call)

    async def _call_within(self, job: Job, timeout: float) -> Any:
        """Call the processor with a deadline (see ``_timeouts``)."""
        if self._is_async:
            return await within(lambda: self._call_processor(job), timeout)
        if self._pool is not None:  # the deadline starts once a child took the job
            return await self._pool.run(job, timeout)
        loop = asyncio.get_running_loop()
        ctx = contextvars.copy_context()
        call = functools.partial(ctx.run, self._processor, blocking_job(job, loop))
        return await in_thread_within(call, timeout, job)

    def _final_item(
        self, job: Job, token: str, value: str, *, completed: bool, update: Sequence[str] = ()
    ) -> list[Any]:
        """The item that moves ``job`` to completed (``value``: its return value JSON) or to
        failed (``value``: the failed reason, ``update``: the fields recording the failure),
        under the retention of the job's own option, else the worker's."""
        default = self._options.remove_on_complete if completed else self._options.remove_on_fail
        return wops.finish_item(
            wops.COMPLETE if completed else wops.FAIL,
            job.id,
            token,
            value,
            attempts=job.attempts,
            keep=wops.keep_of(job.wire_options, completed, default),
            fields=update,
            group=job.group,
        )

    def _failure_fields(self, job: Job, error: BaseException) -> tuple[str, str | None, list[str]]:
        """The failed reason, the traceback (None with ``stackTraceLimit`` 0: not even
        formatted) and the hash fields that record ``error``."""
        reason = str(error) or type(error).__name__
        limit = stacktrace_limit(job.wire_options)
        trace = None
        if limit == 0:
            stacktrace: list[str] = []
        else:
            # an error raised again from a pool child keeps the child's traceback
            trace = getattr(error, "remote_traceback", None) or format_failure(error)
            earlier = job.stacktrace
            if limit is not None:
                earlier = earlier[max(0, len(earlier) - limit + 1) :]
            stacktrace = [*earlier, trace]
        job.stacktrace = stacktrace
        return (
            reason,
            trace,
            [fields.FAILED_REASON, reason, fields.STACKTRACE, dumps(stacktrace)],
        )

    def _fail(self, job: Job, token: str, error: BaseException) -> Outcome:
        reason, trace, update = self._failure_fields(job, error)
        item = self._final_item(job, token, reason, completed=False, update=update)
        return Outcome(item, Status.FAILED, reason, error, trace)

    async def _traced_run(self, job: Job, token: str) -> Outcome:
        """:meth:`_run` inside a ``process <queue>`` span (see :mod:`echomq.telemetry`)."""
        tel = self._telemetry
        assert tel is not None
        metadata = job.wire_options.get(TELEMETRY_KEY)  # tm: JSON text
        worker_id, worker_name = self._worker
        attributes: dict[str, Any] = {
            JOB_ID: job.id,
            JOB_NAME: job.name,
            JOB_ATTEMPT: job.attempts_made + 1,
            WORKER_ID: worker_id,
        }
        if worker_name:
            attributes[WORKER_NAME] = worker_name
        carrier = metadata if isinstance(metadata, str) else None
        with tel.processing(job.queue_name, carrier, attributes) as span:
            outcome = await self._run(job, token)
            status = outcome.status.value
            tel.outcome(span, job.queue_name, status, job.attempts_made, outcome.error)
        return outcome

    async def _run(self, job: Job, token: str) -> Outcome:
        """Run ``job`` (already active, locked with ``token``) and decide its outcome.

        A job that cannot be read (its ``data`` or ``opts`` is not valid JSON, or its hash
        lacks a required field) fails at once, without retries and without running the
        processor: running it with an empty payload would report a success that never was.
        """
        if job._corruption is not None:
            return self._refuse_corrupt(job, token, job._corruption)
        if job.deferred_failure is not None:
            return self._fail(job, token, UnrecoverableError(job.deferred_failure))
        limit = self._options.max_started_attempts
        if limit is not None and job.attempts_started > limit:
            return self._fail(job, token, UnrecoverableError(codes.STARTED_TOO_MANY))
        # a batch worker's timeout applies to the batch call (the Batcher's own)
        batched = self._options.batch is not None
        timeout = None if batched else timeout_of(job, self._default_timeout)
        run = job._run
        if run is not None:
            if run.cancelled:  # cancelled before its processor started
                run.done = True
                return self._cancelled(job, token, JobCancelledError(run.reason, job_id=job.id))
            run.in_processor = True
        try:
            if timeout is None:
                result = await self._call_processor(job)
            else:
                result = await self._call_within(job, timeout)
        except (DelayedError, WaitingChildrenError) as exc:
            return Outcome(None, Status.MOVED, type(exc).__name__)
        except RateLimitError:  # the worker puts the job back (see Status.RATE_LIMITED)
            return Outcome(None, Status.RATE_LIMITED)
        except JobCancelledError as exc:  # job.raise_if_cancelled() in a sync processor
            return self._cancelled(job, token, exc)
        except asyncio.CancelledError:
            if absorb_cancel(run):  # a cancel request, not the worker closing
                assert run is not None
                return self._cancelled(job, token, JobCancelledError(run.reason, job_id=job.id))
            raise
        except Exception as exc:  # a processor failure, whatever its type
            return await self._on_error(job, token, exc)
        finally:
            if run is not None:
                run.in_processor = False
                run.done = True
        if run is not None and run.cancelled and absorb_cancel(run):
            # the processor swallowed the CancelledError and returned: the cancel still wins
            return self._cancelled(job, token, JobCancelledError(run.reason, job_id=job.id))
        try:
            value = dumps(result, "return value")
        except PayloadError as exc:
            return self._fail(job, token, UnrecoverableError(str(exc)))
        job.return_value = result
        item = self._final_item(job, token, value, completed=True)
        return Outcome(item, Status.COMPLETED)

    def _cancelled(self, job: Job, token: str, error: JobCancelledError) -> Outcome:
        """A cancelled job fails with the cancel's reason, without retry; or, when the cancel
        asked for it, goes back to wait (the worker does that on seeing ``Status.REQUEUED``)."""
        run = job._run
        if run is not None and run.requeue:
            return Outcome(None, Status.REQUEUED, error.reason, error)
        outcome = self._fail(job, token, error)
        outcome.status = Status.CANCELLED
        return outcome

    def _refuse_corrupt(self, job: Job, token: str, reason: str) -> Outcome:
        logger.warning(
            "queue=%s job=%s is corrupt (%s); failed without running the processor",
            job.queue_name,
            job.id,
            reason,
            extra={"queue": job.queue_name, "job_id": job.id, "status": "corrupt"},
        )
        return self._fail(job, token, UnrecoverableError(reason))

    async def failure_outcome(self, job: Job, token: str, error: Exception) -> Outcome:
        """The outcome of an attempt that failed with ``error`` (a retry, or the failure)."""
        return await self._on_error(job, token, error)

    async def _on_error(self, job: Job, token: str, error: Exception) -> Outcome:
        attempts_made = job.attempts_made + 1
        if isinstance(error, UnrecoverableError) or attempts_made >= job.attempts:
            return self._fail(job, token, error)
        try:
            if job.wire_options.get("backoff") is None:
                delay = 0  # what retry_delay_ms says, without awaiting it
            else:
                delay = await retry_delay_ms(job, error, attempts_made, self._backoff)
        except EchoMQError as exc:
            logger.error("%s", exc)
            return self._fail(job, token, error)
        if delay == NO_RETRY:
            return self._fail(job, token, error)
        reason, trace, update = self._failure_fields(job, error)
        if delay > 0:
            item = wops.finish_item(
                wops.DELAY, job.id, token, fields=update, delay_ms=delay, group=job.group
            )
            return Outcome(
                item, Status.RETRY_DELAYED, f"{reason} (retry in {delay} ms)", error, trace
            )
        lifo = job.wire_options.get("lifo") is True
        item = wops.finish_item(
            wops.RETRY, job.id, token, fields=update, flag=lifo, group=job.group
        )
        return Outcome(item, Status.RETRY, reason, error, trace)


#: Statuses of a failed attempt: logged at WARNING (the final failure with its traceback).
FAILED_STATUSES = frozenset({Status.FAILED, Status.RETRY, Status.RETRY_DELAYED})
_LINE = "queue=%s job=%s name=%s attempt=%d %s in %.3fs%s"


def log_outcome(queue: str, job: Job, outcome: Outcome, started: float) -> None:
    """One line per job transition, with the same facts in ``extra``: INFO, or WARNING for a
    failed attempt. Only the final failure carries a traceback, the text the job's
    ``stacktrace`` keeps (set as the record's ``exc_text``, so handlers do not format it again);
    a retried attempt is the one line, its reason at the end."""
    failed = outcome.status in FAILED_STATUSES
    level = logging.WARNING if failed else logging.INFO
    if not logger.isEnabledFor(level):
        return
    duration = time.monotonic() - started
    attempt = job.attempts_made + 1
    args = (
        queue,
        job.id,
        job.name,
        attempt,
        outcome.status.value,
        duration,
        f": {outcome.detail}" if outcome.detail else "",
    )
    extra = {
        "queue": queue,
        "job_id": job.id,
        "job_name": job.name,
        "attempt": attempt,
        "status": outcome.status.value,
        "duration": duration,
    }
    error = outcome.error
    exc_info = None
    if outcome.status is Status.FAILED and outcome.trace is not None and error is not None:
        exc_info = (type(error), error, error.__traceback__)
    # The record Logger.log would make, without its walk up the stack for the caller: here.
    here = sys._getframe()
    record = logger.makeRecord(
        logger.name,
        level,
        here.f_code.co_filename,
        here.f_lineno,
        _LINE,
        args,
        exc_info,
        "log_outcome",
        extra,
    )
    if exc_info is not None:
        record.exc_text = outcome.trace
    logger.handle(record)
