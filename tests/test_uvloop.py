"""echomq on uvloop's event loop (``echomq[uvloop]``, ``echomq worker --uvloop``).

uvloop's transports are not registered as ``asyncio.Transport``, so the connections echomq
opens itself (a Queue's and a Worker's channels, the events reader) are run on it for real.
"""

from __future__ import annotations

import asyncio
import uuid

import uvloop

import echomq


def test_queue_worker_and_events_run_on_uvloop(redis_url: str) -> None:
    queue = f"uv-{uuid.uuid4().hex[:8]}"

    async def main() -> object:
        assert "uvloop" in type(asyncio.get_running_loop()).__module__
        async with echomq.Queue(queue, connection=redis_url) as q:
            job = await q.add("double", {"n": 21})

            async def double(job: echomq.Job) -> int:
                return int(job.data["n"]) * 2

            async with (
                echomq.QueueEvents(queue, connection=redis_url) as events,
                echomq.Worker(queue, double, connection=redis_url),
            ):
                return await job.wait_until_finished(events, timeout=10)

    assert uvloop.run(main()) == 42
