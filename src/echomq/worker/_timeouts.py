"""Per-job timeouts: which timeout applies to a job, and running a processor within it.

A job's own ``timeout`` option (stored in its opts as ``emqTimeout``, in milliseconds; Node
workers ignore it) wins over the worker's ``job_timeout``. At the deadline:

- an async processor is cancelled (it sees ``asyncio.CancelledError``);
- a sync processor in a process pool is killed with its child (the pool replaces the child);
  there the deadline starts when a child takes the job, not while the job waits for one;
- a sync processor in a thread cannot be stopped: the worker stops waiting for it, fails the
  attempt and frees the slot, and logs that the thread is still running. Such a processor runs
  in a daemon thread of its own rather than in the worker's thread pool, so a hung one never
  takes a pool thread away from later jobs.

The attempt then fails with :class:`~echomq.JobTimeoutError`, retried per ``attempts``. Jobs
without any timeout never come here: their cost is one dict lookup.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from ..errors import JobTimeoutError
from ..job import Job
from ..options import OPTION_NAMES

logger = logging.getLogger("echomq.worker")

T = TypeVar("T")

_WIRE_NAME = OPTION_NAMES["timeout"]


def timeout_of(job: Job, default: float | None) -> float | None:
    """The timeout of ``job`` in seconds: its own option, else ``default`` (None: none)."""
    raw = job.wire_options.get(_WIRE_NAME)
    if isinstance(raw, (int, float)) and not isinstance(raw, bool) and raw > 0:
        return raw / 1000
    return default


async def within(start: Callable[[], Awaitable[T]], seconds: float) -> T:
    """Await ``start()`` for at most ``seconds``; cancel it (and wait for it to end) at the
    deadline and raise :class:`JobTimeoutError`.

    Unlike ``asyncio.wait_for``, a ``TimeoutError`` raised by the processor itself stays a
    failure of its own, not a timeout.
    """
    task = asyncio.ensure_future(start())
    try:
        done, _ = await asyncio.wait({task}, timeout=seconds)
    except asyncio.CancelledError:  # the job itself was cancelled (closing)
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        raise
    if done:
        return task.result()
    task.cancel()
    with contextlib.suppress(BaseException):
        await task
    raise JobTimeoutError(seconds)


async def in_thread_within(call: Callable[[], T], seconds: float, job: Job) -> T:
    """Run ``call`` in a daemon thread of its own for at most ``seconds``; at the deadline,
    stop waiting (the thread cannot be killed), log that it still runs, and raise
    :class:`JobTimeoutError`."""
    loop = asyncio.get_running_loop()
    result: asyncio.Future[T] = loop.create_future()

    def settle(value: Any, error: BaseException | None) -> None:
        if result.done():
            return
        if error is not None:
            result.set_exception(error)
        else:
            result.set_result(value)

    def target() -> None:
        try:
            value = call()
        except BaseException as exc:
            outcome: tuple[Any, BaseException | None] = (None, exc)
        else:
            outcome = (value, None)
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(settle, *outcome)

    thread = threading.Thread(target=target, name=f"echomq-job-{job.id}", daemon=True)
    thread.start()
    done, _ = await asyncio.wait({result}, timeout=seconds)
    if done:
        return result.result()
    result.cancel()
    logger.warning(
        "queue=%s job=%s timed out after %g s; its thread %s cannot be stopped and is still "
        "running (use processes=N to have timed-out jobs killed)",
        job.queue_name,
        job.id,
        seconds,
        thread.name,
        extra={"queue": job.queue_name, "job_id": job.id, "status": "timeout-thread-running"},
    )
    raise JobTimeoutError(seconds)
