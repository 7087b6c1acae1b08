"""The job side of flows: reading a parent's children, moving an active job to
waiting-children, and unlinking or removing children (docs/protocol/scripts.md from
#script-moveToWaitingChildren to #script-removeUnprocessedChildren).

Flows are built with the low-level add path (``ops.add_job`` with a ``(queue keys, parent id)``
parent), and a parent is put into ``waiting-children`` as a flow insert leaves it. A child's
failure option is written into its ``parent`` field, which is where workers read it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis

import echomq.sync
from echomq import (
    Dependencies,
    DependencyCounts,
    DependencyPage,
    FailedChildrenError,
    Job,
    JobNotFoundError,
    JobNotInStateError,
    JobOptions,
    LockMismatchError,
    LockMissingError,
    ParentNotFoundError,
    Queue,
    ValidationError,
    WaitingChildrenError,
    Worker,
)
from echomq import _ops as ops
from echomq._keys import queue_keys
from echomq._ops import worker as wops
from echomq._redis.run import run_op
from echomq._redis.run_sync import run_op as run_op_sync
from echomq.protocol.keys import QueueKeys
from helpers import session_of, wait_for

FAST: dict[str, Any] = {"drain_delay": 0.2, "stalled_interval": 5.0}
PARAMS = wops.FetchParams("t:", 30_000)


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def events(r: Redis, keys: QueueKeys) -> list[dict[str, str]]:
    entries = await r.xrange(keys.events) or []
    return [{_s(k): _s(v) for k, v in (fields or {}).items()} for _, fields in entries]


async def add(
    r: Redis,
    keys: QueueKeys,
    job_id: str,
    data: Any = None,
    *,
    parent: tuple[QueueKeys, str] | None = None,
    policy: str | None = None,
    name: str = "job",
    delay: float = 0,
) -> str:
    """Add a job (a child when ``parent`` is given, with failure option ``policy``)."""
    options = JobOptions(job_id=job_id, delay=delay) if delay else JobOptions(job_id=job_id)
    job = ops.prepare_job(name, {} if data is None else data, options)
    added = await run_op(r, ops.add_job(keys, job, parent))
    if parent is not None and policy is not None:
        ref = {"id": parent[1], "queueKey": parent[0].qualified, policy: True}
        await r.hset(keys.job(job_id), "parent", json.dumps(ref))
    return added


async def add_waiting_parent(r: Redis, keys: QueueKeys, job_id: str) -> str:
    """A job in ``waiting-children``, as a flow insert leaves a parent."""
    await add(r, keys, job_id, name="parent")
    await r.lrem(keys.wait, 0, job_id)
    await r.zadd(keys.waiting_children, {job_id: 1})
    return job_id


async def take(r: Redis, keys: QueueKeys) -> wops.Fetched:
    """Take the next job of the queue as a worker does (active, locked)."""
    reply = await run_op(r, wops.finish_and_fetch(keys, [], 1, 1, PARAMS, ops.now_ms()))
    assert len(reply.jobs) == 1
    return reply.jobs[0]


async def complete(r: Redis, keys: QueueKeys, job_id: str, value: Any) -> None:
    """Take ``job_id`` (the next job of its queue) and complete it with ``value``."""
    taken = await take(r, keys)
    assert taken.id == job_id
    item = wops.finish_item(wops.COMPLETE, job_id, taken.token, json.dumps(value))
    reply = await run_op(r, wops.finish_and_fetch(keys, [item], 0, 2, PARAMS, ops.now_ms()))
    assert reply.codes == [0]


@pytest.fixture
async def pq(redis: Redis, queue_name: str) -> AsyncIterator[Queue]:
    """The parents' queue (no worker runs on it unless a test starts one)."""
    async with Queue(queue_name, connection=redis) as q:
        yield q


@pytest.fixture
async def cq(redis: Redis, queue_name: str) -> AsyncIterator[Queue]:
    """The children's queue."""
    async with Queue(queue_name + "-c", connection=redis) as q:
        yield q


@pytest.fixture
def pk(queue_name: str) -> QueueKeys:
    return queue_keys(queue_name)


@pytest.fixture
def ck(queue_name: str) -> QueueKeys:
    return queue_keys(queue_name + "-c")


async def get(q: Queue, job_id: str) -> Job:
    job = await q.get_job(job_id)
    assert job is not None
    return job


async def run_children(r: Redis, ck: QueueKeys, completed: int, failed: int) -> None:
    """Run the children's queue until it has ``completed`` and ``failed`` jobs: a child named
    ``bad`` fails with ``boom <id>``, one named ``echo`` returns its data, any other returns
    ``{"v": <id>}``."""

    async def child(job: Job) -> Any:
        if job.name == "bad":
            raise RuntimeError(f"boom {job.id}")
        if job.name == "echo":
            return job.data
        return {"v": job.id}

    async def done() -> bool:
        return bool(await r.zcard(ck.completed) == completed and await r.zcard(ck.failed) == failed)

    async with Worker(ck.name, child, connection=r, **FAST):
        await wait_for(done, timeout=10)


# -- getters -------------------------------------------------------------------------------


async def build_mixed_flow(r: Redis, pk: QueueKeys, ck: QueueKeys) -> None:
    """Parent P with two completed children, one pending (delayed), two ignored failures
    (``idof``, ``cpof``) and one failure that fails the parent (``fpof``)."""
    await add_waiting_parent(r, pk, "P")
    parent = (pk, "P")
    await add(r, ck, "ok1", parent=parent)
    await add(r, ck, "ok2", parent=parent)
    await add(r, ck, "pend", parent=parent, delay=600)
    await add(r, ck, "ign", parent=parent, policy="idof", name="bad")
    await add(r, ck, "cont", parent=parent, policy="cpof", name="bad")
    await add(r, ck, "fp", parent=parent, policy="fpof", name="bad")
    await run_children(r, ck, completed=2, failed=3)


async def test_getters_on_a_flow_with_every_kind_of_child(
    redis: Redis, sync_redis: Any, pq: Queue, pk: QueueKeys, ck: QueueKeys
) -> None:
    await build_mixed_flow(redis, pk, ck)
    parent = await get(pq, "P")
    values = {ck.job("ok1"): {"v": "ok1"}, ck.job("ok2"): {"v": "ok2"}}
    ignored = {ck.job("ign"): "boom ign", ck.job("cont"): "boom cont"}
    assert await parent.get_children_values() == values
    assert await parent.get_ignored_children_failures() == ignored
    # Node's deprecated name means the same: the ignored failures, not the fpof one.
    assert await parent.get_failed_children_values() == ignored
    full = Dependencies(
        processed=values,
        unprocessed=[ck.job("pend")],
        failed=[ck.job("fp")],
        ignored=ignored,
        next_processed_cursor=0,
        next_unprocessed_cursor=0,
        next_failed_cursor=0,
        next_ignored_cursor=0,
    )
    assert await parent.get_dependencies() == full
    assert await parent.get_dependencies_count() == DependencyCounts(2, 1, 1, 2)
    assert await parent.get_dependencies_count(processed=False, ignored=False) == DependencyCounts(
        unprocessed=1, failed=1
    )

    # Only the parts asked for, each with its cursor.
    some = await parent.get_dependencies(processed=True, failed=DependencyPage(count=5))
    assert some == Dependencies(
        processed=values, failed=[ck.job("fp")], next_processed_cursor=0, next_failed_cursor=0
    )
    assert (await parent.get_dependencies(ignored=True)).ignored == ignored
    assert (await parent.get_dependencies(unprocessed=True)).unprocessed == [ck.job("pend")]

    # The same through the generated sync Job.
    with echomq.sync.Queue(pk.name, connection=sync_redis) as sq:
        sync_parent = sq.get_job("P")
        assert sync_parent is not None
        assert sync_parent.get_children_values() == values
        assert sync_parent.get_ignored_children_failures() == ignored
        assert sync_parent.get_failed_children_values() == ignored
        assert sync_parent.get_dependencies() == full
        assert sync_parent.get_dependencies_count() == DependencyCounts(2, 1, 1, 2)


async def test_getters_of_a_job_without_children(pq: Queue) -> None:
    job = await pq.add("lonely")
    assert await job.get_children_values() == {}
    assert await job.get_ignored_children_failures() == {}
    deps = await job.get_dependencies()
    assert (deps.processed, deps.unprocessed, deps.failed, deps.ignored) == ({}, [], [], {})
    assert await job.get_dependencies_count() == DependencyCounts(0, 0, 0, 0)


async def test_get_dependencies_argument_validation(pq: Queue) -> None:
    job = await pq.add("j")
    with pytest.raises(ValidationError, match="at least one part"):
        await job.get_dependencies(processed=False)
    with pytest.raises(ValidationError, match="DependencyPage"):
        await job.get_dependencies(processed=3)  # type: ignore[arg-type]
    with pytest.raises(ValidationError, match="at least one part"):
        await job.get_dependencies_count(
            processed=False, unprocessed=False, failed=False, ignored=False
        )
    for bad in ({"cursor": -1}, {"count": 0}, {"count": True}):
        with pytest.raises(ValidationError, match="DependencyPage"):
            DependencyPage(**bad)


async def test_paging_with_cursors_over_many_children(
    redis: Redis, pq: Queue, pk: QueueKeys, ck: QueueKeys
) -> None:
    # 150 entries with values over 64 bytes: past Redis' small encodings (which SCAN returns
    # whole), so SCAN really pages.
    n, pad = 150, "x" * 80
    await add_waiting_parent(redis, pk, "P")
    pending = set()
    for i in range(n):
        pending.add(await add(redis, ck, f"c{i}", parent=(pk, "P")))
    pending_keys = {ck.job(i) for i in pending}
    # Completed, ignored and failed parts written as children finishing would write them.
    processed = {ck.job(f"d{i}"): {"i": i, "pad": pad} for i in range(n)}
    await redis.hset(pk.processed("P"), mapping={k: json.dumps(v) for k, v in processed.items()})
    ignored: dict[Any, Any] = {ck.job(f"g{i}"): f"reason {i} {pad}" for i in range(n)}
    await redis.hset(pk.ignored_failures("P"), mapping=ignored)
    failed = [ck.job(f"f{i}") for i in range(n)]
    await redis.zadd(pk.unsuccessful("P"), {key: 1000 + i for i, key in enumerate(failed)})
    parent = await get(pq, "P")

    async def read_all(part: str) -> tuple[list[Any], int]:
        got: list[Any] = []
        pages, cursor = 0, 0
        while True:
            page = DependencyPage(cursor=cursor, count=20)
            deps = await parent.get_dependencies(**{part: page})
            value = getattr(deps, part)
            got.extend(value.items() if isinstance(value, dict) else value)
            for other in {"processed", "unprocessed", "failed", "ignored"} - {part}:
                assert getattr(deps, other) is None
            pages += 1
            cursor = getattr(deps, f"next_{part}_cursor")
            if cursor == 0:
                return got, pages

    got, pages = await read_all("unprocessed")
    assert set(got) == pending_keys and pages > 1
    got, pages = await read_all("processed")
    assert dict(got) == processed and pages > 1
    got, pages = await read_all("ignored")
    assert dict(got) == ignored and pages > 1
    got, pages = await read_all("failed")
    assert got == failed  # exact pages, oldest first, each entry once
    assert pages == 8
    last = await parent.get_dependencies(failed=DependencyPage(cursor=140, count=20))
    assert last.failed == failed[140:] and last.next_failed_cursor == 0
    middle = await parent.get_dependencies(failed=DependencyPage(cursor=20, count=20))
    assert middle.failed == failed[20:40] and middle.next_failed_cursor == 40
    assert await parent.get_dependencies_count() == DependencyCounts(n, n, n, n)


# -- move_to_waiting_children --------------------------------------------------------------


async def active_parent_with_child(
    r: Redis, pq: Queue, pk: QueueKeys, ck: QueueKeys
) -> tuple[Job, str]:
    """P taken by a worker (active, locked) with one pending child; returns P and its token."""
    await add(r, pk, "P")
    taken = await take(r, pk)
    await add(r, ck, "c1", parent=(pk, "P"))
    job = await get(pq, "P")
    return job, taken.token


async def test_move_to_waiting_children_moves_an_active_parent(
    redis: Redis, pq: Queue, pk: QueueKeys, ck: QueueKeys
) -> None:
    job, token = await active_parent_with_child(redis, pq, pk, ck)
    await redis.sadd(pk.stalled, "P")
    before = ops.now_ms()
    assert await job.move_to_waiting_children(token) is True
    score = await redis.zscore(pk.waiting_children, "P")
    assert score is not None and before <= score <= ops.now_ms()
    assert await redis.lrange(pk.active, 0, -1) == []
    assert not await redis.exists(pk.lock("P"))
    assert not await redis.sismember(pk.stalled, "P")
    assert (await events(redis, pk))[-1] == {
        "event": "waiting-children",
        "jobId": "P",
        "prev": "active",
    }
    # The last child completing releases it.
    await complete(redis, ck, "c1", "done")
    assert await redis.lrange(pk.wait, 0, -1) == [b"P"]
    assert await job.get_children_values() == {ck.job("c1"): "done"}


async def test_move_to_waiting_children_with_nothing_pending(
    redis: Redis, pq: Queue, pk: QueueKeys, ck: QueueKeys
) -> None:
    await add(redis, pk, "P")
    taken = await take(redis, pk)
    job = await get(pq, "P")
    assert await job.move_to_waiting_children(taken.token) is False
    # Only the named child counts: one that is not pending means nothing to wait for.
    await add(redis, ck, "c1", parent=(pk, "P"))
    other = {"id": "c2", "queue": ck.qualified}
    assert await job.move_to_waiting_children(taken.token, child=other) is False
    assert await redis.lrange(pk.active, 0, -1) == [b"P"]
    assert await redis.get(pk.lock("P")) == taken.token.encode()
    assert await redis.zcard(pk.waiting_children) == 0
    named = {"id": "c1", "queue": ck.qualified}
    assert await job.move_to_waiting_children(taken.token, child=named) is True
    assert await redis.zscore(pk.waiting_children, "P") is not None
    with pytest.raises(ValidationError, match="child must be a mapping"):
        await job.move_to_waiting_children(taken.token, child={"id": "c1"})
    with pytest.raises(ValidationError, match="child must be a mapping"):
        await job.move_to_waiting_children(taken.token, child={"id": "c1", "queue": "nocolon"})


async def test_move_to_waiting_children_refusals_write_nothing(
    redis: Redis, pq: Queue, pk: QueueKeys, ck: QueueKeys
) -> None:
    job, token = await active_parent_with_child(redis, pq, pk, ck)
    with pytest.raises(LockMismatchError):
        await job.move_to_waiting_children("t:other")
    assert await redis.get(pk.lock("P")) == token.encode()
    assert await redis.lrange(pk.active, 0, -1) == [b"P"]
    await redis.zadd(pk.unsuccessful("P"), {ck.job("bad"): 1})
    with pytest.raises(FailedChildrenError):
        await job.move_to_waiting_children(token)
    await redis.delete(pk.unsuccessful("P"))
    await redis.delete(pk.lock("P"))
    with pytest.raises(LockMissingError):
        await job.move_to_waiting_children(token)
    # Not active: a waiting job (the worker's token is not set, so no lock check is made).
    waiting = await add(redis, pk, "W")
    await add(redis, ck, "cw", parent=(pk, waiting))
    with pytest.raises(JobNotInStateError, match="not in the active state"):
        await (await get(pq, "W")).move_to_waiting_children()
    assert await redis.lrange(pk.wait, 0, -1) == [b"W"]
    assert await redis.zcard(pk.waiting_children) == 0
    await redis.delete(pk.job("P"))
    with pytest.raises(JobNotFoundError):
        await job.move_to_waiting_children(token)


async def test_step_job_in_a_real_worker(redis: Redis, queue_name: str, pk: QueueKeys) -> None:
    """The processor adds children, waits for them and runs again once they are done."""
    await echomq.add(queue_name, "step", {}, connection=redis, job_id="S")
    release = asyncio.Event()
    runs: list[str] = []
    locked_while_waiting: list[bool] = []

    async def processor(job: Job) -> Any:
        if job.name == "child":
            await release.wait()
            return job.data["i"] * 10
        runs.append(job.id)
        if len(runs) == 1:
            for i in range(3):
                await add(redis, pk, f"s{i}", {"i": i}, parent=(pk, job.id), name="child")
            assert job.token is not None
            assert await job.move_to_waiting_children(job.token) is True
            raise WaitingChildrenError()
        return await job.get_children_values()

    # Short locks: a renewal of the parked parent's lock would show within the wait below.
    worker = Worker(
        queue_name, processor, connection=redis, concurrency=4, lock_duration=0.4, **FAST
    )
    async with worker:
        await wait_for(lambda: redis.zscore(pk.waiting_children, "S"), timeout=10)
        await asyncio.sleep(0.6)  # longer than the lock: no renewal, no stalled recovery
        locked_while_waiting.append(bool(await redis.exists(pk.lock("S"))))
        assert "S" not in session_of(worker).held.values()  # the worker no longer renews its lock
        assert await redis.zscore(pk.waiting_children, "S") is not None
        assert await redis.hget(pk.job("S"), "atm") is None  # no outcome was recorded
        release.set()
        await wait_for(lambda: redis.zscore(pk.completed, "S"), timeout=10)
    assert runs == ["S", "S"]
    assert locked_while_waiting == [False]
    h = {_s(k): _s(v) for k, v in (await redis.hgetall(pk.job("S"))).items()}
    assert json.loads(h["returnvalue"]) == {pk.job(f"s{i}"): i * 10 for i in range(3)}
    assert h["ats"] == "2" and h["atm"] == "1"
    mine = [e for e in await events(redis, pk) if e.get("jobId") == "S"]
    kinds = [(e["event"], e.get("prev")) for e in mine]
    assert ("waiting-children", "active") in kinds
    assert ("waiting", "waiting-children") in kinds
    assert [k for k, _ in kinds].count("completed") == 1
    assert "failed" not in [k for k, _ in kinds]


async def test_step_job_with_a_sync_processor(
    redis: Redis, sync_redis: Any, queue_name: str, pk: QueueKeys
) -> None:
    """A sync processor (run in a thread) parks its job through the blocking Job twin."""
    await echomq.add(queue_name, "step", {}, connection=redis, job_id="S")
    runs: list[bool] = []

    def processor(job: echomq.sync.Job) -> Any:
        if job.name == "child":
            return job.id
        if not runs:
            child = ops.prepare_job("child", {}, JobOptions(job_id="k1"))
            run_op_sync(sync_redis, ops.add_job(pk, child, (pk, job.id)))
            runs.append(job.move_to_waiting_children(job.token))
            raise WaitingChildrenError()
        runs.append(False)
        return job.get_dependencies_count().processed

    async with Worker(queue_name, processor, connection=redis, **FAST):
        await wait_for(lambda: redis.zscore(pk.completed, "S"), timeout=10)
    assert runs == [True, False]
    assert await redis.hget(pk.job("S"), "returnvalue") == b"1"


# -- remove_child_dependency ---------------------------------------------------------------


async def test_remove_child_dependency_releases_a_waiting_parent_when_last(
    redis: Redis, pq: Queue, cq: Queue, pk: QueueKeys, ck: QueueKeys
) -> None:
    await add_waiting_parent(redis, pk, "P")
    await add(redis, ck, "c1", parent=(pk, "P"), delay=600)
    await add(redis, ck, "c2", parent=(pk, "P"), delay=600)
    c1 = await get(cq, "c1")
    assert c1.parent is not None
    assert await c1.remove_child_dependency() is True
    assert c1.parent is None and c1.parent_key is None
    h = await redis.hgetall(ck.job("c1"))
    assert b"parentKey" not in h and b"parent" not in h
    assert await redis.zscore(ck.delayed, "c1") is not None  # the child stays where it is
    assert await redis.smembers(pk.dependencies("P")) == {ck.job("c2").encode()}
    assert await redis.zscore(pk.waiting_children, "P") is not None  # c2 still pending
    await redis.delete(pk.marker)
    assert await (await get(cq, "c2")).remove_child_dependency() is True
    assert await redis.zcard(pk.waiting_children) == 0
    assert await redis.lrange(pk.wait, 0, -1) == [b"P"]
    assert await redis.zrange(pk.marker, 0, -1) == [b"0"]
    assert (await events(redis, pk))[-1] == {
        "event": "waiting",
        "jobId": "P",
        "prev": "waiting-children",
    }
    # Once unlinked there is no parent any more.
    with pytest.raises(ParentNotFoundError, match="job c2 is not linked to a parent"):
        await (await get(cq, "c2")).remove_child_dependency()


async def test_remove_child_dependency_of_a_finished_child_or_without_parent(
    redis: Redis, sync_redis: Any, pq: Queue, cq: Queue, pk: QueueKeys, ck: QueueKeys
) -> None:
    await add_waiting_parent(redis, pk, "P")
    await add(redis, ck, "done", parent=(pk, "P"))
    await add(redis, ck, "other", parent=(pk, "P"), delay=600)
    await complete(redis, ck, "done", 1)
    done = await get(cq, "done")
    assert await done.remove_child_dependency() is False
    assert await redis.hget(ck.job("done"), "parentKey") == pk.job("P").encode()
    orphan = await cq.add("orphan")
    with pytest.raises(ParentNotFoundError, match="not linked to a parent") as info:
        await orphan.remove_child_dependency()
    assert info.value.code == -5
    await redis.delete(pk.job("P"))
    other = await get(cq, "other")
    with pytest.raises(ParentNotFoundError, match="parent of job other does not exist"):
        await other.remove_child_dependency()
    await redis.delete(ck.job("other"))
    with pytest.raises(JobNotFoundError):
        await other.remove_child_dependency()
    # The sync Job: same script, same replies.
    await add_waiting_parent(redis, pk, "P2")
    await add(redis, ck, "s1", parent=(pk, "P2"), delay=600)
    with echomq.sync.Queue(ck.name, connection=sync_redis) as sq:
        child = sq.get_job("s1")
        assert child is not None
        assert child.remove_child_dependency() is True
        assert child.remove_child_dependency.__doc__ == Job.remove_child_dependency.__doc__
    assert await redis.lrange(pk.wait, 0, -1) == [b"P2"]


# -- remove_unprocessed_children -----------------------------------------------------------


async def test_remove_unprocessed_children_from_outside(
    redis: Redis, pq: Queue, pk: QueueKeys, ck: QueueKeys
) -> None:
    await add_waiting_parent(redis, pk, "P")
    parent = (pk, "P")
    await add(redis, ck, "done", "ok", parent=parent, name="echo")
    await add(redis, ck, "flunk", parent=parent, name="bad")  # flagless: stays pending
    await run_children(redis, ck, completed=1, failed=1)
    await add(redis, ck, "w1", parent=parent)
    await add(redis, ck, "d1", parent=parent, delay=600)
    await add(redis, ck, "locked", parent=parent, delay=600)
    await redis.set(ck.lock("locked"), "t:x")
    # An intermediate parent M, waiting for a grandchild.
    await add(redis, ck, "M", parent=parent, name="parent")
    await redis.lrem(ck.wait, 0, "M")
    await redis.zadd(ck.waiting_children, {"M": 1})
    await add(redis, ck, "g1", parent=(ck, "M"), delay=600)
    job = await get(pq, "P")

    await job.remove_unprocessed_children()
    for gone in ("w1", "d1", "M", "g1"):
        assert not await redis.exists(ck.job(gone)), gone
    for kept in ("done", "locked", "flunk"):
        assert await redis.exists(ck.job(kept)), kept
    assert await redis.smembers(pk.dependencies("P")) == {
        ck.job("locked").encode(),
        ck.job("flunk").encode(),
    }
    assert await job.get_children_values() == {ck.job("done"): "ok"}
    assert await redis.zscore(pk.waiting_children, "P") is not None  # two still pending
    assert await redis.zcard(ck.waiting_children) == 0
    assert await redis.zcard(ck.delayed) == 1  # only "locked" is left there
    child_events = [(e["event"], e.get("jobId"), e.get("prev")) for e in await events(redis, ck)]
    removed = [(j, prev) for kind, j, prev in child_events if kind == "removed"]
    assert sorted(removed) == [("M", "wait"), ("d1", "delayed"), ("g1", "delayed"), ("w1", "wait")]
    # M was released by its last child before it was removed itself.
    at = child_events.index(("waiting", "M", "waiting-children"))
    assert at < child_events.index(("removed", "M", "wait"))

    # Once the remaining children are unlinked, the waiting parent is released.
    await redis.delete(ck.lock("locked"))
    await redis.zrem(ck.failed, "flunk")
    await job.remove_unprocessed_children()
    assert await redis.exists(pk.dependencies("P")) == 0
    assert await redis.lrange(pk.wait, 0, -1) == [b"P"]
    assert (await events(redis, pk))[-1] == {
        "event": "waiting",
        "jobId": "P",
        "prev": "waiting-children",
    }


async def test_remove_unprocessed_children_from_the_parents_processor(
    redis: Redis, queue_name: str, pk: QueueKeys, ck: QueueKeys
) -> None:
    """The continue-on-failure pattern: the released parent drops its pending children and
    completes."""
    await add_waiting_parent(redis, pk, "P")
    await add(redis, ck, "slow", parent=(pk, "P"), delay=600)
    await add(redis, ck, "bad", parent=(pk, "P"), policy="cpof", name="bad")
    await run_children(redis, ck, completed=0, failed=1)
    assert await redis.lrange(pk.wait, 0, -1) == [b"P"]  # released by the cpof failure

    async def parent(job: Job) -> Any:
        failures = await job.get_ignored_children_failures()
        await job.remove_unprocessed_children()
        assert await redis.lrange(pk.active, 0, -1) == [b"P"]  # still ours
        return failures

    async with Worker(queue_name, parent, connection=redis, **FAST):
        await wait_for(lambda: redis.zscore(pk.completed, "P"), timeout=10)
    assert not await redis.exists(ck.job("slow"))
    value = await redis.hget(pk.job("P"), "returnvalue")
    assert value is not None and json.loads(value) == {ck.job("bad"): "boom bad"}
