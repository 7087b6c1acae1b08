"""Replicated adds: ``wait_replicas`` / ``wait_timeout`` follow an add with Redis ``WAIT``.

Real servers only: a primary with one replica started here (module scope), the suite's
Sentinel setup (``redis_sentinel``), and a 3+3 Redis Cluster started here. A replica that
cannot acknowledge is a real one, stopped with SIGSTOP (and always resumed). What a test checks
on a replica it reads from the replica itself: ``WAIT`` returning means the replica has the
write.
"""

from __future__ import annotations

import math
import os
import signal
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import timedelta
from typing import Any

import pytest
import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster
from redis.asyncio.sentinel import Sentinel
from redis.cluster import RedisCluster as SyncRedisCluster

import echomq
import echomq.sync
from _cli import base_env, cli
from _cluster import ClusterSetup
from _sentinel import SERVICE, SentinelSetup
from echomq import (
    EchoMQError,
    FlowJob,
    FlowProducer,
    InvalidOptionError,
    JobNode,
    Queue,
    ReplicationError,
)
from echomq._keys import queue_keys
from echomq.embedded import RedisServer
from helpers import close_sync_cluster, wait_for

#: Short enough to keep the stopped-replica tests quick, long enough to tell from "at once".
TIMEOUT = 0.3
#: What a call that waits ``TIMEOUT`` may take beyond it on a loaded CI machine.
SLACK = 2.0


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RedisServer, RedisServer]]:
    """A primary and its replica, in sync."""
    base = tmp_path_factory.mktemp("replicated")
    # no 5 s wait before the first (diskless) sync
    primary = RedisServer(data_dir=base / "primary", extra_args=["--repl-diskless-sync-delay", "0"])
    primary.start()
    replica = RedisServer(
        data_dir=base / "replica", extra_args=["--replicaof", "127.0.0.1", str(primary.port)]
    )
    try:
        replica.start()
        wait_synced(replica)
        yield primary, replica
    finally:
        replica.stop()
        primary.stop()


def wait_synced(replica: RedisServer, timeout: float = 15.0) -> None:
    """Until ``replica`` has finished its first sync: before that it acknowledges nothing."""
    client = redis.Redis.from_url(replica.url, decode_responses=True)
    try:
        deadline = time.monotonic() + timeout
        while client.info("replication").get("master_link_status") != "up":
            assert time.monotonic() < deadline, "the replica never synced"
            time.sleep(0.02)
    finally:
        client.close()


@pytest.fixture
def primary(pair: tuple[RedisServer, RedisServer]) -> RedisServer:
    return pair[0]


@pytest.fixture
def replica(pair: tuple[RedisServer, RedisServer]) -> RedisServer:
    return pair[1]


@contextmanager
def stopped(server: RedisServer) -> Iterator[None]:
    """``server`` frozen with SIGSTOP (it acknowledges nothing), resumed on exit."""
    assert server.pid is not None
    os.kill(server.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(server.pid, signal.SIGCONT)


@asynccontextmanager
async def client_of(server: RedisServer) -> AsyncIterator[redis.asyncio.Redis]:
    client = redis.asyncio.Redis.from_url(server.url)
    try:
        yield client
    finally:
        await client.aclose()


@contextmanager
def sync_client_of(server: RedisServer) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(server.url)
    try:
        yield client
    finally:
        client.close()


def on_replica(replica: RedisServer, queue: str, *job_ids: str) -> bool:
    """Whether every job is on the replica, read from the replica (``READONLY`` first: a
    cluster replica redirects reads without it)."""
    keys = queue_keys(queue)
    with sync_client_of(replica) as client:
        if client.info("cluster").get("cluster_enabled"):
            client.execute_command("READONLY")  # type: ignore[no-untyped-call]
        return all(client.exists(keys.job(job_id)) for job_id in job_ids)


# -- a live replica: the add returns, and the replica has it -----------------------------------


async def test_add_waits_for_the_replica_and_the_replica_has_the_job(
    primary: RedisServer, replica: RedisServer, queue_name: str
) -> None:
    async with client_of(primary) as client:
        job = await echomq.add(queue_name, "a", {"n": 1}, connection=client, wait_replicas=1)
        jobs = await echomq.add_bulk(
            queue_name, [("b", 1), ("c", 2)], connection=client, wait_replicas=1
        )
    assert on_replica(replica, queue_name, job.id, *(j.id for j in jobs))


async def test_a_queue_default_applies_and_a_call_overrides_it(
    primary: RedisServer, replica: RedisServer, queue_name: str
) -> None:
    async with (
        client_of(primary) as client,
        Queue(queue_name, connection=client, wait_replicas=1, wait_timeout=TIMEOUT) as queue,
    ):
        assert (queue.wait_replicas, queue.wait_timeout) == (1, TIMEOUT)
        job = await queue.add("a", {})
        bulk = await queue.add_bulk([("b", {}), ("c", {})])
        assert on_replica(replica, queue_name, job.id, *(j.id for j in bulk))
        with stopped(replica):
            started = time.monotonic()
            unwaited = await queue.add("d", {}, wait_replicas=0)  # the call's own setting wins
            await queue.add_bulk([("e", {})], wait_replicas=0)
            assert time.monotonic() - started < TIMEOUT
            with pytest.raises(ReplicationError):
                await queue.add("f", {})  # the default again
        assert await queue.get_job(unwaited.id) is not None


async def test_fewer_replicas_than_asked_for_raise_with_the_count(
    primary: RedisServer, queue_name: str
) -> None:
    """Two replicas asked for, one exists: WAIT answers 1 after the timeout."""
    async with client_of(primary) as client:
        started = time.monotonic()
        with pytest.raises(ReplicationError) as caught:
            await echomq.add(
                queue_name, "a", {}, connection=client, wait_replicas=2, wait_timeout=TIMEOUT
            )
        assert TIMEOUT <= time.monotonic() - started < TIMEOUT + SLACK
    assert (caught.value.wait_replicas, caught.value.acknowledged) == (2, 1)
    assert "only 1 of the 2 replica(s)" in str(caught.value)


async def test_a_timedelta_timeout_and_a_flushed_script_cache(
    primary: RedisServer, replica: RedisServer, queue_name: str
) -> None:
    """NOSCRIPT (a restarted or flushed server) loads the script and the add still waits."""
    async with client_of(primary) as client:
        await client.script_flush()
        job = await echomq.add(
            queue_name, "a", {}, connection=client, wait_replicas=1, wait_timeout=timedelta(1)
        )
        await client.script_flush()
        bulk = await echomq.add_bulk(queue_name, [("b", {})], connection=client, wait_replicas=1)
    assert on_replica(replica, queue_name, job.id, bulk[0].id)


async def test_the_wait_runs_on_the_connection_that_wrote_the_add(
    primary: RedisServer, queue_name: str
) -> None:
    """MONITOR shows the add's EVALSHA (or its MULTI/EXEC) and the WAIT from one client
    address: a WAIT on another connection would have no write to wait for."""
    async with (
        client_of(primary) as client,
        client_of(primary) as watcher,
        Queue(queue_name, connection=client, wait_replicas=1) as queue,
        watcher.monitor() as monitor,
    ):
        await queue.add("a", {})
        await queue.add_bulk([("b", {}), ("c", {})])
        seen: list[tuple[str, str]] = []
        while sum(1 for _, command in seen if command.startswith("WAIT")) < 2:
            entry = await monitor.next_command()
            seen.append((f"{entry['client_address']}:{entry['client_port']}", entry["command"]))
    writes = [
        (address, command.split()[0])
        for address, command in seen
        if command.split()[0] in ("EVALSHA", "MULTI", "EXEC", "WAIT")
    ]
    single, bulk = writes[:2], writes[2:]
    assert [c for _, c in single] == ["EVALSHA", "WAIT"]
    assert [c for _, c in bulk] == ["MULTI", "EVALSHA", "EXEC", "WAIT"]
    assert len({address for address, _ in single}) == 1
    assert len({address for address, _ in bulk}) == 1


# -- a stopped replica: ReplicationError after wait_timeout, holding what was added -----------


async def test_a_stopped_replica_raises_after_the_timeout_and_the_job_exists(
    primary: RedisServer, replica: RedisServer, queue_name: str
) -> None:
    async with client_of(primary) as client, Queue(queue_name, connection=client) as queue:
        with stopped(replica):
            started = time.monotonic()
            with pytest.raises(ReplicationError) as caught:
                await queue.add("a", {"n": 1}, wait_replicas=1, wait_timeout=TIMEOUT)
            elapsed = time.monotonic() - started
        error = caught.value
        assert isinstance(error, EchoMQError)
        assert TIMEOUT <= elapsed < TIMEOUT + SLACK
        assert (error.wait_replicas, error.acknowledged) == (1, 0)
        assert error.jobs == [error.job] and error.result is error.job
        stored = await queue.get_job(error.job.id)
        assert stored is not None and stored.data == {"n": 1}
        assert f"job {error.job.id} of queue {queue_name!r} was added on the primary" in str(error)


async def test_add_bulk_raises_one_error_holding_every_job(
    primary: RedisServer, replica: RedisServer, queue_name: str
) -> None:
    async with client_of(primary) as client, Queue(queue_name, connection=client) as queue:
        with stopped(replica), pytest.raises(ReplicationError) as caught:
            await queue.add_bulk(
                [("a", {"i": i}) for i in range(3)], wait_replicas=1, wait_timeout=TIMEOUT
            )
        error = caught.value
        assert error.job is error.jobs[0] and error.result == error.jobs
        assert [j.data for j in error.jobs] == [{"i": 0}, {"i": 1}, {"i": 2}]
        for job in error.jobs:
            assert await queue.get_job(job.id) is not None


async def test_module_add_with_a_url_detaches_the_jobs_of_its_error(
    primary: RedisServer, replica: RedisServer, queue_name: str
) -> None:
    with stopped(replica), pytest.raises(ReplicationError) as caught:
        await echomq.add(
            queue_name, "a", {}, connection=primary.url, wait_replicas=1, wait_timeout=TIMEOUT
        )
    job = caught.value.job
    assert isinstance(job, echomq.Job)
    with pytest.raises(echomq.ConnectionNotOpenError):
        await job.get_state()
    async with client_of(primary) as client:
        assert await echomq.get_job(queue_name, job.id, connection=client) is not None


async def test_flow_producer_add_waits_and_its_error_holds_the_tree(
    primary: RedisServer, replica: RedisServer, queue_name: str
) -> None:
    def tree() -> FlowJob:
        return FlowJob("root", queue_name, children=[FlowJob("child", queue_name)])

    async with client_of(primary) as client, FlowProducer(connection=client) as producer:
        node = await producer.add(tree(), wait_replicas=1)
        assert on_replica(replica, queue_name, node.job.id, node.children[0].job.id)
        with stopped(replica):
            with pytest.raises(ReplicationError) as caught:
                await producer.add(tree(), wait_replicas=1, wait_timeout=TIMEOUT)
            with pytest.raises(ReplicationError) as bulk:
                await producer.add_bulk([tree(), tree()], wait_replicas=1, wait_timeout=TIMEOUT)
        error = caught.value
        assert isinstance(error.result, JobNode)
        assert error.job is error.result.job is error.jobs[0]
        assert [j.name for j in error.jobs] == ["root", "child"]
        assert isinstance(bulk.value.result, list) and len(bulk.value.result) == 2
        assert len(bulk.value.jobs) == 4
        for job in [*error.jobs, *bulk.value.jobs]:
            assert await echomq.get_job(queue_name, job.id, connection=client) is not None


def test_the_sync_api_waits_and_raises_alike(
    primary: RedisServer, replica: RedisServer, queue_name: str
) -> None:
    with sync_client_of(primary) as client:
        job = echomq.sync.add(queue_name, "a", {}, connection=client, wait_replicas=1)
        with echomq.sync.Queue(queue_name, connection=client, wait_replicas=1) as queue:
            bulk = queue.add_bulk([("b", {}), ("c", {})])
            with echomq.sync.FlowProducer(connection=client) as producer:
                node = producer.add(FlowJob("root", queue_name), wait_replicas=1)
            assert on_replica(replica, queue_name, job.id, node.job.id, *(j.id for j in bulk))
            with stopped(replica):
                with pytest.raises(ReplicationError) as single:
                    queue.add("d", {}, wait_timeout=TIMEOUT)
                with pytest.raises(ReplicationError) as many:
                    echomq.sync.add_bulk(
                        queue_name,
                        [("e", {})],
                        connection=client,
                        wait_replicas=1,
                        wait_timeout=TIMEOUT,
                    )
            assert isinstance(single.value.job, echomq.sync.Job)
            assert queue.get_job(single.value.job.id) is not None
            assert queue.get_job(many.value.job.id) is not None


def test_the_cli_prints_the_id_and_exits_1_when_replicas_do_not_confirm(
    primary: RedisServer, replica: RedisServer, queue_name: str
) -> None:
    url = ["--url", primary.url]
    done = cli("add", queue_name, "a", "--data", "{}", "--wait-replicas", "1", *url, env=base_env())
    assert done.returncode == 0, done.stderr
    assert on_replica(replica, queue_name, done.stdout.strip())
    with stopped(replica):
        short = cli(
            "add", queue_name, "b", "--data", "{}", "--wait-replicas", "1",
            "--wait-timeout", str(TIMEOUT), *url, env=base_env(),
        )  # fmt: skip
    assert short.returncode == 1
    assert "was added on the primary" in short.stderr
    with sync_client_of(primary) as client:
        assert echomq.sync.get_job(queue_name, short.stdout.strip(), connection=client)
    refused = cli("add", queue_name, "c", "--data", "{}", "--wait-replicas", "-1", *url,
                  env=base_env())  # fmt: skip
    assert refused.returncode == 2 and "wait_replicas" in refused.stderr


# -- refused settings write nothing ------------------------------------------------------------

BAD_SETTINGS: list[tuple[dict[str, Any], str]] = [
    ({"wait_replicas": -1}, "wait_replicas must be an int >= 0"),
    ({"wait_replicas": 1.5}, "wait_replicas must be an int >= 0"),
    ({"wait_replicas": True}, "wait_replicas must be an int >= 0"),
    ({"wait_replicas": "1"}, "wait_replicas must be an int >= 0"),
    ({"wait_timeout": 0}, "wait_timeout must be positive"),
    ({"wait_timeout": -1.0}, "wait_timeout must be positive"),
    ({"wait_timeout": math.nan}, "wait_timeout must be finite"),
    ({"wait_timeout": math.inf}, "wait_timeout must be finite"),
    ({"wait_timeout": "1"}, "wait_timeout must be seconds"),
    ({"wait_timeout": True}, "wait_timeout must be seconds"),
    ({"wait_timeout": 86_401}, "wait_timeout must be at most 86400 seconds"),
]


@pytest.mark.parametrize(("settings", "why"), BAD_SETTINGS)
async def test_refused_settings_write_nothing(
    primary: RedisServer, queue_name: str, settings: dict[str, Any], why: str
) -> None:
    async with client_of(primary) as client, FlowProducer(connection=client) as producer:
        attempts = [
            lambda: echomq.add(queue_name, "a", {}, connection=client, **settings),
            lambda: echomq.add_bulk(queue_name, [("a", {})], connection=client, **settings),
            lambda: producer.add(FlowJob("a", queue_name), **settings),
            lambda: producer.add_bulk([FlowJob("a", queue_name)], **settings),
        ]
        for attempt in attempts:
            with pytest.raises(InvalidOptionError, match=why):
                await attempt()
        with pytest.raises(InvalidOptionError, match=why):
            Queue(queue_name, connection=client, **settings)
        async with Queue(queue_name, connection=client) as queue:
            with pytest.raises(InvalidOptionError, match=why):
                await queue.add("a", {}, **settings)
            with pytest.raises(InvalidOptionError, match=why):
                await queue.add_bulk([("a", {})], **settings)
        with sync_client_of(primary) as sync_client, pytest.raises(InvalidOptionError, match=why):
            echomq.sync.add(queue_name, "a", {}, connection=sync_client, **settings)
        assert await client.keys(f"bull:{queue_name}:*") == []


# -- Sentinel: WAIT goes to the master the Sentinels name --------------------------------------


async def test_a_sentinel_client_waits_on_the_master(
    redis_sentinel: SentinelSetup, queue_name: str
) -> None:
    assert redis_sentinel.replica is not None
    wait_synced(redis_sentinel.replica)  # the setup waits for the Sentinels, not for this
    sentinel = Sentinel(redis_sentinel.sentinels, socket_timeout=2)
    client = sentinel.master_for(SERVICE)
    try:
        job = await echomq.add(queue_name, "a", {}, connection=client, wait_replicas=1)
        async with Queue(queue_name, connection=client, wait_replicas=1) as queue:
            bulk = await queue.add_bulk([("b", {})])
    finally:
        await client.aclose()
        for connection in sentinel.sentinels:
            await connection.aclose()
    assert on_replica(redis_sentinel.replica, queue_name, job.id, bulk[0].id)


# -- Redis Cluster: WAIT goes to the primary of the queue's slot -------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterSetup]:
    """Three primaries with a replica each (the default node timeout: a replica stopped for
    a second is not failed over)."""
    setup = ClusterSetup(tmp_path_factory.mktemp("replicated-cluster"), masters=3, replicas=1)
    setup.start()
    try:
        yield setup
    finally:
        setup.stop()


def replica_of(setup: ClusterSetup, primary: RedisServer) -> RedisServer:
    for node in setup.nodes:
        with sync_client_of(node) as client:
            info = client.info("replication")
        if info.get("role") == "slave" and int(info.get("master_port", 0)) == primary.port:
            return node
    raise AssertionError(f"no replica of {primary.url}")


async def test_a_cluster_add_waits_on_the_primary_of_the_queues_slot(
    cluster: ClusterSetup, queue_name: str
) -> None:
    """With the replica of the slot's primary stopped the add raises: a WAIT sent to any other
    node would have found its own replica and answered 1 at once."""
    name = "{" + queue_name + "}"
    primary = cluster.master_of(queue_keys(name).marker)
    replica = replica_of(cluster, primary)
    client = RedisCluster.from_url(cluster.urls[0])
    try:
        job = await echomq.add(name, "a", {}, connection=client, wait_replicas=1)
        async with Queue(name, connection=client, wait_replicas=1) as queue:
            bulk = await queue.add_bulk([("b", {}), ("c", {})])
            async with FlowProducer(connection=client) as producer:
                node = await producer.add(FlowJob("root", name), wait_replicas=1)
            assert on_replica(replica, name, job.id, node.job.id, *(j.id for j in bulk))
            with stopped(replica), pytest.raises(ReplicationError) as caught:
                await queue.add("d", {}, wait_timeout=TIMEOUT)
            assert await queue.get_job(caught.value.job.id) is not None
    finally:
        await client.aclose()
    sync_client = SyncRedisCluster.from_url(cluster.urls[0])
    try:
        job = echomq.sync.add(name, "e", {}, connection=sync_client, wait_replicas=1)
        with stopped(replica), pytest.raises(ReplicationError):
            echomq.sync.add_bulk(
                name, [("f", {})], connection=sync_client, wait_replicas=1, wait_timeout=TIMEOUT
            )
    finally:
        close_sync_cluster(sync_client)
    assert on_replica(replica, name, job.id)


async def test_replicas_that_catch_up_after_a_stop_acknowledge_again(
    primary: RedisServer, replica: RedisServer, queue_name: str
) -> None:
    """After SIGCONT the replica takes the backlog and the next replicated add goes through."""
    async with client_of(primary) as client:
        with stopped(replica), pytest.raises(ReplicationError) as caught:
            await echomq.add(
                queue_name, "a", {}, connection=client, wait_replicas=1, wait_timeout=TIMEOUT
            )
        await wait_for(lambda: on_replica(replica, queue_name, caught.value.job.id), timeout=10)
        job = await echomq.add(queue_name, "b", {}, connection=client, wait_replicas=1)
    assert on_replica(replica, queue_name, job.id)
