"""Start-up checks of process isolation and timeouts: refuse what cannot work, warn about
what cannot be enforced, before any job is taken."""

from __future__ import annotations

import inspect
import logging
from typing import Any

from ..errors import InvalidOptionError
from ..options import WorkerOptions
from ._pool import processor_path

logger = logging.getLogger("echomq.worker")


def is_async_processor(processor: Any) -> bool:
    """Whether ``processor`` is ``async def`` (or a callable whose ``__call__`` is)."""
    return inspect.iscoroutinefunction(processor) or inspect.iscoroutinefunction(
        getattr(processor, "__call__", None)  # noqa: B004
    )


def check_pool_options(processor: Any, options: WorkerOptions) -> str | None:
    """The import path of a processor to run in ``options.processes`` children, or None for
    no pool.

    Raises:
        InvalidOptionError: ``processes`` is set for an async processor, or the processor
            cannot be imported by path in a child.
    """
    if options.processes == 0:
        if options.max_tasks_per_child is not None:
            raise InvalidOptionError("max_tasks_per_child needs processes >= 1")
        return None
    if is_async_processor(processor):
        raise InvalidOptionError(
            f"processes={options.processes} runs sync processors (def) in child processes; "
            f"{getattr(processor, '__qualname__', processor)!r} is async and runs on the event "
            "loop: drop processes, or make the processor a plain def"
        )
    return processor_path(processor)


def warn_at_start_up(processor: Any, options: WorkerOptions, queue: str) -> None:
    """Say at start-up that a sync processor in threads cannot be stopped at its timeout, and
    that a pool larger than ``concurrency`` leaves children idle."""
    if options.processes > options.concurrency:
        logger.warning(
            "queue=%s processes=%d but concurrency=%d: only %d child process(es) will ever be "
            "busy; give concurrency >= processes (Worker(processes=N) alone sets both)",
            queue,
            options.processes,
            options.concurrency,
            options.concurrency,
            extra={"queue": queue, "status": "pool-underused"},
        )
    if options.job_timeout is None or options.processes or is_async_processor(processor):
        return
    logger.warning(
        "queue=%s job_timeout is set but the processor is a sync def running in threads "
        "(processes=0), which cannot be stopped: at the deadline the job fails and its slot "
        "is freed, but the thread keeps running; use processes=N to have it killed",
        queue,
        extra={"queue": queue, "status": "timeout-unenforceable"},
    )
