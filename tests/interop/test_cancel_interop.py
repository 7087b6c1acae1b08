"""A cancel request for a job held by a real BullMQ 6.7 worker changes nothing.

Node workers do not listen on echomq's control channel (a pub/sub channel, not a key), so
``Queue.cancel_job`` reaches only echomq workers: with none listening it returns False and
sends nothing; with an idle echomq worker listening, the request is delivered (True) and
ignored, since that worker does not hold the job. Either way the Node worker finishes the job
as if nothing had happened (docs/protocol/control-channel.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import nodepeer
import pytest
from nodepeer import NodePeer
from redis.asyncio import Redis

import echomq
from echomq import Queue, Worker
from helpers import session_of

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
async def peer(redis_url: str, queue_name: str) -> AsyncIterator[NodePeer]:
    assert nodepeer.node_available(), "node >= 20 is required for the interop tests"
    async with NodePeer(redis_url, queue_name) as p:
        yield p


async def test_cancel_of_a_job_held_by_node_changes_nothing(
    peer: NodePeer, redis: Redis, redis_url: str, queue_name: str
) -> None:
    async def never(job: echomq.Job) -> None:
        raise AssertionError("the echomq worker must not get the job")

    node = await peer.start(
        "work", count=2, drainDelay=1, behaviour={"*": {"sleepMs": 1500, "return": "node done"}}
    )
    await node.wait_ready()
    async with Queue(queue_name, connection=redis_url) as queue:
        first = await queue.add("held-by-node", {})
        await node.wait_for_event("started", first.id)
        # No echomq worker listens: nothing is sent.
        assert await queue.cancel_job(first.id, "stop it") is False

        second = await queue.add("held-by-node", {})
        await node.wait_for_event("started", second.id)
        listener = Worker(queue_name, never, connection=redis, drain_delay=0.2)
        async with listener:
            await listener.pause(wait_for_active=False)  # idle, but listening
            await asyncio.wait_for(session_of(listener).control.ready.wait(), 5)
            # Delivered to the echomq worker, which does not hold the job: ignored.
            assert await queue.cancel_job(second.id, "stop it", requeue=True) is True
            report = await node.result(30)
    completed = {
        e["jobId"]: e["returnvalue"] for e in report["events"] if e["event"] == "completed"
    }
    assert completed == {first.id: "node done", second.id: "node done"}
    assert not [e for e in report["events"] if e["event"] == "failed"]
    for job_id in (first.id, second.id):
        h = await redis.hgetall(f"bull:{queue_name}:{job_id}")
        assert h[b"returnvalue"] == b'"node done"' and b"failedReason" not in h
    # The control channel is not a key: nothing of it is stored in Redis.
    assert await redis.keys(f"bull:{queue_name}:echomq*") == []
