"""Getters and queue-level pause/resume: get_state, get_jobs, counts, logs, workers, events.

Jobs are put into states the worker would reach (active, completed, failed, waiting-children,
the legacy v5 ``paused`` list) by writing those keys directly, so the getters are tested on the
exact layout of docs/protocol/keys.md#states without depending on the worker.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis

import echomq
from echomq import JobState, Queue, ValidationError, queue
from echomq._keys import queue_keys
from echomq.protocol.keys import QueueKeys
from helpers import snapshot


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def events(r: Redis, keys: QueueKeys) -> list[list[tuple[str, str]]]:
    """Every events-stream entry as its (field, value) pairs, in order."""
    entries = await r.xrange(keys.events) or []
    return [[(_s(k), _s(v)) for k, v in (fields or {}).items()] for _, fields in entries]


async def place(r: Redis, keys: QueueKeys, job_id: str, state: str, score: int = 1000) -> None:
    """Move a waiting job into ``state`` by writing the state key as the protocol does."""
    await r.lrem(keys.wait, 0, job_id)
    if state in ("active", "paused"):
        await r.lpush(keys.state(state), job_id)
    else:
        await r.zadd(keys.state(state), {job_id: score})


@pytest.fixture
async def q(redis: Redis, queue_name: str) -> AsyncIterator[Queue]:
    async with Queue(queue_name, connection=redis) as qu:
        yield qu


@pytest.fixture
def keys(queue_name: str) -> QueueKeys:
    return queue_keys(queue_name)


# -- get_state ---------------------------------------------------------------------------


async def test_get_state_reports_every_state(redis: Redis, q: Queue, keys: QueueKeys) -> None:
    waiting = await q.add("w")
    delayed = await q.add("d", delay=60)
    prioritized = await q.add("p", priority=3)
    placed = {}
    for state in ("active", "completed", "failed", "waiting-children", "paused"):
        job = await q.add(state)
        await place(redis, keys, job.id, state)
        placed[state] = job.id

    assert await q.get_state(waiting.id) is JobState.WAITING
    assert await q.get_state(delayed.id) is JobState.DELAYED
    assert await q.get_state(prioritized.id) is JobState.PRIORITIZED
    assert await q.get_state(placed["active"]) is JobState.ACTIVE
    assert await q.get_state(placed["completed"]) is JobState.COMPLETED
    assert await q.get_state(placed["failed"]) is JobState.FAILED
    assert await q.get_state(placed["waiting-children"]) is JobState.WAITING_CHILDREN
    # the legacy v5 list reads as waiting
    assert await q.get_state(placed["paused"]) is JobState.WAITING
    assert await q.get_state("nope") is JobState.UNKNOWN


async def test_get_state_order_completed_before_active(
    redis: Redis, q: Queue, keys: QueueKeys
) -> None:
    # an id present in two states is reported by the first in getState's order
    job = await q.add("x")
    await redis.lpush(keys.active, job.id)
    await redis.zadd(keys.completed, {job.id: 1})
    assert await q.get_state(job.id) is JobState.COMPLETED


async def test_module_level_get_state_with_url_and_decoded_client(
    redis_url: str, redis_decoded: Redis, queue_name: str
) -> None:
    job = await echomq.add(queue_name, "n", {"a": 1}, connection=redis_decoded)
    assert await queue.get_state(queue_name, job.id, connection=redis_url) is JobState.WAITING
    assert await queue.get_state(queue_name, job.id, connection=redis_decoded) is JobState.WAITING
    # a caller's client stays open after a module-level call
    assert await redis_decoded.ping()


async def test_get_state_honours_prefix(redis: Redis, queue_name: str) -> None:
    job = await echomq.add(queue_name, "n", connection=redis, prefix="{pfx}")
    assert await queue.get_state(queue_name, job.id, connection=redis) is JobState.UNKNOWN
    state = await queue.get_state(queue_name, job.id, connection=redis, prefix="{pfx}")
    assert state is JobState.WAITING


# -- get_jobs ------------------------------------------------------------------------------


async def test_get_jobs_list_order_and_ranges(q: Queue) -> None:
    ids = [(await q.add("j", i)).id for i in range(4)]  # wait = [4, 3, 2, 1]
    newest_first = list(reversed(ids))

    assert [j.id for j in await q.get_jobs("waiting")] == newest_first
    assert [j.id for j in await q.get_jobs("waiting", asc=True)] == ids
    assert [j.id for j in await q.get_jobs("waiting", 0, 1)] == newest_first[:2]
    assert [j.id for j in await q.get_jobs("waiting", 0, 1, asc=True)] == ids[:2]
    assert [j.id for j in await q.get_jobs("waiting", 1, 2, asc=True)] == ids[1:3]
    assert [j.id for j in await q.get_jobs("waiting", 2, -1, asc=True)] == ids[2:]
    assert [j.id for j in await q.get_waiting()] == ids

    jobs = await q.get_jobs(["waiting"], 0, 0, asc=True)
    assert len(jobs) == 1
    assert jobs[0].name == "j"
    assert jobs[0].data == 0
    assert jobs[0].queue_name == q.name
    # returned jobs are bound: their methods work
    assert await jobs[0].get_state() is JobState.WAITING


async def test_get_jobs_sorted_sets_and_type_order(redis: Redis, q: Queue, keys: QueueKeys) -> None:
    done = []
    for i, score in enumerate((300, 100, 200)):
        job = await q.add(f"c{i}")
        await place(redis, keys, job.id, "completed", score)
        done.append(job.id)
    failed = await q.add("f")
    await place(redis, keys, failed.id, "failed", 50)
    by_score = [done[1], done[2], done[0]]

    assert [j.id for j in await q.get_jobs("completed")] == by_score[::-1]
    assert [j.id for j in await q.get_jobs("completed", asc=True)] == by_score
    assert [j.id for j in await q.get_completed(0, 1)] == by_score[::-1][:2]
    assert [j.id for j in await q.get_failed()] == [failed.id]
    # slices of each state, concatenated in the order asked
    got = await q.get_jobs(["failed", "completed"], 0, 0)
    assert [j.id for j in got] == [failed.id, by_score[-1]]


async def test_get_jobs_defaults_to_every_v6_state(redis: Redis, q: Queue, keys: QueueKeys) -> None:
    made = {
        (await q.add("w")).id,
        (await q.add("d", delay=30)).id,
        (await q.add("p", priority=1)).id,
    }
    for state in ("active", "completed", "failed", "waiting-children"):
        job = await q.add(state)
        await place(redis, keys, job.id, state)
        made.add(job.id)
    legacy = await q.add("legacy")
    await place(redis, keys, legacy.id, "paused")
    jobs = await q.get_jobs()
    # as Node v6: the legacy v5 `paused` list is read only when asked for by name
    assert sorted(j.id for j in jobs) == sorted(made)
    assert [j.id for j in await q.get_delayed()] != []
    assert len(await q.get_prioritized()) == 1
    assert len(await q.get_active()) == 1
    assert len(await q.get_waiting_children()) == 1


async def test_get_jobs_waiting_excludes_legacy_paused_list(
    redis: Redis, q: Queue, keys: QueueKeys
) -> None:
    a = await q.add("a")
    b = await q.add("b")
    await place(redis, keys, b.id, "paused")
    assert [j.id for j in await q.get_jobs("waiting")] == [a.id]
    assert [j.id for j in await q.get_jobs("paused")] == [b.id]


async def test_get_jobs_skips_vanished_hashes_and_repeats(
    redis: Redis, q: Queue, keys: QueueKeys
) -> None:
    a = await q.add("a")
    b = await q.add("b")
    await redis.delete(keys.job(a.id))
    await redis.zadd(keys.completed, {b.id: 1})  # also listed in completed
    jobs = await q.get_jobs(["waiting", "completed"])
    assert [j.id for j in jobs] == [b.id]


async def test_get_jobs_empty_and_invalid(q: Queue) -> None:
    assert await q.get_jobs() == []
    with pytest.raises(ValidationError, match="unknown job state 'wait'"):
        await q.get_jobs("wait")
    with pytest.raises(ValidationError, match="start must be an int"):
        await q.get_jobs("waiting", "0")  # type: ignore[arg-type]


async def test_module_level_get_jobs(redis_decoded: Redis, redis_url: str, queue_name: str) -> None:
    job = await echomq.add(queue_name, "n", {"k": "v"}, connection=redis_decoded, priority=2)
    jobs = await queue.get_jobs(queue_name, JobState.PRIORITIZED, connection=redis_decoded)
    assert [(j.id, j.data, j.priority) for j in jobs] == [(job.id, {"k": "v"}, 2)]
    assert await jobs[0].get_state() is JobState.PRIORITIZED
    via_url = await queue.get_jobs(queue_name, ["prioritized"], connection=redis_url)
    assert [j.id for j in via_url] == [job.id]
    with pytest.raises(echomq.ConnectionNotOpenError):
        await via_url[0].get_state()


# -- counts --------------------------------------------------------------------------------


async def test_get_job_counts_and_count(redis: Redis, q: Queue, keys: QueueKeys) -> None:
    for _ in range(3):
        await q.add("w")
    await q.add("d", delay=60)
    await q.add("p", priority=4)
    for state in ("active", "completed", "failed", "failed", "waiting-children", "paused"):
        job = await q.add(state)
        await place(redis, keys, job.id, state)

    counts = await q.get_job_counts()
    assert counts == {
        "active": 1,
        "completed": 1,
        "delayed": 1,
        "failed": 2,
        "prioritized": 1,
        "waiting": 3,  # the legacy paused list is not counted as waiting (Node v6)
        "waiting-children": 1,
    }
    assert list(counts) == list(echomq._ops.DEFAULT_COUNT_TYPES)
    assert await q.get_job_counts("failed", "waiting") == {"failed": 2, "waiting": 3}
    assert await q.get_job_counts("paused") == {"paused": 1}
    # waiting + legacy paused + delayed + prioritized + waiting-children
    assert await q.count() == 7
    assert await queue.count(q.name, connection=redis) == 7
    assert await queue.get_job_counts(q.name, "active", connection=redis) == {"active": 1}
    with pytest.raises(ValidationError):
        await q.get_job_counts("bogus")


async def test_counts_of_an_empty_queue(redis_decoded: Redis, queue_name: str) -> None:
    counts = await queue.get_job_counts(queue_name, connection=redis_decoded)
    assert set(counts.values()) == {0}
    assert await queue.count(queue_name, connection=redis_decoded) == 0


# -- logs ----------------------------------------------------------------------------------


async def test_get_job_logs(redis: Redis, q: Queue, keys: QueueKeys) -> None:
    job = await q.add("x")
    await redis.rpush(keys.logs(job.id), "l0", "l1", "l2", "l3")
    assert await q.get_job_logs(job.id) == (["l0", "l1", "l2", "l3"], 4)
    assert await q.get_job_logs(job.id, 1, 2) == (["l1", "l2"], 4)
    assert await q.get_job_logs(job.id, asc=False) == (["l3", "l2", "l1", "l0"], 4)
    assert await q.get_job_logs(job.id, 0, 1, asc=False) == (["l3", "l2"], 4)
    assert await q.get_job_logs("missing") == ([], 0)
    assert await job.get_logs(0, 0) == (["l0"], 4)
    got = await queue.get_job_logs(q.name, job.id, 0, -1, False, connection=redis)
    assert got == (["l3", "l2", "l1", "l0"], 4)


# -- pause / resume ------------------------------------------------------------------------


async def test_pause_sets_flag_drops_marker_and_emits(
    redis: Redis, q: Queue, keys: QueueKeys
) -> None:
    job = await q.add("x")
    assert await redis.zrange(keys.marker, 0, -1, withscores=True) == [(b"0", 0.0)]
    assert not await q.is_paused()

    await q.pause()
    assert await redis.hget(keys.meta, "paused") == b"1"
    assert not await redis.exists(keys.marker)
    assert await q.is_paused()
    assert (await events(redis, keys))[-1] == [("event", "paused")]
    assert await redis.lrange(keys.wait, 0, -1) == [job.id.encode()]  # jobs stay put

    # adding to a paused queue writes no marker
    await q.add("y")
    assert not await redis.exists(keys.marker)


async def test_resume_writes_base_marker_when_jobs_are_ready(
    redis: Redis, q: Queue, keys: QueueKeys
) -> None:
    await q.pause()
    await q.add("p", priority=2)
    await q.resume()
    assert not await redis.hexists(keys.meta, "paused")
    assert not await q.is_paused()
    assert await redis.zrange(keys.marker, 0, -1, withscores=True) == [(b"0", 0.0)]
    assert (await events(redis, keys))[-1] == [("event", "resumed")]


async def test_resume_writes_delay_marker_when_only_delayed(
    redis: Redis, q: Queue, keys: QueueKeys
) -> None:
    await q.pause()
    job = await q.add("d", delay=60)
    await redis.delete(keys.marker)
    await q.resume()
    score = await redis.zscore(keys.delayed, job.id)
    assert score is not None
    assert await redis.zrange(keys.marker, 0, -1, withscores=True) == [(b"1", score / 4096)]


async def test_resume_of_an_empty_queue_writes_no_marker(
    redis: Redis, q: Queue, keys: QueueKeys
) -> None:
    await q.pause()
    await q.resume()
    assert not await redis.exists(keys.marker)
    assert not await redis.hexists(keys.meta, "paused")


async def test_resume_renames_legacy_paused_list_when_wait_is_absent(
    redis: Redis, queue_name: str, keys: QueueKeys
) -> None:
    await redis.rpush(keys.paused, "a", "b")
    await redis.hset(keys.meta, "paused", 1)
    await queue.resume(queue_name, connection=redis)
    assert not await redis.exists(keys.paused)
    assert await redis.lrange(keys.wait, 0, -1) == [b"a", b"b"]
    assert await redis.zrange(keys.marker, 0, -1) == [b"0"]


async def test_resume_moves_legacy_paused_list_in_batches(
    redis: Redis, queue_name: str, keys: QueueKeys
) -> None:
    legacy = [f"L{i}" for i in range(7005)]
    await redis.rpush(keys.paused, *legacy)
    await redis.lpush(keys.wait, "w")
    await redis.hset(keys.meta, "paused", 1)
    await queue.resume(queue_name, connection=redis)
    assert not await redis.exists(keys.paused)
    wait = [_s(x) for x in await redis.lrange(keys.wait, 0, -1)]
    # appended to the served end, in their order
    assert wait == ["w", *legacy]
    # one `resumed` event, though the script ran twice
    assert await events(redis, keys) == [[("event", "resumed")]]


async def test_module_level_pause_resume(
    redis_url: str, redis_decoded: Redis, queue_name: str
) -> None:
    await queue.pause(queue_name, connection=redis_url)
    assert await queue.is_paused(queue_name, connection=redis_decoded)
    await queue.resume(queue_name, connection=redis_decoded)
    assert not await queue.is_paused(queue_name, connection=redis_url)


# -- workers and events --------------------------------------------------------------------


async def test_get_workers_lists_named_connections(
    redis_url: str, redis: Redis, q: Queue, keys: QueueKeys
) -> None:
    clients = [Redis.from_url(redis_url) for _ in range(4)]
    try:
        await clients[0].client_setname(keys.worker_client_name())
        await clients[1].client_setname(keys.worker_client_name("w1"))
        await clients[2].client_setname(keys.events_client_name())  # QueueEvents, not a worker
        await clients[3].client_setname(queue_keys(q.name + "x").worker_client_name())
        workers = await q.get_workers()
        assert sorted(w["rawname"] for w in workers) == sorted(
            [keys.worker_client_name(), keys.worker_client_name("w1")]
        )
        assert {w["name"] for w in workers} == {q.name}
        assert all("addr" in w and "id" in w for w in workers)
        decoded = await queue.get_workers(q.name, connection=redis_url)
        assert len(decoded) == 2
    finally:
        for c in clients:
            await c.aclose()


async def test_trim_events(redis: Redis, q: Queue, keys: QueueKeys) -> None:
    for i in range(1000):
        await redis.xadd(keys.events, {"event": "x", "n": i})
    deleted = await q.trim_events(10)
    left = await redis.xlen(keys.events)
    assert deleted == 1000 - left
    assert 10 <= left < 1000
    # "about 0" drops every whole node of the stream, so what the first trim left goes too
    assert await queue.trim_events(q.name, 0, connection=redis) == left
    assert await redis.xlen(keys.events) == 0
    with pytest.raises(ValidationError):
        await q.trim_events(-1)


async def test_getters_write_nothing(redis: Redis, q: Queue) -> None:
    job = await q.add("x")
    mine = f"{q.prefix}:{q.name}:*"  # keys of earlier tests (with TTLs) may expire meanwhile
    before = await snapshot(redis, mine)
    await q.get_state(job.id)
    await q.get_jobs()
    await q.get_job_counts()
    await q.count()
    await q.get_job_logs(job.id)
    await q.is_paused()
    assert await snapshot(redis, mine) == before
