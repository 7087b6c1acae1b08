"""The worker registry (docs/protocol/workers.md) with BullMQ 6.7.6 for Node on the same queue.

A Node worker never reads or writes the registry keys: it keeps processing the queue's jobs
beside an echomq worker that keeps its entry, ``get_workers()`` lists it from ``CLIENT LIST`` as
``kind`` ``"bullmq"`` after the echomq worker's registry entry, and Node's own ``getWorkers``
still sees both.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

if str(Path(__file__).resolve().parent) not in sys.path:  # works with or without __init__.py
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import nodepeer
from nodepeer import NodePeer

import echomq
from echomq import Job, Worker
from echomq._keys import queue_keys
from helpers import queue_key, wait_for

pytestmark = pytest.mark.timeout(90)

FAST: dict[str, Any] = {"drain_delay": 0.2, "heartbeat_interval": 0.2}
NODE_FAST: dict[str, Any] = {"drainDelay": 1, "lockDuration": 1000, "stalledInterval": 300}


@pytest.fixture
async def peer(redis_url: str, queue_name: str) -> AsyncIterator[NodePeer]:
    assert nodepeer.node_available(), "node >= 20 is required for the interop tests"
    async with NodePeer(redis_url, queue_name) as p:
        yield p


async def test_node_worker_is_listed_as_bullmq_and_keeps_working(
    peer: NodePeer, redis: Redis
) -> None:
    n = 60
    node = await peer.start(
        "work",
        concurrency=2,
        name="nodew",
        behaviour={"*": {"echo": True, "sleepMs": 5}},
        timeoutMs=60000,
        **NODE_FAST,
    )
    await node.wait_ready()
    python_runs: list[str] = []

    async def process(job: Job) -> Any:
        python_runs.append(job.id)
        return job.data

    async with Worker(peer.queue, process, connection=redis, name="pyw", **FAST) as w:

        async def both_listed() -> list[echomq.WorkerInfo]:
            found = await echomq.get_workers(peer.queue, connection=redis)
            kinds = sorted((x["kind"], x.get("id") == w.id) for x in found)
            return found if kinds == [("bullmq", False), ("echomq", True)] else []

        listed = await wait_for(both_listed, timeout=15)
        mine = next(x for x in listed if x["kind"] == "echomq")
        theirs = next(x for x in listed if x["kind"] == "bullmq")
        assert listed[0] is mine, "registry entries come first"
        assert mine["worker_name"] == "pyw" and mine["rawname"].endswith(":w:pyw")
        assert theirs["rawname"] == queue_keys(peer.queue).worker_client_name("nodew")
        assert theirs["name"] == peer.queue and "addr" in theirs and "jobs" not in theirs
        node_listed = await peer.call("getWorkers")
        suffix = ":w:"
        names = sorted(x["rawname"].rsplit(suffix, 1)[-1] for x in node_listed)
        assert names == ["nodew", "pyw"]

        ids = await peer.add_many([{"name": "n", "data": {"i": i}} for i in range(n)], bulk=True)

        async def all_done() -> bool:
            return await redis.zcard(queue_key(peer.queue, "completed")) == n

        await wait_for(all_done, timeout=40)
        report = await node.stop()
    node_runs = [i["id"] for i in report["invocations"]]
    assert node_runs, "the Node worker took jobs beside the registered echomq worker"
    assert sorted(node_runs + python_runs) == sorted(ids)
    assert await redis.zcard(queue_key(peer.queue, "failed")) == 0
    # the echomq worker closed: its entry is gone, Node never wrote one
    assert await redis.exists(queue_keys(peer.queue).workers) == 0
