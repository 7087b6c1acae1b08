"""Global limits against the real BullMQ 6.7.6 for Node (issue "Global limits on Queue").

Limits set from Python hold Node workers; limits set from Node are what Python's getters read;
and the same setting made from either side leaves byte-identical keys (compared with DUMP).
The Node side runs through ``tests/interop/node/driver.mjs`` (``npm ci --prefix tests``).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from redis.asyncio import Redis

if str(Path(__file__).resolve().parent) not in sys.path:  # works with or without __init__.py
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import nodepeer
from nodepeer import NodePeer

import echomq
from echomq import Queue, QueueMeta, RateLimit, Worker
from helpers import queue_key

pytestmark = pytest.mark.timeout(90)

NODE_FAST: dict[str, Any] = {"drainDelay": 1, "lockDuration": 5000, "stalledInterval": 5000}


@pytest.fixture
async def peer(redis_url: str, queue_name: str) -> AsyncIterator[NodePeer]:
    assert nodepeer.node_available(), "node >= 20 is required for the interop tests"
    async with NodePeer(redis_url, queue_name) as p:
        yield p


@pytest.fixture
async def twin(redis_url: str) -> AsyncIterator[NodePeer]:
    """A second, empty queue driven from Node (for side-by-side comparisons)."""
    async with NodePeer(redis_url, f"q-{uuid4().hex[:12]}") as p:
        yield p


def queue_call(method: str, *args: Any) -> tuple[str, dict[str, Any]]:
    """A driver ``queueMethod`` call, for :meth:`NodePeer.batch`."""
    return ("queueMethod", {"method": method, "args": list(args)})


def starts_of(report: dict[str, Any]) -> list[int]:
    return sorted(int(i["startedAt"]) for i in report["invocations"])


# -- limits set from Python hold Node workers ------------------------------------------------


async def test_python_global_concurrency_holds_a_node_worker(peer: NodePeer, redis: Redis) -> None:
    async with Queue(peer.queue, connection=redis) as q:
        await q.set_global_concurrency(1)
        await q.add_bulk([("j", i) for i in range(4)])
        worker = await peer.start(
            "work",
            concurrency=3,
            count=4,
            behaviour={"*": {"sleepMs": 200}},
            timeoutMs=20000,
            **NODE_FAST,
        )
        await worker.wait_for_event("started")
        assert await q.is_maxed() is True  # the Node worker's one job fills the queue
        report = await worker.result(30)
    starts = starts_of(report)
    assert len(starts) == 4
    # One job at a time: each starts when the previous one (200 ms) finished.
    assert min(b - a for a, b in zip(starts, starts[1:])) >= 190


async def test_python_global_rate_limit_holds_a_node_worker(peer: NodePeer, redis: Redis) -> None:
    async with Queue(peer.queue, connection=redis) as q:
        await q.set_global_rate_limit(1, 0.4)
        await q.add_bulk([("j", i) for i in range(3)])
    report = await peer.work(concurrency=3, count=3, timeoutMs=20000, **NODE_FAST)
    starts = starts_of(report)
    assert len(starts) == 3
    # One job per 400 ms window; each window opens with its job.
    assert min(b - a for a, b in zip(starts, starts[1:])) >= 370


async def test_python_manual_rate_limit_holds_a_node_worker(peer: NodePeer, redis: Redis) -> None:
    async with Queue(peer.queue, connection=redis) as q:
        await q.set_global_rate_limit(100, 1)  # a fetch honours the limiter only with some max
        set_at = time.time()
        await q.rate_limit(2.0)
        await q.add("j", 1)
    report = await peer.work(concurrency=1, count=1, timeoutMs=20000, **NODE_FAST)
    assert starts_of(report)[0] / 1000 - set_at >= 1.9


# -- limits set from Node, read by Python ----------------------------------------------------


async def test_python_reads_what_node_sets(peer: NodePeer, redis: Redis) -> None:
    _, _, node_meta, node_maxed = await peer.batch(
        [
            queue_call("setGlobalConcurrency", 4),
            queue_call("setGlobalRateLimit", 7, 1500),
            queue_call("getMeta"),
            queue_call("isMaxed"),
        ]
    )
    async with Queue(peer.queue, connection=redis) as q:
        assert await q.get_global_concurrency() == 4
        assert await q.get_global_rate_limit() == RateLimit(max=7, duration=1.5)
        meta = await q.get_meta()
        assert meta == QueueMeta(
            paused=False,
            concurrency=4,
            rate_limit_max=7,
            rate_limit_duration=1.5,
            max_len_events=10000,
            version="bullmq:6.7.6",
        )
        assert node_meta == {
            "concurrency": meta.concurrency,
            "max": meta.rate_limit_max,
            "duration": 1500,
            "maxLenEvents": meta.max_len_events,
            "paused": meta.paused,
            "version": meta.version,
        }
        assert node_maxed is False and await q.is_maxed() is False
        await redis.lpush(queue_key(peer.queue, "active"), "a", "b", "c", "d")
        (node_maxed,) = await peer.batch([queue_call("isMaxed")])
        assert node_maxed is True and await q.is_maxed() is True

        limited, _, _ = await peer.batch(
            [
                queue_call("rateLimit", 3000),
                queue_call("removeGlobalConcurrency"),
                queue_call("removeGlobalRateLimit"),
            ]
        )
        assert limited is None
        assert await redis.get(queue_key(peer.queue, "limiter")) == b"9007199254740991"
        before = await q.get_rate_limit_ttl()
        (node_ttl,) = await peer.batch([queue_call("getRateLimitTtl")])
        after = await q.get_rate_limit_ttl()
        assert 2.5 < before <= 3.0
        assert after - 0.01 <= node_ttl / 1000 <= before + 0.01  # the same TTL, read meanwhile
        assert await q.get_global_concurrency() is None
        assert await q.get_global_rate_limit() is None
        assert await q.is_maxed() is False

        # No max and no limiter key: BullMQ answers PTTL's -2 where echomq answers 0.0.
        removed, node_ttl = await peer.batch(
            [queue_call("removeRateLimitKey"), queue_call("getRateLimitTtl")]
        )
        assert (removed, node_ttl) == (1, -2)
        assert await q.get_rate_limit_ttl() == 0.0


async def test_counts_per_priority_match_node(peer: NodePeer, redis: Redis) -> None:
    await peer.add_many(
        [
            {"name": "a", "data": 1},
            {"name": "b", "data": 2, "opts": {"priority": 3}},
            {"name": "c", "data": 3, "opts": {"priority": 3}},
            {"name": "d", "data": 4, "opts": {"priority": 9}},
            {"name": "e", "data": 5, "opts": {"lifo": True}},
        ]
    )
    priorities = [9, 0, 3, 4, 3]
    (node_counts,) = await peer.batch([queue_call("getCountsPerPriority", priorities)])
    counts = await echomq.get_counts_per_priority(peer.queue, priorities, connection=redis)
    assert counts == {9: 1, 0: 2, 3: 2, 4: 0}
    assert node_counts == {str(p): n for p, n in counts.items()}


# -- the same setting from either side leaves the same bytes ---------------------------------


async def _dumps(r: Redis, queue: str) -> tuple[bytes | None, bytes | None]:
    return await r.dump(queue_key(queue, "meta")), await r.dump(queue_key(queue, "limiter"))


async def test_python_writes_what_node_writes(peer: NodePeer, twin: NodePeer, redis: Redis) -> None:
    # Both queues first get the fields a BullMQ Queue object writes (getVersion waits for them).
    await peer.batch([queue_call("getVersion")])
    await twin.batch([queue_call("getVersion")])
    async with Queue(peer.queue, connection=redis) as q:
        await twin.batch(
            [queue_call("setGlobalConcurrency", 3), queue_call("setGlobalRateLimit", 10, 2500)]
        )
        await q.set_global_concurrency(3)
        await q.set_global_rate_limit(10, 2.5)
        assert await redis.hgetall(queue_key(peer.queue, "meta")) == {
            b"opts.maxLenEvents": b"10000",
            b"version": b"bullmq:6.7.6",
            b"concurrency": b"3",
            b"max": b"10",
            b"duration": b"2500",
        }
        assert await _dumps(redis, peer.queue) == await _dumps(redis, twin.queue)

        await twin.batch([queue_call("rateLimit", 1200)])
        await q.rate_limit(1.2)
        assert await _dumps(redis, peer.queue) == await _dumps(redis, twin.queue)
        py_pttl = await redis.pttl(queue_key(peer.queue, "limiter"))
        node_pttl = await redis.pttl(queue_key(twin.queue, "limiter"))
        assert 1000 < py_pttl <= 1200 and 0 < node_pttl <= 1200

        await twin.batch([queue_call("removeGlobalConcurrency")])
        await q.remove_global_concurrency()
        assert await _dumps(redis, peer.queue) == await _dumps(redis, twin.queue)

        await twin.batch([queue_call("removeGlobalRateLimit"), queue_call("removeRateLimitKey")])
        await q.remove_global_rate_limit()
        await q.remove_rate_limit_key()
        meta, limiter = await _dumps(redis, peer.queue)
        assert (meta, limiter) == await _dumps(redis, twin.queue)
        assert limiter is None
    assert await redis.hgetall(queue_key(peer.queue, "meta")) == {
        b"opts.maxLenEvents": b"10000",
        b"version": b"bullmq:6.7.6",
    }


async def test_a_freed_global_slot_wakes_an_idle_node_worker(peer: NodePeer, redis: Redis) -> None:
    """echomq's freed-slot marker (docs/protocol/differences.md#freed-slot-marker), seen by
    BullMQ for Node with its default 5 s drain delay: a job that waited for the queue's only
    global slot, held by a job finished by hand (a finish that takes no job), starts on the
    idle Node worker within a fraction of the drain delay, where BullMQ alone wakes nobody."""
    async with Queue(peer.queue, connection=redis) as q:
        await q.set_global_concurrency(1)
        held = await q.add("held", 0)
        by_hand = Worker(peer.queue, None, connection=redis)
        try:
            taken = await by_hand.get_next_job("by-hand", block=False)
            assert taken is not None and taken.id == held.id
            worker = await peer.start(
                "work", concurrency=2, count=1, timeoutMs=20000, lockDuration=5000
            )
            await worker.wait_for_event("ready")
            waiting = await q.add("waiting", 1)  # the queue is maxed: no marker, no start
            await asyncio.sleep(1.0)  # the Node worker is idle on its 5 s blocking wait
            assert str(await q.get_state(waiting.id)) == "waiting"
            freed = time.time()
            await taken.move_to_completed("done", "by-hand")
            report = await worker.result(30)
        finally:
            await by_hand.close()
    started = starts_of(report)
    assert len(started) == 1
    assert started[0] / 1000 - freed < 1.0, "the Node worker slept out its drain delay"
