"""The worker registry (docs/protocol/workers.md): each echomq worker's heartbeat entry, and
``get_workers()`` reading it, merged with ``CLIENT LIST``.

A running worker is listed with its fields and the jobs it holds; a clean close removes it; a
SIGKILLed worker drops out once its entry's time to live passes; a restricted server without
``CLIENT`` still lists the registry; on a Cluster every registry key shares the queue's slot.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio
from redis.crc import key_slot

import echomq
import echomq.sync
from _cli import base_env, cli
from _cluster import cluster_url
from _procs import WorkerProcs
from echomq import InvalidJobIdError, InvalidOptionError, Job, Queue, Worker, WorkerOptions
from echomq._keys import queue_keys
from echomq._ops import now_ms
from echomq._ops import workers as reg
from echomq._redis.run import run_op
from echomq.embedded import RedisServer
from helpers import busy_for, wait_for

FAST: dict[str, Any] = {"drain_delay": 0.2, "heartbeat_interval": 0.2}


def _echomq(workers: list[echomq.WorkerInfo]) -> list[echomq.WorkerInfo]:
    return [w for w in workers if w["kind"] == "echomq"]


async def test_a_running_worker_is_listed_with_the_job_it_runs(
    redis: redis.asyncio.Redis, redis_url: str, queue_name: str
) -> None:
    release = asyncio.Event()
    started = asyncio.Event()

    async def process(job: Job) -> str:
        started.set()
        await release.wait()
        return "done"

    before = datetime.now(timezone.utc)
    async with (
        Queue(queue_name, connection=redis) as queue,
        Worker(queue_name, process, connection=redis, concurrency=3, name="w-one", **FAST) as w,
    ):
        job = await queue.add("slow")
        await asyncio.wait_for(started.wait(), 10)

        async def listed_with_job() -> list[echomq.WorkerInfo]:
            found = _echomq(await queue.get_workers())
            return found if found and found[0]["jobs"] == [job.id] else []

        [info] = await wait_for(listed_with_job, timeout=10)
        assert info["id"] == w.id
        assert info["worker_name"] == "w-one"
        assert info["name"] == queue_name
        assert info["rawname"] == queue_keys(queue_name).worker_client_name("w-one")
        assert info["host"] == socket.gethostname()
        assert info["pid"] == os.getpid()
        assert info["concurrency"] == 3
        assert info["version"] == echomq.__version__
        assert before.replace(microsecond=0) <= info["started_at"] <= info["heartbeat_at"]
        # its own connection is accounted for: listed once, not again as a connection
        assert len(await queue.get_workers()) == 1
        assert await queue.get_workers_count() == 1
        # the module-level and sync getters read the same
        [same] = await echomq.get_workers(queue_name, connection=redis)
        assert same["id"] == w.id
        sync_list = await asyncio.to_thread(
            echomq.sync.get_workers, queue_name, connection=redis_url
        )
        assert [x["id"] for x in sync_list] == [w.id]
        release.set()
        await wait_for(
            lambda: _jobs_of(queue, w.id), timeout=10, message="the job leaves the entry"
        )
        w.concurrency = 5
        await wait_for(lambda: _concurrency_of(queue, w.id, 5), timeout=10)
    # a clean close removes the entry and the index
    assert await queue_get_workers(redis, queue_name) == []
    keys = queue_keys(queue_name)
    assert await redis.exists(keys.workers, keys.worker(w.id)) == 0


async def _jobs_of(queue: Queue, worker_id: str) -> bool:
    return any(w.get("id") == worker_id and w["jobs"] == [] for w in await queue.get_workers())


async def _concurrency_of(queue: Queue, worker_id: str, n: int) -> bool:
    return any(
        w.get("id") == worker_id and w.get("concurrency") == n for w in await queue.get_workers()
    )


async def queue_get_workers(r: redis.asyncio.Redis, name: str) -> list[echomq.WorkerInfo]:
    return await echomq.get_workers(name, connection=r)


async def test_the_entry_expires_and_the_index_with_it(
    redis: redis.asyncio.Redis, queue_name: str
) -> None:
    """What a killed worker leaves: an entry and an index that expire on their own."""
    keys = queue_keys(queue_name)
    entry = reg.WorkerEntry(
        id="dead",
        name=None,
        host="h",
        pid=1,
        concurrency=1,
        started_ms=reg_now(),
        jobs=["a", "b"],
        version="0",
        client_name=keys.worker_client_name(),
    )
    assert await run_op(redis, reg.heartbeat(keys, entry, 300, reg_now())) == 1
    [info] = _echomq(await queue_get_workers(redis, queue_name))
    assert info["id"] == "dead" and info["jobs"] == ["a", "b"]
    assert 0 < await redis.pttl(keys.workers) <= 300
    await asyncio.sleep(0.4)
    assert await redis.exists(keys.workers, keys.worker("dead")) == 0
    assert await queue_get_workers(redis, queue_name) == []


def reg_now() -> int:
    return now_ms()


def _entry(keys: Any, worker_id: str) -> reg.WorkerEntry:
    return reg.WorkerEntry(
        id=worker_id,
        name=None,
        host="h",
        pid=1,
        concurrency=1,
        started_ms=reg_now(),
        jobs=[],
        version="0",
        client_name=keys.worker_client_name(),
    )


async def test_heartbeat_script_keeps_the_index_as_long_as_its_last_entry(
    redis: redis.asyncio.Redis, queue_name: str
) -> None:
    keys = queue_keys(queue_name)
    now = reg_now()
    await redis.zadd(keys.workers, {"ghost": now - 1})  # expired: the next call drops it
    assert await run_op(redis, reg.heartbeat(keys, _entry(keys, "short"), 300, now)) == 1
    assert await run_op(redis, reg.heartbeat(keys, _entry(keys, "long"), 5000, now)) == 2
    assert await redis.zscore(keys.workers, "ghost") is None
    assert 4000 < await redis.pttl(keys.workers) <= 5000
    assert 0 < await redis.pttl(keys.worker("short")) <= 300
    assert await run_op(redis, reg.unregister(keys, "long", reg_now())) == 1
    assert await redis.exists(keys.worker("long")) == 0
    assert 0 < await redis.pttl(keys.workers) <= 300
    assert await run_op(redis, reg.unregister(keys, "short", reg_now())) == 0
    assert await redis.exists(keys.workers, keys.worker("short")) == 0
    # an unreadable entry is skipped by readers
    await run_op(redis, reg.heartbeat(keys, _entry(keys, "bad"), 5000, reg_now()))
    await redis.set(keys.worker("bad"), "not json", px=5000)
    assert await queue_get_workers(redis, queue_name) == []


async def test_a_killed_worker_disappears_after_its_ttl(
    redis: redis.asyncio.Redis, redis_url: str, queue_name: str, tmp_path: Path
) -> None:
    with WorkerProcs(tmp_path, redis_url) as procs:
        proc = procs.start(queue_name, name="doomed", extra=("--heartbeat-interval", "0.3"))

        async def registered() -> list[echomq.WorkerInfo]:
            return [
                w for w in await queue_get_workers(redis, queue_name) if w.get("pid") == proc.pid
            ]

        [info] = await wait_for(registered, timeout=20)
        assert info["worker_name"] == "doomed" and info["kind"] == "echomq"
        # the CLI lists it too
        env = base_env()
        listed = await asyncio.to_thread(
            cli, "queue", queue_name, "workers", "--json", "--url", redis_url, env=env
        )
        assert listed.returncode == 0, listed.stderr
        [shown] = json.loads(listed.stdout)
        assert (shown["id"], shown["pid"], shown["kind"]) == (info["id"], proc.pid, "echomq")
        text = await asyncio.to_thread(
            cli, "queue", queue_name, "workers", "--url", redis_url, env=env
        )
        assert text.returncode == 0 and "doomed" in text.stdout and str(proc.pid) in text.stdout
        proc.kill()
        # gone within the entry's time to live (3 intervals), without any clean-up
        await wait_for(
            lambda: _gone(redis, queue_name), timeout=5, message="the killed worker's entry"
        )
        keys = queue_keys(queue_name)
        await wait_for(lambda: _no_keys(redis, keys.workers), timeout=5)


async def _gone(r: redis.asyncio.Redis, name: str) -> bool:
    return await queue_get_workers(r, name) == []


async def _no_keys(r: redis.asyncio.Redis, key: str) -> bool:
    return await r.exists(key) == 0


async def test_heartbeat_off(redis: redis.asyncio.Redis, queue_name: str) -> None:
    async def process(job: Job) -> None:
        return None

    options = {**FAST, "heartbeat_interval": None}
    async with Worker(queue_name, process, connection=redis, **options):

        async def listed() -> list[echomq.WorkerInfo]:
            return await queue_get_workers(redis, queue_name)

        # only its connection, recognised as redis-py's where the server says so (Redis >= 7.2)
        [info] = await wait_for(listed, timeout=10)
        assert "addr" in info and info["name"] == queue_name
        assert await redis.exists(queue_keys(queue_name).workers) == 0
    with pytest.raises(InvalidOptionError, match="heartbeat_interval"):
        WorkerOptions(heartbeat_interval=0)


async def test_workers_is_a_reserved_job_id(redis: redis.asyncio.Redis, queue_name: str) -> None:
    with pytest.raises(InvalidJobIdError, match="name of a queue key"):
        await echomq.add(queue_name, "x", {}, job_id="workers", connection=redis)
    assert await redis.exists(queue_keys(queue_name).job("workers")) == 0


def test_merge_lists_unexplained_connections_by_kind() -> None:
    raw = queue_keys("q").worker_client_name()
    registered = reg.WorkerInfo(kind="echomq", id="w1", name="q", rawname=raw, jobs=[])
    py = {"id": "7", "name": "q", "rawname": raw, "lib-name": "redis-py"}
    node = {"id": "8", "name": "q", "rawname": raw, "lib-name": ""}
    other = {"id": "9", "name": "q", "rawname": raw}
    merged = reg.merge_workers([registered], [node, py, other])
    assert [w["id"] for w in merged] == ["w1", "8", "9"]
    assert [w["kind"] for w in merged] == ["echomq", "bullmq", "bullmq"]
    assert reg.merge_workers([registered], None) == [registered]
    assert [w["kind"] for w in reg.merge_workers([], [py])] == ["echomq"]


# -- restricted servers -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def no_client_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A server with CLIENT (and CONFIG) renamed away, as managed services run it."""
    server = RedisServer(
        data_dir=tmp_path_factory.mktemp("redis-no-client"),
        appendonly=False,
        extra_args=("--rename-command", "CLIENT", "", "--rename-command", "CONFIG", ""),
    )
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


async def test_without_client_list_the_registry_is_listed(
    no_client_server: str, queue_name: str
) -> None:
    started = asyncio.Event()
    release = asyncio.Event()

    async def process(job: Job) -> None:
        started.set()
        await release.wait()

    async with (
        Queue(queue_name, connection=no_client_server) as queue,
        Worker(queue_name, process, connection=no_client_server, **FAST) as w,
    ):
        job = await queue.add("x")
        await asyncio.wait_for(started.wait(), 10)

        async def with_job() -> list[echomq.WorkerInfo]:
            found = await queue.get_workers()
            return found if found and found[0]["jobs"] == [job.id] else []

        [info] = await wait_for(with_job, timeout=10)
        assert info["id"] == w.id and info["kind"] == "echomq"
        assert await queue.get_workers_count() == 1
        release.set()
    async with Queue(queue_name, connection=no_client_server) as queue:
        assert await queue.get_workers() == []


# -- Redis Cluster ------------------------------------------------------------------------------


async def test_cluster_registry_keys_share_the_queue_slot(
    redis_cluster: list[str], queue_name: str
) -> None:
    name = "{" + queue_name + "}"
    keys = queue_keys(name)
    assert key_slot(keys.workers.encode()) == key_slot(keys.wait.encode())
    assert key_slot(keys.worker("abc").encode()) == key_slot(keys.wait.encode())
    url = cluster_url(redis_cluster)
    started = asyncio.Event()
    release = asyncio.Event()

    async def process(job: Job) -> None:
        started.set()
        await release.wait()

    async with (
        Queue(name, connection=url) as queue,
        Worker(name, process, connection=url, **FAST) as w,
    ):
        job = await queue.add("x")
        await asyncio.wait_for(started.wait(), 10)

        async def with_job() -> list[echomq.WorkerInfo]:
            found = _echomq(await queue.get_workers())
            return found if found and found[0]["jobs"] == [job.id] else []

        [info] = await wait_for(with_job, timeout=10)
        assert info["id"] == w.id
        release.set()
    async with Queue(name, connection=url) as queue:
        assert _echomq(await queue.get_workers()) == []


# -- outages ------------------------------------------------------------------------------------


async def test_heartbeats_ride_out_a_busy_redis(
    fresh_server: Callable[..., RedisServer], queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A Redis busy for longer than the entry's time to live: the heartbeat warns, the worker
    keeps running, and the entry comes back once Redis answers."""
    caplog.set_level(logging.WARNING, logger="echomq.worker")
    server = fresh_server(appendonly=False, extra_args=["--lua-time-limit", "50"])
    url = server.url
    done: list[str] = []

    async def process(job: Job) -> None:
        done.append(job.id)

    async with (
        Queue(queue_name, connection=url) as queue,
        Worker(queue_name, process, connection=url, **FAST) as w,
    ):
        await wait_for(lambda: _listed(queue, w.id), timeout=10)
        busy = busy_for(url, 1.0)  # > 3 intervals of 0.2 s: the entry expires meanwhile
        await asyncio.to_thread(busy.join, 10)
        await wait_for(lambda: _listed(queue, w.id), timeout=10, message="the entry is back")
        assert w.is_running
        job = await queue.add("after")
        await wait_for(lambda: job.id in done, timeout=10)
    failures = [r for r in caplog.records if "registry heartbeat failed" in r.getMessage()]
    assert failures and all(r.levelno == logging.WARNING for r in failures)


async def _listed(queue: Queue, worker_id: str) -> bool:
    return any(w.get("id") == worker_id for w in await queue.get_workers())
