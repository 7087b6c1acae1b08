"""Tasks (``@echomq.task``) across runtimes, against the real BullMQ 6.7.6 for Node: a Node
producer enqueues a Python task by its name and an object of arguments, and a Python task's
job is processed by a Node worker, which sees the name and the data object."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

if str(Path(__file__).resolve().parent) not in sys.path:  # works with or without __init__.py
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import nodepeer
from nodepeer import NodePeer

import echomq
from echomq import Worker

pytestmark = pytest.mark.timeout(90)

FAST: dict[str, Any] = {"drain_delay": 0.2}
NODE_FAST: dict[str, Any] = {"drainDelay": 1, "lockDuration": 1000, "stalledInterval": 300}


@pytest.fixture
async def peer(redis_url: str, queue_name: str) -> AsyncIterator[NodePeer]:
    assert nodepeer.node_available(), "node >= 20 is required for the interop tests"
    async with NodePeer(redis_url, queue_name) as p:
        yield p


async def test_a_node_producer_enqueues_a_python_task(peer: NodePeer, redis: Redis) -> None:
    calls: list[tuple[str, int, datetime]] = []

    @echomq.task(queue=peer.queue)
    async def send_welcome(to: str, count: int, at: datetime, name: str = "there") -> str:
        calls.append((to, count, at))
        return f"hello {name} <{to}> x{count}"

    ok = await peer.add(
        "send_welcome",
        {"to": "ada@example.com", "count": "2", "at": "2026-01-02T03:04:05.000Z", "name": "Ada"},
    )
    bad = await peer.add("send_welcome", {"to": "bob@example.com"}, {"attempts": 4})
    bound = send_welcome.using(connection=redis)
    async with Worker.for_tasks([send_welcome], connection=redis, **FAST):
        assert await bound.aresult(ok, timeout=10) == "hello Ada <ada@example.com> x2"
        with pytest.raises(echomq.JobFailedError, match="missing argument 'count'"):
            await bound.aresult(bad, timeout=10)
    assert calls == [("ada@example.com", 2, datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc))]
    got = await peer.get_job(bad)
    assert got is not None and got["state"] == "failed"
    assert got["json"]["attemptsMade"] == 1  # no retry, though 4 attempts were allowed


async def test_a_python_task_is_processed_by_a_node_worker(peer: NodePeer, redis: Redis) -> None:
    @echomq.task(queue=peer.queue, attempts=3, priority=2)
    async def resize(path: str, sizes: list[int], crop: bool = False) -> dict[str, Any]:
        raise AssertionError("the Node worker runs it")

    job = await resize.using(connection=redis).aenqueue("cat.png", [64, 128])
    report = await peer.work(count=1, behaviour={"*": {"echo": True}}, **NODE_FAST)
    [seen] = report["invocations"]
    assert seen["id"] == job.id and seen["name"] == "resize"
    assert seen["data"] == {"path": "cat.png", "sizes": [64, 128], "crop": False}
    assert seen["opts"]["attempts"] == 3 and seen["opts"]["priority"] == 2
    value = await resize.using(connection=redis).aresult(job, timeout=10)
    assert value == {"path": "cat.png", "sizes": [64, 128], "crop": False}
