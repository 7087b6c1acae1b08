"""The groups API on a real Redis: limits, pausing, the readers, removing a group's waiting jobs.

What docs/groups.md promises of ``Queue.set_group_concurrency`` and the methods around it,
seen from the outside: a setting is stored as docs/protocol/groups.md says, a raised or removed
limit (and a resumed group) lets the groups it held back run at once, without waiting for one of
their jobs to end (workers here idle with a long ``drain_delay``, so only the wake-up can start
them in time), the readers answer what Redis holds, and a refused call writes nothing. Starts
are recorded by the processors themselves, never read back from the queue under test. The same
calls through ``echomq.sync`` and the module-level functions, and ``echomq queue NAME groups``
and ``echomq add --group`` through the real process, close the file.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from redis import Redis as SyncRedis
from redis.asyncio import Redis

import echomq
import echomq.sync
from _cli import base_env, cli
from echomq import GroupInfo, InvalidOptionError, Job, RateLimit, ValidationError, Worker
from echomq._keys import queue_keys
from echomq._ops import groups as gops
from echomq._redis.run import run_op, run_plan
from helpers import queue_key, snapshot, snapshot_sync, wait_for

#: Workers that would sleep long between fetches: a job that starts within WAKE seconds of a
#: call was started by the wake-up that call wrote.
IDLE: dict[str, Any] = {"drain_delay": 5.0, "lock_duration": 5.0, "stalled_interval": 5.0}
WAKE = 2.0


class Starts:
    """A processor that records each start ``(group, id)`` and holds every job until
    :attr:`release` is set (or returns at once with ``hold=False``)."""

    def __init__(self, hold: bool = True) -> None:
        self.hold = hold
        self.started: list[tuple[str | None, str]] = []
        self.release = asyncio.Event()

    async def __call__(self, job: Job) -> str:
        self.started.append((job.group, job.id))
        if self.hold:
            await self.release.wait()
        return job.id

    def of(self, group: str | None) -> list[str]:
        return [job_id for g, job_id in self.started if g == group]


async def state(redis: Redis, queue: str) -> dict[str, str]:
    """The settings and rotation fields of ``groups:state`` (without the order counter and the
    count of the groups' own settings, "o", checked by its own test)."""
    raw = await redis.hgetall(queue_key(queue, "groups:state"))
    return {k.decode(): v.decode() for k, v in raw.items() if k not in (b"seq", b"o")}


async def rotation(redis: Redis, queue: str) -> list[str]:
    return [m.decode() for m in await redis.lrange(queue_key(queue, "groups:ready"), 0, -1)]


async def settle(seconds: float = 0.3) -> None:
    """Give the worker time to start anything it (wrongly) could."""
    await asyncio.sleep(seconds)


# -- settings: stored as the protocol says, read back, removed ------------------------------


async def test_group_concurrency_is_stored_read_and_removed(redis: Redis, queue_name: str) -> None:
    q = echomq.Queue(queue_name, connection=redis)
    assert await q.get_group_concurrency() is None
    assert await q.get_group_concurrency("t1") is None
    await q.set_group_concurrency(3)
    await q.set_group_concurrency(1, group="t1")
    assert await state(redis, queue_name) == {"c": "3", "c:t1": "1"}
    assert await q.get_group_concurrency() == 3
    assert await q.get_group_concurrency("t1") == 1
    assert await q.get_group_concurrency("t2") is None  # its own: none, the default applies
    assert await q.remove_group_concurrency(group="t1") is True
    assert await q.remove_group_concurrency(group="t1") is False
    assert await state(redis, queue_name) == {"c": "3"}
    assert await q.remove_group_concurrency() is True
    assert await q.remove_group_concurrency() is False
    assert await state(redis, queue_name) == {}
    await q.aclose()


async def test_group_rate_limit_is_stored_read_and_removed(redis: Redis, queue_name: str) -> None:
    q = echomq.Queue(queue_name, connection=redis)
    assert await q.get_group_rate_limit() is None
    await q.set_group_rate_limit(10, 1)
    await q.set_group_rate_limit(2, timedelta(minutes=1), group="api-key-7")
    await q.set_group_rate_limit(1, 0.0001, group="tiny")  # under a millisecond: 1 ms
    assert await state(redis, queue_name) == {
        "r": "10:1000",
        "r:api-key-7": "2:60000",
        "r:tiny": "1:1",
    }
    assert await q.get_group_rate_limit() == RateLimit(10, 1.0)
    assert await q.get_group_rate_limit("api-key-7") == RateLimit(2, 60.0)
    assert await q.get_group_rate_limit("other") is None
    assert await q.remove_group_rate_limit(group="tiny") is True
    assert await q.remove_group_rate_limit() is True
    assert await q.remove_group_rate_limit() is False
    assert await state(redis, queue_name) == {"r:api-key-7": "2:60000"}
    # an unreadable stored value reads as unset
    await redis.hset(queue_key(queue_name, "groups:state"), "r", "ten")
    assert await q.get_group_rate_limit() is None
    await q.aclose()


BAD_CALLS: list[tuple[str, Callable[[echomq.Queue], Any], type[Exception], str]] = [
    ("concurrency 0", lambda q: q.set_group_concurrency(0), InvalidOptionError, ">= 1"),
    ("concurrency float", lambda q: q.set_group_concurrency(1.5), InvalidOptionError, "int"),
    ("concurrency bool", lambda q: q.set_group_concurrency(True), InvalidOptionError, "int"),
    ("concurrency str", lambda q: q.set_group_concurrency("3"), InvalidOptionError, "int"),
    ("empty group", lambda q: q.set_group_concurrency(2, group=""), InvalidOptionError, "empty"),
    ("int group", lambda q: q.set_group_concurrency(2, group=7), InvalidOptionError, "str"),
    (
        "long group",
        lambda q: q.set_group_concurrency(2, group="x" * 257),
        InvalidOptionError,
        "256",
    ),
    ("rate max 0", lambda q: q.set_group_rate_limit(0, 1), InvalidOptionError, ">= 1"),
    ("rate window 0", lambda q: q.set_group_rate_limit(5, 0), InvalidOptionError, "positive"),
    ("rate window < 0", lambda q: q.set_group_rate_limit(5, -1), InvalidOptionError, "positive"),
    (
        "rate group",
        lambda q: q.set_group_rate_limit(5, 1, group=""),
        InvalidOptionError,
        "empty",
    ),
    ("remove c group", lambda q: q.remove_group_concurrency(""), InvalidOptionError, "empty"),
    ("remove r group", lambda q: q.remove_group_rate_limit(3), InvalidOptionError, "str"),
    ("pause None", lambda q: q.pause_group(None), InvalidOptionError, "str"),
    ("pause empty", lambda q: q.pause_group(""), InvalidOptionError, "empty"),
    ("resume long", lambda q: q.resume_group("x" * 300), InvalidOptionError, "256"),
    ("remove jobs", lambda q: q.remove_group_jobs(""), InvalidOptionError, "empty"),
    ("jobs group", lambda q: q.get_group_jobs(""), InvalidOptionError, "empty"),
    ("jobs index", lambda q: q.get_group_jobs("g", "0"), ValidationError, "start"),
    ("groups index", lambda q: q.get_groups(0, 1.0), ValidationError, "end"),
    ("counts group", lambda q: q.get_group_job_counts(""), InvalidOptionError, "empty"),
]


@pytest.mark.parametrize(
    ("call", "error", "words"),
    [pytest.param(c, e, w, id=name) for name, c, e, w in BAD_CALLS],
)
async def test_a_refused_call_writes_nothing(
    redis: Redis,
    queue_name: str,
    call: Callable[[echomq.Queue], Any],
    error: type[Exception],
    words: str,
) -> None:
    q = echomq.Queue(queue_name, connection=redis)
    await q.add("j", {}, group="g")
    await q.set_group_concurrency(1)
    before = await snapshot(redis, queue_key(queue_name, "*"))
    with pytest.raises(error, match=words):
        await call(q)
    assert await snapshot(redis, queue_key(queue_name, "*")) == before
    await q.aclose()


# -- limits raised or removed: the groups held back run at once -----------------------------


async def test_a_group_at_its_concurrency_leaves_the_rotation_and_a_raise_runs_it_at_once(
    redis: Redis, queue_name: str
) -> None:
    q = echomq.Queue(queue_name, connection=redis)
    await q.set_group_concurrency(1)
    ids = [(await q.add("j", {"i": i}, group="g")).id for i in range(4)]
    starts = Starts()
    async with Worker(queue_name, starts, connection=redis, concurrency=10, **IDLE):
        await wait_for(lambda: len(starts.started) == 1, timeout=5)
        await settle()
        assert starts.of("g") == ids[:1]
        assert "g" not in await rotation(redis, queue_name)  # out until something changes
        assert (await q.get_groups())[0] == GroupInfo("g", 3, 1, False, True)

        await q.set_group_concurrency(2, group="g")  # the group's own, above the default
        await wait_for(lambda: len(starts.started) == 2, timeout=WAKE)
        await settle()
        assert starts.of("g") == ids[:2]  # no job ended meanwhile

        await q.set_group_concurrency(3)  # the default raised: "g" keeps its own 2
        await settle()
        assert starts.of("g") == ids[:2]

        await q.remove_group_concurrency(group="g")  # back to the default, 3
        await wait_for(lambda: len(starts.started) == 3, timeout=WAKE)
        await q.remove_group_concurrency()  # no limit at all
        await wait_for(lambda: len(starts.started) == 4, timeout=WAKE)
        assert starts.of("g") == ids
        starts.release.set()
    await q.aclose()


async def test_raising_the_default_brings_back_every_held_group(
    redis: Redis, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 200 groups (ZSCAN then walks `groups` in steps) each with one active job: with the
    # default concurrency 1 none is in the rotation; raised to 2, every one is back, once.
    monkeypatch.setattr(gops, "SCAN_COUNT", 20)
    keys = queue_keys(queue_name)
    q = echomq.Queue(queue_name, connection=redis)
    await q.set_group_concurrency(1)
    groups = [f"g{i}" for i in range(200)]
    await q.add_bulk([("j", {}, {"group": g}) for g in groups])
    # as a fetch leaves them: one active job each (groups:run:<gid> = 2), out of the rotation
    await redis.mset({queue_key(queue_name, f"groups:run:{g}"): 2 for g in groups})
    await redis.delete(queue_key(queue_name, "groups:ready"), queue_key(queue_name, "marker"))

    plan = gops.set_group_concurrency(keys, 2)
    calls = 0
    try:
        op = next(plan)
        while True:
            calls += 1
            op = plan.send(await run_op(redis, op))
    except StopIteration:
        pass
    assert calls > 1  # a plan of bounded calls
    # each group once, and "" (the ungrouped jobs' turn)
    assert sorted(await rotation(redis, queue_name)) == sorted(["", *groups])
    assert await redis.zscore(queue_key(queue_name, "marker"), "0") == 0.0  # workers woken

    # lowering it again brings nobody back and costs one call
    await redis.delete(queue_key(queue_name, "groups:ready"))
    await redis.mset({queue_key(queue_name, f"groups:run:{g}"): 2 for g in groups})
    plan = gops.set_group_concurrency(keys, 1)
    with pytest.raises(StopIteration):
        plan.send(await run_op(redis, next(plan)))
    assert await rotation(redis, queue_name) == []
    await q.aclose()


async def test_raising_a_rate_limit_runs_a_group_whose_window_was_full(
    redis: Redis, queue_name: str
) -> None:
    q = echomq.Queue(queue_name, connection=redis)
    await q.set_group_rate_limit(1, 60, group="r")
    ids = [(await q.add("j", {"i": i}, group="r")).id for i in range(4)]
    starts = Starts(hold=False)
    async with Worker(queue_name, starts, connection=redis, concurrency=5, **IDLE):
        await wait_for(lambda: len(starts.started) == 1, timeout=5)
        await settle()
        assert starts.of("r") == ids[:1]
        assert await redis.zscore(queue_key(queue_name, "groups:limited"), "r") is not None
        assert (await q.get_groups())[0] == GroupInfo("r", 3, 0, False, True)

        await q.set_group_rate_limit(3, 60, group="r")  # 1 started of 3 allowed: 2 more
        await wait_for(lambda: len(starts.started) == 3, timeout=WAKE)
        await settle()
        assert starts.of("r") == ids[:3]

        await q.remove_group_rate_limit(group="r")
        await wait_for(lambda: len(starts.started) == 4, timeout=WAKE)
    assert starts.of("r") == ids
    assert await redis.zscore(queue_key(queue_name, "groups:limited"), "r") is None
    await q.aclose()


async def test_removing_the_default_rate_limit_runs_the_groups_it_held(
    redis: Redis, queue_name: str
) -> None:
    q = echomq.Queue(queue_name, connection=redis)
    await q.set_group_rate_limit(1, 60)
    await q.add_bulk([("j", {}, {"group": g}) for g in ("a", "b") for _ in range(2)])
    starts = Starts(hold=False)
    async with Worker(queue_name, starts, connection=redis, concurrency=5, **IDLE):
        await wait_for(lambda: len(starts.started) == 2, timeout=5)
        await settle()
        assert sorted(g for g, _ in starts.started) == ["a", "b"]
        await q.remove_group_rate_limit()
        await wait_for(lambda: len(starts.started) == 4, timeout=WAKE)
    await q.aclose()


# -- pause and resume -----------------------------------------------------------------------


async def test_pause_group_stops_one_group_while_the_others_run(
    redis: Redis, queue_name: str
) -> None:
    q = echomq.Queue(queue_name, connection=redis)
    paused = [(await q.add("j", {"i": i}, group="a")).id for i in range(3)]
    await q.add_bulk([("j", {}, {"group": "b"}) for _ in range(3)] + [("free", {})])
    await q.pause_group("a")  # "a" is in the rotation: the fetch that meets it drops it
    # a:<gid> odd: in the rotation, no job running
    assert await state(redis, queue_name) == {"p:a": "1"}
    # each in the rotation (odd), no job running
    assert await redis.get(queue_key(queue_name, "groups:run:a")) == b"1"
    assert await redis.get(queue_key(queue_name, "groups:run:b")) == b"1"
    starts = Starts(hold=False)
    async with Worker(queue_name, starts, connection=redis, concurrency=2, **IDLE):
        await wait_for(lambda: len(starts.started) == 4, timeout=5)
        await settle()
        assert starts.of("a") == [] and len(starts.of("b")) == 3 and len(starts.of(None)) == 1
        assert await q.get_groups() == [GroupInfo("a", 3, 0, True, False)]
        assert "a" not in await rotation(redis, queue_name)
        await q.pause_group("a")  # again: nothing changes

        await q.resume_group("a")
        await wait_for(lambda: len(starts.started) == 7, timeout=WAKE)
        assert starts.of("a") == paused  # first in, first out
        await q.resume_group("a")  # not paused: nothing to do
    assert await state(redis, queue_name) == {}
    await q.aclose()


async def test_a_paused_group_keeps_the_jobs_added_to_it(redis: Redis, queue_name: str) -> None:
    q = echomq.Queue(queue_name, connection=redis)
    await q.pause_group("later")
    await q.add("j", {}, group="later")
    starts = Starts(hold=False)
    async with Worker(queue_name, starts, connection=redis, concurrency=2, **IDLE):
        await settle(0.5)
        assert starts.started == []
        assert await q.get_group_job_counts("later") == {"waiting": 1, "active": 0, "delayed": 0}
        await q.resume_group("later")
        await wait_for(lambda: len(starts.started) == 1, timeout=WAKE)
    await q.aclose()


# -- readers --------------------------------------------------------------------------------


async def test_get_groups_lists_most_waiting_first_with_their_state(
    redis: Redis, queue_name: str
) -> None:
    q = echomq.Queue(queue_name, connection=redis)
    await q.set_group_concurrency(1)
    await q.set_group_concurrency(3, group="big")
    sizes = {"big": 7, "mid": 4, "small": 2, "one": 1}
    await q.add_bulk([("j", {}, {"group": g}) for g, n in sizes.items() for _ in range(n)])
    await q.add("free", {})
    await q.pause_group("small")
    assert [g.id for g in await q.get_groups()] == ["big", "mid", "small", "one"]
    starts = Starts()
    async with Worker(queue_name, starts, connection=redis, concurrency=20, **IDLE):
        await wait_for(lambda: len(starts.started) == 3 + 1 + 1 + 1, timeout=5)
        await settle()
        assert await q.get_groups() == [
            GroupInfo("big", 4, 3, False, True),
            GroupInfo("mid", 3, 1, False, True),
            GroupInfo("small", 2, 0, True, False),
            GroupInfo("one", 0, 1, False, True),  # listed while it has an active job
        ]
        assert await q.get_groups(0, 0) == [GroupInfo("big", 4, 3, False, True)]
        assert [g.id for g in await q.get_groups(1, 2)] == ["mid", "small"]
        assert [g.id for g in await q.get_groups(-1)] == ["one"]
        assert await q.get_groups(10, 20) == []
        starts.release.set()
        await q.remove_group_concurrency()
        await wait_for(lambda: len(starts.started) == 13, timeout=5)
        # the finished groups leave the index; "small" stays: paused, with waiting jobs
        await wait_for(lambda: _only_small(q), timeout=5)
    await q.aclose()


async def _only_small(q: echomq.Queue) -> bool:
    return await q.get_groups() == [GroupInfo("small", 2, 0, True, False)]


async def test_get_group_job_counts(redis: Redis, queue_name: str) -> None:
    q = echomq.Queue(queue_name, connection=redis)
    assert await q.get_group_job_counts("g") == {"waiting": 0, "active": 0, "delayed": 0}
    await q.add_bulk(
        [("j", {}, {"group": "g"}) for _ in range(3)]
        + [("j", {}, {"group": "g", "delay": 60 + i}) for i in range(4)]
        + [("j", {}, {"group": "h", "delay": 30 + i}) for i in range(5)]
        + [("j", {}, {"delay": 30})]
    )
    await q.set_group_concurrency(1)
    starts = Starts()
    async with Worker(queue_name, starts, connection=redis, concurrency=5, **IDLE):
        await wait_for(lambda: len(starts.started) == 1, timeout=5)
        assert await q.get_group_job_counts("g") == {"waiting": 2, "active": 1, "delayed": 4}
        assert await q.get_group_job_counts("h") == {"waiting": 0, "active": 0, "delayed": 5}
        starts.release.set()
    await q.aclose()


async def test_delayed_counts_page_through_every_score_once(
    redis: Redis, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # countGroupDelayed pages by score, 3 a page here; equal scores (more than 4096 jobs due in
    # one ms) at a page's end are counted whole, never twice and never skipped.
    monkeypatch.setattr(gops, "SCAN_COUNT", 3)
    keys = queue_keys(queue_name)
    delayed = queue_key(queue_name, "groups:delayed")
    scores = [10, 20, 30, 30, 30, 30, 40, 50, 50, 60]
    for i, score in enumerate(scores):
        await redis.hset(queue_key(queue_name, f"d{i}"), mapping={"gid": "g" if i % 3 else "h"})
        await redis.zadd(delayed, {f"d{i}": score})
    counts = await run_plan(redis, gops.get_group_job_counts_plan(keys, "g"))
    assert counts["delayed"] == sum(1 for i in range(len(scores)) if i % 3)
    counts = await run_plan(redis, gops.get_group_job_counts_plan(keys, "h"))
    assert counts["delayed"] == sum(1 for i in range(len(scores)) if not i % 3)


async def test_get_group_jobs_in_the_order_they_will_run(redis: Redis, queue_name: str) -> None:
    q = echomq.Queue(queue_name, connection=redis)
    a = await q.add("a", {}, group="g")
    b = await q.add("b", {}, group="g", priority=2)
    c = await q.add("c", {}, group="g", lifo=True)
    d = await q.add("d", {}, group="g", priority=1)
    e = await q.add("e", {}, group="g")
    await q.add("other", {}, group="h")
    await q.add("later", {}, group="g", delay=60)
    expected = [c.id, a.id, e.id, d.id, b.id]
    jobs = await q.get_group_jobs("g")
    assert [j.id for j in jobs] == expected
    assert {j.group for j in jobs} == {"g"} and jobs[0].name == "c"
    assert [j.id for j in await q.get_group_jobs("g", 1, 2)] == expected[1:3]
    assert [j.id for j in await q.get_group_jobs("g", -2)] == expected[-2:]
    assert await q.get_group_jobs("nobody") == []
    # the jobs are bound: their methods work
    await jobs[0].update_data({"x": 1})
    assert (await q.get_job(c.id)).data == {"x": 1}  # type: ignore[union-attr]
    starts = Starts(hold=False)
    async with Worker(queue_name, starts, connection=redis, concurrency=1, **IDLE):
        await wait_for(lambda: len(starts.started) == 6, timeout=5)
    assert starts.of("g") == expected
    await q.aclose()


async def test_job_group_is_read_from_the_hash_and_the_add(redis: Redis, queue_name: str) -> None:
    q = echomq.Queue(queue_name, connection=redis)
    added = await q.add("j", {}, group="tenant-42")
    plain = await q.add("j", {})
    assert added.group == "tenant-42" and plain.group is None
    read = await q.get_job(added.id)
    assert read is not None and read.group == "tenant-42"
    assert (await q.get_job(plain.id)).group is None  # type: ignore[union-attr]
    # a hash that lost `gid` still names the group its producer asked for (opts.emqGroup)
    await redis.hdel(queue_key(queue_name, added.id), "gid")
    assert (await q.get_job(added.id)).group == "tenant-42"  # type: ignore[union-attr]
    await q.aclose()


# -- remove_group_jobs ----------------------------------------------------------------------


async def test_remove_group_jobs_removes_only_that_groups_waiting_jobs(
    redis: Redis, queue_name: str
) -> None:
    q = echomq.Queue(queue_name, connection=redis)
    await q.set_group_concurrency(1)
    doomed = [await q.add("j", {"i": i}, group="g") for i in range(6)]
    later = await q.add("later", {}, group="g", delay=60)
    others = [await q.add("h", {}, group="h") for _ in range(2)]
    free = await q.add("free", {})
    await doomed[3].log("a line")
    starts = Starts()
    async with Worker(queue_name, starts, connection=redis, concurrency=5, **IDLE):
        # one job of each group (their concurrency is 1) and the ungrouped one
        await wait_for(lambda: len(starts.started) == 3, timeout=5)
        assert starts.of("g") == [doomed[0].id]
        assert await q.remove_group_jobs("g") == 5
        assert await q.remove_group_jobs("g") == 0
        for job in doomed[1:]:
            assert await q.get_job(job.id) is None
            assert not await redis.exists(queue_key(queue_name, f"{job.id}:logs"))
        assert await q.get_group_job_counts("g") == {"waiting": 0, "active": 1, "delayed": 1}
        assert await q.get_job(later.id) is not None
        assert [g.id for g in await q.get_groups()] == ["h", "g"]  # "g": its active job
        starts.release.set()
        await wait_for(lambda: len(starts.started) == 4, timeout=5)
    assert sorted(j for _, j in starts.started) == sorted(
        [doomed[0].id, free.id, *(o.id for o in others)]
    )
    assert await redis.zcard(queue_key(queue_name, "groups:waiting")) == 0
    assert await q.get_groups() == []
    await q.aclose()


async def test_remove_group_jobs_runs_in_bounded_calls(redis: Redis, queue_name: str) -> None:
    keys = queue_keys(queue_name)
    q = echomq.Queue(queue_name, connection=redis)
    # jobs without a priority (the group's LIST) and with one (its ZSET): a call spans both
    await q.add_bulk([("j", {}, {"group": "g", "priority": i % 2}) for i in range(7)])
    kept = await q.add("h", {}, group="h")
    plan = gops.remove_group_jobs_plan(keys, "g", budget=3)
    replies = []
    try:
        op = next(plan)
        while True:
            reply = await run_op(redis, op)
            replies.append(reply)
            op = plan.send(reply)
    except StopIteration as done:
        assert done.value == 7
    assert replies == [(3, True), (3, True), (1, False)]
    assert await q.get_group_job_counts("g") == {"waiting": 0, "active": 0, "delayed": 0}
    assert not await redis.exists(keys.group_wait("g"), keys.group_prioritized("g"))
    assert await redis.zrange(queue_key(queue_name, "groups"), 0, -1) == [b"h"]
    assert await q.get_job(kept.id) is not None
    await q.aclose()


# -- the module-level functions and the sync API --------------------------------------------


async def test_module_level_functions(redis: Redis, queue_name: str) -> None:
    kw: dict[str, Any] = {"connection": redis}
    await echomq.add(queue_name, "j", {}, group="g", **kw)
    await echomq.set_group_concurrency(queue_name, 2, **kw)
    await echomq.set_group_concurrency(queue_name, 5, "g", **kw)
    assert await echomq.get_group_concurrency(queue_name, **kw) == 2
    assert await echomq.get_group_concurrency(queue_name, "g", **kw) == 5
    assert await echomq.remove_group_concurrency(queue_name, "g", **kw) is True
    await echomq.set_group_rate_limit(queue_name, 10, 1, "g", **kw)
    assert await echomq.get_group_rate_limit(queue_name, "g", **kw) == RateLimit(10, 1.0)
    assert await echomq.remove_group_rate_limit(queue_name, "g", **kw) is True
    await echomq.pause_group(queue_name, "g", **kw)
    assert await echomq.get_groups(queue_name, **kw) == [GroupInfo("g", 1, 0, True, False)]
    await echomq.resume_group(queue_name, "g", **kw)
    counts = await echomq.get_group_job_counts(queue_name, "g", **kw)
    assert counts == {"waiting": 1, "active": 0, "delayed": 0}
    assert len(await echomq.get_group_jobs(queue_name, "g", **kw)) == 1
    assert await echomq.remove_group_jobs(queue_name, "g", **kw) == 1
    assert await echomq.get_groups(queue_name, **kw) == []
    assert await echomq.remove_group_concurrency(queue_name, **kw) is True


def test_the_sync_api_does_the_same(sync_redis: SyncRedis, queue_name: str) -> None:
    with echomq.sync.Queue(queue_name, connection=sync_redis) as q:
        jobs = [q.add("j", {"i": i}, group="t1") for i in range(3)]
        q.add("j", {}, group="t2", delay=60)
        assert jobs[0].group == "t1"
        q.set_group_concurrency(3)
        q.set_group_concurrency(1, group="t1")
        q.set_group_rate_limit(10, 1, group="t1")
        assert q.get_group_concurrency() == 3 and q.get_group_concurrency("t1") == 1
        assert q.get_group_rate_limit("t1") == RateLimit(10, 1.0)
        q.pause_group("t1")
        assert q.get_groups() == [GroupInfo("t1", 3, 0, True, False)]
        assert q.get_group_job_counts("t2") == {"waiting": 0, "active": 0, "delayed": 1}
        assert [j.id for j in q.get_group_jobs("t1")] == [j.id for j in jobs]
        q.get_group_jobs("t1")[0].update_progress(5)  # bound sync jobs
        q.resume_group("t1")
        assert q.remove_group_rate_limit("t1") is True
        assert q.remove_group_concurrency("t1") is True
        assert q.remove_group_concurrency() is True
        assert q.remove_group_jobs("t1") == 3
        assert q.get_groups() == []
        before = snapshot_sync(sync_redis, queue_key(queue_name, "*"))
        with pytest.raises(InvalidOptionError):
            q.set_group_concurrency(0, group="t1")
        with pytest.raises(InvalidOptionError):
            q.pause_group("")
        assert snapshot_sync(sync_redis, queue_key(queue_name, "*")) == before
    kw: dict[str, Any] = {"connection": sync_redis}
    echomq.sync.set_group_concurrency(queue_name, 4, **kw)
    assert echomq.sync.get_group_concurrency(queue_name, **kw) == 4
    echomq.sync.set_group_rate_limit(queue_name, 2, 0.5, **kw)
    assert echomq.sync.get_group_rate_limit(queue_name, **kw) == RateLimit(2, 0.5)
    echomq.sync.pause_group(queue_name, "t3", **kw)
    echomq.sync.add(queue_name, "j", {}, group="t3", **kw)
    assert echomq.sync.get_groups(queue_name, **kw) == [GroupInfo("t3", 1, 0, True, False)]
    echomq.sync.resume_group(queue_name, "t3", **kw)
    assert echomq.sync.get_group_job_counts(queue_name, "t3", **kw)["waiting"] == 1
    assert len(echomq.sync.get_group_jobs(queue_name, "t3", **kw)) == 1
    assert echomq.sync.remove_group_jobs(queue_name, "t3", **kw) == 1
    assert echomq.sync.remove_group_rate_limit(queue_name, **kw) is True
    assert echomq.sync.remove_group_concurrency(queue_name, **kw) is True


# -- the CLI, through the real process ------------------------------------------------------


@pytest.fixture
def env(redis_url: str) -> Iterator[dict[str, str]]:
    yield base_env(ECHOMQ_REDIS_URL=redis_url)


def test_cli_add_group_and_queue_groups(
    env: dict[str, str], sync_redis: SyncRedis, queue_name: str
) -> None:
    for tenant, n in (("big", 3), ("small", 1)):
        for _ in range(n):
            done = cli("add", queue_name, "job", "--data", "{}", "--group", tenant, env=env)
            assert done.returncode == 0, done.stderr
    job_id = done.stdout.strip()
    assert sync_redis.hget(queue_key(queue_name, job_id), "gid") == b"small"
    with echomq.sync.Queue(queue_name, connection=sync_redis) as q:
        q.set_group_concurrency(3)
        q.set_group_rate_limit(10, 1)
        q.pause_group("small")

    shown = cli("queue", queue_name, "groups", env=env)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == (
        f"queue {queue_name}: default group concurrency 3, default group rate limit 10 per 1s"
    )
    assert lines[1].split() == ["GROUP", "WAITING", "ACTIVE", "STATE"]
    assert lines[2].split() == ["big", "3", "0"]
    assert lines[3].split() == ["small", "1", "0", "paused"]

    as_json = cli("queue", queue_name, "groups", "--json", env=env)
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == {
        "queue": queue_name,
        "concurrency": 3,
        "rate_limit": {"max": 10, "duration": 1.0},
        "groups": [
            {"id": "big", "waiting": 3, "active": 0, "paused": False, "limited": False},
            {"id": "small", "waiting": 1, "active": 0, "paused": True, "limited": False},
        ],
    }
    page = cli("queue", queue_name, "groups", "--start", "0", "--end", "0", env=env)
    lines = page.stdout.splitlines()
    assert len(lines) == 4 and lines[2].split()[0] == "big"
    assert lines[3] == "(groups 0 to 0 by waiting jobs; see --start/--end)"


def test_cli_refuses_a_bad_group_before_writing(
    env: dict[str, str], sync_redis: SyncRedis, queue_name: str
) -> None:
    for bad in ("", "x" * 257):
        done = cli("add", queue_name, "job", "--data", "{}", "--group", bad, env=env)
        assert done.returncode == 2
        assert "group" in done.stderr
    assert list(sync_redis.scan_iter(match=queue_key(queue_name, "*"))) == []
    empty = cli("queue", queue_name, "groups", env=env)
    assert empty.returncode == 0, empty.stderr
    assert "no groups with waiting or active jobs" in empty.stdout


async def test_the_groups_own_settings_are_counted(redis: Redis, queue_name: str) -> None:
    # "o" lets a fetch skip reading each group's own settings while no group has any
    q = echomq.Queue(queue_name, connection=redis)
    field = queue_key(queue_name, "groups:state")
    await q.set_group_concurrency(3)
    await q.set_group_rate_limit(5, 1)
    assert await redis.hget(field, "o") is None
    await q.set_group_concurrency(1, group="a")
    await q.set_group_concurrency(2, group="a")  # replaced, not one more
    await q.set_group_rate_limit(1, 1, group="a")
    await q.pause_group("b")
    await q.pause_group("b")
    assert await redis.hget(field, "o") == b"3"
    await q.resume_group("b")
    await q.resume_group("b")
    await q.remove_group_concurrency(group="a")
    await q.remove_group_rate_limit(group="a")
    await q.remove_group_rate_limit(group="a")
    assert await redis.hget(field, "o") == b"0"
    await q.aclose()
