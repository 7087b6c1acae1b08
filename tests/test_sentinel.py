"""Redis Sentinel: a Sentinel-managed client works everywhere a client is accepted.

The suite starts one primary, one replica and three Sentinels (``tests/_sentinel.py``). Every
extra connection a component opens (the worker's blocking fetch and control channel, the events
reader) must resolve the master through the same Sentinels, and errors must name the service
and the Sentinels, never a default address.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from redis.asyncio import Redis
from redis.asyncio.sentinel import Sentinel

import echomq
import echomq.sync
from _failover import ride_through
from _sentinel import DOWN_AFTER_MS, SERVICE, SentinelSetup
from echomq import Job, Queue, QueueEvents, RedisUnavailableError, ValidationError, Worker
from echomq._redis.fail_fast import redact_url
from echomq._redis.topology import parse
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


async def test_the_sentinel_url_form_everywhere_a_url_is_taken(
    redis_sentinel: SentinelSetup, queue_name: str
) -> None:
    """``redis+sentinel://host:port,.../service``: each component opens (and closes) its own
    Sentinel-managed clients, as for any URL."""
    url = redis_sentinel.url()
    done: list[str] = []

    async def record(job: Job) -> str:
        done.append(job.id)
        return "ok"

    added = await echomq.add(queue_name, "first", {}, connection=url)
    async with (
        QueueEvents(queue_name, connection=url) as events,
        Queue(queue_name, connection=url) as queue,
        Worker(queue_name, record, connection=url),
    ):
        second = await queue.add("second", {})
        assert await second.wait_until_finished(events, timeout=10) == "ok"
        assert await added.wait_until_finished(events, timeout=10) == "ok"
    sync_job = echomq.sync.add(queue_name, "sync", {}, connection=url)
    assert echomq.sync.get_state(queue_name, sync_job.id, connection=url) == "waiting"
    assert sorted(done, key=int) == [added.id, second.id]


async def test_a_client_from_a_sentinel_url_names_the_service_in_its_errors(
    redis_sentinel: SentinelSetup, queue_name: str
) -> None:
    url = redis_sentinel.url("no-such-service")
    client = echomq.client_from_url(url)
    try:
        with pytest.raises(RedisUnavailableError, match="service no-such-service via sentinels"):
            await echomq.add(queue_name, "x", {}, connection=client)
    finally:
        await client.aclose()
        for sentinel in client.connection_pool.sentinel_manager.sentinels:
            await sentinel.aclose()


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("redis+sentinel://127.0.0.1:26379", "the service name is missing"),
        ("redis+sentinel://127.0.0.1/mymaster", "'127.0.0.1' is not host:port"),
        ("redis+sentinel://h:1/mymaster/x", "is not /service_name[/db]"),
        ("redis+sentinel://h:1/mymaster?password=x", "unknown option(s) password"),
        ("redis+cluster://h:1/0", "a cluster has no database number"),
        ("redis+cluster://h:99999", "'h:99999' is not host:port"),
        ("sentinel://h:1/mymaster", "must start with redis://"),
    ],
)
def test_a_malformed_topology_url_is_refused_before_anything_connects(url: str, why: str) -> None:
    with pytest.raises(ValidationError) as raised:
        echomq.client_from_url(url)
    assert why in str(raised.value)


def test_topology_urls_are_parsed_and_their_passwords_masked() -> None:
    url = "rediss+sentinel://app:s3cret@10.0.0.1:26379,10.0.0.2:26380/orders/2?sentinel_password=pw"
    t = parse(url)
    assert (t.kind, t.tls, t.service, t.db) == ("sentinel", True, "orders", 2)
    assert t.nodes == (("10.0.0.1", 26379), ("10.0.0.2", 26380))
    assert (t.username, t.password, t.sentinel_password) == ("app", "s3cret", "pw")
    masked = redact_url(url)
    assert "s3cret" not in masked and "pw" not in masked.split("?")[1]
    assert masked.startswith("rediss+sentinel://app:***@10.0.0.1:26379,10.0.0.2:26380/orders/2")
    c = parse("redis+cluster://node-1:7000,node-2:7001")
    assert (c.kind, c.tls, c.nodes) == ("cluster", False, (("node-1", 7000), ("node-2", 7001)))


async def test_a_worker_and_a_producer_ride_through_a_sentinel_failover(
    tmp_path: Path, queue_name: str
) -> None:
    """The primary is SIGKILLed under load; the Sentinels promote the replica. Every add the
    producer saw acknowledged runs (the ledger is kept here, not in Redis), none runs twice
    beyond the jobs whose lock the failover cut, and the worker runs new jobs on the new
    primary soon after the failure is detected (down-after 1 s)."""
    setup = SentinelSetup(tmp_path / "sentinel")
    setup.start()

    def kill_primary() -> None:
        assert setup.primary is not None and setup.primary.pid is not None
        os.kill(setup.primary.pid, signal.SIGKILL)

    try:
        run = await ride_through(setup.url(), queue_name, kill_primary, concurrency=5)
    finally:
        setup.stop()
    assert run.lost == []  # nothing acknowledged was lost
    assert run.extra_runs <= 5  # only jobs the failover cut
    resumed = run.resumed
    assert resumed < DOWN_AFTER_MS / 1000 + 3, f"the worker resumed {resumed:.2f} s after the kill"


async def test_a_worker_and_a_producer_ride_through_a_frozen_sentinel_primary(
    tmp_path: Path, queue_name: str
) -> None:
    """The primary is frozen (SIGSTOP) under load: the connections to it neither fail nor
    answer. When the Sentinels announce the new master (+switch-master), echomq drops them
    (_sentinel_watch), so the worker runs new jobs on the new primary about as soon as after a
    kill, instead of waiting for the frozen one to come back and be demoted."""
    setup = SentinelSetup(tmp_path / "sentinel")
    setup.start()
    assert setup.primary is not None and setup.primary.pid is not None
    frozen = setup.primary.pid
    try:
        run = await ride_through(
            setup.url(), queue_name, lambda: os.kill(frozen, signal.SIGSTOP), concurrency=5
        )
    finally:
        os.kill(frozen, signal.SIGCONT)
        setup.stop()
    assert run.lost == []
    assert run.extra_runs <= 5
    resumed = run.resumed
    assert resumed < DOWN_AFTER_MS / 1000 + 3, f"the worker resumed {resumed:.2f} s after the stop"
