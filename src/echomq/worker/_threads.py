"""Which sync processors are still running in their threads, for a shutdown that ends.

A thread cannot be interrupted. When ``close()`` gives up on a sync processor at the end of its
grace period, the job goes back to wait at once, but the thread runs on until the processor
returns, and Python waits for such threads before the process exits. :class:`ThreadTracker`
wraps a sync processor so that the worker can tell, once closed, which jobs' threads still run
(``Worker.abandoned_job_ids``); the CLI then exits without waiting for them
(docs/workers.md#shutdown).

:class:`ProcessorThreads` is the worker's pool of those threads: a ``ThreadPoolExecutor`` bound
to the worker's concurrency, that a raised concurrency (``Worker.set_concurrency``) widens by
sending new work to a wider pool while the threads of the old one finish theirs.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


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


class ProcessorThreads(Executor):
    """The threads sync processors run in, at most ``bound`` at once; :meth:`widen` raises it.

    Threads start on demand (``ThreadPoolExecutor``); a wider bound takes effect for the work
    submitted after it, in a new pool, and the old pool is shut down without waiting, so its
    threads end once the work they took is done (nothing submitted is cancelled).
    """

    def __init__(self, bound: int, name: str) -> None:
        self._name = name
        self._bound = bound
        self._pool = ThreadPoolExecutor(max_workers=bound, thread_name_prefix=name)
        self._lock = threading.Lock()

    @property
    def bound(self) -> int:
        """The most threads that run processors at once."""
        return self._bound

    def widen(self, bound: int) -> None:
        """Allow ``bound`` threads from now on, when that is more than today (a lower bound
        changes nothing: the worker submits no more jobs than its slots)."""
        with self._lock:
            if bound <= self._bound:
                return
            old, self._bound = self._pool, bound
            self._pool = ThreadPoolExecutor(max_workers=bound, thread_name_prefix=self._name)
        old.shutdown(wait=False)

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        with self._lock:
            pool = self._pool
        return pool.submit(fn, *args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            pool = self._pool
        pool.shutdown(wait=wait, cancel_futures=cancel_futures)
