"""The producer: adds jobs with custom ids and records every acknowledged add.

An add is *acknowledged* when ``echomq.add`` returned: from then on the job must never be lost.
An add that raised (connection refused, OOM, BUSY, LOADING, a lost reply...) is retried with
the same custom id, so an add that was applied although its reply was lost is not doubled
(the retry finds the id taken and returns that job). Ids are ``j00000``, ``j00001``, ...
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any

import redis.asyncio

import echomq
from echomq import ValidationError
from echomq._redis import topology

#: Events kept in the stream, far above what any scenario emits, so the audit sees them all.
MAX_LEN_EVENTS = 1_000_000


def job_id(index: int) -> str:
    return f"j{index:05d}"


class Producer:
    """Adds jobs to one queue through its own connection (named ``faults-producer``, or
    unnamed with ``client_name=None``, where the server has no CLIENT command)."""

    def __init__(
        self,
        url: str,
        queue: str,
        *,
        retry_for: float = 30.0,
        client_name: str | None = "faults-producer",
    ) -> None:
        self.queue = queue
        self.client: Any
        if "+" in url.partition("://")[0]:  # redis+sentinel:// or redis+cluster://
            # A short reply timeout: an add that hangs on a frozen primary is given up and
            # tried again (same id), rather than acknowledged by a primary already replaced.
            self.client = echomq.client_from_url(url, client_name=client_name, socket_timeout=0.5)
        else:
            self.client = redis.asyncio.Redis.from_url(
                url, client_name=client_name, socket_timeout=10
            )
        self.acked: dict[str, float] = {}  # job id -> time.time() of the acknowledgement
        self.refusals = 0  # adds that raised and were retried
        self._retry_for = retry_for
        self._tasks: list[asyncio.Task[None]] = []
        self._next = 0

    async def prepare(self) -> None:
        """Keep every event in the stream (the audit counts outcomes there)."""
        await self.client.hset(f"bull:{self.queue}:meta", "opts.maxLenEvents", MAX_LEN_EVENTS)

    def new_id(self) -> str:
        self._next += 1
        return job_id(self._next - 1)

    async def add(self, data: dict[str, Any], *, name: str = "job", **options: Any) -> str:
        """Add one job, retrying until Redis acknowledges it; returns its id."""
        jid = options.pop("job_id", None) or self.new_id()
        deadline = time.monotonic() + self._retry_for
        delay = 0.05
        while True:
            try:
                await echomq.add(
                    self.queue, name, data, connection=self.client, job_id=jid, **options
                )
            except ValidationError:
                raise
            except Exception:  # any Redis trouble: retry with the same id
                self.refusals += 1
                if time.monotonic() > deadline:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.5)
                continue
            self.acked[jid] = time.time()
            return jid

    async def add_many(
        self,
        n: int,
        data: Callable[[int], dict[str, Any]],
        options: Callable[[int], dict[str, Any]] | None = None,
    ) -> list[str]:
        """Add ``n`` jobs one after another; ``data(i)`` gives the i-th job's data and
        ``options(i)`` its options (e.g. ``group``), if given."""
        return [await self.add(data(i), **(options(i) if options else {})) for i in range(n)]

    def stream(
        self,
        n: int,
        data: Callable[[int], dict[str, Any]],
        every: float,
        options: Callable[[int], dict[str, Any]] | None = None,
    ) -> None:
        """Add ``n`` jobs in the background, one every ``every`` seconds (see :meth:`join`);
        ``options`` as in :meth:`add_many`."""

        async def run() -> None:
            for i in range(n):
                await self.add(data(i), **(options(i) if options else {}))
                await asyncio.sleep(every)

        self._tasks.append(asyncio.create_task(run(), name="faults-producer"))

    async def join(self, timeout: float = 60.0) -> None:
        """Wait for background adds to end (their errors propagate)."""
        tasks, self._tasks = self._tasks, []
        if tasks:
            await asyncio.wait_for(asyncio.gather(*tasks), timeout)

    async def aclose(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await topology.aclose(self.client)  # a Sentinel client's Sentinel connections too
