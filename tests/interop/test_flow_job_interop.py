"""The job side of flows against the real BullMQ 6.7.6 for Node.

On flows Node made and Python workers ran, echomq's flow getters return what Node's
``getChildrenValues`` / ``getIgnoredChildrenFailures`` / ``getDependencies`` /
``getDependenciesCount`` return; a parent Node moved to waiting-children is released by
children a Python worker completes, and Python's move leaves what Node's leaves.
"""

from __future__ import annotations

import sys
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
from echomq import DependencyPage, Job, Queue, Worker
from echomq import _ops as ops
from echomq._keys import queue_keys
from echomq._ops import worker as wops
from echomq._redis.run import run_op
from echomq.protocol.keys import QueueKeys
from helpers import wait_for

pytestmark = pytest.mark.timeout(90)

FAST: dict[str, Any] = {"drain_delay": 0.2, "stalled_interval": 5.0}


@pytest.fixture
def names() -> tuple[str, str]:
    """The parents' queue and the children's queue."""
    base = f"q-{uuid4().hex[:12]}"
    return base, base + "-c"


@pytest.fixture
async def peer(redis_url: str, names: tuple[str, str]) -> AsyncIterator[NodePeer]:
    assert nodepeer.node_available(), "node >= 20 is required for the interop tests"
    async with NodePeer(redis_url, names[0]) as p:
        yield p


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def child(job: Job) -> Any:
    """Children: ``bad`` fails with ``boom <id>``; any other returns its data."""
    if job.name == "bad":
        raise RuntimeError(f"boom {job.id}")
    return job.data


async def run_queue(
    r: Redis, keys: QueueKeys, processor: Any, completed: int, failed: int = 0
) -> None:
    async def done() -> bool:
        counts = await r.zcard(keys.completed), await r.zcard(keys.failed)
        return counts == (completed, failed)

    async with Worker(keys.name, processor, connection=r, **FAST):
        await wait_for(done, timeout=20)


def node_child(name: str, queue: str, job_id: str, **opts: Any) -> dict[str, Any]:
    return {
        "name": name,
        "queueName": queue,
        "data": {"id": job_id},
        "opts": {"jobId": job_id, **opts},
    }


async def node_reads(peer: NodePeer, job_id: str) -> list[Any]:
    """Node's getChildrenValues, getIgnoredChildrenFailures, getDependencies (whole, then a
    page of each part) and getDependenciesCount of one job."""
    page = {"cursor": 0, "count": 20}
    calls: list[tuple[str, dict[str, Any]]] = [
        ("jobMethod", {"id": job_id, "method": "getChildrenValues"}),
        ("jobMethod", {"id": job_id, "method": "getIgnoredChildrenFailures"}),
        ("jobMethod", {"id": job_id, "method": "getDependencies"}),
        (
            "jobMethod",
            {
                "id": job_id,
                "method": "getDependencies",
                "args": [{"processed": page, "unprocessed": page, "ignored": page}],
            },
        ),
        ("jobMethod", {"id": job_id, "method": "getDependenciesCount"}),
    ]
    return await peer.batch(calls)


async def assert_same_reads(peer: NodePeer, parent: Job) -> None:
    values, ignored, deps, paged, counts = await node_reads(peer, parent.id)
    assert await parent.get_children_values() == values
    assert await parent.get_ignored_children_failures() == ignored
    assert await parent.get_failed_children_values() == ignored
    mine = await parent.get_dependencies()
    assert mine.processed == deps["processed"]
    assert sorted(mine.unprocessed or []) == sorted(deps["unprocessed"])
    assert mine.failed == deps["failed"]
    assert mine.ignored == deps["ignored"]
    first = DependencyPage()
    page = await parent.get_dependencies(processed=first, unprocessed=first, ignored=first)
    assert page.processed == paged["processed"]
    assert page.next_processed_cursor == int(paged["nextProcessedCursor"]) == 0
    assert sorted(page.unprocessed or []) == sorted(paged["unprocessed"])
    assert page.next_unprocessed_cursor == int(paged["nextUnprocessedCursor"]) == 0
    assert page.ignored == paged["ignored"]
    assert page.next_ignored_cursor == int(paged["nextIgnoredCursor"]) == 0
    count = await parent.get_dependencies_count()
    assert {
        "processed": count.processed,
        "unprocessed": count.unprocessed,
        "failed": count.failed,
        "ignored": count.ignored,
    } == counts


async def test_getters_equal_nodes_on_node_flows_run_by_python(
    redis: Redis, peer: NodePeer, names: tuple[str, str]
) -> None:
    pq, cq = names
    pk, ck = queue_keys(pq), queue_keys(cq)
    mixed = {
        "name": "root",
        "queueName": pq,
        "data": {},
        "opts": {"jobId": "R"},
        "children": [
            node_child("ok", cq, "ok1"),
            node_child("ok", cq, "ok2"),
            node_child("later", cq, "pend", delay=600_000),
            node_child("bad", cq, "ign", ignoreDependencyOnFailure=True),
            node_child("bad", cq, "cont", continueParentOnFailure=True),
            node_child("bad", cq, "fp", failParentOnFailure=True),
        ],
    }
    done = {
        "name": "root",
        "queueName": pq,
        "data": {},
        "opts": {"jobId": "D"},
        "children": [node_child("ok", cq, "d1"), node_child("ok", cq, "d2")],
    }
    await peer.call("addFlow", flow=mixed)
    await peer.call("addFlow", flow=done)
    await run_queue(redis, ck, child, completed=4, failed=3)

    async def parent(job: Job) -> Any:
        return await job.get_children_values()

    # R was released by its cpof / fpof children (and carries the fpof failure); D by its last
    # child. A Python worker fails R and completes D.
    await run_queue(redis, pk, parent, completed=1, failed=1)
    async with Queue(pq, connection=redis) as q:
        r_job, d_job = await q.get_job("R"), await q.get_job("D")
        assert r_job is not None and d_job is not None
        assert r_job.failed_reason == f"child {ck.job('fp')} failed"
        assert d_job.return_value == {ck.job("d1"): {"id": "d1"}, ck.job("d2"): {"id": "d2"}}
        deps = await r_job.get_dependencies()
        assert deps.unprocessed == [ck.job("pend")] and deps.failed == [ck.job("fp")]
        await assert_same_reads(peer, r_job)
        await assert_same_reads(peer, d_job)


async def test_node_moves_to_waiting_children_python_children_release(
    redis: Redis, peer: NodePeer, names: tuple[str, str]
) -> None:
    pq, cq = names
    pk, ck = queue_keys(pq), queue_keys(cq)
    params = wops.FetchParams("t:", 30_000)
    for job_id in ("N", "Y"):  # N: moved by Node; Y: moved by Python, side by side
        await echomq.add(pq, "parent", {}, connection=redis, job_id=job_id)
    reply = await run_op(redis, wops.finish_and_fetch(pk, [], 2, 1, params, ops.now_ms()))
    tokens = {fetched.id: fetched.token for fetched in reply.jobs}
    assert set(tokens) == {"N", "Y"}
    for parent_id in ("N", "Y"):
        for i in range(2):
            job = ops.prepare_job("ok", {"n": i}, echomq.JobOptions(job_id=f"{parent_id}{i}"))
            await run_op(redis, ops.add_job(ck, job, (pk, parent_id)))

    moved = await peer.call("jobMethod", id="N", method="moveToWaitingChildren", args=[tokens["N"]])
    assert moved is True
    async with Queue(pq, connection=redis) as q:
        mine = await q.get_job("Y")
        assert mine is not None
        assert await mine.move_to_waiting_children(tokens["Y"]) is True
        for parent_id in ("N", "Y"):
            assert await redis.zscore(pk.waiting_children, parent_id) is not None
            assert not await redis.exists(pk.lock(parent_id))
        entries = [fields or {} for _, fields in await redis.xrange(pk.events) or []]
        decoded = [{_s(k): _s(v) for k, v in f.items()} for f in entries]
        moves = [f for f in decoded if f["event"] == "waiting-children"]
        assert moves == [
            {"event": "waiting-children", "jobId": "N", "prev": "active"},
            {"event": "waiting-children", "jobId": "Y", "prev": "active"},
        ]
        # Node refuses to move a job Python already moved, as Python refuses Node's.
        with pytest.raises(nodepeer.NodeCommandError, match="not in the active state"):
            await peer.call("jobMethod", id="Y", method="moveToWaitingChildren", args=["0"])
        node_moved = await q.get_job("N")
        assert node_moved is not None
        with pytest.raises(echomq.JobNotInStateError):
            await node_moved.move_to_waiting_children("0")

        await run_queue(redis, ck, child, completed=4)
        assert sorted(await redis.lrange(pk.wait, 0, -1)) == [b"N", b"Y"]

        async def parent(job: Job) -> Any:
            return await job.get_children_values()

        await run_queue(redis, pk, parent, completed=2)
        for parent_id in ("N", "Y"):
            done = await q.get_job(parent_id)
            assert done is not None
            expected = {ck.job(f"{parent_id}{i}"): {"n": i} for i in range(2)}
            assert done.return_value == expected
            node_values = await peer.call("jobMethod", id=parent_id, method="getChildrenValues")
            assert node_values == expected
        assert await peer.call("getJobState", id="N") == "completed"
