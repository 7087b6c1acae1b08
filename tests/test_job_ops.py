"""Operations on one job: data, progress, logs, retry, promote, priority, delay, refresh.

Each test asserts the Redis effects docs/protocol/scripts.md states (#script-updateProgress
to #script-reprocessJob): fields, state keys,
scores, markers and event entries with their fields, plus the error codes as exceptions.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from redis.asyncio import Redis

from echomq import (
    ConnectionNotOpenError,
    InvalidOptionError,
    Job,
    JobNotFoundError,
    JobNotInStateError,
    JobState,
    PayloadError,
    Queue,
    ValidationError,
)
from echomq import _ops as ops
from echomq._keys import queue_keys
from echomq._ops import now_ms
from echomq._redis.run import run_op
from echomq.protocol.keys import QueueKeys
from helpers import snapshot

P32 = 2**32


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def events(r: Redis, keys: QueueKeys) -> list[list[tuple[str, str]]]:
    entries = await r.xrange(keys.events) or []
    return [[(_s(k), _s(v)) for k, v in (fields or {}).items()] for _, fields in entries]


async def hash_of(r: Redis, key: str) -> dict[str, str]:
    return {_s(k): _s(v) for k, v in (await r.hgetall(key)).items()}


async def finish(r: Redis, keys: QueueKeys, job: Job, state: str, at: int = 5000) -> None:
    """Put a waiting job into completed/failed with the fields a worker writes."""
    await r.lrem(keys.wait, 0, job.id)
    await r.zrem(keys.prioritized, job.id)
    await r.zadd(keys.state(state), {job.id: at})
    result: dict[Any, Any] = (
        {"returnvalue": '{"ok":1}'} if state == "completed" else {"failedReason": "boom"}
    )
    await r.hset(
        keys.job(job.id),
        mapping={
            "finishedOn": at,
            "processedOn": at - 10,
            "atm": 2,
            "ats": 3,
            "stacktrace": '["trace"]',
            **result,
        },
    )
    await r.delete(keys.marker)


@pytest.fixture
async def q(redis: Redis, queue_name: str) -> AsyncIterator[Queue]:
    async with Queue(queue_name, connection=redis) as qu:
        yield qu


@pytest.fixture
def keys(queue_name: str) -> QueueKeys:
    return queue_keys(queue_name)


# -- update_data / update_progress / log ---------------------------------------------------


async def test_update_data(redis: Redis, q: Queue, keys: QueueKeys) -> None:
    job = await q.add("x", {"a": 1})
    before = await events(redis, keys)
    await job.update_data({"b": [1, "é"]})
    assert await redis.hget(keys.job(job.id), "data") == '{"b":[1,"é"]}'.encode()
    assert job.data == {"b": [1, "é"]}
    assert await events(redis, keys) == before  # no event

    snap = await snapshot(redis, keys.qualified + "*")
    with pytest.raises(PayloadError):
        await job.update_data({"bad": object()})
    assert await snapshot(redis, keys.qualified + "*") == snap


async def test_update_progress(redis: Redis, q: Queue, keys: QueueKeys) -> None:
    job = await q.add("x")
    await job.update_progress(42)
    await job.update_progress({"pct": 50.5})
    assert await redis.hget(keys.job(job.id), "progress") == b'{"pct":50.5}'
    assert job.progress == {"pct": 50.5}
    assert (await events(redis, keys))[-2:] == [
        [("event", "progress"), ("jobId", job.id), ("data", "42")],
        [("event", "progress"), ("jobId", job.id), ("data", '{"pct":50.5}')],
    ]
    for bad in ("50%", True, [1, 2], None):
        with pytest.raises(ValidationError, match="progress must be a number or a mapping"):
            await job.update_progress(bad)  # type: ignore[arg-type]
    with pytest.raises(PayloadError):
        await job.update_progress(float("nan"))


async def test_log_appends_and_trims_to_keep_logs(redis: Redis, q: Queue, keys: QueueKeys) -> None:
    job = await q.add("x")
    assert await job.log("one") == 1
    assert await job.log("two") == 2
    assert await redis.lrange(keys.logs(job.id), 0, -1) == [b"one", b"two"]

    kept = await q.add("y", keep_logs=2)
    assert kept.wire_options["kl"] == 2
    assert [await kept.log(f"l{i}") for i in range(4)] == [1, 2, 2, 2]
    assert await redis.lrange(keys.logs(kept.id), 0, -1) == [b"l2", b"l3"]
    assert await kept.get_logs() == (["l2", "l3"], 2)
    with pytest.raises(ValidationError):
        await job.log(3)  # type: ignore[arg-type]


async def test_missing_job_raises_job_not_found(redis: Redis, q: Queue, keys: QueueKeys) -> None:
    job = await q.add("x")
    await redis.delete(keys.job(job.id))
    snap = await snapshot(redis, keys.qualified + "*")
    with pytest.raises(JobNotFoundError, match=f"job {job.id} does not exist") as info:
        await job.update_data({})
    assert info.value.code == -1
    assert info.value.job_id == job.id
    with pytest.raises(JobNotFoundError):
        await job.update_progress(1)
    with pytest.raises(JobNotFoundError):
        await job.log("x")
    with pytest.raises(JobNotFoundError):
        await job.change_priority(3)
    with pytest.raises(JobNotFoundError):
        await job.change_delay(1)
    with pytest.raises(JobNotFoundError):
        await job.retry()
    with pytest.raises(JobNotFoundError):
        await job.refresh()
    assert await snapshot(redis, keys.qualified + "*") == snap


# -- retry (reprocessJob) -----------------------------------------------------------------


async def test_retry_failed_job(redis: Redis, q: Queue, keys: QueueKeys) -> None:
    job = await q.add("x")
    other = await q.add("y")
    await finish(redis, keys, job, "failed")
    await job.retry()

    assert await redis.zscore(keys.failed, job.id) is None
    h = await hash_of(redis, keys.job(job.id))
    for gone in ("finishedOn", "processedOn", "failedReason"):
        assert gone not in h
    assert (h["atm"], h["ats"], h["stacktrace"]) == ("2", "3", '["trace"]')
    # LPUSH: behind the job already waiting
    assert await redis.lrange(keys.wait, 0, -1) == [job.id.encode(), other.id.encode()]
    assert await redis.zrange(keys.marker, 0, -1, withscores=True) == [(b"0", 0.0)]
    assert (await events(redis, keys))[-1] == [
        ("event", "waiting"),
        ("jobId", job.id),
        ("prev", "failed"),
    ]
    assert (job.failed_reason, job.finished_on, job.processed_on) == (None, None, None)
    assert await job.get_state() is JobState.WAITING


async def test_retry_completed_job_resetting_attempts(
    redis: Redis, q: Queue, keys: QueueKeys
) -> None:
    job = await q.add("x")
    await finish(redis, keys, job, "completed")
    await job.retry("completed", reset_attempts_made=True, reset_attempts_started=True)
    h = await hash_of(redis, keys.job(job.id))
    for gone in ("finishedOn", "processedOn", "returnvalue", "atm", "ats"):
        assert gone not in h
    assert (job.attempts_made, job.attempts_started, job.return_value) == (0, 0, None)
    assert (await events(redis, keys))[-1][-1] == ("prev", "completed")


async def test_retry_lifo_prioritized_and_paused(redis: Redis, q: Queue, keys: QueueKeys) -> None:
    waiting = await q.add("w")
    lifo = await q.add("l", lifo=True)
    await finish(redis, keys, lifo, "failed")
    await lifo.retry()
    assert await redis.lindex(keys.wait, -1) == lifo.id.encode()  # RPUSH: served next
    assert await redis.lindex(keys.wait, 0) == waiting.id.encode()

    pri = await q.add("p", priority=5)  # pc = 1
    await finish(redis, keys, pri, "failed")
    await q.pause()
    await pri.retry()
    assert await redis.zscore(keys.prioritized, pri.id) == 5 * P32 + 2
    assert not await redis.exists(keys.marker)  # paused: no marker


async def test_retry_errors(redis: Redis, q: Queue, keys: QueueKeys) -> None:
    job = await q.add("x")
    snap = await snapshot(redis, keys.qualified + "*")
    with pytest.raises(JobNotInStateError, match="not in the failed state") as info:
        await job.retry()
    assert info.value.code == -3
    with pytest.raises(JobNotInStateError, match="not in the completed state"):
        await job.retry("completed")
    with pytest.raises(ValidationError, match="'completed' or 'failed'"):
        await job.retry("active")
    assert await snapshot(redis, keys.qualified + "*") == snap


async def test_retry_reattaches_child_to_live_parent(
    redis: Redis, q: Queue, keys: QueueKeys
) -> None:
    parent = await q.add("parent")
    parent_key = keys.job(parent.id)
    child = await q.add("child")
    child_key = keys.job(child.id)
    await redis.hset(child_key, "parentKey", parent_key)
    await finish(redis, keys, child, "completed")
    await redis.hset(parent_key + ":processed", child_key, '{"ok":1}')
    await child.retry("completed")
    assert not await redis.hexists(parent_key + ":processed", child_key)
    assert await redis.smembers(parent_key + ":dependencies") == {child_key.encode()}

    failed_child = await q.add("child2")
    fc_key = keys.job(failed_child.id)
    await redis.hset(fc_key, "parentKey", parent_key)
    await finish(redis, keys, failed_child, "failed")
    await redis.zadd(parent_key + ":unsuccessful", {fc_key: 1})
    await failed_child.retry()
    assert not await redis.exists(parent_key + ":unsuccessful")
    assert await redis.sismember(parent_key + ":dependencies", fc_key)


# -- promote -------------------------------------------------------------------------------


async def test_promote_delayed_job(redis: Redis, q: Queue, keys: QueueKeys) -> None:
    job = await q.add("d", delay=60)
    await job.promote()
    assert await redis.zscore(keys.delayed, job.id) is None
    assert await redis.lrange(keys.wait, 0, -1) == [job.id.encode()]
    h = await hash_of(redis, keys.job(job.id))
    assert h["delay"] == "0"
    assert h["timestamp"] == str(round(job.timestamp.timestamp() * 1000))
    assert job.delay == 0
    assert await redis.zscore(keys.marker, "0") == 0
    assert (await events(redis, keys))[-1] == [
        ("event", "waiting"),
        ("jobId", job.id),
        ("prev", "delayed"),
    ]
    with pytest.raises(JobNotInStateError, match="not in the delayed state"):
        await job.promote()


async def test_promote_prioritized_and_paused(redis: Redis, q: Queue, keys: QueueKeys) -> None:
    await q.pause()
    job = await q.add("d", delay=60, priority=9)
    await redis.delete(keys.marker)
    await job.promote()
    assert await redis.zscore(keys.prioritized, job.id) == 9 * P32 + 1
    assert not await redis.exists(keys.marker)


async def test_promote_drops_legacy_list_marker(redis: Redis, q: Queue, keys: QueueKeys) -> None:
    job = await q.add("d", delay=60)
    await redis.lpush(keys.wait, "0:123")
    await job.promote()
    assert await redis.lrange(keys.wait, 0, -1) == [job.id.encode()]


# -- change_priority -----------------------------------------------------------------------


async def test_change_priority_moves_between_wait_and_prioritized(
    redis: Redis, q: Queue, keys: QueueKeys
) -> None:
    first = await q.add("a")
    job = await q.add("b")
    opts_before = await redis.hget(keys.job(job.id), "opts")

    await job.change_priority(7)
    assert await redis.lrange(keys.wait, 0, -1) == [first.id.encode()]
    assert await redis.zscore(keys.prioritized, job.id) == 7 * P32 + 1
    assert await redis.hget(keys.job(job.id), "priority") == b"7"
    assert await redis.hget(keys.job(job.id), "opts") == opts_before
    assert job.priority == 7

    await job.change_priority(3)  # re-scored with a new counter
    assert await redis.zscore(keys.prioritized, job.id) == 3 * P32 + 2

    await job.change_priority(2, lifo=True)  # front of its band, counter 0
    assert await redis.zscore(keys.prioritized, job.id) == 2 * P32

    await job.change_priority(0)  # back of wait
    assert await redis.zcard(keys.prioritized) == 0
    assert await redis.lrange(keys.wait, 0, -1) == [job.id.encode(), first.id.encode()]

    await job.change_priority(0, lifo=True)  # served next
    assert await redis.lrange(keys.wait, 0, -1) == [first.id.encode(), job.id.encode()]
    assert await redis.zrange(keys.marker, 0, -1) == [b"0"]


async def test_change_priority_of_delayed_job_only_sets_field(
    redis: Redis, q: Queue, keys: QueueKeys
) -> None:
    job = await q.add("d", delay=60)
    score = await redis.zscore(keys.delayed, job.id)
    await job.change_priority(4)
    assert await redis.zscore(keys.delayed, job.id) == score
    assert await redis.zcard(keys.prioritized) == 0
    assert await redis.hget(keys.job(job.id), "priority") == b"4"
    # used when it is promoted
    await job.promote()
    assert await redis.zscore(keys.prioritized, job.id) is not None


async def test_change_priority_paused_writes_no_marker(
    redis: Redis, q: Queue, keys: QueueKeys
) -> None:
    await q.pause()
    job = await q.add("a")
    await job.change_priority(1)
    assert not await redis.exists(keys.marker)


async def test_change_priority_validation(redis: Redis, q: Queue) -> None:
    job = await q.add("a")
    mine = f"bull:{q.name}:*"
    snap = await snapshot(redis, mine)
    for bad in (-1, 2**21, 1.5, True):
        with pytest.raises(ValidationError, match="priority"):
            await job.change_priority(bad)  # type: ignore[arg-type]
    assert await snapshot(redis, mine) == snap


# -- change_delay --------------------------------------------------------------------------


async def test_change_delay(redis: Redis, q: Queue, keys: QueueKeys) -> None:
    job = await q.add("d", delay=60)
    before = now_ms()
    await job.change_delay(timedelta(seconds=5))
    after = now_ms()
    score = int(await redis.zscore(keys.delayed, job.id) or 0)
    due = score // 4096
    assert score % 4096 == 0
    assert before + 5000 <= due <= after + 5000
    assert await redis.hget(keys.job(job.id), "delay") == b"5000"
    assert job.delay == 5.0
    assert (await events(redis, keys))[-1] == [
        ("event", "delayed"),
        ("jobId", job.id),
        ("delay", str(due)),
    ]
    assert await redis.zscore(keys.marker, "1") == score / 4096

    with pytest.raises(InvalidOptionError):
        await job.change_delay(-1)
    waiting = await q.add("w")
    with pytest.raises(JobNotInStateError, match="not in the delayed state"):
        await waiting.change_delay(1)


async def test_change_delay_orders_jobs_due_in_the_same_ms(
    redis: Redis, q: Queue, keys: QueueKeys
) -> None:
    a = await q.add("a", delay=60)
    b = await q.add("b", delay=60)
    now = now_ms()
    await run_op(redis, ops.change_delay(keys, a.id, 1, now))
    await run_op(redis, ops.change_delay(keys, b.id, 1, now))
    assert await redis.zscore(keys.delayed, a.id) == (now + 1000) * 4096
    assert await redis.zscore(keys.delayed, b.id) == (now + 1000) * 4096 + 1


# -- state, refresh, binding ---------------------------------------------------------------


async def test_job_state_helpers_and_refresh(
    redis_decoded: Redis, queue_name: str, keys: QueueKeys
) -> None:
    async with Queue(queue_name, connection=redis_decoded) as qd:
        job = await qd.add("x", {"v": 1})
        assert await job.get_state() is JobState.WAITING
        assert not await job.is_completed()
        await finish(redis_decoded, keys, job, "completed")
        assert await job.is_completed()
        assert not await job.is_failed()
        await job.refresh()
        assert job.return_value == {"ok": 1}
        assert job.attempts_made == 2
        await job.update_progress({"p": 1})
        await job.retry("completed")
        assert await redis_decoded.lindex(keys.wait, 0) == job.id
        assert await job.log("hello") == 1
        assert await job.get_logs() == (["hello"], 1)


async def test_unbound_job_raises(q: Queue) -> None:
    job = await q.add("x")
    job._conn = None
    with pytest.raises(ConnectionNotOpenError):
        await job.get_state()
