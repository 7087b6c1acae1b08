"""Grouped jobs met by the scripts and getters outside the fetch (docs/protocol/groups.md).

A grouped job lives in the ``groups`` keys and never in ``wait``, ``prioritized``, ``delayed``
or ``active``. Every script that meets one (getState, removeJob, drain, cleanJobsInSet,
obliterate, moveJobsToWait, reprocessJob, promote, changePriority, changeDelay) keeps it there,
and the getters count and list it with its state (#groups-getters). Jobs are made active by a
real fetch (finishAndFetch) and failed or completed through it, as a worker would.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import redis.asyncio

from echomq import JobState, Queue
from echomq import _ops as ops
from echomq._keys import queue_keys
from echomq._ops import worker as wops
from echomq._redis.run import run_op, run_plan
from echomq.errors import ActiveJobsError, JobLockedError, JobNotInStateError
from echomq.protocol.keys import QueueKeys

R = redis.asyncio.Redis

PARAMS = wops.FetchParams("tok:", 30_000)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@pytest.fixture
async def keys(queue_name: str, redis: R) -> AsyncIterator[QueueKeys]:
    qk = queue_keys(queue_name)
    yield qk
    leftovers = [k async for k in redis.scan_iter(match=qk.qualified + "*", count=1000)]
    if leftovers:
        await redis.delete(*leftovers)


@pytest.fixture
async def queue(redis: R, keys: QueueKeys) -> AsyncIterator[Queue]:
    async with Queue(keys.name, connection=redis) as q:
        yield q


async def key_names(r: R, keys: QueueKeys) -> set[str]:
    """Every key under the queue's prefix key."""
    return {_text(k) async for k in r.scan_iter(match=keys.base + "*", count=1000)}


async def events(r: R, keys: QueueKeys) -> list[dict[str, str]]:
    entries = await r.xrange(keys.events) or []
    return [{_text(k): _text(v) for k, v in fields.items()} for _, fields in entries]


async def ungrouped_holders(r: R, keys: QueueKeys, job_id: str) -> list[str]:
    """The BullMQ structures that hold ``job_id`` (a grouped job must be in none)."""
    held = []
    for key in (keys.wait, keys.active, keys.paused):
        if await r.lpos(key, job_id) is not None:
            held.append(key)
    for key in (keys.delayed, keys.prioritized):
        if await r.zscore(key, job_id) is not None:
            held.append(key)
    return held


async def group_waiting(r: R, keys: QueueKeys, gid: str) -> list[str]:
    """A group's waiting jobs, in the order they run."""
    listed = await r.lrange(keys.group_wait(gid), 0, -1)
    prioritized = await r.zrange(keys.group_prioritized(gid), 0, -1)
    return [_text(i) for i in [*listed, *prioritized]]


async def take(r: R, keys: QueueKeys, n: int = 1) -> list[wops.Fetched]:
    """Fetch up to ``n`` jobs as a worker would (locks held for 30 s)."""
    reply = await run_op(r, wops.finish_and_fetch(keys, [], n, 1, PARAMS, ops.now_ms()))
    return reply.jobs


async def finish(r: R, keys: QueueKeys, job: wops.Fetched, kind: str, value: str) -> None:
    item = wops.finish_item(kind, job.id, job.token, value)
    reply = await run_op(r, wops.finish_and_fetch(keys, [item], 0, 100, PARAMS, ops.now_ms()))
    assert reply.codes == [0]


async def failed_grouped(r: R, queue: Queue, keys: QueueKeys, gid: str = "t1") -> str:
    """A grouped job taken and failed for good; its id."""
    job = await queue.add("g", {}, group=gid)
    (taken,) = await take(r, keys)
    assert taken.id == job.id
    await finish(r, keys, taken, wops.FAIL, "boom")
    assert await r.zscore(keys.failed, job.id) is not None
    return job.id


# -- getState ------------------------------------------------------------------------------


async def test_get_state_of_grouped_jobs(redis: R, queue: Queue, keys: QueueKeys) -> None:
    waiting = await queue.add("w", {}, group="t1")
    prioritized = await queue.add("p", {}, group="t1", priority=4)
    delayed = await queue.add("d", {}, group="t1", delay=60)
    assert await queue.get_state(waiting.id) is JobState.WAITING
    # whatever its priority, a grouped waiting job is waiting
    assert await queue.get_state(prioritized.id) is JobState.WAITING
    assert await queue.get_state(delayed.id) is JobState.DELAYED
    (taken,) = await take(redis, keys)
    assert taken.id == waiting.id
    assert await queue.get_state(waiting.id) is JobState.ACTIVE
    await finish(redis, keys, taken, wops.COMPLETE, '"ok"')
    assert await queue.get_state(waiting.id) is JobState.COMPLETED
    assert await queue.get_state("nope") is JobState.UNKNOWN
    for job_id in (waiting.id, prioritized.id, delayed.id):
        assert await ungrouped_holders(redis, keys, job_id) == []


async def test_get_state_of_ungrouped_jobs_unchanged(queue: Queue) -> None:
    await queue.add("g", {}, group="t1")
    plain = await queue.add("w", {})
    assert await queue.get_state(plain.id) is JobState.WAITING
    prioritized = await queue.add("p", {}, priority=2)
    assert await queue.get_state(prioritized.id) is JobState.PRIORITIZED


# -- counts and lists ----------------------------------------------------------------------


async def test_counts_include_grouped_jobs(redis: R, queue: Queue, keys: QueueKeys) -> None:
    await queue.add("u", {})
    await queue.add("u", {}, delay=60)
    for gid in ("t1", "t2"):
        await queue.add("g", {}, group=gid)
        await queue.add("g", {}, group=gid, priority=3)
    await queue.add("g", {}, group="t1", delay=60)
    await queue.add("g", {}, group="t2", delay=60)
    counts = await queue.get_job_counts("waiting", "delayed", "active", "prioritized")
    assert counts == {"waiting": 5, "delayed": 3, "active": 0, "prioritized": 0}
    taken = await take(redis, keys, 3)
    assert len(taken) == 3
    counts = await queue.get_job_counts("waiting", "active")
    assert counts == {"waiting": 2, "active": 3}
    assert await queue.count() == 2 + 3  # waiting + delayed


async def test_is_maxed_counts_grouped_active_jobs(redis: R, queue: Queue, keys: QueueKeys) -> None:
    await queue.set_global_concurrency(2)
    await queue.add("g", {}, group="t1")
    await queue.add("g", {}, group="t2")
    assert not await queue.is_maxed()
    assert len(await take(redis, keys, 2)) == 2
    assert await redis.llen(keys.active) == 0
    assert await queue.is_maxed()


async def test_lists_put_ungrouped_first_and_page_across_both(queue: Queue) -> None:
    plain = [(await queue.add("u", {"i": i})).id for i in range(3)]
    grouped = [(await queue.add("g", {"i": i}, group=f"t{i % 2}")).id for i in range(3)]
    # newest first within each part, ungrouped first
    newest = [*reversed(plain), *reversed(grouped)]
    assert [j.id for j in await queue.get_jobs("waiting")] == newest
    # get_waiting: next to run first (oldest first), ungrouped then grouped
    assert [j.id for j in await queue.get_waiting()] == [*plain, *grouped]
    for start, end in [(0, 1), (2, 3), (1, 4), (3, 5), (4, 9), (5, 5), (6, 9), (0, -1), (2, -1)]:
        got = [j.id for j in await queue.get_jobs("waiting", start, end)]
        want = newest[start:] if end == -1 else newest[start : end + 1]
        assert got == want, (start, end)
    oldest = [*plain, *grouped]
    for start, end in [(0, 1), (2, 3), (3, 5), (0, -1), (4, -1)]:
        got = [j.id for j in await queue.get_jobs("waiting", start, end, asc=True)]
        want = oldest[start:] if end == -1 else oldest[start : end + 1]
        assert got == want, (start, end)
    # other negative indexes run across both as LRANGE's do
    assert [j.id for j in await queue.get_jobs("waiting", -2, -1)] == newest[-2:]
    assert [j.id for j in await queue.get_jobs("waiting", 0, -3)] == newest[:-2]


async def test_lists_of_delayed_and_active_grouped_jobs(
    redis: R, queue: Queue, keys: QueueKeys
) -> None:
    plain_delayed = (await queue.add("u", {}, delay=60)).id
    grouped_delayed = (await queue.add("g", {}, group="t1", delay=30)).id
    assert [j.id for j in await queue.get_delayed()] == [plain_delayed, grouped_delayed]
    grouped = (await queue.add("g", {}, group="t1")).id
    (taken,) = await take(redis, keys)
    assert taken.id == grouped
    assert [j.id for j in await queue.get_active()] == [grouped]
    plain = (await queue.add("u", {})).id
    (taken,) = await take(redis, keys)
    assert taken.id == plain
    assert [j.id for j in await queue.get_active()] == [plain, grouped]
    assert [j.id for j in await queue.get_jobs("active", 0, 0, asc=True)] == [plain]
    assert [j.id for j in await queue.get_jobs("active", 1, 5, asc=True)] == [grouped]
    assert [j.id for j in await queue.get_jobs(["active", "delayed"], 1, 1)] == [
        grouped,
        grouped_delayed,
    ]


# -- remove --------------------------------------------------------------------------------


async def test_remove_grouped_waiting_job(redis: R, queue: Queue, keys: QueueKeys) -> None:
    first = await queue.add("g", {}, group="t1")
    second = await queue.add("g", {}, group="t1")
    assert await queue.remove(first.id)
    assert await group_waiting(redis, keys, "t1") == [second.id]
    assert await redis.zscore(keys.groups_waiting, first.id) is None
    assert await redis.zscore(keys.groups, "t1") == 1
    assert {"event": "removed", "jobId": first.id, "prev": "wait"} in [
        {k: e[k] for k in ("event", "jobId", "prev") if k in e} for e in await events(redis, keys)
    ]
    assert await second.remove()
    assert not await redis.exists(keys.group_wait("t1"))
    assert await redis.zscore(keys.groups, "t1") is None
    assert await queue.get_job_counts("waiting") == {"waiting": 0}


async def test_remove_grouped_delayed_job(redis: R, queue: Queue, keys: QueueKeys) -> None:
    job = await queue.add("g", {}, group="t1", delay=60)
    assert await redis.zscore(keys.groups_delayed, job.id) is not None
    assert await job.remove()
    assert await redis.zcard(keys.groups_delayed) == 0
    assert not await redis.exists(keys.job(job.id))


async def test_remove_grouped_active_job(redis: R, queue: Queue, keys: QueueKeys) -> None:
    await queue.set_group_concurrency(1, group="t1")
    job = await queue.add("g", {}, group="t1")
    nxt = await queue.add("g", {}, group="t1")
    (taken,) = await take(redis, keys)
    assert taken.id == job.id
    assert await take(redis, keys) == []  # the group is at its concurrency
    with pytest.raises(JobLockedError):
        await queue.remove(job.id)
    assert await redis.lrange(keys.groups_active, 0, -1) == [job.id.encode()]
    # once its lock is gone it is removed and its group's slot is free again
    await redis.delete(keys.lock(job.id))
    assert await queue.remove(job.id)
    assert await redis.llen(keys.groups_active) == 0
    # no job running; in the rotation (odd): the field stays while the group is listed
    assert await redis.get(keys.group_run("t1")) == b"1"
    (taken,) = await take(redis, keys)
    assert taken.id == nxt.id


# -- drain ---------------------------------------------------------------------------------


@pytest.mark.parametrize("budget", [1000, 2])
async def test_drain_removes_grouped_waiting_jobs(
    redis: R, queue: Queue, keys: QueueKeys, budget: int
) -> None:
    plain = await queue.add("u", {})
    grouped = [(await queue.add("g", {}, group=f"t{i % 3}")).id for i in range(7)]
    # lifo jobs (the oldest at the LIST's tail) and jobs with a priority (the group's ZSET)
    grouped += [(await queue.add("g", {}, group="t0", lifo=True)).id for _ in range(40)]
    grouped += [(await queue.add("g", {}, group="t2", priority=1 + i % 3)).id for i in range(5)]
    delayed = await queue.add("g", {}, group="t1", delay=60)
    assert await redis.llen(keys.groups_ready) == 4  # "" and three groups
    await run_plan(redis, ops.drain_plan(keys, budget=budget))
    assert await queue.get_job_counts("waiting", "delayed") == {"waiting": 0, "delayed": 1}
    for job_id in [plain.id, *grouped]:
        assert not await redis.exists(keys.job(job_id))
    for gid in ("t0", "t1", "t2"):
        assert not await redis.exists(keys.group_wait(gid), keys.group_prioritized(gid))
    assert await redis.zcard(keys.groups_waiting) == 0
    # the emptied groups left the rotation and the index
    assert not await redis.exists(keys.groups_ready)
    # (groups:run:<gid> is twice the active jobs, plus 1 in the rotation: none is left)
    assert not [k async for k in redis.scan_iter(match=keys.group_run("*"))]
    assert await redis.zcard(keys.groups) == 0
    assert await redis.zscore(keys.groups_delayed, delayed.id) is not None
    await queue.drain(delayed=True)
    assert await redis.zcard(keys.groups_delayed) == 0
    assert not await redis.exists(keys.job(delayed.id))
    # a group added afterwards runs again
    again = await queue.add("g", {}, group="t1")
    (taken,) = await take(redis, keys)
    assert taken.id == again.id


@pytest.mark.parametrize("budget", [1000, 2])
async def test_drain_keeps_a_schedulers_waiting_iteration_in_its_group(
    redis: R, queue: Queue, keys: QueueKeys, budget: int
) -> None:
    await queue.upsert_job_scheduler(
        "tick", every=60, template={"name": "tick", "opts": {"group": "cron"}}
    )
    (iteration,) = await group_waiting(redis, keys, "cron")
    # lifo jobs before it in the group's LIST, fifo ones after it
    await queue.add_bulk([("j", {}, {"group": "cron", "lifo": True}) for _ in range(5)])
    await queue.add_bulk([("j", {}, {"group": "cron"}) for _ in range(5)])
    assert len(await group_waiting(redis, keys, "cron")) == 11
    await run_plan(redis, ops.drain_plan(keys, budget=budget))
    assert await group_waiting(redis, keys, "cron") == [iteration]
    assert await redis.zrange(keys.groups_waiting, 0, -1) == [iteration.encode()]
    assert await redis.zscore(keys.groups, "cron") == 1
    assert await queue.get_job_counts("waiting") == {"waiting": 1}


async def test_drain_keeps_active_groups_in_the_index(
    redis: R, queue: Queue, keys: QueueKeys
) -> None:
    await queue.add("g", {}, group="t1")
    await queue.add("g", {}, group="t1")
    await queue.add("g", {}, group="t2")
    (taken,) = await take(redis, keys)
    await queue.drain()
    assert await redis.zrange(keys.groups, 0, -1, withscores=True) == [(b"t1", 0.0)]
    assert await redis.lrange(keys.groups_active, 0, -1) == [taken.id.encode()]
    assert not await redis.exists(keys.groups_ready)
    await finish(redis, keys, taken, wops.COMPLETE, '"ok"')
    assert await redis.zcard(keys.groups) == 0


# -- obliterate ----------------------------------------------------------------------------


async def test_obliterate_deletes_every_group_key(redis: R, queue: Queue, keys: QueueKeys) -> None:
    await queue.add("u", {})
    for i in range(6):
        await queue.add("g", {}, group=f"t{i % 3}")
    await queue.add("g", {}, group="t4", delay=60)
    await redis.hset(
        keys.groups_state, mapping={"c": 5, "c:t1": 2, "r:t2": "10:1000", "p:t9": 1, "r": "5:60000"}
    )
    await redis.set(keys.group_limit("t2"), 3, px=60_000)
    await redis.set(keys.group_limit("t9"), 1, px=60_000)
    await redis.zadd(keys.groups_limited, {"t8": ops.now_ms() + 60_000})
    await redis.set(keys.group_limit("t8"), 5, px=60_000)
    (taken,) = await take(redis, keys)
    assert taken.id
    assert any(k.startswith(keys.groups) for k in await key_names(redis, keys))
    with pytest.raises(ActiveJobsError):
        await queue.obliterate()
    await run_plan(redis, ops.obliterate_plan(keys, force=True, budget=2))
    assert await key_names(redis, keys) == set()


async def test_obliterate_refuses_grouped_active_jobs_and_writes_nothing(
    redis: R, queue: Queue, keys: QueueKeys
) -> None:
    await queue.add("g", {}, group="t1")
    await take(redis, keys)
    await queue.pause()
    before = {k: await redis.dump(k) for k in await key_names(redis, keys)}
    with pytest.raises(ActiveJobsError):
        await queue.obliterate()
    after = {k: await redis.dump(k) for k in await key_names(redis, keys)}
    assert set(after) == set(before)


# -- clean ---------------------------------------------------------------------------------


@pytest.mark.parametrize("batch", [1000, 2])
async def test_clean_wait_cleans_grouped_waiting_jobs(
    redis: R, queue: Queue, keys: QueueKeys, batch: int
) -> None:
    plain = [(await queue.add("u", {})).id for _ in range(2)]
    grouped = [(await queue.add("g", {}, group=f"t{i % 2}")).id for i in range(3)]
    removed = await run_plan(redis, ops.clean_plan(keys, 0, 0, "wait", batch=batch))
    assert sorted(removed) == sorted(plain + grouped)
    assert await queue.get_job_counts("waiting") == {"waiting": 0}
    assert await redis.zcard(keys.groups) == 0
    assert not await redis.exists(keys.group_wait("t0"))
    assert not await redis.exists(keys.group_wait("t1"))


async def test_clean_wait_keeps_fresh_grouped_jobs_and_honours_limit(
    redis: R, queue: Queue, keys: QueueKeys
) -> None:
    old = [(await queue.add("g", {}, group="t1")).id for _ in range(3)]
    for job_id in old:
        await redis.hset(keys.job(job_id), "timestamp", 1000)
    fresh = (await queue.add("g", {}, group="t1")).id
    removed = await run_plan(redis, ops.clean_plan(keys, 60, 2, "wait", batch=1))
    assert removed == old[:2]
    assert await group_waiting(redis, keys, "t1") == [old[2], fresh]
    removed = await run_plan(redis, ops.clean_plan(keys, 60, 0, "wait", batch=1))
    assert removed == [old[2]]
    assert await group_waiting(redis, keys, "t1") == [fresh]
    assert await redis.zscore(keys.groups, "t1") == 1


async def test_clean_delayed_and_active_grouped_jobs(
    redis: R, queue: Queue, keys: QueueKeys
) -> None:
    delayed = (await queue.add("g", {}, group="t1", delay=60)).id
    plain_delayed = (await queue.add("u", {}, delay=60)).id
    assert sorted(await queue.clean(0, 0, "delayed")) == sorted([delayed, plain_delayed])
    assert await redis.zcard(keys.groups_delayed) == 0
    first = (await queue.add("g", {}, group="t1")).id
    second = (await queue.add("g", {}, group="t2")).id
    taken = await take(redis, keys, 2)
    assert {j.id for j in taken} == {first, second}
    # locked jobs are kept; an unlocked one is cleaned and frees its group's slot
    assert await queue.clean(0, 0, "active") == []
    await redis.delete(keys.lock(first))
    assert await queue.clean(0, 0, "active") == [first]
    assert await redis.lrange(keys.groups_active, 0, -1) == [second.encode()]
    assert await redis.get(keys.group_run("t1")) is None
    assert await redis.zscore(keys.groups, "t1") is None


# -- back to ready: retries, promotion, priority, delay ------------------------------------


async def test_retry_jobs_returns_grouped_jobs_to_their_group(
    redis: R, queue: Queue, keys: QueueKeys
) -> None:
    grouped = await failed_grouped(redis, queue, keys)
    plain = await queue.add("u", {})
    (taken,) = await take(redis, keys)
    assert taken.id == plain.id
    await finish(redis, keys, taken, wops.FAIL, "boom")
    await queue.retry_jobs()
    assert await redis.zcard(keys.failed) == 0
    assert await ungrouped_holders(redis, keys, grouped) == []
    assert await group_waiting(redis, keys, "t1") == [grouped]
    assert await redis.lrange(keys.wait, 0, -1) == [plain.id.encode()]
    assert await queue.get_state(grouped) is JobState.WAITING
    assert await redis.hget(keys.job(grouped), "failedReason") is None
    (again,) = await take(redis, keys)
    assert again.id in (grouped, plain.id)


async def test_job_retry_returns_a_grouped_job_to_its_group(
    redis: R, queue: Queue, keys: QueueKeys
) -> None:
    grouped = await failed_grouped(redis, queue, keys)
    job = await queue.get_job(grouped)
    assert job is not None
    await job.retry("failed")
    assert await ungrouped_holders(redis, keys, grouped) == []
    assert await group_waiting(redis, keys, "t1") == [grouped]
    assert await redis.zscore(keys.groups_waiting, grouped) is not None
    assert sorted(await redis.lrange(keys.groups_ready, 0, -1)) == [b"", b"t1"]  # in the rotation
    (again,) = await take(redis, keys)
    assert again.id == grouped


async def test_promote_jobs_promotes_grouped_delayed_jobs(
    redis: R, queue: Queue, keys: QueueKeys
) -> None:
    plain = await queue.add("u", {}, delay=60)
    grouped = [(await queue.add("g", {}, group="t1", delay=60)).id for _ in range(3)]
    await run_plan(redis, ops.promote_jobs_plan(keys, count=2))
    assert await redis.zcard(keys.delayed) == 0
    assert await redis.zcard(keys.groups_delayed) == 0
    assert await redis.lrange(keys.wait, 0, -1) == [plain.id.encode()]
    assert await group_waiting(redis, keys, "t1") == grouped
    for job_id in grouped:
        assert await ungrouped_holders(redis, keys, job_id) == []
        assert await queue.get_state(job_id) is JobState.WAITING
    waiting_events = [e for e in await events(redis, keys) if e["event"] == "waiting"]
    assert {e["jobId"] for e in waiting_events} == {plain.id, *grouped}


async def test_job_promote_of_a_grouped_delayed_job(
    redis: R, queue: Queue, keys: QueueKeys
) -> None:
    job = await queue.add("g", {}, group="t1", delay=60, priority=2)
    first = await queue.add("g", {}, group="t1", priority=1)
    await job.promote()
    assert await ungrouped_holders(redis, keys, job.id) == []
    assert await redis.zcard(keys.groups_delayed) == 0
    assert await group_waiting(redis, keys, "t1") == [first.id, job.id]
    assert await redis.hget(keys.job(job.id), "delay") == b"0"
    with pytest.raises(JobNotInStateError):
        await job.promote()


async def test_change_priority_rescores_inside_the_group(
    redis: R, queue: Queue, keys: QueueKeys
) -> None:
    a = await queue.add("g", {}, group="t1")
    b = await queue.add("g", {}, group="t1")
    c = await queue.add("g", {}, group="t1", priority=5)
    assert await group_waiting(redis, keys, "t1") == [a.id, b.id, c.id]
    await a.change_priority(3)
    assert await group_waiting(redis, keys, "t1") == [b.id, a.id, c.id]
    await c.change_priority(3, lifo=True)
    assert await group_waiting(redis, keys, "t1") == [b.id, c.id, a.id]
    await c.change_priority(0)
    assert await group_waiting(redis, keys, "t1") == [b.id, c.id, a.id]
    for job in (a, b, c):
        assert await ungrouped_holders(redis, keys, job.id) == []
    assert await redis.zscore(keys.groups, "t1") == 3
    assert await redis.zcard(keys.groups_waiting) == 3
    # a delayed grouped job keeps its new priority for when it is due
    d = await queue.add("g", {}, group="t1", delay=60)
    await d.change_priority(1)
    assert await redis.hget(keys.job(d.id), "priority") == b"1"
    assert await redis.zscore(keys.groups_delayed, d.id) is not None
    await d.promote()
    assert await group_waiting(redis, keys, "t1") == [b.id, c.id, d.id, a.id]


async def test_change_delay_rescores_in_grouped_delayed(
    redis: R, queue: Queue, keys: QueueKeys
) -> None:
    job = await queue.add("g", {}, group="t1", delay=60)
    before = await redis.zscore(keys.groups_delayed, job.id)
    await job.change_delay(120)
    after = await redis.zscore(keys.groups_delayed, job.id)
    assert before is not None and after is not None and after > before
    assert await ungrouped_holders(redis, keys, job.id) == []
    assert await redis.hget(keys.job(job.id), "delay") == b"120000"
    assert any(e["event"] == "delayed" and e["jobId"] == job.id for e in await events(redis, keys))
    waiting = await queue.add("g", {}, group="t1")
    with pytest.raises(JobNotInStateError):
        await waiting.change_delay(5)


# -- the rate window -------------------------------------------------------------------------


async def test_a_rate_slot_frees_a_window_after_its_job_ends(
    redis: R, queue: Queue, keys: QueueKeys
) -> None:
    await queue.set_group_rate_limit(1, 0.3, group="t1")
    await queue.add_bulk([("g", {}, {"group": "t1"}) for _ in range(2)])
    (first,) = await take(redis, keys)
    await asyncio.sleep(0.4)  # a window after its start, but it still runs
    assert await take(redis, keys) == []
    (entry,) = await redis.zrange(keys.group_limit("t1"), 0, -1, withscores=True)
    assert entry[1] == float("inf")
    assert await redis.pttl(keys.group_limit("t1")) == -1  # no expiry while a job runs
    # out of the rotation until that job ends, whatever is added meanwhile
    assert await redis.zscore(keys.groups_limited, "t1") == float("inf")
    await queue.add("g", {}, group="t1")
    assert await redis.get(keys.group_run("t1")) == b"2"  # one running, out of the rotation
    (info,) = await queue.get_groups()
    assert info.limited and info.waiting == 2
    await finish(redis, keys, first, "C", "1")
    until = await redis.zscore(keys.groups_limited, "t1")
    assert until is not None and 0 < until - ops.now_ms() <= 300  # a window after the end
    assert await take(redis, keys) == []  # ended just now: a window to go
    assert 0 < await redis.pttl(keys.group_limit("t1")) <= 300
    await asyncio.sleep(0.35)
    (second,) = await take(redis, keys)
    assert second.id != first.id


async def test_a_running_rate_entry_whose_job_is_gone_counts_as_ended(
    redis: R, queue: Queue, keys: QueueKeys
) -> None:
    """An end never recorded (a hash deleted under a running job, a limit removed and set again
    while it ran) does not hold the slot for ever: met with the window full, it ends then."""
    await queue.set_group_rate_limit(1, 0.2, group="t1")
    await queue.add_bulk([("g", {}, {"group": "t1"}) for _ in range(2)])
    (first,) = await take(redis, keys)
    await redis.delete(keys.lock(first.id))  # its worker is gone, nobody records its end
    await queue.remove_group_rate_limit(group="t1")
    await queue.set_group_rate_limit(1, 0.2, group="t1")
    assert await take(redis, keys) == []  # counted as ended when met: a window to go
    await asyncio.sleep(0.25)
    (second,) = await take(redis, keys)
    assert second.id != first.id


# -- jobs a fetch takes and gives back ---------------------------------------------------------


async def test_a_grouped_id_without_a_hash_is_dropped_and_frees_its_group(
    redis: R, queue: Queue, keys: QueueKeys
) -> None:
    gone = await queue.add("g", {}, group="t1")
    kept = await queue.add("g", {}, group="t1")
    await redis.delete(keys.job(gone.id))
    reply = await run_op(redis, wops.finish_and_fetch(keys, [], 5, 1, PARAMS, ops.now_ms()))
    assert [j.id for j in reply.jobs] == [kept.id]
    assert [(d.id, d.structure) for d in reply.dangling] == [(gone.id, "group")]
    assert await redis.lrange(keys.groups_active, 0, -1) == [kept.id.encode()]
    assert await redis.zcard(keys.groups_waiting) == 0
    assert await redis.get(keys.group_run("t1")) == b"2"  # one running, out of turn


async def test_a_fetch_sets_aside_grouped_isolated_jobs(
    redis: R, queue: Queue, keys: QueueKeys
) -> None:
    """An isolated job runs alone: a fetch that took a job first sets it aside, back at the
    head of its group, still counted as waiting, not active."""
    first = await queue.add("g", {}, group="t1")
    second = await queue.add("g", {}, group="t2")
    third = await queue.add("g", {}, group="t3")
    after = await queue.add("g", {}, group="t2")
    await redis.hset(keys.job(second.id), mapping={"stc": 2, "iso": 1})
    # two slots: t1's job, t2's set aside (not the first job), t3's
    reply = await run_op(redis, wops.finish_and_fetch(keys, [], 2, 1, PARAMS, ops.now_ms()))
    assert sorted(j.id for j in reply.jobs) == sorted([first.id, third.id])
    assert reply.set_aside == 1
    assert sorted(await redis.lrange(keys.groups_active, 0, -1)) == sorted(
        [first.id.encode(), third.id.encode()]
    )
    assert sorted(await redis.zrange(keys.groups_waiting, 0, -1)) == sorted(
        [second.id.encode(), after.id.encode()]
    )
    # back at the head of its group, where it was taken from
    assert await group_waiting(redis, keys, "t2") == [second.id, after.id]
    assert await redis.zscore(keys.groups, "t2") == 2
    assert await redis.get(keys.group_run("t2")) == b"1"  # none running, in the rotation
    assert (await queue.get_job_counts("waiting", "active")) == {"waiting": 2, "active": 2}


async def test_an_isolated_job_is_taken_alone_by_a_worker_that_is_not_busy(
    redis: R, queue: Queue, keys: QueueKeys
) -> None:
    first = await queue.add("g", {}, group="t1")
    second = await queue.add("g", {}, group="t2")
    await redis.hset(keys.job(first.id), mapping={"stc": 2, "iso": 1})
    busy = await run_op(
        redis, wops.finish_and_fetch(keys, [], 2, 1, PARAMS, ops.now_ms(), busy=True)
    )
    assert [j.id for j in busy.jobs] == [second.id] and busy.set_aside == 1
    await queue.add("g", {}, group="t3")
    idle = await run_op(redis, wops.finish_and_fetch(keys, [], 2, 3, PARAMS, ops.now_ms()))
    assert [j.id for j in idle.jobs] == [first.id]  # alone: the fetch took nothing more
    assert idle.set_aside == 0 and wops.isolated(idle.jobs[0])
    assert (await queue.get_job_counts("waiting", "active")) == {"waiting": 1, "active": 2}


async def test_a_paused_group_emptied_in_the_rotation_leaves_no_counter(
    redis: R, queue: Queue, keys: QueueKeys
) -> None:
    job = await queue.add("g", {}, group="t1")
    assert await redis.get(keys.group_run("t1")) == b"1"  # in the rotation, nothing running
    await queue.pause_group("t1")
    assert await queue.remove(job.id)
    assert await take(redis, keys) == []  # meets it paused and empty: it leaves for good
    assert await redis.get(keys.group_run("t1")) is None
    assert await redis.zscore(keys.groups, "t1") is None
    assert not await redis.exists(keys.groups_ready)
