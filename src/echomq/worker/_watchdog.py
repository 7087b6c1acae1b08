"""The event-loop watchdog: warns, naming the running jobs, when the loop was blocked.

An ``async def`` processor that computes without awaiting (or calls blocking I/O) stops the
worker's loop: no other job of the worker runs, nothing is fetched or recorded, and the jobs'
locks are kept only because a thread renews them (``_locks.run_in_thread``). The watchdog
sleeps in short steps and measures how late each wake-up was: a lateness over ``threshold`` (a
quarter of the lock duration) is logged as a WARNING that names the processor, how long the
loop was blocked and the jobs its async processor was running, and how to fix it; once per
job (a stretch that names only jobs warned about already is not logged again).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable

logger = logging.getLogger("echomq.worker")

#: The watchdog warns when the loop was blocked longer than this fraction of the lock duration.
FRACTION = 0.25


def jobs_order(job_id: str) -> tuple[int, str]:
    """Numeric ids in numeric order, then the others."""
    return (int(job_id), "") if job_id.isdigit() else (1 << 62, job_id)


class LoopWatchdog:
    """Measures the event loop's lateness while a worker runs."""

    def __init__(
        self,
        queue: str,
        processor: str,
        lock_seconds: float,
        running: Callable[[], list[str]],
    ) -> None:
        self._queue = queue
        self._processor = processor
        self.threshold = max(lock_seconds * FRACTION, 0.1)
        self._step = min(self.threshold / 4, 1.0)
        self._running = running
        #: the longest stretch seen so far (seconds), for tests and diagnostics
        self.worst = 0.0
        self._started: list[str] = []  # async jobs started during the current step
        self._warned: set[str] = set()  # jobs named in a warning already (once per job)
        #: when the watchdog last ran (``time.monotonic()``), read from other threads
        self.last_tick = time.monotonic()

    def note(self, job_id: str) -> None:
        """An async processor starts running ``job_id`` (it may block the loop this step)."""
        if len(self._started) < 100:
            self._started.append(job_id)

    def blocked(self) -> bool:
        """Whether the loop is blocked now, past the threshold (safe from any thread)."""
        return time.monotonic() - self.last_tick > self.threshold + self._step

    async def run(self) -> None:
        """Watch until cancelled."""
        loop = asyncio.get_running_loop()
        step = self._step
        while True:
            before = loop.time()
            jobs = self._running()  # what ran while the loop was (maybe) blocked
            self._started.clear()
            await asyncio.sleep(step)
            self.last_tick = time.monotonic()
            late = loop.time() - before - step
            if late > self.worst:
                self.worst = late
            if late > self.threshold:
                blocked = sorted(set(jobs).union(self._started), key=jobs_order)
                if not blocked or not self._warned.issuperset(blocked):
                    self._warn(late, blocked)
                self._warned.intersection_update(self._running())  # forget finished jobs
                self._warned.update(blocked)

    def _warn(self, late: float, jobs: list[str]) -> None:
        named = f" (job {', '.join(jobs)})" if jobs else ""
        logger.warning(
            "queue=%s processor %s blocked the event loop for %.1f s%s; nothing else of this "
            "worker ran meanwhile (its locks were renewed from a thread): use a sync def, "
            "asyncio.to_thread or processes=N for blocking code",
            self._queue,
            self._processor,
            late,
            named,
            extra={"queue": self._queue, "job_ids": jobs, "blocked": late, "status": "blocked"},
        )
