"""The worker survives its connections being killed, the server restarting, and script errors.

Connection and restart tests run against private servers (``fresh_server``), so ``CLIENT
KILL`` touches nothing but the worker under test. Each test checks that the trouble was
logged and that jobs added afterwards still complete.
"""

from __future__ import annotations

import asyncio
import base64
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import pytest_asyncio
from redis.asyncio import Redis

import echomq
from echomq import Job, Worker
from echomq.embedded import RedisServer
from helpers import queue_key, wait_for

pytestmark = pytest.mark.timeout(60)

WORKER = "res"
FAST: dict[str, Any] = {"lock_duration": 1.0, "stalled_interval": 0.5}


def blocking_name(queue: str) -> str:
    return f"bull:{base64.b64encode(queue.encode()).decode()}:w:{WORKER}"


@pytest_asyncio.fixture
async def server(fresh_server: Callable[..., RedisServer]) -> RedisServer:
    # fsync on every write, so a SIGKILLed server loses nothing that was acknowledged
    return fresh_server(extra_args=["--appendfsync", "always"])


@pytest_asyncio.fixture
async def tester(server: RedisServer) -> AsyncIterator[Redis]:
    """The test's own client, named so it is never mistaken for the worker's connections."""
    client = Redis.from_url(server.url, client_name="tester")
    try:
        yield client
    finally:
        await client.aclose()


class Recorder:
    """An async processor that records runs and can hold jobs until released."""

    def __init__(self) -> None:
        self.runs: list[str] = []
        self.gate = asyncio.Event()
        self.gate.set()
        self.started = asyncio.Event()

    async def __call__(self, job: Job) -> str:
        self.runs.append(job.id)
        self.started.set()
        await self.gate.wait()
        return f"done-{job.id}"


async def clients(r: Redis) -> list[dict[str, Any]]:
    return [c for c in await r.client_list() if c["name"] != "tester"]


async def blocking_client(r: Redis, queue: str) -> dict[str, Any] | None:
    named = [c for c in await clients(r) if c["name"] == blocking_name(queue)]
    assert len(named) <= 1, named
    return named[0] if named else None


async def blocked_in_bzpopmin(r: Redis, queue: str) -> dict[str, Any] | None:
    client = await blocking_client(r, queue)
    return client if client is not None and client["cmd"] == "bzpopmin" else None


async def command_clients(r: Redis) -> list[dict[str, Any]]:
    return [c for c in await clients(r) if c["name"] == ""]


async def completed(r: Redis, queue: str, n: int) -> None:
    await wait_for(lambda: _zcard_is(r, queue_key(queue, "completed"), n), timeout=15)


async def _zcard_is(r: Redis, name: str, n: int) -> bool:
    return bool(await r.zcard(name) == n)


async def assert_completed_once(r: Redis, queue: str, ids: list[str]) -> None:
    members = sorted(m.decode() for m in await r.zrange(queue_key(queue, "completed"), 0, -1))
    assert members == sorted(ids)
    events = [
        f[b"jobId"].decode()
        for _, f in await r.xrange(queue_key(queue, "events"))
        if f[b"event"] == b"completed"
    ]
    assert sorted(events) == sorted(ids), "exactly one completed event per job"
    assert await r.llen(queue_key(queue, "active")) == 0
    assert await r.llen(queue_key(queue, "wait")) == 0
    for job_id in ids:
        assert await r.hget(queue_key(queue, job_id), "returnvalue") == f'"done-{job_id}"'.encode()


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name.startswith("echomq") and r.levelno >= logging.WARNING
    ]


# -- CLIENT KILL -------------------------------------------------------------------------------


async def test_killed_blocking_connection_while_idle(
    server: RedisServer, tester: Redis, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="echomq")
    rec = Recorder()
    async with Worker(queue_name, rec, connection=server.url, name=WORKER, drain_delay=10, **FAST):
        victim = await wait_for(lambda: blocked_in_bzpopmin(tester, queue_name), timeout=5)
        assert await tester.client_kill_filter(_id=victim["id"]) == 1

        async def back() -> bool:
            client = await blocking_client(tester, queue_name)
            return client is not None and client["id"] != victim["id"]

        await wait_for(back, timeout=5, message="the blocking connection did not come back")
        job = await echomq.add(queue_name, "after", {}, connection=tester)
        await completed(tester, queue_name, 1)
        names = [w["rawname"] for w in await echomq.get_workers(queue_name, connection=tester)]
        assert names == [blocking_name(queue_name)]
    await assert_completed_once(tester, queue_name, [job.id])
    assert any("Connection" in m or "closed" in m for m in warnings_of(caplog)), (
        f"the lost blocking connection was not logged; warnings: {warnings_of(caplog)}"
    )


async def test_killed_command_connection_while_idle(
    server: RedisServer, tester: Redis, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="echomq")
    rec = Recorder()
    async with Worker(queue_name, rec, connection=server.url, name=WORKER, drain_delay=10, **FAST):
        await wait_for(lambda: blocked_in_bzpopmin(tester, queue_name), timeout=5)
        await wait_for(lambda: command_clients(tester), timeout=5)
        victims = await command_clients(tester)
        for victim in victims:
            await tester.client_kill_filter(_id=victim["id"])
        jobs = await echomq.add_bulk(
            queue_name, [("after", {}) for _ in range(3)], connection=tester
        )
        await completed(tester, queue_name, 3)
        now = {c["id"] for c in await command_clients(tester)}
        assert now and not now & {v["id"] for v in victims}, "a new command connection is used"
    await assert_completed_once(tester, queue_name, [j.id for j in jobs])
    assert any("Connection" in m or "closed" in m for m in warnings_of(caplog)), (
        f"the lost command connection was not logged; warnings: {warnings_of(caplog)}"
    )


async def test_killed_connections_while_busy(
    server: RedisServer, tester: Redis, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="echomq")
    rec = Recorder()
    rec.gate.clear()
    busy = await echomq.add(queue_name, "busy", {}, connection=tester)
    async with Worker(
        queue_name, rec, connection=server.url, name=WORKER, drain_delay=10, concurrency=2, **FAST
    ):
        await asyncio.wait_for(rec.started.wait(), 5)
        await wait_for(lambda: blocked_in_bzpopmin(tester, queue_name), timeout=5)
        killed = 0
        for victim in await clients(tester):  # both the blocking and the command connections
            killed += await tester.client_kill_filter(_id=victim["id"])
        assert killed >= 2
        rec.gate.set()  # the running job now finishes over a dead connection
        more = await echomq.add_bulk(
            queue_name, [("more", {}) for _ in range(4)], connection=tester
        )
        await completed(tester, queue_name, 5)
        await wait_for(lambda: blocked_in_bzpopmin(tester, queue_name), timeout=5)
    await assert_completed_once(tester, queue_name, [busy.id, *(j.id for j in more)])
    assert sorted(rec.runs) == sorted([busy.id, *(j.id for j in more)])
    assert warnings_of(caplog), "killing the worker's connections was not logged"


async def test_a_busy_worker_stays_listed_after_its_blocking_connection_is_killed(
    server: RedisServer, tester: Redis, queue_name: str
) -> None:
    """The named blocking connection is reopened at once, not when the worker next idles, so
    getWorkers keeps listing a worker that is busy for a long time."""
    rec = Recorder()
    rec.gate.clear()
    busy = await echomq.add(queue_name, "busy", {}, connection=tester)
    async with Worker(queue_name, rec, connection=server.url, name=WORKER, **FAST):
        await asyncio.wait_for(rec.started.wait(), 5)  # concurrency 1: no more waits on the marker
        victim = await blocking_client(tester, queue_name)
        assert victim is not None
        assert await tester.client_kill_filter(_id=victim["id"]) == 1

        async def listed_again() -> bool:
            names = [w["rawname"] for w in await echomq.get_workers(queue_name, connection=tester)]
            now = await blocking_client(tester, queue_name)
            return (
                names == [blocking_name(queue_name)]
                and now is not None
                and (now["id"] != victim["id"])
            )

        await wait_for(listed_again, timeout=5, message="the busy worker was not listed again")
        assert await tester.zcard(f"bull:{queue_name}:completed") == 0, "still busy"
        rec.gate.set()
        await completed(tester, queue_name, 1)
    await assert_completed_once(tester, queue_name, [busy.id])


# -- server restart ----------------------------------------------------------------------------


async def test_server_restart_while_idle(
    server: RedisServer, tester: Redis, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="echomq")
    rec = Recorder()
    first = await echomq.add(queue_name, "before", {}, connection=tester)
    async with Worker(queue_name, rec, connection=server.url, name=WORKER, drain_delay=1, **FAST):
        await completed(tester, queue_name, 1)
        await wait_for(lambda: blocked_in_bzpopmin(tester, queue_name), timeout=5)
        await asyncio.to_thread(server.restart)
        await tester.connection_pool.disconnect()  # the test's own connection died too
        await wait_for(lambda: blocking_client(tester, queue_name), timeout=10)
        jobs = await echomq.add_bulk(
            queue_name, [("after", {}) for _ in range(5)], connection=tester
        )
        await completed(tester, queue_name, 6)
    await assert_completed_once(tester, queue_name, [first.id, *(j.id for j in jobs)])
    assert warnings_of(caplog), "the restart was not logged"


@pytest.mark.parametrize("how", ["restart", "crash"])
async def test_server_restart_while_jobs_flow(
    how: str,
    server: RedisServer,
    tester: Redis,
    queue_name: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="echomq")
    n = 30

    async def slowish(job: Job) -> str:
        await asyncio.sleep(0.05)
        return f"done-{job.id}"

    jobs = await echomq.add_bulk(queue_name, [("flow", {}) for _ in range(n)], connection=tester)
    ids = [j.id for j in jobs]
    async with Worker(
        queue_name,
        slowish,
        connection=server.url,
        name=WORKER,
        drain_delay=1,
        concurrency=3,
        **FAST,
    ):
        await wait_for(
            lambda: _zcard_at_least(tester, queue_key(queue_name, "completed"), 5), timeout=10
        )
        if how == "restart":
            await asyncio.to_thread(server.restart)
        else:
            await asyncio.to_thread(server.kill)
            await asyncio.sleep(0.3)  # the server stays down a while, with jobs running
            await asyncio.to_thread(server.start)
        await tester.connection_pool.disconnect()  # the test's own connection died too
        await wait_for(lambda: _zcard_is(tester, queue_key(queue_name, "completed"), n), timeout=20)
    await assert_completed_once(tester, queue_name, ids)
    assert await tester.zcard(queue_key(queue_name, "failed")) == 0
    assert warnings_of(caplog), f"the server {how} was not logged"


async def _zcard_at_least(r: Redis, name: str, n: int) -> bool:
    return bool(await r.zcard(name) >= n)


# -- script errors -----------------------------------------------------------------------------


async def test_wrongtype_job_key_before_fetch_is_logged_and_skipped(
    redis: Redis, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="echomq")
    jobs = await echomq.add_bulk(queue_name, [("j", {}) for _ in range(3)], connection=redis)
    bad = jobs[1].id
    await redis.delete(queue_key(queue_name, bad))
    await redis.set(queue_key(queue_name, bad), "planted")  # WRONGTYPE for every hash command
    rec = Recorder()
    async with Worker(queue_name, rec, connection=redis, drain_delay=0.2, **FAST):
        await wait_for(lambda: _zcard_is(redis, queue_key(queue_name, "completed"), 2), timeout=10)
        later = await echomq.add(queue_name, "later", {}, connection=redis)
        await wait_for(lambda: _zcard_is(redis, queue_key(queue_name, "completed"), 3), timeout=10)
    good = [jobs[0].id, jobs[2].id, later.id]
    completed = await redis.zrange(queue_key(queue_name, "completed"), 0, -1)
    assert sorted(m.decode() for m in completed) == sorted(good)
    assert bad not in rec.runs
    assert any("WRONGTYPE" in m for m in warnings_of(caplog)), warnings_of(caplog)


async def test_wrongtype_job_key_while_running_does_not_wedge_the_worker(
    redis: Redis, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="echomq")
    victim = await echomq.add(queue_name, "victim", {}, connection=redis)
    rec = Recorder()
    rec.gate.clear()
    async with Worker(queue_name, rec, connection=redis, drain_delay=0.2, **FAST):
        await asyncio.wait_for(rec.started.wait(), 5)
        # the job hash is replaced while the processor runs: recording its outcome must fail
        await redis.delete(queue_key(queue_name, victim.id))
        await redis.set(queue_key(queue_name, victim.id), "planted")
        rec.gate.set()
        await wait_for(lambda: any("WRONGTYPE" in m for m in warnings_of(caplog)), timeout=5)
        others = await echomq.add_bulk(queue_name, [("o", {}) for _ in range(3)], connection=redis)
        await wait_for(
            lambda: _zcard_is(redis, queue_key(queue_name, "completed"), 3),
            timeout=8,
            message=f"jobs added after the script error never completed; runs={rec.runs}",
        )
    completed = await redis.zrange(queue_key(queue_name, "completed"), 0, -1)
    assert sorted(m.decode() for m in completed) == sorted(j.id for j in others)


async def test_script_error_before_any_write_does_not_wedge_the_worker(
    redis: Redis, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="echomq")
    victim = await echomq.add(queue_name, "victim", {}, connection=redis)
    rec = Recorder()
    rec.gate.clear()
    async with Worker(queue_name, rec, connection=redis, drain_delay=0.2, **FAST):
        await asyncio.wait_for(rec.started.wait(), 5)
        # completing checks <job>:dependencies before it writes anything: WRONGTYPE every time
        await redis.set(queue_key(queue_name, f"{victim.id}:dependencies"), "planted")
        rec.gate.set()
        await wait_for(lambda: any("WRONGTYPE" in m for m in warnings_of(caplog)), timeout=5)
        await echomq.add_bulk(queue_name, [("o", {}) for _ in range(3)], connection=redis)
        await wait_for(
            lambda: _zcard_is(redis, queue_key(queue_name, "completed"), 3),
            timeout=8,
            message=f"jobs added after the script error never completed; runs={rec.runs}",
        )


async def test_no_false_not_recorded_warning_after_a_fetch_script_error(
    redis: Redis, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="echomq")
    jobs = await echomq.add_bulk(queue_name, [("j", {}) for _ in range(3)], connection=redis)
    await redis.delete(queue_key(queue_name, jobs[1].id))
    await redis.set(queue_key(queue_name, jobs[1].id), "planted")
    async with Worker(queue_name, Recorder(), connection=redis, drain_delay=0.2, **FAST):
        await wait_for(lambda: _zcard_is(redis, queue_key(queue_name, "completed"), 2), timeout=10)
    assert await redis.zscore(queue_key(queue_name, "completed"), jobs[0].id) is not None
    false_alarms = [m for m in warnings_of(caplog) if "not recorded" in m]
    assert false_alarms == []
