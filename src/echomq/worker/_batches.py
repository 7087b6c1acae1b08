"""Batches (``Worker(..., batch=Batch(size, wait))``): many jobs in one processor call.

Batching sits between a job's task and the processor. Each job is fetched, locked, started (the
``active`` hook), finished and logged by its own task exactly as without batches; only the call
of its processor differs. :class:`Batcher` stands in for the processor: each job's task calls
it with its job and awaits that job's own result, while the batcher gathers the jobs into a
batch, calls the user's processor once with the list when the batch has ``size`` jobs or
``wait`` seconds passed since its first job, and hands each task the result at its position.
So locks (every job of a running batch is held, hence renewed), progress, logs, retries,
backoff, events, metrics and the stalled check stay per job.

Invariants:

- a result that is an exception instance fails its job alone; a processor that raises fails
  every job of the batch with that error; anything but a list of one result per job fails every
  job with :class:`~echomq.BatchResultError`. Each such failure is retried per the job's
  ``attempts``, as any failed attempt;
- a failure's traceback (logged, and kept in the job's ``stacktrace``) is the user's: an
  exception raised in the processor (and caught there, or not) shows the frames of the
  processor down to where it was raised; one returned without ever being raised has no
  traceback, so it shows none (rather than the frame of this module that hands it to the job's
  task) and gets a note naming the processor that returned it, with its file and line;
- the job timeout applies to the batch call, from its start: the shortest timeout among its
  jobs (their own ``timeout`` option, else the worker's ``job_timeout``). At the deadline every
  job of the batch fails with :class:`~echomq.JobTimeoutError` (an async processor is
  cancelled, a sync one's thread is abandoned, as for single jobs);
- a cancelled job (``cancel_job``) leaves its batch at once: it fails as cancelled (or goes back
  to wait) while the batch goes on, and the result at its position is ignored. A sync processor
  sees ``job.cancelled`` turn true. Once every job of a batch is gone (the worker closing), the
  call is cancelled (async) or abandoned (sync: its thread runs on, as ``abandoned_job_ids``
  says).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from types import CodeType
from typing import Any

from .._redis.retry import stop_tasks
from .._tracebacks import hands_over
from ..errors import BatchResultError
from ..job import Job
from ..options import Batch
from ._execute import blocking_job
from ._timeouts import in_thread_within, timeout_of, within


@dataclass(slots=True)
class _Entry:
    """A job waiting in a batch, and where its result goes."""

    job: Job
    future: asyncio.Future[Any]


class Batcher:
    """The processor of a batch worker's jobs (see the module's docstring): ``await
    batcher(job)`` returns the job's result from the batch call it joined, or raises its
    error."""

    def __init__(
        self,
        processor: Callable[[list[Any]], Any],
        batch: Batch,
        *,
        is_async: bool,
        executor: Executor,
        default_timeout: float | None,
        queue: str,
    ) -> None:
        self._processor = processor
        #: the processor's name, for the event-loop watchdog's warnings
        self.__qualname__ = getattr(processor, "__qualname__", type(processor).__name__)
        #: the note on an exception the processor returned without raising it
        self._returned_note = f"returned, not raised, by the batch processor {_where(processor)}"
        self._size = batch.size
        self._wait = batch.wait_seconds
        self._is_async = is_async
        self._executor = executor
        self._default_timeout = default_timeout
        self._queue = queue
        self._pending: list[_Entry] = []
        self._timer: asyncio.TimerHandle | None = None
        self._calls: set[asyncio.Task[None]] = set()  # a reference to every batch call

    @hands_over  # a job's error comes from the batch call, not from here
    async def __call__(self, job: Job) -> Any:
        loop = asyncio.get_running_loop()
        entry = _Entry(job, loop.create_future())
        self._pending.append(entry)
        if len(self._pending) >= self._size:
            # jobs cancelled while waiting do not count
            self._pending = [e for e in self._pending if not e.future.done()]
        if len(self._pending) >= self._size:
            self._flush()
        elif self._timer is None:
            self._timer = loop.call_later(self._wait, self._flush)
        # Cancelling the job's task cancels the future: the job leaves the batch.
        return await entry.future

    def _flush(self) -> None:
        """Start the batch call of the jobs gathered so far (those not cancelled meanwhile)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        entries = [e for e in self._pending if not e.future.done()]
        self._pending = []
        if not entries:
            return
        call = asyncio.create_task(
            self._call(entries), name=f"echomq-batch-{self._queue}-{entries[0].job.id}"
        )
        self._calls.add(call)
        call.add_done_callback(self._calls.discard)

        waiting = len(entries)

        def abandon(_: object) -> None:  # once nobody waits for the result any more
            nonlocal waiting
            waiting -= 1
            if waiting == 0:
                call.cancel()  # a no-op once the call has settled the futures itself

        for entry in entries:
            entry.future.add_done_callback(abandon)

    async def _call(self, entries: list[_Entry]) -> None:
        """Call the processor with the batch and settle each job's future."""
        jobs = [e.job for e in entries]
        try:
            results = await self._run(jobs)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the whole batch failed
            for entry in entries:
                _settle(entry.future, exc)
            return
        if not isinstance(results, list) or len(results) != len(jobs):
            got = (
                f"a list of {len(results)}"
                if isinstance(results, list)
                else f"a {type(results).__name__}"
            )
            error = BatchResultError(
                f"the batch processor must return a list of {len(jobs)} results (one per job, "
                f"in order), got {got}"
            )
            for entry in entries:
                _settle(entry.future, error)
            return
        for entry, result in zip(entries, results):
            if isinstance(result, Exception) and result.__traceback__ is None:
                _add_note(result, self._returned_note)
            _settle(entry.future, result)

    async def _run(self, jobs: list[Job]) -> Any:
        """The processor's return value for ``jobs``, within the batch's timeout."""
        timeouts = [t for t in (timeout_of(job, self._default_timeout) for job in jobs) if t]
        timeout = min(timeouts) if timeouts else None
        if self._is_async:
            if timeout is None:
                return await self._processor(jobs)
            return await within(lambda: self._processor(jobs), timeout)
        loop = asyncio.get_running_loop()
        ctx = contextvars.copy_context()
        twins = [blocking_job(job, loop) for job in jobs]
        call = functools.partial(ctx.run, self._processor, twins)
        if timeout is None:
            return await loop.run_in_executor(self._executor, call)
        # the warning of a thread left running names the batch's first job
        return await in_thread_within(call, timeout, jobs[0])

    async def aclose(self) -> None:
        """Cancel the batch calls still running and wait for them (the worker closing)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        await stop_tasks(list(self._calls))


def _settle(future: asyncio.Future[Any], result: Any) -> None:
    """Give a job's task its result, or the exception instance at its position."""
    if future.done():  # the job was cancelled: its result is ignored
        return
    if isinstance(result, Exception):
        future.set_exception(result)
    else:
        future.set_result(result)


def _where(processor: Callable[..., Any]) -> str:
    """``name (File "path", line N)`` of the function ``processor`` is (or calls), for notes."""
    target: Any = processor
    while isinstance(target, functools.partial):
        target = target.func
    target = inspect.unwrap(target)
    name = getattr(target, "__qualname__", None) or type(target).__qualname__
    code = getattr(target, "__code__", None)
    if code is None and callable(target):  # a callable object: its class's __call__
        code = getattr(type(target).__call__, "__code__", None)
    if not isinstance(code, CodeType):
        return name
    return f'{name} (File "{code.co_filename}", line {code.co_firstlineno})'


def _add_note(error: BaseException, note: str) -> None:
    """Add ``note`` to ``error``'s ``__notes__`` once (``BaseException.add_note`` of 3.11+,
    written out for 3.10: the tracebacks echomq formats show the notes on every version)."""
    notes = getattr(error, "__notes__", None)
    if notes is None:
        setattr(error, "__notes__", [note])  # noqa: B010 (not in 3.10's BaseException)
    elif isinstance(notes, list) and note not in notes:
        notes.append(note)
