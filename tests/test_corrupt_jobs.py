"""Corrupt and dangling jobs: a worker fails the first loudly and removes the second.

A corrupt job has a hash a worker cannot run (``data`` or ``opts`` that is not valid JSON,
``opts`` that is not an object, required fields missing): it goes to ``failed`` with a reason,
without running the processor and without retries. A dangling id is in a state structure but
has no hash: it is removed from that structure with a warning, and no partial hash is created.
Both are written here with raw Redis commands, as a foreign producer or a crash would leave them.
"""

from __future__ import annotations

import logging
import pickle
import time
from typing import Any

import pytest
from redis.asyncio import Redis

import echomq
from echomq import Job, Queue, Worker
from echomq._keys import queue_keys
from echomq._ops import worker as wops
from echomq._redis.run import run_op
from echomq.protocol.keys import QueueKeys
from helpers import wait_for

FAST: dict[str, Any] = {"drain_delay": 0.2, "stalled_interval": 5.0}

STATE_LISTS = ("wait", "active", "paused")
STATE_SETS = ("prioritized", "delayed", "completed", "failed", "waiting-children")


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def states_holding(r: Redis, keys: QueueKeys, job_id: str) -> list[str]:
    """Every state structure the id is in (a healthy job is in exactly one)."""
    held = [s for s in STATE_LISTS if await r.lpos(keys.state(s), job_id) is not None]
    held += [s for s in STATE_SETS if await r.zscore(keys.state(s), job_id) is not None]
    return held


async def events_of(r: Redis, keys: QueueKeys, job_id: str) -> list[str]:
    entries = await r.xrange(keys.events)
    return [_s(f[b"event"]) for _, f in entries if f.get(b"jobId") == job_id.encode()]


async def write_raw_job(r: Redis, keys: QueueKeys, job_id: str, fields: dict[str, Any]) -> None:
    """A job hash written by hand and queued in wait, as a foreign producer would."""
    await r.hset(keys.job(job_id), mapping=fields)
    await r.lpush(keys.wait, job_id)


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


class Recorder:
    """A processor that records the ids it ran."""

    def __init__(self) -> None:
        self.ran: list[str] = []

    async def __call__(self, job: Job) -> str:
        self.ran.append(job.id)
        return "ok"


def good_fields(**over: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "name": "raw",
        "data": '{"a":1}',
        "opts": '{"attempts":3}',
        "timestamp": str(int(time.time() * 1000)),
        "delay": "0",
        "priority": "0",
    }
    fields.update(over)
    return {k: v for k, v in fields.items() if v is not None}


# case -> (hash fields, reason prefix, whether retries-exhausted follows the failure). Where
# opts is readable its attempts=3 holds: one failure leaves atm 1 < 3, so no retries-exhausted
# (as for any unrecoverable failure); where it is not, attempts is 0 and the event follows.
CORRUPT: dict[str, tuple[dict[str, Any], str, bool]] = {
    "garbage-data": (good_fields(data="this is not json"), "job data is not valid JSON: ", False),
    "pickle-data": (
        good_fields(data=pickle.dumps({"a": 1})),
        "job data is not valid JSON: ",
        False,
    ),
    "truncated-data": (good_fields(data='{"a": [1, 2'), "job data is not valid JSON: ", False),
    "nan-data": (good_fields(data='{"a": NaN}'), "job data is not valid JSON: NaN is ", False),
    "opts-invalid": (good_fields(opts='{"attempts": 3'), "job opts is not valid JSON: ", True),
    "opts-array": (good_fields(opts="[1, 2]"), "job opts is not a JSON object: got array", True),
    "opts-string": (good_fields(opts='"x"'), "job opts is not a JSON object: got string", True),
    "missing-data-timestamp": (
        good_fields(data=None, timestamp=None),
        "job hash is missing required field(s): data, timestamp",
        False,
    ),
    "partial-hash": (
        {"processedOn": "1", "ats": "1", "stc": "1"},
        "job hash is missing required field(s): name, data, timestamp",
        True,
    ),
}


@pytest.mark.parametrize("case", sorted(CORRUPT))
async def test_a_corrupt_job_fails_without_running(
    redis: Redis, queue_name: str, case: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="echomq")
    fields, reason, exhausted = CORRUPT[case]
    keys = queue_keys(queue_name)
    before = await echomq.add(queue_name, "ok", {"i": 1}, connection=redis)
    await write_raw_job(redis, keys, "bad", fields)
    after = await echomq.add(queue_name, "ok", {"i": 2}, connection=redis)
    proc = Recorder()

    async with Worker(queue_name, proc, connection=redis, **FAST):
        await wait_for(lambda: redis.zscore(keys.failed, "bad"), timeout=10)
        await wait_for(lambda: _zcard_is(redis, keys.completed, 2), timeout=10)

    assert proc.ran == [before.id, after.id]
    h = await redis.hgetall(keys.job("bad"))
    assert _s(h[b"failedReason"]).startswith(reason)
    assert b"finishedOn" in h and h[b"atm"] == b"1"
    assert await states_holding(redis, keys, "bad") == ["failed"]
    assert not await redis.exists(keys.lock("bad"))
    tail = ["active", "failed", "retries-exhausted"] if exhausted else ["active", "failed"]
    assert (await events_of(redis, keys, "bad"))[-len(tail) :] == tail
    assert any(f"job=bad is corrupt ({reason}" in m for m in warnings_of(caplog))
    for job in (before, after):
        assert await states_holding(redis, keys, job.id) == ["completed"]


async def _zcard_is(r: Redis, key: str, n: int) -> bool:
    return bool(await r.zcard(key) == n)


async def test_a_minimal_foreign_job_without_opts_is_processed(
    redis: Redis, queue_name: str
) -> None:
    # name, data and timestamp are all BullMQ workers need; such a job must never be refused
    keys = queue_keys(queue_name)
    await write_raw_job(
        redis, keys, "plain", {"name": "n", "data": '{"x":1}', "timestamp": "1700000000000"}
    )
    seen: list[Any] = []

    async def proc(job: Job) -> int:
        seen.append(job.data)
        return 1

    async with Worker(queue_name, proc, connection=redis, **FAST):
        await wait_for(lambda: redis.zscore(keys.completed, "plain"), timeout=10)
    assert seen == [{"x": 1}]


async def test_get_job_still_reads_a_corrupt_job(redis: Redis, queue_name: str) -> None:
    keys = queue_keys(queue_name)
    await write_raw_job(redis, keys, "bad", good_fields(data=pickle.dumps([1]), opts="[1]"))
    await write_raw_job(redis, keys, "nan", good_fields(data='{"a": NaN}'))
    q = Queue(queue_name, connection=redis)
    job = await q.get_job("bad")
    assert job is not None
    assert job.name == "raw" and job.data == {} and job.wire_options == {}
    assert job.attempts == 0
    nan = await q.get_job("nan")
    assert nan is not None and nan.attempts == 3
    assert nan.data["a"] != nan.data["a"]  # NaN, as Python reads it
    assert await q.get_state("bad") == echomq.JobState.WAITING


# -- dangling ids ------------------------------------------------------------------------


async def _run_with_dangling(
    redis: Redis,
    queue_name: str,
    caplog: pytest.LogCaptureFixture,
    structure: str,
    place: Any,
) -> None:
    """Place a dangling id with ``place``, run a worker next to healthy jobs, and check that
    the id was removed with a warning and never created a hash."""
    caplog.set_level(logging.WARNING, logger="echomq")
    keys = queue_keys(queue_name)
    before = await echomq.add(queue_name, "ok", {"i": 1}, connection=redis)
    extra = await place(keys)  # healthy jobs it added, if any
    placed_events = await events_of(redis, keys, "ghost")
    after = await echomq.add(queue_name, "ok", {"i": 2}, connection=redis)
    proc = Recorder()
    expected = f"queue={queue_name} job=ghost was in {structure} but its hash is missing; removed"

    async with Worker(queue_name, proc, connection=redis, **FAST):
        await wait_for(lambda: _zcard_is(redis, keys.completed, 2 + len(extra)), timeout=10)
        await wait_for(lambda: expected in warnings_of(caplog), timeout=10)

    assert sorted(proc.ran) == sorted([before.id, after.id, *extra])
    assert await states_holding(redis, keys, "ghost") == []
    assert not await redis.exists(keys.job("ghost"), keys.lock("ghost"))
    assert await events_of(redis, keys, "ghost") == placed_events  # no event since
    assert warnings_of(caplog).count(expected) == 1


async def test_dangling_id_in_wait_is_removed(
    redis: Redis, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def place(keys: QueueKeys) -> list[str]:
        await redis.lpush(keys.wait, "ghost")
        return []

    await _run_with_dangling(redis, queue_name, caplog, "wait", place)


async def test_dangling_id_in_prioritized_is_removed(
    redis: Redis, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def place(keys: QueueKeys) -> list[str]:
        await echomq.add(queue_name, "p", {}, connection=redis, priority=1, job_id="ghost")
        await redis.delete(keys.job("ghost"))
        kept = await echomq.add(queue_name, "p", {}, connection=redis, priority=2)
        return [kept.id]

    await _run_with_dangling(redis, queue_name, caplog, "prioritized", place)


async def test_dangling_id_in_delayed_is_removed(
    redis: Redis, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    async def place(keys: QueueKeys) -> list[str]:
        due = int(time.time() * 1000) - 1000
        await redis.zadd(keys.delayed, {"ghost": due * 4096})
        kept = await echomq.add(queue_name, "d", {}, connection=redis, delay=0.05)
        return [kept.id]

    await _run_with_dangling(redis, queue_name, caplog, "delayed", place)


async def test_dangling_id_in_active_is_removed_by_the_stalled_check(
    redis: Redis, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="echomq")
    keys = queue_keys(queue_name)
    # a crashed worker's leftovers: a suspect from the previous check, no lock and no hash
    await redis.lpush(keys.active, "ghost")
    await redis.sadd(keys.stalled, "ghost")
    job = await echomq.add(queue_name, "ok", {}, connection=redis)
    proc = Recorder()
    expected = f"queue={queue_name} job=ghost was in active but its hash is missing; removed"

    async with Worker(queue_name, proc, connection=redis, drain_delay=0.2, stalled_interval=0.2):
        await wait_for(lambda: redis.zscore(keys.completed, job.id), timeout=10)
        await wait_for(lambda: expected in warnings_of(caplog), timeout=10)

    assert proc.ran == [job.id]
    assert await states_holding(redis, keys, "ghost") == []
    assert not await redis.sismember(keys.stalled, "ghost")
    assert not await redis.exists(keys.job("ghost"), keys.lock("ghost"))
    assert await events_of(redis, keys, "ghost") == []
    assert warnings_of(caplog).count(expected) == 1


async def test_stalled_check_reply_lists_recovered_and_dangling(
    redis: Redis, queue_name: str
) -> None:
    keys = queue_keys(queue_name)
    job = await echomq.add(queue_name, "s", {}, connection=redis)
    await redis.rpoplpush(keys.wait, keys.active)
    await redis.lpush(keys.active, "ghost")
    await redis.sadd(keys.stalled, job.id, "ghost")
    now = int(time.time() * 1000)
    reply = await run_op(redis, wops.move_stalled_jobs_to_wait(keys, 1, 30_000, now))
    assert reply == wops.StalledReply(recovered=[job.id], dangling=["ghost"])
    assert await states_holding(redis, keys, job.id) == ["wait"]
    assert await states_holding(redis, keys, "ghost") == []
    assert not await redis.exists(keys.job("ghost"))
    # throttled: a second check within the interval does nothing
    again = await run_op(redis, wops.move_stalled_jobs_to_wait(keys, 1, 30_000, now))
    assert again == wops.StalledReply(recovered=[], dangling=[])


async def test_fetch_reports_dangling_ids_without_spending_a_slot(
    redis: Redis, queue_name: str
) -> None:
    keys = queue_keys(queue_name)
    await redis.lpush(keys.wait, "ghost-1")
    job = await echomq.add(queue_name, "ok", {}, connection=redis)
    await redis.lpush(keys.wait, "ghost-2")
    await echomq.add(queue_name, "p", {}, connection=redis, priority=2, job_id="ghost-3")
    await redis.delete(keys.job("ghost-3"))
    due = int(time.time() * 1000) - 1000
    await redis.zadd(keys.delayed, {"ghost-4": due * 4096})
    late = await echomq.add(queue_name, "late", {}, connection=redis, delay=60)
    await redis.zadd(keys.delayed, {late.id: due * 4096 + 1})
    params = wops.FetchParams(
        token_prefix="t:", lock_ms=30_000, limiter_max=10, limiter_duration_ms=60_000
    )
    now = int(time.time() * 1000)

    reply = await run_op(redis, wops.finish_and_fetch(keys, [], 1, 7, params, now))
    assert [(f.id, f.token) for f in reply.jobs] == [(job.id, "t:7")]
    assert reply.dangling == [
        wops.Dangling("ghost-4", "delayed"),
        wops.Dangling("ghost-1", "wait"),
    ]
    assert await redis.get(keys.limiter) == b"1"  # the dangling id was not counted

    reply = await run_op(redis, wops.finish_and_fetch(keys, [], 5, 8, params, now))
    assert [(f.id, f.token) for f in reply.jobs] == [(late.id, "t:8")]
    assert reply.jobs[0].hash["delay"] == "0"
    assert reply.dangling == [
        wops.Dangling("ghost-2", "wait"),
        wops.Dangling("ghost-3", "prioritized"),
    ]
    assert await redis.lrange(keys.active, 0, -1) == [late.id.encode(), job.id.encode()]
    assert await redis.get(keys.limiter) == b"2"
    for ghost in ("ghost-1", "ghost-2", "ghost-3", "ghost-4"):
        assert await states_holding(redis, keys, ghost) == []
        assert not await redis.exists(keys.job(ghost), keys.lock(ghost))
