"""A producer and a worker riding through a failover, with a ledger kept outside Redis.

:func:`ride_through` adds jobs ``{"i": n}`` with a ``Queue`` while a ``Worker`` runs them and
counts every run by ``i`` here, in the test's memory; it calls ``kill()`` after the first
adds, keeps adding (an add refused while there is no primary is tried again), and returns once
a job added after the kill has run and every acknowledged add has run. The caller asserts on
the returned :class:`FailoverRun`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from echomq import Job, Queue, RedisUnavailableError, Worker
from helpers import wait_for

BEFORE = 30  # adds before the kill
DEADLINE = 30.0  # seconds for a job added after the kill to run


@dataclass
class FailoverRun:
    """What the ledger saw: every acknowledged ``i``, runs per ``i``, and how long after the
    kill the first job added after it started."""

    acknowledged: list[int] = field(default_factory=list)
    runs: dict[int, int] = field(default_factory=dict)
    resumed: float = 0.0

    @property
    def lost(self) -> list[int]:
        """Acknowledged adds that never ran."""
        return sorted(set(self.acknowledged) - set(self.runs))

    @property
    def extra_runs(self) -> int:
        """Runs beyond the first of each job."""
        return sum(n - 1 for n in self.runs.values())


async def ride_through(
    url: str, queue: str, kill: Callable[[], None], concurrency: int = 5
) -> FailoverRun:
    """Add, kill, keep adding until a job added after the kill ran; see the module docstring."""
    run = FailoverRun()
    first_run: dict[int, float] = {}

    async def record(job: Job) -> None:
        i = int(job.data["i"])
        run.runs[i] = run.runs.get(i, 0) + 1
        first_run.setdefault(i, time.monotonic())

    async with (
        Queue(queue, connection=url) as producer,
        Worker(queue, record, connection=url, concurrency=concurrency),
    ):
        for i in range(BEFORE):
            await producer.add("before", {"i": i})
            run.acknowledged.append(i)
            await asyncio.sleep(0.01)
        kill()
        killed = time.monotonic()
        after: int | None = None
        i = BEFORE
        while after is None or after not in first_run:
            assert time.monotonic() - killed < DEADLINE, "no job ran on the new primary"
            try:
                await producer.add("after", {"i": i})
            except RedisUnavailableError:  # no primary yet: the producer tries again
                await asyncio.sleep(0.02)
                continue
            run.acknowledged.append(i)
            after = i if after is None else after
            i += 1
            await asyncio.sleep(0.02)
        run.resumed = first_run[after] - killed
        await wait_for(lambda: set(run.acknowledged) <= set(run.runs), timeout=20)
    return run
