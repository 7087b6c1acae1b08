"""Queue-wide operations: remove, drain, clean, obliterate, retry_jobs, promote_jobs.

Each test checks the exact Redis effects (which keys remain, which events were written) against
docs/protocol/scripts.md (#script-removeJob to #script-obliterate, #script-moveJobsToWait). The
worker is not used: where a job must be active, completed or failed, the test writes that state
directly, as a worker would (commented
"simulates a worker"). Flows are built the same way: a parent in ``waiting-children`` is written
as addParentJob would, and children are added through the add script with a parent key.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
import redis.asyncio
import redis.exceptions as redis_errors

import echomq
from echomq import _ops as ops
from echomq._keys import queue_keys
from echomq._ops import scripts
from echomq._redis.run import run_op
from echomq._redis.run_sync import run_op as run_op_sync
from echomq._redis.run_sync import run_plan as run_plan_sync
from echomq.errors import (
    ActiveJobsError,
    JobBelongsToSchedulerError,
    JobLockedError,
    QueueNotPausedError,
    ValidationError,
)
from echomq.options import JobOptions
from echomq.protocol.keys import QueueKeys
from echomq.queue import (
    Queue,
    clean,
    drain,
    obliterate,
    promote_jobs,
    remove,
    retry_jobs,
)
from helpers import Snapshot

R = redis.asyncio.Redis


# -- helpers -------------------------------------------------------------------------------


async def events(r: R, keys: QueueKeys) -> list[dict[str, str]]:
    """The events stream as dicts of str, oldest first."""
    entries = await r.xrange(keys.events) or []
    return [{_text(k): _text(v) for k, v in (fields or {}).items()} for _, fields in entries]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def queue_key_names(r: R, keys: QueueKeys) -> set[str]:
    """Every key under the queue's base key."""
    return {k.decode() if isinstance(k, bytes) else k async for k in r.scan_iter(keys.base + "*")}


async def add_waiting(r: R, keys: QueueKeys, n: int, **options: Any) -> list[str]:
    jobs = await echomq.add_bulk(
        keys.name, [("j", {"i": i}, options) for i in range(n)], connection=r, prefix=keys.prefix
    )
    return [j.id for j in jobs]


async def make_completed(r: R, keys: QueueKeys, job_id: str, finished_ms: int) -> None:
    # Simulates a worker completing the job: out of wait, into completed with finishedOn.
    await r.lrem(keys.wait, 0, job_id)
    await r.zadd(keys.completed, {job_id: finished_ms})
    await r.hset(
        keys.job(job_id),
        mapping={"finishedOn": finished_ms, "processedOn": finished_ms - 5, "returnvalue": "1"},
    )


async def make_failed(r: R, keys: QueueKeys, job_id: str, finished_ms: int) -> None:
    # Simulates a worker failing the job for good.
    await r.lrem(keys.wait, 0, job_id)
    await r.zadd(keys.failed, {job_id: finished_ms})
    await r.hset(
        keys.job(job_id),
        mapping={"finishedOn": finished_ms, "processedOn": finished_ms - 5, "failedReason": "boom"},
    )


async def make_active(r: R, keys: QueueKeys, job_id: str, *, locked: bool = True) -> None:
    # Simulates a worker taking the job (RPOPLPUSH wait -> active) and holding its lock.
    await r.lrem(keys.wait, 0, job_id)
    await r.lpush(keys.active, job_id)
    await r.hset(keys.job(job_id), "processedOn", ops.now_ms())
    if locked:
        await r.set(keys.lock(job_id), "token-1", px=30_000)


async def make_parent(r: R, keys: QueueKeys, parent_id: str) -> None:
    # Simulates addParentJob: the parent hash, placed in waiting-children.
    now = ops.now_ms()
    await r.hset(
        keys.job(parent_id),
        mapping={
            "name": "parent",
            "data": "{}",
            "opts": "{}",
            "timestamp": now,
            "delay": 0,
            "priority": 0,
        },
    )
    await r.zadd(keys.waiting_children, {parent_id: now})


async def add_child(r: R, keys: QueueKeys, parent: QueueKeys, parent_id: str, job_id: str) -> str:
    """Add a child through the add script with a parent (as FlowProducer does)."""
    op = ops.add_job(
        keys, ops.prepare_job("child", {}, JobOptions(job_id=job_id)), parent=(parent, parent_id)
    )
    return await run_op(r, op)


def other_queue(keys: QueueKeys, suffix: str = "other") -> QueueKeys:
    return queue_keys(f"{keys.name}-{suffix}", keys.prefix)


@pytest.fixture
async def keys(queue_name: str, redis: R) -> AsyncIterator[QueueKeys]:
    """The test queue's keys; every key of the test's queues is deleted afterwards."""
    qk = queue_keys(queue_name)
    yield qk
    leftovers = [k async for k in redis.scan_iter(match=qk.qualified + "*", count=1000)]
    for i in range(0, len(leftovers), 1000):
        await redis.delete(*leftovers[i : i + 1000])


async def queue_snapshot(r: R, keys: QueueKeys) -> Snapshot:
    """Like ``helpers.snapshot`` (``key -> (TYPE, DUMP)``), limited to this test's queues.

    Covers every key under ``<prefix>:<name>`` (so the ``<name>-other`` queue too). The session
    server is shared, so keys of other tests (some with TTLs) may change meanwhile.
    """
    result: Snapshot = {}
    async for key in r.scan_iter(match=keys.qualified + "*", count=1000):
        raw = key.encode() if isinstance(key, str) else key
        dumped = await r.dump(key)
        if dumped is not None:
            kind = await r.type(key)
            result[raw] = (kind.encode() if isinstance(kind, str) else kind, dumped)
    return dict(sorted(result.items()))


class CountingRunner:
    """Drives a plan like ``ops.run_plan`` and records every op it ran."""

    def __init__(self, r: R) -> None:
        self.r = r
        self.ops: list[ops.ScriptOp[Any]] = []

    async def run(self, plan: ops.Plan[Any]) -> Any:
        try:
            op = next(plan)
            while True:
                assert isinstance(op, ops.ScriptOp)
                self.ops.append(op)
                op = plan.send(await run_op(self.r, op))
        except StopIteration as done:
            return done.value


# -- remove --------------------------------------------------------------------------------


async def test_remove_waiting_job(redis_decoded: R, keys: QueueKeys) -> None:
    r = redis_decoded
    [a, b] = await add_waiting(r, keys, 2)
    await r.rpush(keys.logs(a), "line")
    before = await events(r, keys)

    assert await remove(keys.name, a, connection=r) is True

    assert await r.lrange(keys.wait, 0, -1) == [b]
    assert not await r.exists(keys.job(a), keys.logs(a))
    assert (await events(r, keys))[len(before) :] == [
        {"event": "removed", "jobId": a, "prev": "wait"}
    ]
    # A second remove finds nothing: False, and no event.
    assert await remove(keys.name, a, connection=r) is False
    assert len(await events(r, keys)) == len(before) + 1


@pytest.mark.parametrize(
    ("state", "prev"),
    [("completed", "completed"), ("failed", "failed"), ("delayed", "delayed")],
)
async def test_remove_reports_the_state_key(
    redis_decoded: R, keys: QueueKeys, state: str, prev: str
) -> None:
    r = redis_decoded
    if state == "delayed":
        [a] = await add_waiting(r, keys, 1, delay=60)
    else:
        [a] = await add_waiting(r, keys, 1)
        maker = make_completed if state == "completed" else make_failed
        await maker(r, keys, a, ops.now_ms())
    assert await remove(keys.name, a, connection=r)
    assert (await events(r, keys))[-1] == {"event": "removed", "jobId": a, "prev": prev}
    assert await r.zcard(keys.state(state)) == 0


async def test_remove_locked_job_is_refused_and_writes_nothing(
    redis: R, redis_decoded: R, keys: QueueKeys
) -> None:
    [a] = await add_waiting(redis, keys, 1)
    await make_active(redis, keys, a)
    before = await queue_snapshot(redis, keys)
    with pytest.raises(JobLockedError, match="worker"):
        await remove(keys.name, a, connection=redis)
    assert await queue_snapshot(redis, keys) == before


async def test_remove_scheduler_current_iteration_is_refused(redis: R, keys: QueueKeys) -> None:
    # Simulates a job scheduler: its `repeat` entry and its current iteration, delayed.
    next_ms = 1_900_000_000_000
    iteration = f"repeat:sched:{next_ms}"
    await redis.zadd(keys.repeat, {"sched": next_ms})
    await redis.hset(keys.job(iteration), mapping={"name": "s", "data": "{}", "rjk": "sched"})
    await redis.zadd(keys.delayed, {iteration: next_ms * 4096})
    before = await queue_snapshot(redis, keys)
    with pytest.raises(JobBelongsToSchedulerError) as info:
        await remove(keys.name, iteration, connection=redis)
    assert info.value.code == -8
    assert await queue_snapshot(redis, keys) == before
    # An older, finished iteration of the same scheduler can be removed.
    old = f"repeat:sched:{next_ms - 1000}"
    await redis.hset(keys.job(old), mapping={"name": "s", "rjk": "sched"})
    await redis.zadd(keys.completed, {old: 1})
    assert await remove(keys.name, old, connection=redis)


async def test_remove_last_child_releases_parent(redis_decoded: R, keys: QueueKeys) -> None:
    r = redis_decoded
    await make_parent(r, keys, "P")
    await add_child(r, keys, keys, "P", "c1")
    await add_child(r, keys, keys, "P", "c2")
    await r.delete(keys.marker)

    assert await remove(keys.name, "c1", connection=r)
    # c2 is still pending: the parent waits.
    assert await r.zscore(keys.waiting_children, "P") is not None
    assert await r.smembers(keys.job("P") + ":dependencies") == {keys.job("c2")}

    await r.delete(keys.marker)
    assert await remove(keys.name, "c2", connection=r)
    assert await r.zcard(keys.waiting_children) == 0
    assert await r.lrange(keys.wait, 0, -1) == ["P"]
    assert await r.zrange(keys.marker, 0, -1, withscores=True) == [("0", 0.0)]
    tail = (await events(r, keys))[-2:]
    assert tail == [
        {"event": "waiting", "jobId": "P", "prev": "waiting-children"},
        {"event": "removed", "jobId": "c2", "prev": "wait"},
    ]


async def test_release_of_parent_in_paused_queue_writes_no_marker(
    redis_decoded: R, keys: QueueKeys
) -> None:
    r = redis_decoded
    parent = other_queue(keys)
    await make_parent(r, parent, "P")
    await add_child(r, keys, parent, "P", "c1")
    await echomq.queue.pause(parent.name, connection=r)
    assert await remove(keys.name, "c1", connection=r)
    assert await r.lrange(parent.wait, 0, -1) == ["P"]
    assert not await r.exists(parent.marker)
    # The event goes to the parent queue's stream.
    assert (await events(r, parent))[-1] == {
        "event": "waiting",
        "jobId": "P",
        "prev": "waiting-children",
    }


async def test_remove_parent_removes_every_recorded_child(
    redis_decoded: R, keys: QueueKeys
) -> None:
    r = redis_decoded
    other = other_queue(keys)
    await make_parent(r, keys, "P")
    for child in ("done", "ignored", "bad", "pending"):
        await add_child(r, keys, keys, "P", child)
    await add_child(r, other, keys, "P", "far")
    pk = keys.job("P")
    # Simulates finished children: completed -> :processed, ignored failure -> :failed,
    # fpof failure -> :unsuccessful (each taken out of :dependencies by the worker).
    await make_completed(r, keys, "done", 1)
    await r.srem(pk + ":dependencies", keys.job("done"))
    await r.hset(pk + ":processed", keys.job("done"), "1")
    await make_failed(r, keys, "ignored", 1)
    await r.srem(pk + ":dependencies", keys.job("ignored"))
    await r.hset(pk + ":failed", keys.job("ignored"), "boom")
    await make_failed(r, keys, "bad", 1)
    await r.srem(pk + ":dependencies", keys.job("bad"))
    await r.zadd(pk + ":unsuccessful", {keys.job("bad"): 1})

    assert await remove(keys.name, "P", connection=r)

    for job in ("P", "done", "ignored", "bad", "pending"):
        assert not await r.exists(keys.job(job))
    assert not await r.exists(other.job("far"))
    assert not await r.exists(
        pk + ":processed", pk + ":failed", pk + ":unsuccessful", pk + ":dependencies"
    )
    for state in ("wait", "completed", "failed", "waiting-children"):
        assert not await r.exists(keys.state(state))
    assert not await r.exists(other.wait)
    removed = {(e["jobId"], e["prev"]) for e in await events(r, keys) if e["event"] == "removed"}
    assert removed == {
        ("P", "waiting-children"),
        ("done", "completed"),
        ("ignored", "failed"),
        ("bad", "failed"),
        ("pending", "wait"),
    }
    assert (await events(r, other))[-1] == {"event": "removed", "jobId": "far", "prev": "wait"}


async def test_remove_without_children_keeps_them(redis_decoded: R, keys: QueueKeys) -> None:
    r = redis_decoded
    await make_parent(r, keys, "P")
    await add_child(r, keys, keys, "P", "c1")
    assert await remove(keys.name, "P", remove_children=False, connection=r)
    assert not await r.exists(keys.job("P"), keys.job("P") + ":dependencies")
    assert await r.lrange(keys.wait, 0, -1) == ["c1"]
    assert await r.hget(keys.job("c1"), "parentKey") == keys.job("P")


async def test_remove_parent_with_locked_child_is_refused(redis: R, keys: QueueKeys) -> None:
    await make_parent(redis, keys, "P")
    await add_child(redis, keys, keys, "P", "c1")
    await make_active(redis, keys, "c1")
    before = await queue_snapshot(redis, keys)
    with pytest.raises(JobLockedError):
        await remove(keys.name, "P", connection=redis)
    assert await queue_snapshot(redis, keys) == before
    # Without children only the parent's own lock matters.
    assert await remove(keys.name, "P", remove_children=False, connection=redis)
    assert await redis.exists(keys.job("c1"))


async def test_remove_releases_owned_dedup_key(redis_decoded: R, keys: QueueKeys) -> None:
    r = redis_decoded
    [a, b] = await add_waiting(r, keys, 2)
    # Simulates two deduplicated adds: `a` owns de:x (with a keepLastIfActive dn:x), `b` has
    # deid y but de:y belongs to another job.
    await r.hset(keys.job(a), "deid", "x")
    await r.set(keys.base + "de:x", a)
    await r.hset(keys.base + "dn:x", "name", "next")
    await r.hset(keys.job(b), "deid", "y")
    await r.set(keys.base + "de:y", "someone-else")
    assert await remove(keys.name, a, connection=r)
    assert await remove(keys.name, b, connection=r)
    assert not await r.exists(keys.base + "de:x", keys.base + "dn:x")
    assert await r.get(keys.base + "de:y") == "someone-else"


async def test_job_remove_and_queue_remove(redis_decoded: R, keys: QueueKeys) -> None:
    r = redis_decoded
    async with Queue(keys.name, connection=r) as q:
        job = await q.add("j", {"x": 1})
        other = await q.add("j", {"x": 2})
        assert await job.remove() is True
        assert await job.remove() is False
        assert await q.remove(other.id) is True
    assert not await r.exists(keys.wait)


async def test_remove_validates_job_id(redis: R, keys: QueueKeys) -> None:
    before = await queue_snapshot(redis, keys)
    with pytest.raises(ValidationError):
        await remove(keys.name, "", connection=redis)
    assert await queue_snapshot(redis, keys) == before


# -- drain ---------------------------------------------------------------------------------


async def _mixed_queue(r: R, keys: QueueKeys) -> dict[str, list[str]]:
    wait = await add_waiting(r, keys, 3)
    prio = await add_waiting(r, keys, 2, priority=5)
    delayed = await add_waiting(r, keys, 2, delay=60)
    [done, act] = await add_waiting(r, keys, 2)
    await make_completed(r, keys, done, ops.now_ms())
    await make_active(r, keys, act)
    return {"wait": wait, "prio": prio, "delayed": delayed, "done": [done], "active": [act]}


async def test_drain_removes_waiting_and_prioritized_only(
    redis_decoded: R, keys: QueueKeys
) -> None:
    r = redis_decoded
    jobs = await _mixed_queue(r, keys)
    stream = await events(r, keys)
    marker = await r.zrange(keys.marker, 0, -1, withscores=True)
    pc = await r.get(keys.pc)

    await drain(keys.name, connection=r)

    assert not await r.exists(keys.wait, keys.prioritized)
    for job in jobs["wait"] + jobs["prio"]:
        assert not await r.exists(keys.job(job))
    assert await r.zrange(keys.delayed, 0, -1) == jobs["delayed"]
    assert await r.zrange(keys.completed, 0, -1) == jobs["done"]
    assert await r.lrange(keys.active, 0, -1) == jobs["active"]
    for job in jobs["delayed"] + jobs["done"] + jobs["active"]:
        assert await r.exists(keys.job(job))
    # No events; marker and pc untouched.
    assert await events(r, keys) == stream
    assert await r.zrange(keys.marker, 0, -1, withscores=True) == marker
    assert await r.get(keys.pc) == pc


async def test_drain_delayed(redis_decoded: R, keys: QueueKeys) -> None:
    r = redis_decoded
    jobs = await _mixed_queue(r, keys)
    async with Queue(keys.name, connection=r) as q:
        await q.drain(delayed=True)
    assert not await r.exists(keys.wait, keys.prioritized, keys.delayed)
    for job in jobs["delayed"]:
        assert not await r.exists(keys.job(job))
    assert await r.exists(keys.job(jobs["done"][0]), keys.job(jobs["active"][0])) == 2


async def test_drain_keeps_current_scheduler_iterations_wherever_they_are(
    redis_decoded: R, keys: QueueKeys
) -> None:
    r = redis_decoded
    # Simulates three schedulers whose current iterations sit in wait (not at the tail),
    # prioritized and delayed. BullMQ drops the wrong entries here
    # (docs/protocol/differences.md#drain).
    it_wait, it_prio, it_delayed = (f"repeat:s{i}:{1_900_000_000_000 + i}" for i in range(3))
    await r.zadd(keys.repeat, {f"s{i}": 1_900_000_000_000 + i for i in range(3)})
    [j1] = await add_waiting(r, keys, 1)
    await r.lpush(keys.wait, it_wait)
    [j2] = await add_waiting(r, keys, 1)
    await r.zadd(keys.prioritized, {it_prio: 1})
    await r.zadd(keys.delayed, {it_delayed: 1})
    for it in (it_wait, it_prio, it_delayed):
        await r.hset(keys.job(it), mapping={"name": "s", "data": "{}"})
    assert await r.lrange(keys.wait, 0, -1) == [j2, it_wait, j1]

    await drain(keys.name, delayed=True, connection=r)

    assert await r.lrange(keys.wait, 0, -1) == [it_wait]
    assert await r.zrange(keys.prioritized, 0, -1) == [it_prio]
    assert await r.zrange(keys.delayed, 0, -1) == [it_delayed]
    assert not await r.exists(keys.job(j1), keys.job(j2))
    assert await r.exists(keys.job(it_wait), keys.job(it_prio), keys.job(it_delayed)) == 3


async def test_drain_keeps_order_of_kept_ids_among_many(redis_decoded: R, keys: QueueKeys) -> None:
    r = redis_decoded
    kept = [f"repeat:s{i}:{1_900_000_000_000 + i}" for i in range(3)]
    await r.zadd(keys.repeat, {f"s{i}": 1_900_000_000_000 + i for i in range(3)})
    ids = await add_waiting(r, keys, 30)
    # Interleave the kept ids through the list (head at index 0).
    await r.linsert(keys.wait, "BEFORE", ids[5], kept[0])
    await r.linsert(keys.wait, "BEFORE", ids[17], kept[1])
    await r.rpush(keys.wait, kept[2])
    runner = CountingRunner(r)
    await runner.run(ops.drain_plan(keys, budget=7))
    # Every other id is gone; the kept ones keep their relative order (head first).
    assert await r.lrange(keys.wait, 0, -1) == [kept[1], kept[0], kept[2]]
    assert [op.args[1] for op in runner.ops] == [7] * len(runner.ops)
    assert len(runner.ops) == 30 // 7 + 1


async def test_drain_in_bounded_batches(redis_decoded: R, keys: QueueKeys) -> None:
    r = redis_decoded
    await add_waiting(r, keys, 2000)
    await add_waiting(r, keys, 600, priority=3)
    runner = CountingRunner(r)
    sizes = []
    plan = ops.drain_plan(keys)
    try:
        op = next(plan)
        while True:
            runner.ops.append(op)  # type: ignore[arg-type]
            before = await r.llen(keys.wait) + await r.zcard(keys.prioritized)
            result = await run_op(r, op)
            sizes.append(before - await r.llen(keys.wait) - await r.zcard(keys.prioritized))
            op = plan.send(result)
    except StopIteration:
        pass
    assert sizes == [1000, 1000, 600]
    assert all(op.args[1] == ops.admin.BATCH == 1000 for op in runner.ops)
    assert not await r.exists(keys.wait, keys.prioritized)
    assert not [k async for k in r.scan_iter(keys.base + "[0-9]*")]


async def test_drain_hard_parent_rule(redis_decoded: R, keys: QueueKeys) -> None:
    r = redis_decoded
    other = other_queue(keys)
    await make_parent(r, keys, "P-same")
    await add_child(r, keys, keys, "P-same", "c1")
    await make_parent(r, other, "P-far")
    await add_child(r, keys, other, "P-far", "c2")
    far_events = await events(r, other)

    await drain(keys.name, connection=r)

    # Same queue: the parent is deleted, with no event.
    assert not await r.exists(keys.job("P-same"), keys.waiting_children)
    assert not [e for e in await events(r, keys) if e["event"] == "removed"]
    # Other queue: the parent moves to its wait, without an event.
    assert await r.lrange(other.wait, 0, -1) == ["P-far"]
    assert await r.zcard(other.waiting_children) == 0
    assert await events(r, other) == far_events


# -- clean ---------------------------------------------------------------------------------


async def test_clean_completed(redis_decoded: R, keys: QueueKeys) -> None:
    r = redis_decoded
    now = ops.now_ms()
    ids = await add_waiting(r, keys, 4)
    for i, job in enumerate(ids):
        # Two finished two hours ago, two just now.
        await make_completed(r, keys, job, now - (7_200_000 if i < 2 else 0))

    removed = await clean(keys.name, timedelta(hours=1), connection=r)

    assert sorted(removed) == sorted(ids[:2])
    assert await r.zrange(keys.completed, 0, -1) == ids[2:]
    assert not await r.exists(keys.job(ids[0]), keys.job(ids[1]))
    assert (await events(r, keys))[-1] == {"event": "cleaned", "count": "2"}


async def test_clean_wait_with_limit_takes_oldest(redis_decoded: R, keys: QueueKeys) -> None:
    r = redis_decoded
    ids = await add_waiting(r, keys, 5)
    removed = await clean(keys.name, 0, 2, "waiting", connection=r)
    assert removed == ids[:2]
    assert await r.lrange(keys.wait, 0, -1) == ids[2:][::-1]
    assert (await events(r, keys))[-1] == {"event": "cleaned", "count": "2"}


async def test_clean_active_skips_locked_jobs(redis_decoded: R, keys: QueueKeys) -> None:
    r = redis_decoded
    [held, stale] = await add_waiting(r, keys, 2)
    await make_active(r, keys, held)
    await make_active(r, keys, stale, locked=False)
    assert await clean(keys.name, 0, state="active", connection=r) == [stale]
    assert await r.lrange(keys.active, 0, -1) == [held]


async def test_clean_delayed_and_prioritized_use_timestamps(
    redis_decoded: R, keys: QueueKeys
) -> None:
    r = redis_decoded
    old = ops.now_ms() / 1000 - 7200
    [d_old] = await add_waiting(r, keys, 1, delay=600, timestamp=old)
    [d_new] = await add_waiting(r, keys, 1, delay=600)
    [p_old] = await add_waiting(r, keys, 1, priority=2, timestamp=old)
    [p_new] = await add_waiting(r, keys, 1, priority=2)
    assert await clean(keys.name, 3600, state="delayed", connection=r) == [d_old]
    assert await clean(keys.name, 3600, state="prioritized", connection=r) == [p_old]
    assert await r.zrange(keys.delayed, 0, -1) == [d_new]
    assert await r.zrange(keys.prioritized, 0, -1) == [p_new]


async def test_clean_in_bounded_batches(redis_decoded: R, keys: QueueKeys) -> None:
    r = redis_decoded
    ids = await add_waiting(r, keys, 2500)
    # Simulates a worker having completed them all, an hour ago.
    finished = ops.now_ms() - 3_600_000
    async with r.pipeline(transaction=False) as pipe:
        pipe.delete(keys.wait)
        pipe.zadd(keys.completed, dict.fromkeys(ids, finished))
        for job in ids:
            pipe.hset(keys.job(job), "finishedOn", finished)
        await pipe.execute()
    runner = CountingRunner(r)

    removed = await runner.run(ops.clean_plan(keys, 60, 0, "completed"))

    assert sorted(removed) == sorted(ids)
    assert [op.args[1] for op in runner.ops] == [1000, 1000, 1000]
    assert [e["count"] for e in await events(r, keys) if e["event"] == "cleaned"] == [
        "1000",
        "1000",
        "500",
    ]
    assert not await r.exists(keys.completed)


async def test_clean_limit_spans_batches(redis_decoded: R, keys: QueueKeys) -> None:
    r = redis_decoded
    await add_waiting(r, keys, 2500)
    runner = CountingRunner(r)
    removed = await runner.run(ops.clean_plan(keys, 0, 1500, "wait"))
    assert len(removed) == 1500
    assert [op.args[1] for op in runner.ops] == [1000, 500]
    assert await r.llen(keys.wait) == 1000


async def test_clean_scans_past_recent_jobs(redis_decoded: R, keys: QueueKeys) -> None:
    r = redis_decoded
    # 1200 recent jobs at the served end of wait, then 1300 old ones (older timestamps,
    # added later, so nearer the head). Each call inspects at most 1000 entries.
    await add_waiting(r, keys, 1200)
    old = await add_waiting(r, keys, 1300, timestamp=ops.now_ms() / 1000 - 7200)
    runner = CountingRunner(r)
    removed = await runner.run(ops.clean_plan(keys, 3600, 0, "wait"))
    assert sorted(removed) == sorted(old)
    assert await r.llen(keys.wait) == 1200
    assert all(op.args[1] == 1000 for op in runner.ops)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((0, 0, "waiting-children"), "state"),
        ((0, 0, "bogus"), "state"),
        ((-1, 0, "completed"), "grace"),
        ((0, -5, "completed"), "limit"),
        ((0, 1.5, "completed"), "limit"),
        (("soon", 0, "completed"), "grace"),
    ],
)
async def test_clean_validates_before_writing(
    redis: R, keys: QueueKeys, args: tuple[Any, ...], match: str
) -> None:
    await add_waiting(redis, keys, 2)
    before = await queue_snapshot(redis, keys)
    with pytest.raises(ValidationError, match=match):
        await clean(keys.name, *args, connection=redis)
    assert await queue_snapshot(redis, keys) == before


# -- obliterate ----------------------------------------------------------------------------


async def test_obliterate_pauses_and_deletes_everything(redis_decoded: R, keys: QueueKeys) -> None:
    r = redis_decoded
    await _mixed_queue(r, keys)
    # Remove the active job (as a finishing worker would) so no force is needed.
    [act] = [_text(a) for a in await r.lrange(keys.active, 0, -1)]
    await r.delete(keys.active, keys.lock(act))
    await make_failed(r, keys, act, 1)
    await r.zadd(keys.repeat, {"sched": 1})
    await r.hset(keys.base + "repeat:sched", "name", "s")
    await r.sadd(keys.stalled, "x")
    await r.set(keys.stalled_check, 1)
    await r.set(keys.limiter, 3)
    await make_parent(r, keys, "P")
    await add_child(r, keys, keys, "P", "c-kept")
    await r.lrem(keys.wait, 0, "c-kept")  # a child that is nowhere in the states (kept)
    await r.delete(keys.marker)
    await r.zadd(keys.marker, {"0": 0})

    await obliterate(keys.name, connection=r)

    # BullMQ leaves waiting-children (and its jobs), limiter and stray job hashes.
    assert await queue_key_names(r, keys) == {
        keys.waiting_children,
        keys.job("P"),
        keys.job("P") + ":dependencies",
        keys.limiter,
        keys.job("c-kept"),
    }


async def test_obliterate_with_active_jobs_needs_force(redis: R, keys: QueueKeys) -> None:
    [a, _] = await add_waiting(redis, keys, 2)
    await make_active(redis, keys, a)
    before = await queue_snapshot(redis, keys)
    with pytest.raises(ActiveJobsError, match="force=True"):
        await obliterate(keys.name, connection=redis)
    # Refused atomically: not even paused.
    assert await queue_snapshot(redis, keys) == before

    await obliterate(keys.name, force=True, connection=redis)
    assert await queue_key_names(redis, keys) == set()


async def test_obliterate_already_paused_queue(redis_decoded: R, keys: QueueKeys) -> None:
    r = redis_decoded
    await add_waiting(r, keys, 3)
    await echomq.queue.pause(keys.name, connection=r)
    runner = CountingRunner(r)
    await runner.run(ops.obliterate_plan(keys))
    assert len(runner.ops) == 1
    assert await queue_key_names(r, keys) == set()


async def test_obliterate_in_bounded_batches(redis_decoded: R, keys: QueueKeys) -> None:
    r = redis_decoded
    await add_waiting(r, keys, 1500)
    await add_waiting(r, keys, 1000, delay=60)
    runner = CountingRunner(r)
    left = []
    plan = ops.obliterate_plan(keys)
    try:
        op = next(plan)
        while True:
            runner.ops.append(op)  # type: ignore[arg-type]
            result = await run_op(r, op)
            left.append(await r.llen(keys.wait) + await r.zcard(keys.delayed))
            op = plan.send(result)
    except StopIteration:
        pass
    assert left == [1500, 500, 0]
    assert [op.args[0] for op in runner.ops] == [1000, 1000, 1000]
    # Only the first call may pause the queue.
    assert [op.args[2] for op in runner.ops] == ["1", "0", "0"]
    assert await queue_key_names(r, keys) == set()


async def test_obliterate_refuses_a_queue_resumed_midway(redis_decoded: R, keys: QueueKeys) -> None:
    r = redis_decoded
    await add_waiting(r, keys, 2500)
    plan = ops.obliterate_plan(keys)
    assert await run_op(r, next(plan)) is True
    await echomq.queue.resume(keys.name, connection=r)
    second = plan.send(True)
    before = await queue_snapshot(r, keys)
    with pytest.raises(QueueNotPausedError):
        await run_op(r, second)
    assert await queue_snapshot(r, keys) == before
    assert await r.llen(keys.wait) == 1500


async def test_obliterate_parent_in_other_queue_is_released_silently(
    redis_decoded: R, keys: QueueKeys
) -> None:
    r = redis_decoded
    other = other_queue(keys)
    await make_parent(r, other, "P")
    await add_child(r, keys, other, "P", "c1")
    far_events = await events(r, other)
    await obliterate(keys.name, connection=r)
    assert await r.lrange(other.wait, 0, -1) == ["P"]
    assert await events(r, other) == far_events
    assert not await r.exists(other.job("P") + ":dependencies")


# -- retry_jobs / promote_jobs -------------------------------------------------------------


async def test_retry_failed_jobs(redis_decoded: R, keys: QueueKeys) -> None:
    r = redis_decoded
    now = ops.now_ms()
    ids = await add_waiting(r, keys, 3, priority=4)
    for i, job in enumerate(ids):
        await r.zrem(keys.prioritized, job)
        await make_failed(r, keys, job, now - 10_000 + i)
    await r.delete(keys.marker)
    mark = len(await events(r, keys))

    await retry_jobs(keys.name, connection=r)

    # LPUSHed in score order, priority ignored.
    assert await r.lrange(keys.wait, 0, -1) == ids[::-1]
    assert not await r.exists(keys.failed)
    for job in ids:
        assert await r.hmget(keys.job(job), "finishedOn", "processedOn", "failedReason") == [
            None,
            None,
            None,
        ]
    assert (await events(r, keys))[mark:] == [
        {"event": "waiting", "jobId": job, "prev": "failed"} for job in ids
    ]
    assert await r.zrange(keys.marker, 0, -1) == ["0"]


async def test_retry_completed_up_to_timestamp_in_batches(
    redis_decoded: R, keys: QueueKeys
) -> None:
    r = redis_decoded
    ids = await add_waiting(r, keys, 5)
    for i, job in enumerate(ids):
        await make_completed(r, keys, job, 1_000_000 + i * 1000)
    runner = CountingRunner(r)
    # Finished at or before 1 003 000 ms: the first four.
    await runner.run(ops.retry_jobs_plan(keys, "completed", 2, 1003.0))
    assert [op.args[0] for op in runner.ops] == [2, 2, 2]
    assert await r.zrange(keys.completed, 0, -1) == ids[4:]
    assert sorted(await r.lrange(keys.wait, 0, -1)) == sorted(ids[:4])
    assert await r.hget(keys.job(ids[0]), "returnvalue") is None


async def test_retry_child_becomes_pending_again(redis_decoded: R, keys: QueueKeys) -> None:
    r = redis_decoded
    await make_parent(r, keys, "P")
    await add_child(r, keys, keys, "P", "c1")
    pk = keys.job("P")
    # Simulates the worker completing c1 (result recorded on the parent).
    await make_completed(r, keys, "c1", 1000)
    await r.srem(pk + ":dependencies", keys.job("c1"))
    await r.hset(pk + ":processed", keys.job("c1"), "1")
    async with Queue(keys.name, connection=r) as q:
        await q.retry_jobs("completed")
    assert await r.smembers(pk + ":dependencies") == {keys.job("c1")}
    assert not await r.exists(pk + ":processed")


async def test_promote_jobs(redis_decoded: R, keys: QueueKeys) -> None:
    r = redis_decoded
    ids = await add_waiting(r, keys, 3, delay=3600)
    mark = len(await events(r, keys))
    async with Queue(keys.name, connection=r) as q:
        await q.promote_jobs(count=2)
    assert not await r.exists(keys.delayed)
    assert await r.lrange(keys.wait, 0, -1) == ids[::-1]
    assert (await events(r, keys))[mark:] == [
        {"event": "waiting", "jobId": job, "prev": "delayed"} for job in ids
    ]
    # As in BullMQ, the delay field is left as it was.
    assert await r.hget(keys.job(ids[0]), "delay") == "3600000"
    await promote_jobs(keys.name, connection=r)  # nothing left: one call, no change
    assert not await r.exists(keys.delayed)


@pytest.mark.parametrize(
    "kwargs",
    [{"state": "active"}, {"state": "delayed"}, {"count": 0}, {"count": True}],
)
async def test_retry_jobs_validates_before_writing(
    redis: R, keys: QueueKeys, kwargs: dict[str, Any]
) -> None:
    [a] = await add_waiting(redis, keys, 1)
    await make_failed(redis, keys, a, 1)
    before = await queue_snapshot(redis, keys)
    with pytest.raises(ValidationError):
        await retry_jobs(keys.name, connection=redis, **kwargs)
    assert await queue_snapshot(redis, keys) == before


# -- scripts that pick their state key from ARGV -------------------------------------------


@pytest.mark.parametrize(
    ("script", "args"),
    [("cleanJobsInSet", [0, 10, "meta", 0]), ("moveJobsToWait", [10, "+inf", "wait"])],
)
async def test_state_picked_from_argv_must_be_declared(
    redis: R, keys: QueueKeys, script: str, args: list[Any]
) -> None:
    # The script declares every state it may work on and refuses any other name, writing
    # nothing (the ops refuse it before sending; this is the script's own guard).
    await add_waiting(redis, keys, 2)
    before = await queue_snapshot(redis, keys)
    op = ops.ScriptOp(scripts.get(script), keys.script_keys[script], args, lambda r: r)
    with pytest.raises(redis_errors.ResponseError, match="unknown state"):
        await run_op(redis, op)
    assert await queue_snapshot(redis, keys) == before


def test_ops_refuse_a_state_their_script_does_not_declare(keys: QueueKeys) -> None:
    with pytest.raises(ValidationError, match="state"):
        ops.clean_batch(keys, cutoff_ms=0, batch=1, state="waiting")  # a name, not a suffix
    with pytest.raises(ValidationError, match="state"):
        ops.move_jobs_to_wait(keys, state="wait", count=1, max_score="+inf")


# -- sync driver and URL connections -------------------------------------------------------


def test_plans_run_on_a_sync_client(sync_redis: Any, queue_name: str) -> None:
    keys = queue_keys(queue_name)
    for i in range(5):
        sync_redis.lpush(keys.wait, str(i))
        sync_redis.hset(keys.job(str(i)), "name", "j")
    run_plan_sync(sync_redis, ops.drain_plan(keys, budget=2))
    assert not sync_redis.exists(keys.wait, keys.job("0"))
    assert run_op_sync(sync_redis, ops.remove_job(keys, "gone")) is False


async def test_module_functions_accept_a_url(redis_url: str, redis: R, keys: QueueKeys) -> None:
    await add_waiting(redis, keys, 3)
    assert len(await clean(keys.name, 0, state="wait", connection=redis_url)) == 3
    await drain(keys.name, connection=redis_url)
    await obliterate(keys.name, connection=redis_url)
    assert await queue_key_names(redis, keys) == set()
