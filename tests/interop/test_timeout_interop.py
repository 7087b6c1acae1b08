"""The ``timeout`` job option against the real BullMQ 6.7.6 for Node.

echomq stores it in the job's opts as ``emqTimeout`` (milliseconds), a key BullMQ does not
know: a Node worker passes it through untouched and does not enforce it, so a job that runs
longer than its timeout on a Node worker completes normally.
"""

from __future__ import annotations

import json
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

pytestmark = pytest.mark.timeout(90)

NODE_FAST: dict[str, Any] = {"drainDelay": 1, "lockDuration": 1000, "stalledInterval": 300}


@pytest.fixture
async def peer(redis_url: str, queue_name: str) -> AsyncIterator[NodePeer]:
    assert nodepeer.node_available(), "node >= 20 is required for the interop tests"
    async with NodePeer(redis_url, queue_name) as p:
        yield p


async def test_a_job_with_a_timeout_completes_normally_on_a_node_worker(
    redis: Redis, peer: NodePeer
) -> None:
    job = await echomq.add(peer.queue, "slow", {"n": 1}, timeout=0.2, connection=redis)
    report = await peer.work(
        count=1, behaviour={"*": {"sleepMs": 600, "return": "node-done"}}, **NODE_FAST
    )
    assert [i["id"] for i in report["invocations"]] == [job.id]
    got = await peer.get_job(job.id)
    assert got is not None and got["state"] == "completed"
    j = got["json"]
    assert (j["returnvalue"], j["attemptsMade"], j.get("failedReason")) == ("node-done", 1, None)
    assert j["finishedOn"] - j["processedOn"] >= 600  # ran past the timeout, unenforced
    stored = json.loads(await redis.hget(f"bull:{peer.queue}:{job.id}", "opts") or "{}")
    assert stored["emqTimeout"] == 200  # kept as written
