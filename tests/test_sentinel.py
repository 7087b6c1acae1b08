"""Redis Sentinel: a Sentinel-managed client works everywhere a client is accepted.

The suite starts one primary, one replica and three Sentinels (``tests/_sentinel.py``). Every
extra connection a component opens (the worker's blocking fetch and control channel, the events
reader) must resolve the master through the same Sentinels, and errors must name the service
and the Sentinels, never a default address.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from redis.asyncio import Redis
from redis.asyncio.sentinel import Sentinel

import echomq
from _sentinel import SERVICE, SentinelSetup
from echomq import Job, Queue, QueueEvents, RedisUnavailableError, Worker
from helpers import wait_for


@asynccontextmanager
async def master_client(setup: SentinelSetup, service: str = SERVICE) -> AsyncIterator[Redis]:
    """``Sentinel(...).master_for(service)``, as a user writes it; closed with its Sentinels."""
    sentinel = Sentinel(setup.sentinels, socket_timeout=2)
    client = sentinel.master_for(service)
    try:
        yield client
    finally:
        await client.aclose()
        for connection in sentinel.sentinels:
            await connection.aclose()


async def test_producer_worker_and_events_on_a_sentinel_client(
    redis_sentinel: SentinelSetup, queue_name: str
) -> None:
    done: list[str] = []

    async def double(job: Job) -> int:
        done.append(job.id)
        return int(job.data["x"]) * 2

    async with (
        master_client(redis_sentinel) as client,
        QueueEvents(queue_name, connection=client) as events,
    ):
        jobs = [
            await echomq.add(queue_name, "double", {"x": i}, connection=client) for i in range(5)
        ]
        async with Worker(queue_name, double, connection=client, concurrency=3):
            for job in jobs:
                assert await job.wait_until_finished(events, timeout=10) == job.data["x"] * 2
        assert sorted(done, key=int) == [job.id for job in jobs]
        async with Queue(queue_name, connection=client) as queue:
            assert (await queue.get_job_counts("completed"))["completed"] == 5
            # the worker's blocking connection was listed while it ran; none is left
            assert await queue.get_workers() == []


async def test_a_worker_on_a_sentinel_client_is_listed_and_closes_cleanly(
    redis_sentinel: SentinelSetup, queue_name: str
) -> None:
    async def noop(job: Job) -> None:
        return None

    async with (
        master_client(redis_sentinel) as client,
        Queue(queue_name, connection=client) as q,
        Worker(queue_name, noop, connection=client, name="on-sentinel"),
    ):
        await wait_for(lambda: _listed(q), timeout=10)


async def _listed(queue: Queue) -> bool:
    return len(await queue.get_workers()) == 1


async def test_errors_name_the_service_and_the_sentinels(
    redis_sentinel: SentinelSetup, queue_name: str
) -> None:
    async with master_client(redis_sentinel, "no-such-service") as client:
        with pytest.raises(RedisUnavailableError) as raised:
            await asyncio.wait_for(echomq.add(queue_name, "x", {}, connection=client), timeout=30)
    message = str(raised.value)
    assert "service no-such-service via sentinels" in message
    for host, port in redis_sentinel.sentinels:
        assert f"{host}:{port}" in message
    assert "localhost:6379" not in message
