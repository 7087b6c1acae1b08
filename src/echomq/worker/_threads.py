"""Which sync processors are still running in their threads, for a shutdown that ends.

A thread cannot be interrupted. When ``close()`` gives up on a sync processor at the end of its
grace period, the job goes back to wait at once, but the thread runs on until the processor
returns, and Python waits for such threads before the process exits. :class:`ThreadTracker`
wraps a sync processor so that the worker can tell, once closed, which jobs' threads still run
(``Worker.abandoned_job_ids``); the CLI then exits without waiting for them
(docs/workers.md#shutdown).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any


class ThreadTracker:
    """Records the job each sync processor thread is running, while it runs."""

    __slots__ = ("_lock", "_running")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[int, tuple[str, ...]] = {}  # thread ident -> its job ids

    def wrap(self, processor: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """``processor`` (sync), recording each call's job while it runs."""
        return self._tracked(processor, lambda job: (job.id,))

    def wrap_batch(self, processor: Callable[[list[Any]], Any]) -> Callable[[list[Any]], Any]:
        """``processor`` (sync, given a list of jobs), recording each call's jobs while it
        runs."""
        return self._tracked(processor, lambda jobs: tuple(job.id for job in jobs))

    def _tracked(
        self, processor: Callable[[Any], Any], ids_of: Callable[[Any], tuple[str, ...]]
    ) -> Callable[[Any], Any]:
        @functools.wraps(processor)
        def tracked(arg: Any) -> Any:
            ident = threading.get_ident()
            with self._lock:
                self._running[ident] = ids_of(arg)
            try:
                return processor(arg)
            finally:
                with self._lock:
                    self._running.pop(ident, None)

        return tracked

    def running(self) -> list[str]:
        """The ids of the jobs whose sync processor is running now."""
        with self._lock:
            return sorted(job_id for ids in self._running.values() for job_id in ids)
