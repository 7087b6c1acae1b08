"""Process-level crashes: a CLI worker SIGKILLed mid-job, and two worker processes at once.

The workers run ``procs.recording:process`` (see ``tests/procs/recording.py``), which records
every execution in ``rec:<queue>:runs`` outside the queue's keyspace. Delivery is
at-least-once: a job whose worker died is run again, but its completion is recorded once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

import echomq
from _procs import WorkerProcs, run_counts, runs
from helpers import queue_key, wait_for

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def procs(tmp_path: Path, redis_url: str) -> Iterator[WorkerProcs]:
    with WorkerProcs(tmp_path, redis_url) as group:
        yield group


async def completed_events(r: Redis, queue: str) -> list[str]:
    entries = await r.xrange(queue_key(queue, "events"))
    return [f[b"jobId"].decode() for _, f in entries if f[b"event"] == b"completed"]


async def assert_all_completed_once(r: Redis, queue: str, ids: list[str]) -> None:
    completed = [m.decode() for m in await r.zrange(queue_key(queue, "completed"), 0, -1)]
    assert sorted(completed, key=int) == sorted(ids, key=int)
    events = await completed_events(r, queue)
    assert sorted(events, key=int) == sorted(ids, key=int), "one completed event per job"
    for state in ("active", "wait"):
        assert await r.llen(queue_key(queue, state)) == 0, state
    assert await r.zcard(queue_key(queue, "failed")) == 0
    assert await r.zcard(queue_key(queue, "prioritized")) == 0
    for job_id in ids:
        h = await r.hgetall(queue_key(queue, job_id))
        assert h[b"atm"] == b"1", (job_id, h)
        assert json.loads(h[b"returnvalue"]) == job_id
        assert not await r.exists(queue_key(queue, f"{job_id}:lock"))


async def test_sigkilled_worker_jobs_are_rerun_and_completed_once(
    procs: WorkerProcs, redis: Redis, queue_name: str
) -> None:
    n = 8
    jobs = await echomq.add_bulk(
        queue_name, [("rec", {"sleep": 0.4}) for _ in range(n)], connection=redis
    )
    ids = [job.id for job in jobs]
    first = procs.start(queue_name, name="first", concurrency=2)

    async def mid_job() -> list[str] | None:
        # at least one job done and two held (started, lock live, not finished)
        if await redis.zcard(queue_key(queue_name, "completed")) < 1:
            return None
        active = [a.decode() for a in await redis.lrange(queue_key(queue_name, "active"), 0, -1)]
        started = {job_id for job_id, _ in await runs(redis, queue_name)}
        held = [a for a in active if a in started]
        return held if len(held) == 2 else None

    held = await wait_for(mid_job, timeout=15, message="first worker never was mid-job")
    first.kill()
    # The killed worker's jobs stay active, locked, until their locks expire.
    active = await redis.lrange(queue_key(queue_name, "active"), 0, -1)
    assert sorted(a.decode() for a in active) == sorted(held)
    assert all([await redis.exists(queue_key(queue_name, f"{j}:lock")) for j in held])
    done_before = {
        m.decode() for m in await redis.zrange(queue_key(queue_name, "completed"), 0, -1)
    }

    second = procs.start(queue_name, name="second", concurrency=2)
    await wait_for(
        lambda: _zcard_is(redis, queue_key(queue_name, "completed"), n),
        timeout=20,
        message=f"not all jobs completed; second worker log:\n{second.log()}",
    )
    await assert_all_completed_once(redis, queue_name, ids)

    counts = await run_counts(redis, queue_name)
    for job_id in ids:
        expected_runs = 2 if job_id in held else 1
        assert counts[job_id] == expected_runs, (job_id, counts)
    for job_id in held:
        h = await redis.hgetall(queue_key(queue_name, job_id))
        assert h[b"ats"] == b"2" and h[b"stc"] == b"1", (job_id, h)
        assert h[b"pb"] == b"second"
        runs_of = [pid for j, pid in await runs(redis, queue_name) if j == job_id]
        assert runs_of == [first.pid, second.pid]
    for job_id in done_before:
        h = await redis.hgetall(queue_key(queue_name, job_id))
        assert h[b"ats"] == b"1" and h[b"pb"] == b"first"
    stalled = [
        f[b"jobId"].decode()
        for _, f in await redis.xrange(queue_key(queue_name, "events"))
        if f[b"event"] == b"stalled"
    ]
    assert sorted(stalled) == sorted(held)
    assert "stalled (its worker lost the lock); moved back to wait" in second.log()
    assert second.terminate() == 0


async def _zcard_is(r: Redis, name: str, n: int) -> bool:
    return bool(await r.zcard(name) == n)


async def test_two_worker_processes_complete_every_job_once(
    procs: WorkerProcs, redis: Redis, queue_name: str
) -> None:
    n = 40
    workers = [procs.start(queue_name, name=f"w{i}", concurrency=3) for i in (1, 2)]

    async def both_listed() -> bool:
        names = {w["rawname"] for w in await echomq.get_workers(queue_name, connection=redis)}
        return all(any(name.endswith(f":w:w{i}") for name in names) for i in (1, 2))

    await wait_for(both_listed, timeout=15, message="the two workers never registered")
    jobs = await echomq.add_bulk(
        queue_name, [("rec", {"sleep": 0.05}) for _ in range(n)], connection=redis
    )
    ids = [job.id for job in jobs]
    await wait_for(lambda: _zcard_is(redis, queue_key(queue_name, "completed"), n), timeout=20)
    await assert_all_completed_once(redis, queue_name, ids)
    counts = await run_counts(redis, queue_name)
    assert set(counts) == set(ids) and set(counts.values()) == {1}
    by = [await redis.hget(queue_key(queue_name, job_id), "pb") for job_id in ids]
    assert set(by) == {b"w1", b"w2"}, "both workers took jobs"
    pids = {pid for _, pid in await runs(redis, queue_name)}
    assert pids == {w.pid for w in workers}
    for worker in workers:
        assert worker.terminate() == 0
