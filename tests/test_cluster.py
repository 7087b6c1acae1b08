"""Redis Cluster: every key of a queue hashes to one slot, and the API works there
(docs/protocol/keys.md#cluster).

Two hash-tag layouts are covered: the prefix ``{bull}`` and a braced queue name ``{emails}``.
The clients are ``redis.asyncio.cluster.RedisCluster`` on the suite's 3-master cluster
(``redis_cluster`` fixture); each test closes what it opens.
"""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio.cluster import RedisCluster
from redis.cluster import RedisCluster as SyncRedisCluster
from redis.crc import key_slot

import echomq
import echomq.sync
from _cluster import ClusterSetup, cluster_url
from _failover import ride_through
from echomq import JobOptions, JobState, Queue, Worker
from echomq import _ops as ops
from echomq._keys import queue_keys
from echomq._ops import worker as wops
from echomq._redis.fail_fast import server_address
from echomq._redis.run import run_op
from echomq.protocol.keys import QueueKeys
from helpers import close_sync_cluster, wait_for

LAYOUTS = [
    pytest.param("{bull}", lambda: f"q-{uuid.uuid4().hex[:8]}", id="braced-prefix"),
    pytest.param("bull", lambda: f"{{emails-{uuid.uuid4().hex[:8]}}}", id="braced-name"),
]


def all_keys(keys: QueueKeys, job_id: str = "1") -> list[str]:
    """Every queue-level key and one job's keys."""
    skip = ("name", "prefix", "qualified", "base", "script_keys")
    names = [s for s in QueueKeys.__slots__ if s not in skip]
    return [
        *(getattr(keys, n) for n in names),
        *(k for declared in keys.script_keys.values() for k in declared),
        keys.job(job_id),
        keys.lock(job_id),
        keys.logs(job_id),
        keys.base + "de:some-dedup-id",
        keys.qualified,
    ]


@pytest.fixture
async def cluster(redis_cluster: list[str]) -> AsyncIterator[RedisCluster]:
    client = RedisCluster.from_url(redis_cluster[0], decode_responses=True)
    try:
        yield client
    finally:
        await client.aclose()


# -- slots -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "prefix"), [("x", "{bull}"), ("{emails}", "bull"), ("{emails}", "{bull}")]
)
def test_queue_keys_share_one_slot(name: str, prefix: str) -> None:
    keys = queue_keys(name, prefix)
    slots = {key_slot(k.encode()) for k in all_keys(keys)}
    assert len(slots) == 1
    tag = "bull" if prefix == "{bull}" else "emails"
    assert slots == {key_slot(tag.encode())}


def test_keys_keep_braces_as_given() -> None:
    assert queue_keys("{emails}").wait == "bull:{emails}:wait"
    assert queue_keys("q", "{bull}").wait == "{bull}:q:wait"


def test_unbraced_queue_spreads_over_slots() -> None:
    slots = {key_slot(k.encode()) for k in all_keys(queue_keys("plain"))}
    assert len(slots) > 1


async def test_cluster_slot_agrees_with_the_server(cluster: RedisCluster) -> None:
    keys = queue_keys("{emails}")
    assert await cluster.cluster_keyslot(keys.wait) == key_slot(keys.wait.encode())


# -- the API on a cluster --------------------------------------------------------------------


@pytest.mark.parametrize(("prefix", "make_name"), LAYOUTS)
async def test_add_and_read_on_a_cluster(
    cluster: RedisCluster, prefix: str, make_name: Any
) -> None:
    name = make_name()
    keys = queue_keys(name, prefix)
    job = await echomq.add(name, "one", {"n": 1}, connection=cluster, prefix=prefix)  # type: ignore[arg-type]
    assert job.id == "1"
    assert await cluster.lrange(keys.wait, 0, -1) == ["1"]
    read = await echomq.get_job(name, "1", connection=cluster, prefix=prefix)  # type: ignore[arg-type]
    assert read is not None
    assert read.data == {"n": 1}


@pytest.mark.parametrize(("prefix", "make_name"), LAYOUTS)
async def test_add_bulk_on_a_cluster(cluster: RedisCluster, prefix: str, make_name: Any) -> None:
    # add_bulk sends its script calls in one MULTI/EXEC. redis-py's cluster pipeline refuses
    # EVALSHA ("Calling pipelined function evalsha is blocked when running redis in cluster
    # mode"), so this needs echomq to send the transaction some other way on a cluster.
    name = make_name()
    keys = queue_keys(name, prefix)
    jobs = await echomq.add_bulk(
        name,
        [("a", {}), ("b", {}, {"delay": 60}), ("c", {}, {"priority": 2})],
        connection=cluster,  # type: ignore[arg-type]
        prefix=prefix,
    )
    assert [j.id for j in jobs] == ["1", "2", "3"]
    assert await cluster.lrange(keys.wait, 0, -1) == ["1"]
    assert await cluster.zrange(keys.delayed, 0, -1) == ["2"]
    assert await cluster.zrange(keys.prioritized, 0, -1) == ["3"]


@pytest.mark.parametrize(("prefix", "make_name"), LAYOUTS)
async def test_queue_getters_pause_resume_and_worker_on_a_cluster(
    cluster: RedisCluster, prefix: str, make_name: Any
) -> None:
    name = make_name()
    async with Queue(name, connection=cluster, prefix=prefix) as q:  # type: ignore[arg-type]
        first = await q.add("a", {"n": 1})
        await q.add("b", {"n": 2}, priority=1)
        assert await q.get_job_counts("waiting", "prioritized") == {
            "waiting": 1,
            "prioritized": 1,
        }
        assert await q.get_state(first.id) is JobState.WAITING
        assert [j.id for j in await q.get_waiting()] == [first.id]
        await q.pause()
        assert await q.is_paused()
        await q.resume()
        assert not await q.is_paused()

        done: list[Any] = []

        async def process(job: echomq.Job) -> int:
            done.append(job.data["n"])
            return int(job.data["n"]) * 10

        worker = Worker(name, process, connection=cluster, prefix=prefix, drain_delay=0.1)  # type: ignore[arg-type]
        task = asyncio.create_task(worker.run())
        try:
            await wait_for(lambda: len(done) == 2, timeout=10)
            counts = await wait_for(
                lambda: _completed(q), timeout=10, message="both jobs completed"
            )
            assert counts == 2
        finally:
            await worker.close()
            await task
        assert sorted(done) == [1, 2]


@pytest.mark.parametrize(("prefix", "make_name"), LAYOUTS)
async def test_declared_key_scripts_on_a_cluster(
    cluster: RedisCluster, prefix: str, make_name: Any
) -> None:
    # The server refuses a script whose declared KEYS span slots (CROSSSLOT), and one that
    # touches a key of another slot; run each script that takes the declared-key layout.
    name = make_name()
    keys = queue_keys(name, prefix)
    job = ops.prepare_job("n", {}, JobOptions())
    parent = await run_op(cluster, ops.add_job(keys, job))  # type: ignore[arg-type]
    child = await run_op(cluster, ops.add_job(keys, job, (keys, parent)))  # type: ignore[arg-type]
    params = wops.FetchParams("tok:", 30_000, metrics_max_points=10)
    now = ops.now_ms()
    got = await run_op(cluster, wops.finish_and_fetch(keys, [], 2, 1, params, now))  # type: ignore[arg-type]
    assert [j.id for j in got.jobs] == [parent, child]
    renewed = wops.extend_locks(keys, [parent, child], ["tok:1", "tok:2"], 30_000)
    assert await run_op(cluster, renewed) == []  # type: ignore[arg-type]
    done = wops.finish_item(wops.COMPLETE, child, "tok:2", "1")
    reply = await run_op(cluster, wops.finish_and_fetch(keys, [done], 1, 3, params, now))  # type: ignore[arg-type]
    assert reply.codes == [0]
    assert await cluster.hget(keys.metrics_completed, "count") == "1"
    assert await cluster.smembers(keys.job(parent) + ":dependencies") == set()


async def _waiting_parent(cluster: RedisCluster, keys: QueueKeys) -> str:
    """A parent job in ``waiting-children``, as addParentJob leaves one."""
    parent = await run_op(cluster, ops.add_job(keys, ops.prepare_job("p", {}, JobOptions())))  # type: ignore[arg-type]
    await cluster.lrem(keys.wait, 0, parent)
    await cluster.zadd(keys.waiting_children, {parent: 1})
    return parent


@pytest.mark.parametrize(("prefix", "make_name"), LAYOUTS)
async def test_recovery_and_admin_scripts_on_a_cluster(
    cluster: RedisCluster, prefix: str, make_name: Any
) -> None:
    # The worker's recovery scripts and the admin scripts, each touching job keys built from
    # the declared prefix and, for a flow across two queues sharing the hash tag, the other
    # queue's keys derived from a job reference.
    name = make_name()
    keys = queue_keys(name, prefix)
    other = queue_keys(name + "-children", prefix)
    job = ops.prepare_job("n", {}, JobOptions())
    params = wops.FetchParams("tok:", 30_000)

    parent = await _waiting_parent(cluster, keys)
    far = await run_op(cluster, ops.add_job(other, job, (keys, parent)))  # type: ignore[arg-type]
    near = await run_op(cluster, ops.add_job(keys, job, (keys, parent)))  # type: ignore[arg-type]
    got = await run_op(cluster, wops.finish_and_fetch(other, [], 1, 1, params, ops.now_ms()))  # type: ignore[arg-type]
    assert [j.id for j in got.jobs] == [far]
    handed_back = wops.move_job_from_active_to_wait(other, far, "tok:1")
    assert await run_op(cluster, handed_back) == 0  # type: ignore[arg-type]
    got = await run_op(cluster, wops.finish_and_fetch(other, [], 1, 2, params, ops.now_ms()))  # type: ignore[arg-type]
    assert [j.id for j in got.jobs] == [far]
    stalled = wops.move_stalled_jobs_to_wait(other, 1, 30_000, ops.now_ms())
    assert (await run_op(cluster, stalled)).recovered == []  # type: ignore[arg-type]
    await cluster.delete(other.lock(far), other.stalled_check)  # the lock expired
    assert (await run_op(cluster, stalled)).recovered == [far]  # type: ignore[arg-type]

    assert await run_op(cluster, ops.remove_job(keys, parent)) is True  # type: ignore[arg-type]
    for k in (keys.job(parent), keys.job(near), other.job(far)):
        assert not await cluster.exists(k)
    assert (await cluster.xrevrange(other.events, count=1))[0][1]["event"] == "removed"

    # Hard removal of a child releases its parent in the other queue.
    parent = await _waiting_parent(cluster, keys)
    await run_op(cluster, ops.add_job(other, job, (keys, parent)))  # type: ignore[arg-type]
    assert await run_op(cluster, ops.drain_batch(other, delayed=False)) is False  # type: ignore[arg-type]
    assert await cluster.lrange(keys.wait, 0, -1) == [parent]

    done = await run_op(cluster, ops.add_job(keys, job))  # type: ignore[arg-type]
    await cluster.lrem(keys.wait, 0, done)
    await cluster.zadd(keys.completed, {done: 1})  # simulates a worker
    retry = ops.move_jobs_to_wait(keys, state="completed", count=10, max_score="+inf")
    assert await run_op(cluster, retry) is False  # type: ignore[arg-type]
    assert await cluster.lrange(keys.wait, 0, -1) == [done, parent]
    cleaned = ops.clean_batch(keys, cutoff_ms=ops.now_ms() + 1000, batch=10, state="wait")
    assert sorted((await run_op(cluster, cleaned)).removed) == sorted([done, parent])  # type: ignore[arg-type]

    await run_op(cluster, ops.add_job(keys, job))  # type: ignore[arg-type]
    assert await run_op(cluster, ops.obliterate_batch(keys, force=True)) is False  # type: ignore[arg-type]
    assert not await cluster.exists(keys.meta, keys.wait, keys.events)


async def _completed(q: Queue) -> int:
    counts = await q.get_job_counts("completed")
    return counts["completed"] if counts["completed"] == 2 else 0


async def test_unbraced_queue_on_a_cluster_is_refused_clearly(cluster: RedisCluster) -> None:
    # Without a hash tag the queue's keys live in several slots. The server answers with
    # "Script attempted to access a non local key" (or CROSSSLOT) after a script may already
    # have written some keys; echomq should refuse the queue with its own error, naming the fix.
    name = f"plain-{uuid.uuid4().hex[:8]}"
    with pytest.raises(echomq.EchoMQError) as info:
        await echomq.add(name, "a", {}, connection=cluster)  # type: ignore[arg-type]
    assert "{" in str(info.value)  # tells the user to use a hash tag
    assert "connection must be" not in str(info.value)
    keys = queue_keys(name)
    for key in all_keys(keys):
        assert not await cluster.exists(key)


def test_sync_cluster_client_connects_and_closes(redis_cluster: list[str]) -> None:
    # The sync cluster client used by tooling around echomq; close_sync_cluster leaks nothing.
    client = SyncRedisCluster.from_url(redis_cluster[0], decode_responses=True)
    try:
        keys = queue_keys("{sync-check}")
        client.hset(keys.meta, "probe", "1")
        assert client.hget(keys.meta, "probe") == "1"
        client.delete(keys.meta)
    finally:
        close_sync_cluster(client)


async def test_flows_on_a_cluster(cluster: RedisCluster) -> None:
    """Every queue of a flow shares one hash tag: the flow runs across queues and prefixes;
    a flow (or a parent=) that spans hash tags is refused before anything is written."""
    tag = "{flow-" + uuid.uuid4().hex[:6] + "}"
    async with echomq.FlowProducer(connection=cluster, prefix=tag) as flows:  # type: ignore[arg-type]
        node = await flows.add(
            echomq.FlowJob(
                "publish",
                "videos",
                children=[
                    echomq.FlowJob("transcode", "transcodes", {"n": 1}),
                    echomq.FlowJob("thumb", "thumbs", prefix=tag + "x"),
                ],
            )
        )
        assert await cluster.zscore(f"{tag}:videos:waiting-children", node.job.id) is not None

        async def ok(job: echomq.Job) -> int:
            return 1

        async with (
            Worker("transcodes", ok, connection=cluster, prefix=tag, drain_delay=0.2),  # type: ignore[arg-type]
            Worker("thumbs", ok, connection=cluster, prefix=tag + "x", drain_delay=0.2),  # type: ignore[arg-type]
        ):
            await wait_for(lambda: _finished_children(cluster, tag, node.job.id), timeout=10)
        state = await echomq.get_state("videos", node.job.id, connection=cluster, prefix=tag)  # type: ignore[arg-type]
        assert state == "waiting"

        other = "{other-" + uuid.uuid4().hex[:6] + "}"
        with pytest.raises(echomq.ValidationError, match="hash tag"):
            await flows.add(
                echomq.FlowJob("p", "videos", children=[echomq.FlowJob("c", "x", prefix=other)])
            )
        assert not await cluster.exists(f"{other}:x:id")
        with pytest.raises(echomq.ValidationError, match="hash tag"):
            await echomq.add("x", "c", {}, connection=cluster, prefix=other, parent=node.job)  # type: ignore[arg-type]
        assert not await cluster.exists(f"{other}:x:id")


async def _finished_children(cluster: RedisCluster, tag: str, parent_id: str) -> bool:
    return bool(await cluster.hlen(f"{tag}:videos:{parent_id}:processed") == 2)


async def test_the_cluster_url_form_everywhere_a_url_is_taken(redis_cluster: list[str]) -> None:
    """``redis+cluster://host:port,...``: the API opens (and closes) cluster clients for it, and
    the untagged-queue refusal holds there too."""
    url = cluster_url(redis_cluster)
    name = f"{{url-{uuid.uuid4().hex[:8]}}}"
    done: list[str] = []

    async def record(job: echomq.Job) -> None:
        done.append(job.id)

    added = await echomq.add(name, "a", {}, connection=url)
    async with Worker(name, record, connection=url):
        await wait_for(lambda: bool(done), timeout=10, message="the job ran")
    assert done == [added.id]
    async with Queue(name, connection=url) as q:
        assert await q.get_state(added.id) is JobState.COMPLETED
    job = echomq.sync.add(name, "sync", {}, connection=url)
    assert echomq.sync.get_state(name, job.id, connection=url) == "waiting"
    with pytest.raises(echomq.EchoMQError, match="{"):
        await echomq.add(f"plain-{uuid.uuid4().hex[:8]}", "a", {}, connection=url)


async def test_a_worker_and_a_producer_ride_through_a_cluster_failover(
    tmp_path: Path, queue_name: str
) -> None:
    """3 primaries with a replica each (node timeout 1 s). The primary of the queue's slot is
    SIGKILLed under load and its replica takes over. Every add the producer saw acknowledged
    runs (the ledger is kept here, not in Redis), none runs twice beyond the jobs whose lock the
    failover cut, and the worker runs jobs on the new primary."""
    setup = ClusterSetup(tmp_path / "cluster", masters=3, replicas=1, node_timeout_ms=1000)
    setup.start()
    name = f"{{{queue_name}}}"

    def kill_the_slots_primary() -> None:
        victim = setup.master_of(queue_keys(name).marker)
        assert victim.pid is not None
        os.kill(victim.pid, signal.SIGKILL)

    try:
        run = await ride_through(cluster_url(setup.urls), name, kill_the_slots_primary)
    finally:
        setup.stop()
    assert run.lost == []  # nothing acknowledged was lost
    assert run.extra_runs <= 5  # only jobs the failover cut
    assert run.resumed < 1 + 4, f"the worker resumed {run.resumed:.2f} s after the kill"


async def test_errors_on_a_cluster_client_name_the_cluster(cluster: RedisCluster) -> None:
    """A producer error on a cluster client you pass names the cluster's nodes (redis-py's own
    message, kept in it, names the node that failed), not one node as if it were the server."""
    await cluster.initialize()  # the nodes it found join the startup nodes
    address = server_address(cluster)
    assert address.startswith("cluster 127.0.0.1:")
    assert len(address.split(",")) >= 3
