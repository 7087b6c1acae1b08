"""The server checks: an evicting ``maxmemory-policy`` and clock skew are logged, once.

Real servers of their own (``fresh_server``) with the settings under test; the client clock is
injected where a skew is needed, since the server's cannot be moved. The per-process state of
``echomq._redis.server_reports`` is cleared around each test, as a fresh port may repeat an address.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Callable, Iterator

import pytest
import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

import echomq
import echomq.sync
from echomq._redis import server_checks as checks
from echomq._redis import server_checks_sync as sync_checks
from echomq._redis import server_reports as reports
from echomq._redis.connection import AsyncConn
from echomq._redis.connection_sync import SyncConn
from echomq._redis.server_checks import ServerWatch
from echomq._redis.server_reports import ClockReading
from echomq.embedded import RedisServer
from helpers import close_sync_cluster, wait_for

ServerFactory = Callable[..., RedisServer]
LRU = ("--maxmemory-policy", "allkeys-lru")


@pytest.fixture
def closed_port_url() -> str:
    """A URL of a loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"redis://127.0.0.1:{port}"


@pytest.fixture(autouse=True)
def _forget_servers() -> Iterator[None]:
    reports.forget_all()
    yield
    reports.forget_all()


def _server_records(caplog: pytest.LogCaptureFixture, level: int = logging.WARNING) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == "echomq.server" and r.levelno == level
    ]


def _start(fresh_server: ServerFactory, *args: str) -> RedisServer:
    return fresh_server(appendonly=False, extra_args=list(args))


# -- eviction policy ----------------------------------------------------------------------------


async def test_an_evicting_policy_is_reported_once_per_process(
    fresh_server: ServerFactory, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = _start(fresh_server, *LRU)
    caplog.set_level(logging.DEBUG, logger="echomq.server")
    await echomq.add(queue_name, "a", connection=server.url)
    await echomq.add(queue_name, "b", connection=server.url)
    async with echomq.Queue(queue_name, connection=server.url) as queue:
        await queue.add("c")
    client = redis.asyncio.Redis.from_url(server.url)
    try:
        await echomq.add(queue_name, "d", connection=client)
    finally:
        await client.aclose()
    await asyncio.to_thread(echomq.sync.add, queue_name, "e", connection=server.url)

    warnings = _server_records(caplog)
    assert len(warnings) == 1, warnings
    assert f"127.0.0.1:{server.port}" in warnings[0]
    assert "allkeys-lru" in warnings[0]
    assert "evict job hashes and queue keys" in warnings[0]
    assert "jobs can be lost" in warnings[0]
    assert "maxmemory-policy noeviction" in warnings[0]


def test_sync_queue_reports_an_evicting_policy(
    fresh_server: ServerFactory, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = _start(fresh_server, "--maxmemory-policy", "volatile-ttl")
    caplog.set_level(logging.WARNING, logger="echomq.server")
    with echomq.sync.Queue(queue_name, connection=server.url) as queue:
        assert queue.count() == 0  # a getter is a first use too
        queue.add("a")
    warnings = _server_records(caplog)
    assert len(warnings) == 1 and "volatile-ttl" in warnings[0], warnings


async def test_a_worker_reports_the_policy_at_start(
    fresh_server: ServerFactory, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = _start(fresh_server, *LRU)
    caplog.set_level(logging.WARNING, logger="echomq.server")

    async def process(job: echomq.Job) -> None:
        return None

    async with echomq.Worker(queue_name, process, connection=server.url):
        await wait_for(lambda: _server_records(caplog), message="no policy warning")
    await echomq.add(queue_name, "a", connection=server.url)  # already reported
    warnings = _server_records(caplog)
    assert len(warnings) == 1 and "allkeys-lru" in warnings[0], warnings


async def test_noeviction_says_nothing(
    fresh_server: ServerFactory, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = _start(fresh_server, "--maxmemory-policy", "noeviction")
    caplog.set_level(logging.DEBUG, logger="echomq.server")
    await echomq.add(queue_name, "a", connection=server.url)
    assert reports.is_checked(f"127.0.0.1:{server.port}")
    assert _server_records(caplog) == []


async def test_config_renamed_is_said_once_at_info(
    fresh_server: ServerFactory, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = _start(fresh_server, *LRU, "--rename-command", "CONFIG", "")
    caplog.set_level(logging.DEBUG, logger="echomq.server")
    job = await echomq.add(queue_name, "a", connection=server.url)
    assert job.id == "1"
    await echomq.add(queue_name, "b", connection=server.url)
    assert _server_records(caplog) == []
    (info,) = _server_records(caplog, logging.INFO)
    assert f"Redis at 127.0.0.1:{server.port} refused CONFIG GET (unknown command" in info
    assert "the maxmemory-policy check did not run" in info


async def test_config_refused_by_acl_is_said_once_at_info(
    fresh_server: ServerFactory, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = _start(fresh_server, *LRU)
    admin = redis.asyncio.Redis.from_url(server.url)
    try:
        await admin.execute_command(
            "ACL", "SETUSER", "producer", "on", ">pw", "~*", "&*", "+@all", "-config"
        )
    finally:
        await admin.aclose()
    caplog.set_level(logging.INFO, logger="echomq.server")
    url = server.url.replace("redis://", "redis://producer:pw@")
    await echomq.add(queue_name, "a", connection=url)
    await echomq.add(queue_name, "b", connection=url)
    assert _server_records(caplog) == []
    (info,) = _server_records(caplog, logging.INFO)
    assert "refused CONFIG GET (this user has no permissions to run the 'config|get'" in info


async def test_time_renamed_is_said_once_and_the_policy_still_checked(
    fresh_server: ServerFactory, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    server = _start(fresh_server, *LRU, "--rename-command", "TIME", "")
    caplog.set_level(logging.INFO, logger="echomq.server")
    await echomq.add(queue_name, "a", connection=server.url)
    await asyncio.to_thread(echomq.sync.add, queue_name, "b", connection=server.url)
    (warning,) = _server_records(caplog)
    assert "allkeys-lru" in warning
    (info,) = _server_records(caplog, logging.INFO)
    assert "refused TIME (unknown command" in info and "clock-skew check did not run" in info


async def test_the_checks_run_once_then_cost_no_command(
    fresh_server: ServerFactory, queue_name: str
) -> None:
    server = _start(fresh_server)
    client = redis.asyncio.Redis.from_url(server.url)
    sync_client = redis.Redis.from_url(server.url)
    try:
        for _ in range(3):
            await echomq.add(queue_name, "a", connection=client)
            await echomq.add(queue_name, "b", connection=server.url)
            echomq.sync.add(queue_name, "c", connection=sync_client)
        async with echomq.Queue(queue_name, connection=client) as queue:
            assert queue._conn.first_use is None  # nothing left to do per call
            await queue.add("d")
        stats = await client.info("commandstats")
    finally:
        await client.aclose()
        sync_client.close()

    def calls(command: str) -> int:
        return sum(v["calls"] for k, v in stats.items() if k.startswith(f"cmdstat_{command}"))

    assert calls("time") == 1
    assert calls("config") == 1


# -- clock skew ------------------------------------------------------------------------------


def test_the_skew_is_taken_at_the_middle_of_the_round_trip() -> None:
    reading = ClockReading.of(sent=100.0, server=105.5, received=101.0)
    assert reading.skew == 5.0
    assert reading.uncertainty == 0.5


def test_time_replies_of_every_shape() -> None:
    assert reports.parse_time([b"1700000000", b"250000"]) == 1700000000.25
    assert reports.parse_time(("1700000000", "500000")) == 1700000000.5
    assert reports.parse_time((1700000000, 0)) == 1700000000.0


async def test_skew_against_the_real_server_clock(redis: redis.asyncio.Redis) -> None:
    ahead = await checks.read_clock(redis, None, now=lambda: time.time() + 60)
    assert abs(ahead.skew + 60) < 0.1, ahead
    assert 0 <= ahead.uncertainty < 0.1
    exact = await checks.read_clock(redis, None)
    assert abs(exact.skew) < 0.1, exact


def test_sync_skew_against_the_real_server_clock(sync_redis: redis.Redis) -> None:
    behind = sync_checks.read_clock(sync_redis, now=lambda: time.time() - 30)
    assert abs(behind.skew - 30) < 0.1, behind


def test_when_a_skew_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="echomq.server")
    address = "clock-test:1"

    def report(skew: float, at: float, uncertainty: float = 0.01) -> list[str]:
        caplog.clear()
        reports.report_clock(address, ClockReading(skew, uncertainty), at)
        return [r.getMessage() for r in caplog.records if r.name == "echomq.server"]

    assert report(0.5, 0) == []  # within tolerance
    first = report(-5.0, 10)
    assert len(first) == 1 and "5.0 s ahead of" in first[0] and "NTP" in first[0]
    assert report(-5.6, 20) == []  # the same skew
    assert report(-4.5, 30) == []
    moved = report(-7.0, 40)
    assert len(moved) == 1 and "7.0 s ahead of" in moved[0]
    assert report(-7.2, 40 + reports.REWARN_AFTER - 1) == []
    assert len(report(-7.2, 40 + reports.REWARN_AFTER + 1)) == 1  # still there an hour later
    assert report(-30.0, 5000, uncertainty=0.8) == []  # too imprecise to say
    back = report(0.1, 5000)
    assert len(back) == 1 and "back within" in back[0]
    behind = report(3.0, 5001)
    assert len(behind) == 1 and "3.0 s behind" in behind[0]


async def test_a_producer_reports_its_skew(
    fresh_server: ServerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    server = _start(fresh_server)
    caplog.set_level(logging.WARNING, logger="echomq.server")
    conn = AsyncConn(server.url)
    try:
        await checks.check_producer(conn, now=lambda: time.time() + 60)
        await checks.check_producer(conn, now=lambda: time.time() + 120)  # checked already
    finally:
        await conn.aclose()
    warnings = _server_records(caplog)
    assert len(warnings) == 1, warnings
    assert "ahead of the clock of Redis" in warnings[0]
    assert f"127.0.0.1:{server.port}" in warnings[0]


def test_a_sync_producer_reports_its_skew(
    fresh_server: ServerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    server = _start(fresh_server)
    caplog.set_level(logging.WARNING, logger="echomq.server")
    conn = SyncConn(server.url)
    try:
        sync_checks.check_producer(conn, now=lambda: time.time() - 10)
    finally:
        conn.close()
    warnings = _server_records(caplog)
    assert len(warnings) == 1 and "10.0 s behind" in warnings[0], warnings


async def test_a_worker_rechecks_the_clock(
    fresh_server: ServerFactory, caplog: pytest.LogCaptureFixture
) -> None:
    server = _start(fresh_server, *LRU)
    caplog.set_level(logging.WARNING, logger="echomq.server")
    offset = 60.0
    conn = AsyncConn(server.url, pipelined=True)
    watch = ServerWatch(conn, now=lambda: time.time() + offset)
    try:
        await watch.check()
        await watch.check()  # same skew: nothing new
        assert len(_server_records(caplog)) == 2  # the policy, the skew
        offset = 65.0
        await watch.check()
    finally:
        await conn.aclose()
    warnings = _server_records(caplog)
    assert len(warnings) == 3, warnings
    assert "65.0 s ahead of" in warnings[2] or "64.9 s ahead of" in warnings[2]


async def test_a_failing_check_never_raises(closed_port_url: str) -> None:
    conn = AsyncConn(closed_port_url, connect_timeout=0.2)
    try:
        await checks.check_producer(conn)
        await ServerWatch(conn).check()
    finally:
        await conn.aclose()
    sync_conn = SyncConn(closed_port_url, connect_timeout=0.2)
    try:
        sync_checks.check_producer(sync_conn)
    finally:
        sync_conn.close()


def test_policy_replies_of_every_shape() -> None:
    assert reports.parse_policy([b"maxmemory-policy", b"allkeys-lru"]) == "allkeys-lru"
    assert reports.parse_policy({"maxmemory-policy": "noeviction"}) == "noeviction"
    per_node = {"a:1": {"maxmemory-policy": "noeviction"}, "b:2": {"maxmemory-policy": "lfu"}}
    assert reports.parse_policy(per_node) == "lfu"
    assert reports.parse_policy([]) is None
    assert reports.parse_policy({}) is None


async def test_checks_on_a_cluster(redis_cluster: list[str]) -> None:
    client = redis.asyncio.cluster.RedisCluster.from_url(redis_cluster[0])
    try:
        assert await checks.read_policy(client, None) == "noeviction"
        reading = await checks.read_clock(client, None, now=lambda: time.time() + 5)
        assert abs(reading.skew + 5) < 0.1, reading
    finally:
        await client.aclose()
    sync_client = redis.cluster.RedisCluster.from_url(redis_cluster[0])
    try:
        assert sync_checks.read_policy(sync_client) == "noeviction"
        assert abs(sync_checks.read_clock(sync_client).skew) < 0.1
    finally:
        close_sync_cluster(sync_client)
