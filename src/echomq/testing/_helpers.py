"""``run_until_drained`` and ``assert_enqueued``: helpers over the public API.

Both read the queue through its own connection, so they see what a production worker or
producer would see. Neither uses pytest; any test runner (or script) can call them.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any

from .._redis.connection import AsyncConnection
from ..job import Job, JobState
from ..options import WorkerOptions
from ..queue import Queue
from ..worker import Processor, Worker

#: States a job is in while it still has to run.
PENDING = ("waiting", "prioritized", "delayed", "active", "waiting-children")
_FINISHED = (JobState.COMPLETED, JobState.FAILED)
_POLL = 0.01
_UNSET: Any = object()


async def run_until_drained(
    queue: Queue,
    processor: Processor,
    *,
    connection: AsyncConnection | None = None,
    timeout: float = 10.0,
    include_delayed: bool = True,
    options: WorkerOptions | None = None,
) -> list[Job]:
    """Run a real :class:`~echomq.Worker` on ``queue`` until it has nothing left to run.

    Args:
        queue: the queue to drain.
        processor: ``async def f(job)`` or ``def f(job)``, as for a Worker.
        connection: the worker's connection; default the queue's own client.
        timeout: seconds to wait at most for the queue to drain.
        include_delayed: also wait for delayed jobs (and retries in backoff) to run.
        options: worker options (concurrency, lock duration, ...).

    Returns:
        The jobs the worker took, in the order it first took them, re-read after the run: each
        is completed or failed (look at ``return_value`` / ``failed_reason``), unless it was
        removed on completion (then it is left out).

    Raises:
        TimeoutError: the queue did not drain within ``timeout``; the message has its counts.
    """
    taken: dict[str, None] = {}
    worker = Worker(
        queue.name,
        _recording(processor, taken),
        connection=connection if connection is not None else queue._conn.client,
        prefix=queue.prefix,
        options=options,
    )
    states = PENDING if include_delayed else tuple(s for s in PENDING if s != "delayed")
    async with worker:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            counts = await queue.get_job_counts(*states)
            if not any(counts.values()):
                break
            if loop.time() > deadline:
                raise TimeoutError(f"queue {queue.name!r} not drained in {timeout}s: {counts}")
            await asyncio.sleep(_POLL)
    finished = []
    for job_id in taken:
        job = await queue.get_job(job_id)
        if job is not None and await job.get_state() in _FINISHED:
            finished.append(job)
    return finished


def _recording(processor: Processor, taken: dict[str, None]) -> Processor:
    """``processor`` noting the id of every job it is given (sync stays sync, async async)."""
    if inspect.iscoroutinefunction(processor):
        run_async: Callable[[Any], Awaitable[Any]] = processor

        @functools.wraps(processor)
        async def noting_async(job: Any) -> Any:
            taken[job.id] = None
            return await run_async(job)

        return noting_async

    @functools.wraps(processor)
    def noting(job: Any) -> Any:
        taken[job.id] = None
        return processor(job)

    return noting


async def assert_enqueued(
    queue: Queue, *, name: str | None = None, data: Any = _UNSET, count: int | None = None
) -> list[Job]:
    """Assert that jobs matching ``name`` and ``data`` wait in ``queue`` to run.

    Waiting, prioritized, delayed and waiting-children jobs count; active and finished ones do
    not.

    Args:
        queue: the queue to look in.
        name: the job name to match; None matches any.
        data: the job data to match (compared after the JSON round trip); omit to match any.
        count: how many must match; None means at least one.

    Returns:
        The matching jobs, oldest first.

    Raises:
        AssertionError: no job matches (or not ``count`` of them); the message lists what
            does wait in the queue.
    """
    waiting = await queue.get_jobs(
        ["waiting", "prioritized", "delayed", "waiting-children"], asc=True
    )
    matching = [
        job
        for job in waiting
        if (name is None or job.name == name) and (data is _UNSET or job.data == data)
    ]
    if (count is None and matching) or len(matching) == count:
        return matching
    wanted = f"name={name!r}" + ("" if data is _UNSET else f", data={data!r}")
    found = "; ".join(f"{job.name!r} {job.data!r}" for job in waiting[:20]) or "nothing"
    expected = "at least one job" if count is None else f"{count} job(s)"
    raise AssertionError(
        f"expected {expected} with {wanted} in queue {queue.name!r}, found {len(matching)}; "
        f"it holds: {found}"
    )
