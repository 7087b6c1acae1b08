"""Recovery at full speed, isolation of a job that keeps killing its worker, locks kept through
a blocked event loop: with real worker processes (``procs.recording``) and a real server.

- A mass crash: every orphan restarts at once on the survivor's free slots (the rule before
  isolation ran one job that stalled before at a time per worker).
- A poison job (``os._exit``) among others, max stalled count 1: the innocents that shared its
  process twice are isolated rather than failed, each runs alone and completes; the poison
  fails after a stall while alone.
- An ``async def`` processor that blocks its loop longer than the lock keeps its job: the locks
  are renewed from a thread, so each job runs once, none stalls.
- The stalled check's rule itself, through the script: past the limit a job is isolated first,
  and failed only once isolated; with a max stalled count of 0, at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

import echomq
from _procs import WorkerProc, WorkerProcs, run_counts
from echomq import _ops as ops
from echomq._ops import worker as wops
from echomq._redis.connection import AsyncConn
from echomq._redis.run import run_op
from echomq.protocol.keys import QueueKeys
from echomq.worker._locks import LockRenewer, run_in_thread
from helpers import queue_key, wait_for

pytestmark = pytest.mark.timeout(90)

PARAMS = wops.FetchParams("t:", 30_000)


@pytest.fixture
def procs(tmp_path: Path, redis_url: str) -> Iterator[WorkerProcs]:
    with WorkerProcs(tmp_path, redis_url) as group:
        yield group


async def _ids_in(r: Redis, queue: str, state: str) -> set[str]:
    return {m.decode() for m in await r.zrange(queue_key(queue, state), 0, -1)}


async def test_a_mass_crash_restarts_every_orphan_at_once(
    procs: WorkerProcs, redis: Redis, queue_name: str
) -> None:
    n = 20
    jobs = await echomq.add_bulk(
        queue_name, [("rec", {"sleep": 3.0}) for _ in range(n)], connection=redis
    )
    ids = [job.id for job in jobs]
    victims = [procs.start(queue_name, concurrency=10) for _ in range(2)]

    async def all_started() -> bool:
        return len(await run_counts(redis, queue_name)) == n

    await wait_for(all_started, timeout=30, message="the first workers never took every job")
    for victim in victims:
        victim.kill()
    killed = time.monotonic()
    survivor = procs.start(queue_name, concurrency=n)

    async def all_restarted() -> bool:
        counts = await run_counts(redis, queue_name)
        return all(counts[job_id] >= 2 for job_id in ids)

    await wait_for(
        all_restarted, timeout=20, message=f"not all orphans restarted:\n{survivor.log()}"
    )
    # lock 1 s + two stalled intervals of 0.5 s + the survivor's start-up; one at a time, the
    # last would start after 19 runs of 3 s
    assert time.monotonic() - killed < 8.0
    await wait_for(
        lambda: _count(redis, queue_key(queue_name, "completed"), n),
        timeout=20,
        message=survivor.log(),
    )
    for job_id in ids:
        h = await redis.hgetall(queue_key(queue_name, job_id))
        assert h[b"stc"] == b"1" and b"iso" not in h, (job_id, h)


async def _count(r: Redis, key: str, n: int) -> bool:
    return bool(await r.zcard(key) >= n)


async def test_a_poison_job_fails_alone_and_its_neighbours_complete(
    procs: WorkerProcs, redis: Redis, queue_name: str
) -> None:
    innocents = [
        job.id
        for job in await echomq.add_bulk(
            queue_name, [("rec", {"sleep": 1.0}) for _ in range(4)], connection=redis
        )
    ]
    poison = (await echomq.add(queue_name, "rec", {"exit": True}, connection=redis)).id
    extra = ("--max-stalled-count", "1")
    current: list[WorkerProc] = [procs.start(queue_name, concurrency=8, extra=extra)]

    async def settled() -> bool:  # a supervisor: a dead worker is replaced at once
        if current[-1].proc.poll() is not None:
            current.append(procs.start(queue_name, concurrency=8, extra=extra))
        done = await _ids_in(redis, queue_name, "completed")
        failed = await _ids_in(redis, queue_name, "failed")
        return done | failed == {*innocents, poison}

    await wait_for(settled, timeout=60, message="jobs never settled:\n" + current[-1].log())
    assert await _ids_in(redis, queue_name, "completed") == set(innocents)
    assert await _ids_in(redis, queue_name, "failed") == {poison}
    h = await redis.hgetall(queue_key(queue_name, poison))
    assert h[b"failedReason"] == b"job stalled more than allowable limit"
    assert h[b"iso"] == b"1" and h[b"stc"] == b"3"  # ran twice beside others, once alone
    counts = await run_counts(redis, queue_name)
    assert counts[poison] == 3
    # each worker died once per run of the poison; nothing else killed one
    assert len(current) == 4, [w.log() for w in current]


async def test_a_blocked_event_loop_keeps_its_locks(
    procs: WorkerProcs, redis: Redis, queue_name: str
) -> None:
    jobs = await echomq.add_bulk(
        queue_name, [("rec", {"block": 2.5}) for _ in range(4)], connection=redis
    )
    ids = [job.id for job in jobs]
    # two workers with a 1 s lock and a stalled check every 0.3 s: a lost lock is found
    workers = [procs.start(queue_name, concurrency=4, stalled_interval=0.3) for _ in range(2)]
    await wait_for(
        lambda: _count(redis, queue_key(queue_name, "completed"), len(ids)),
        timeout=40,
        message="\n".join(w.log() for w in workers),
    )
    counts = await run_counts(redis, queue_name)
    assert all(counts[job_id] == 1 for job_id in ids), counts
    for job_id in ids:
        h = await redis.hgetall(queue_key(queue_name, job_id))
        assert b"stc" not in h and h[b"ats"] == b"1" and h[b"atm"] == b"1", (job_id, h)
    events = await redis.xrange(queue_key(queue_name, "events"))
    assert not [f for _, f in events if f[b"event"] == b"stalled"]
    logs = "".join(w.log() for w in workers)
    named = re.findall(r"blocked the event loop for [0-9.]+ s \(job ([0-9, ]+)\)", logs)
    warned = [job_id for group in named for job_id in group.split(", ")]
    assert sorted(warned) == sorted(ids), logs  # each job named once


async def _stall(redis: Redis, keys: QueueKeys, job_id: str, max_stalled: int) -> list[str]:
    """Take the job, drop its lock, and run the stalled check twice (suspect, then recover)."""
    reply = await run_op(redis, wops.finish_and_fetch(keys, [], 1, 1, PARAMS, ops.now_ms()))
    assert [j.id for j in reply.jobs] == [job_id]
    await redis.delete(keys.job(job_id) + ":lock")
    recovered: list[str] = []
    for _ in range(2):
        await redis.delete(keys.stalled_check)
        op = wops.move_stalled_jobs_to_wait(keys, max_stalled, 30_000, ops.now_ms())
        recovered += (await run_op(redis, op)).recovered
    return recovered


async def test_the_stalled_check_isolates_before_it_fails(redis: Redis, queue_name: str) -> None:
    keys = QueueKeys(queue_name)
    job = await echomq.add(queue_name, "j", {}, connection=redis)
    assert await _stall(redis, keys, job.id, 1) == [job.id]
    h = await redis.hgetall(keys.job(job.id))
    assert h[b"stc"] == b"1" and b"iso" not in h and b"defa" not in h
    await _stall(redis, keys, job.id, 1)  # past the limit, beside others maybe: isolated
    h = await redis.hgetall(keys.job(job.id))
    assert h[b"stc"] == b"2" and h[b"iso"] == b"1" and b"defa" not in h
    await _stall(redis, keys, job.id, 1)  # it stalled alone: it fails
    h = await redis.hgetall(keys.job(job.id))
    assert h[b"stc"] == b"3" and h[b"defa"] == b"job stalled more than allowable limit"


async def test_no_isolation_with_a_max_stalled_count_of_zero(redis: Redis, queue_name: str) -> None:
    keys = QueueKeys(queue_name)
    job = await echomq.add(queue_name, "j", {}, connection=redis)
    await _stall(redis, keys, job.id, 0)
    h = await redis.hgetall(keys.job(job.id))
    assert b"iso" not in h and h[b"defa"] == b"job stalled more than allowable limit"


async def _held_job(redis: Redis, queue_name: str, lock_ms: int) -> tuple[QueueKeys, str, str]:
    keys = QueueKeys(queue_name)
    job = await echomq.add(queue_name, "j", {}, connection=redis)
    params = wops.FetchParams("t:", lock_ms)
    reply = await run_op(redis, wops.finish_and_fetch(keys, [], 1, 1, params, ops.now_ms()))
    return keys, job.id, reply.jobs[0].token


@pytest.mark.parametrize("thread", [True, False])
async def test_the_renewer_keeps_a_lock_through_a_blocked_loop_only_from_its_thread(
    redis: Redis, redis_url: str, queue_name: str, thread: bool, caplog: pytest.LogCaptureFixture
) -> None:
    keys, job_id, token = await _held_job(redis, queue_name, 600)
    conn = AsyncConn(redis)

    def new_client() -> Redis:
        if not thread:
            raise RuntimeError("no second client here")
        return Redis.from_url(redis_url)

    renewer = LockRenewer(keys, conn, lambda: {token: job_id}, 600, 0.2)
    task = asyncio.create_task(run_in_thread(renewer, lambda: True, new_client))
    try:
        await asyncio.sleep(0.3)
        time.sleep(1.2)  # this loop is blocked for twice the lock
        held = await redis.get(keys.job(job_id) + ":lock")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    if thread:
        assert held == token.encode()
    else:  # renewed on the blocked loop: the lock expired meanwhile
        assert held is None
        assert "lock renewal cannot run in a thread (RuntimeError" in caplog.text


async def test_locks_of_a_fetch_whose_reply_is_unread_are_renewed_by_token(
    redis: Redis, queue_name: str
) -> None:
    keys = QueueKeys(queue_name)
    jobs = await echomq.add_bulk(queue_name, [("j", {}) for _ in range(3)], connection=redis)
    # a fetch of two jobs (tokens t:1, t:2) whose reply the worker has not read
    await run_op(redis, wops.finish_and_fetch(keys, [], 2, 1, wops.FetchParams("t:", 500), 0))
    taken, left = [j.id for j in jobs[:2]], jobs[2].id
    await redis.sadd(keys.stalled, *taken)  # suspects of the next stalled check
    renewer = LockRenewer(
        keys, AsyncConn(redis), dict, 60_000, 1.0, unread=lambda: ["t:1", "t:2", "t:9"]
    )
    assert await renewer.renew_once() == []
    for job_id in taken:
        assert await redis.pttl(keys.job(job_id) + ":lock") > 30_000
    assert await redis.smembers(keys.stalled) == set()
    assert await redis.exists(keys.job(left) + ":lock") == 0
    op = wops.extend_locks_by_token(keys, ["t:2", "other"], 1_000)
    assert await run_op(redis, op) == {"t:2": taken[1]}


async def test_a_job_fetched_while_another_blocks_the_loop_keeps_its_lock(
    redis: Redis, redis_url: str, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The worker sends a fetch, then an ``async def`` processor blocks the loop before the
    reply is read: the job that fetch took is locked, but not yet in the worker's table. Its
    lock outlives the block (renewed by token from the lock thread)."""
    import redis as sync_redis

    keys = QueueKeys(queue_name)
    first = await echomq.add(queue_name, "blocker", {}, connection=redis)
    sync = sync_redis.Redis.from_url(redis_url)
    seen: dict[str, object] = {}
    worker: echomq.Worker

    async def process(job: echomq.Job) -> None:
        if job.id != first.id:
            return
        added = await echomq.add(queue_name, "next", {}, connection=redis)
        seen["id"] = added.id
        # until the worker's fetch took it (in Redis), yielding to the loop in between
        while sync.lpos(keys.active, added.id) is None:
            await asyncio.sleep(0)
        session = worker._session
        assert session is not None
        seen["unread"] = added.id not in session.held.values()
        time.sleep(2.5)  # blocks the loop, with a 1 s lock
        seen["lock"] = sync.get(keys.job(added.id) + ":lock")

    worker = echomq.Worker(queue_name, process, connection=redis, concurrency=2, lock_duration=1.0)
    try:
        async with worker:
            await wait_for(lambda: _count(redis, keys.completed, 2), timeout=20)
    finally:
        sync.close()
    assert seen["unread"] is True  # the case this test is about was reached
    assert seen["lock"] is not None, caplog.text
    assert "lock could not be renewed" not in caplog.text
    h = await redis.hgetall(keys.job(str(seen["id"])))
    assert h[b"atm"] == b"1" and b"stc" not in h
