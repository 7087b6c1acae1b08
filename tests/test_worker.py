"""The worker against a real Redis: processing, ordering, concurrency, outcomes and effects."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any

import pytest
from redis.asyncio import Redis

import echomq
from echomq import Backoff, Job, KeepJobs, Limiter, Worker
from echomq._ops import scripts
from echomq.worker import WorkerState
from echomq.worker._session import Session
from helpers import monitored, wait_for

FAST = {"drain_delay": 0.2, "stalled_interval": 5.0}


async def events_of(r: Redis, queue: str) -> list[dict[str, str]]:
    entries = await r.xrange(f"bull:{queue}:events")
    return [{k.decode(): v.decode() for k, v in fields.items()} for _, fields in entries]


async def finished(r: Redis, queue: str, n: int, state: str = "completed") -> None:
    await wait_for(lambda: _zcard_at_least(r, f"bull:{queue}:{state}", n), timeout=10)


async def _zcard_at_least(r: Redis, key: str, n: int) -> bool:
    return bool(await r.zcard(key) >= n)


async def test_processes_jobs_and_records_return_values(redis: Redis, queue_name: str) -> None:
    jobs = await echomq.add_bulk(
        queue_name, [("double", {"x": i}) for i in range(20)], connection=redis
    )

    async def double(job: Job) -> dict[str, Any]:
        return {"y": job.data["x"] * 2}

    async with Worker(queue_name, double, connection=redis, concurrency=5, **FAST):
        await finished(redis, queue_name, 20)
    for job in jobs:
        h = await redis.hgetall(f"bull:{queue_name}:{job.id}")
        assert json.loads(h[b"returnvalue"]) == {"y": job.data["x"] * 2}
        assert h[b"atm"] == b"1" and h[b"ats"] == b"1"
        assert int(h[b"finishedOn"]) >= int(h[b"processedOn"])
        assert not await redis.exists(f"bull:{queue_name}:{job.id}:lock")
    assert await redis.llen(f"bull:{queue_name}:active") == 0
    evs = await events_of(redis, queue_name)
    completed = [e for e in evs if e["event"] == "completed"]
    assert len(completed) == 20
    assert all(e["prev"] == "active" for e in completed)
    assert json.loads(completed[0]["returnvalue"])["y"] % 2 == 0
    assert [e for e in evs if e["event"] == "active"][0]["prev"] == "waiting"
    assert evs[-1]["event"] == "drained"


async def test_none_result_is_stored_as_json_null(redis: Redis, queue_name: str) -> None:
    job = await echomq.add(queue_name, "n", {}, connection=redis)

    async def nothing(job: Job) -> None:
        return None

    async with Worker(queue_name, nothing, connection=redis, **FAST):
        await finished(redis, queue_name, 1)
    assert await redis.hget(f"bull:{queue_name}:{job.id}", "returnvalue") == b"null"


async def test_sync_processor_runs_in_a_thread(redis: Redis, queue_name: str) -> None:
    await echomq.add_bulk(queue_name, [("s", {"i": i}) for i in range(4)], connection=redis)
    threads: set[str] = set()
    main = threading.current_thread().name

    def blocking(job: Job) -> int:
        threads.add(threading.current_thread().name)
        time.sleep(0.2)  # would block the loop (and lock renewal) if run on it
        return int(job.data["i"])

    started = time.monotonic()
    async with Worker(queue_name, blocking, connection=redis, concurrency=4, **FAST):
        await finished(redis, queue_name, 4)
    assert main not in threads
    assert time.monotonic() - started < 0.75  # the four ran side by side


async def test_concurrency_without_a_connection_per_slot(redis: Redis, queue_name: str) -> None:
    await echomq.add_bulk(queue_name, [("c", {}) for _ in range(30)], connection=redis)
    running = 0
    peak = 0
    release = asyncio.Event()

    async def slow(job: Job) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await release.wait()
        running -= 1

    worker = Worker(queue_name, slow, connection=redis, concurrency=10, name="w1", **FAST)
    async with worker:
        await wait_for(lambda: peak == 10, timeout=5)
        assert await redis.llen(f"bull:{queue_name}:active") == 10
        clients = await redis.client_list()
        named = [c for c in clients if c["name"].startswith("bull:") and ":w:w1" in c["name"]]
        assert len(named) == 1
        release.set()
        await finished(redis, queue_name, 30)
    assert peak == 10


async def test_two_finish_calls_in_flight_each_with_half_the_slots(
    redis: Redis, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While Redis records one batch, the worker runs the jobs the other call returned."""
    await echomq.add_bulk(queue_name, [("c", {"i": i}) for i in range(400)], connection=redis)
    flying = peak = biggest = 0
    call = Session.call

    async def counted(self: Session, items: list[Any], fetch: int, outages: Any = None) -> Any:
        nonlocal flying, peak, biggest
        flying += 1
        peak, biggest = max(peak, flying), max(biggest, len(items))
        try:
            return await call(self, items, fetch, outages)
        finally:
            flying -= 1

    monkeypatch.setattr(Session, "call", counted)
    seen: list[int] = []

    async def quick(job: Job) -> int:
        seen.append(job.data["i"])
        return 1

    async with Worker(queue_name, quick, connection=redis, concurrency=20, **FAST):
        await finished(redis, queue_name, 400)
    assert peak == 2  # never more
    assert 0 < biggest <= 10  # half of concurrency=20
    assert sorted(seen) == list(range(400))  # each job once


async def test_order_priority_then_fifo_and_lifo(redis: Redis, queue_name: str) -> None:
    q = echomq.Queue(queue_name, connection=redis)
    await q.add("a", 1)
    await q.add("b", 2)
    await q.add("p5", 3, priority=5)
    await q.add("p1", 4, priority=1)
    await q.add("lifo", 5, lifo=True)
    order: list[str] = []

    async def record(job: Job) -> None:
        order.append(job.name)

    async with Worker(queue_name, record, connection=redis, **FAST):
        await finished(redis, queue_name, 5)
    assert order == ["lifo", "a", "b", "p1", "p5"]


async def test_delayed_job_runs_when_due(redis: Redis, queue_name: str) -> None:
    job = await echomq.add(queue_name, "later", {}, connection=redis, delay=0.4)
    seen: list[float] = []

    async def record(job: Job) -> None:
        seen.append(time.time())

    async with Worker(queue_name, record, connection=redis, drain_delay=5.0):
        await finished(redis, queue_name, 1)
    due = job.timestamp.timestamp() + 0.4
    assert seen[0] >= due - 0.005
    assert seen[0] < due + 1.0  # woken by the delay marker, not by the 5 s drain delay
    evs = await events_of(redis, queue_name)
    assert {"event": "waiting", "jobId": job.id, "prev": "delayed"} in evs


async def test_retries_with_fixed_backoff_then_success(redis: Redis, queue_name: str) -> None:
    job = await echomq.add(
        queue_name, "flaky", {}, connection=redis, attempts=3, backoff=Backoff(delay=0.1)
    )
    tries: list[float] = []

    async def flaky(job: Job) -> str:
        tries.append(time.monotonic())
        if len(tries) < 3:
            raise ValueError(f"boom {len(tries)}")
        return "ok"

    async with Worker(queue_name, flaky, connection=redis, **FAST):
        await finished(redis, queue_name, 1)
    assert len(tries) == 3
    assert tries[1] - tries[0] >= 0.095 and tries[2] - tries[1] >= 0.095
    h = await redis.hgetall(f"bull:{queue_name}:{job.id}")
    assert h[b"atm"] == b"3" and h[b"ats"] == b"3"
    assert h[b"returnvalue"] == b'"ok"'
    assert h[b"failedReason"] == b"boom 2"
    stack = json.loads(h[b"stacktrace"])
    assert len(stack) == 2 and "ValueError: boom 1" in stack[0]
    evs = [e for e in await events_of(redis, queue_name) if e.get("jobId") == job.id]
    assert [e["event"] for e in evs].count("delayed") == 2
    assert "failed" not in [e["event"] for e in evs]


async def test_final_failure_and_retries_exhausted(redis: Redis, queue_name: str) -> None:
    job = await echomq.add(queue_name, "bad", {}, connection=redis, attempts=2, stacktrace_limit=1)

    async def bad(job: Job) -> None:
        raise RuntimeError("always")

    async with Worker(queue_name, bad, connection=redis, **FAST):
        await finished(redis, queue_name, 1, "failed")
    h = await redis.hgetall(f"bull:{queue_name}:{job.id}")
    assert h[b"failedReason"] == b"always" and h[b"atm"] == b"2"
    assert len(json.loads(h[b"stacktrace"])) == 1
    evs = [e for e in await events_of(redis, queue_name) if e.get("jobId") == job.id]
    names = [e["event"] for e in evs]
    assert names.count("waiting") == 2  # the add, and the immediate retry (prev active)
    assert {"event": "waiting", "jobId": job.id, "prev": "active"} in evs
    assert {"event": "failed", "jobId": job.id, "failedReason": "always", "prev": "active"} in evs
    assert {"event": "retries-exhausted", "jobId": job.id, "attemptsMade": "2"} in evs


async def test_exponential_and_custom_backoff(redis: Redis, queue_name: str) -> None:
    exp = await echomq.add(
        queue_name,
        "exp",
        {},
        connection=redis,
        attempts=3,
        backoff={"type": "exponential", "delay": 0.05},
    )
    custom = await echomq.add(
        queue_name, "custom", {}, connection=redis, attempts=3, backoff={"type": "mine"}
    )
    times: dict[str, list[float]] = {"exp": [], "custom": []}
    calls: list[tuple[int, str]] = []

    def strategy(attempts_made: int, kind: str, error: BaseException, job: Job) -> float:
        calls.append((attempts_made, kind))
        return -1 if attempts_made >= 2 else 0.05

    async def fail(job: Job) -> None:
        times[job.name].append(time.monotonic())
        raise ValueError("x")

    async with Worker(
        queue_name, fail, connection=redis, concurrency=2, backoff_strategy=strategy, **FAST
    ):
        await finished(redis, queue_name, 2, "failed")
    e = times["exp"]
    assert len(e) == 3 and e[1] - e[0] >= 0.045 and e[2] - e[1] >= 0.095
    assert len(times["custom"]) == 2  # -1 from the strategy stops retrying
    assert calls == [(1, "mine"), (2, "mine")]
    for j in (exp, custom):
        assert await redis.zscore(f"bull:{queue_name}:failed", j.id) is not None


async def test_unrecoverable_error_fails_at_once(redis: Redis, queue_name: str) -> None:
    job = await echomq.add(queue_name, "u", {}, connection=redis, attempts=5)
    tries = 0

    async def proc(job: Job) -> None:
        nonlocal tries
        tries += 1
        raise echomq.UnrecoverableError("no point")

    async with Worker(queue_name, proc, connection=redis, **FAST):
        await finished(redis, queue_name, 1, "failed")
    assert tries == 1
    h = await redis.hgetall(f"bull:{queue_name}:{job.id}")
    assert h[b"failedReason"] == b"no point" and h[b"atm"] == b"1"
    names = [e["event"] for e in await events_of(redis, queue_name)]
    assert "retries-exhausted" not in names  # atm 1 < attempts 5, as in Node


async def test_removal_options_and_worker_defaults(redis: Redis, queue_name: str) -> None:
    own = await echomq.add(queue_name, "own", {}, connection=redis, remove_on_complete=True)
    kept = await echomq.add_bulk(queue_name, [("k", {"i": i}) for i in range(5)], connection=redis)

    async def ok(job: Job) -> int:
        return 1

    async with Worker(
        queue_name, ok, connection=redis, remove_on_complete=KeepJobs(count=2), **FAST
    ):
        await wait_for(lambda: _no_waiting(redis, queue_name), timeout=5)
        await wait_for(lambda: _active_empty(redis, queue_name), timeout=5)
    assert not await redis.exists(f"bull:{queue_name}:{own.id}")
    completed = await redis.zrange(f"bull:{queue_name}:completed", 0, -1)
    assert [c.decode() for c in completed] == [j.id for j in kept[-2:]]
    for j in kept[:3]:
        assert not await redis.exists(f"bull:{queue_name}:{j.id}")


async def _no_waiting(r: Redis, queue: str) -> bool:
    return bool(await r.llen(f"bull:{queue}:wait") == 0)


async def _active_empty(r: Redis, queue: str) -> bool:
    return bool(await r.llen(f"bull:{queue}:active") == 0)


async def test_lost_lock_means_no_completion(redis: Redis, queue_name: str) -> None:
    job = await echomq.add(queue_name, "l", {}, connection=redis)
    started = asyncio.Event()
    release = asyncio.Event()

    async def proc(job: Job) -> str:
        started.set()
        await release.wait()
        return "done"

    async with Worker(queue_name, proc, connection=redis, **FAST):
        await asyncio.wait_for(started.wait(), 5)
        await redis.set(f"bull:{queue_name}:{job.id}:lock", "someone-else")
        release.set()
        await wait_for(lambda: _has_event(redis, queue_name, "active"), timeout=2)
        await asyncio.sleep(0.3)
    assert await redis.zscore(f"bull:{queue_name}:completed", job.id) is None
    assert await redis.lrange(f"bull:{queue_name}:active", 0, -1) == [job.id.encode()]
    assert not await redis.hexists(f"bull:{queue_name}:{job.id}", "returnvalue")


async def _has_event(r: Redis, queue: str, name: str) -> bool:
    return any(e["event"] == name for e in await events_of(r, queue))


async def test_locks_are_renewed_in_batches(redis: Redis, queue_name: str) -> None:
    await echomq.add_bulk(queue_name, [("r", {}) for _ in range(3)], connection=redis)
    release = asyncio.Event()

    async def proc(job: Job) -> None:
        await release.wait()

    async with Worker(queue_name, proc, connection=redis, concurrency=3, lock_duration=0.3, **FAST):
        await wait_for(lambda: _active_count(redis, queue_name, 3), timeout=5)
        await asyncio.sleep(0.9)  # three lock lifetimes
        keys = [f"bull:{queue_name}:{i}:lock" for i in (1, 2, 3)]
        ttls = [await redis.pttl(k) for k in keys]
        assert all(0 < ttl <= 300 for ttl in ttls), ttls
        release.set()
        await finished(redis, queue_name, 3)


async def _active_count(r: Redis, queue: str, n: int) -> bool:
    return bool(await r.llen(f"bull:{queue}:active") == n)


async def test_stalled_job_is_recovered_and_processed(redis: Redis, queue_name: str) -> None:
    # Simulate a crashed worker: the job is in active with no lock, and a previous check
    # marked it suspect.
    job = await echomq.add(queue_name, "s", {"v": 1}, connection=redis)
    await redis.rpoplpush(f"bull:{queue_name}:wait", f"bull:{queue_name}:active")
    await redis.sadd(f"bull:{queue_name}:stalled", job.id)

    async def ok(job: Job) -> str:
        return "recovered"

    async with Worker(queue_name, ok, connection=redis, stalled_interval=0.2, drain_delay=0.2):
        await finished(redis, queue_name, 1)
    h = await redis.hgetall(f"bull:{queue_name}:{job.id}")
    assert h[b"stc"] == b"1" and h[b"returnvalue"] == b'"recovered"'
    evs = await events_of(redis, queue_name)
    assert {"event": "waiting", "jobId": job.id, "prev": "active"} in evs
    assert {"event": "stalled", "jobId": job.id} in evs


async def test_job_stalled_too_often_fails_without_running(redis: Redis, queue_name: str) -> None:
    job = await echomq.add(queue_name, "s", {}, connection=redis, attempts=3)
    await redis.rpoplpush(f"bull:{queue_name}:wait", f"bull:{queue_name}:active")
    await redis.sadd(f"bull:{queue_name}:stalled", job.id)
    ran = False

    async def proc(job: Job) -> None:
        nonlocal ran
        ran = True

    async with Worker(
        queue_name,
        proc,
        connection=redis,
        max_stalled_count=0,
        stalled_interval=0.2,
        drain_delay=0.2,
    ):
        await finished(redis, queue_name, 1, "failed")
    assert not ran
    h = await redis.hgetall(f"bull:{queue_name}:{job.id}")
    assert h[b"failedReason"] == b"job stalled more than allowable limit"
    assert b"defa" not in h
    names = [e["event"] for e in await events_of(redis, queue_name) if e.get("jobId") == job.id]
    # attempts=3 and atm=1 after the deferred failure: no retries-exhausted, as in Node
    assert names[-3:] == ["stalled", "active", "failed"]


async def test_limiter_spaces_jobs(redis: Redis, queue_name: str) -> None:
    await echomq.add_bulk(queue_name, [("r", {}) for _ in range(6)], connection=redis)
    starts: list[float] = []

    async def proc(job: Job) -> None:
        starts.append(time.monotonic())

    limiter = Limiter(max=2, duration=0.3)
    async with Worker(queue_name, proc, connection=redis, concurrency=6, limiter=limiter, **FAST):
        await finished(redis, queue_name, 6)
    assert starts[-1] - starts[0] >= 0.55  # three windows of 0.3 s for six jobs


async def test_manual_rate_limit_puts_job_back(redis: Redis, queue_name: str) -> None:
    job = await echomq.add(queue_name, "r", {}, connection=redis)
    tries: list[float] = []
    worker: Worker

    async def proc(job: Job) -> str:
        tries.append(time.monotonic())
        if len(tries) == 1:
            await worker.rate_limit(0.3)
            raise echomq.RateLimitError()
        return "ok"

    worker = Worker(
        queue_name, proc, connection=redis, limiter=Limiter(max=100, duration=1), **FAST
    )
    async with worker:
        await finished(redis, queue_name, 1)
    assert tries[1] - tries[0] >= 0.25
    h = await redis.hgetall(f"bull:{queue_name}:{job.id}")
    assert h[b"ats"] == b"2" and h[b"atm"] == b"1"  # the rate-limited try is not an attempt


async def test_move_to_delayed_from_processor(redis: Redis, queue_name: str) -> None:
    job = await echomq.add(queue_name, "d", {}, connection=redis)
    tries: list[float] = []

    async def proc(job: Job) -> str:
        tries.append(time.time())
        if len(tries) == 1:
            await job.move_to_delayed(time.time() + 0.3)
            raise echomq.DelayedError()
        return "later"

    async with Worker(queue_name, proc, connection=redis, **FAST):
        await finished(redis, queue_name, 1)
    assert tries[1] - tries[0] >= 0.28
    h = await redis.hgetall(f"bull:{queue_name}:{job.id}")
    assert h[b"atm"] == b"1" and h[b"ats"] == b"2"


async def test_metrics_are_collected_when_enabled(redis: Redis, queue_name: str) -> None:
    await echomq.add_bulk(queue_name, [("m", {}) for _ in range(3)], connection=redis)

    async def ok(job: Job) -> None:
        return None

    async with Worker(queue_name, ok, connection=redis, metrics_max_data_points=60, **FAST):
        await finished(redis, queue_name, 3)
    m = await redis.hgetall(f"bull:{queue_name}:metrics:completed")
    assert m[b"count"] == b"3" and b"prevTS" in m and m[b"prevCount"] == b"0"


async def test_metrics_are_not_written_by_default(redis: Redis, queue_name: str) -> None:
    await echomq.add(queue_name, "m", {}, connection=redis)

    async def ok(job: Job) -> None:
        return None

    async with Worker(queue_name, ok, connection=redis, **FAST):
        await finished(redis, queue_name, 1)
    assert not await redis.exists(f"bull:{queue_name}:metrics:completed")


async def test_graceful_close_waits_for_running_jobs(redis: Redis, queue_name: str) -> None:
    job = await echomq.add(queue_name, "g", {}, connection=redis)
    started = asyncio.Event()

    async def slow(job: Job) -> str:
        started.set()
        await asyncio.sleep(0.3)
        return "finished"

    worker = Worker(queue_name, slow, connection=redis, **FAST)
    task = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 5)
    await worker.close()
    await task
    assert await redis.hget(f"bull:{queue_name}:{job.id}", "returnvalue") == b'"finished"'


async def test_close_after_grace_hands_the_job_back_to_wait(redis: Redis, queue_name: str) -> None:
    job = await echomq.add(queue_name, "g", {}, connection=redis)
    started = asyncio.Event()

    async def hang(job: Job) -> None:
        started.set()
        await asyncio.sleep(60)

    worker = Worker(queue_name, hang, connection=redis, close_grace=0.1, **FAST)
    task = asyncio.create_task(worker.run())
    await asyncio.wait_for(started.wait(), 5)
    await worker.close()
    await task
    assert await redis.llen(f"bull:{queue_name}:active") == 0
    assert await redis.lrange(f"bull:{queue_name}:wait", 0, -1) == [job.id.encode()]
    assert await redis.zscore(f"bull:{queue_name}:completed", job.id) is None


async def test_local_pause_and_resume(redis: Redis, queue_name: str) -> None:
    seen: list[str] = []

    async def rec(job: Job) -> None:
        seen.append(job.id)

    async with Worker(queue_name, rec, connection=redis, **FAST) as worker:
        await worker.pause()
        await echomq.add(queue_name, "p", {}, connection=redis)
        await asyncio.sleep(0.4)
        assert seen == []
        worker.resume()
        await wait_for(lambda: len(seen) == 1, timeout=3)


async def test_close_twice_is_harmless_in_every_state(redis: Redis, queue_name: str) -> None:
    never_run = Worker(queue_name, lambda job: None, connection=redis)
    await never_run.close()
    await never_run.close()
    assert never_run.state is WorkerState.CLOSED
    ran = Worker(queue_name, lambda job: None, connection=redis, **FAST)
    async with ran:
        pass
    await ran.close()
    await ran.close(force=True)
    assert ran.state is WorkerState.CLOSED


async def test_constructor_has_no_side_effects(redis: Redis, queue_name: str) -> None:
    before = len(await redis.client_list())
    worker = Worker(queue_name, lambda job: None, connection="redis://127.0.0.1:1/0")
    assert not worker.is_running
    assert len(await redis.client_list()) == before
    await worker.close()


async def test_refuses_bad_options() -> None:
    with pytest.raises(echomq.InvalidOptionError, match="concurrency"):
        Worker("q", lambda job: None, connection="redis://localhost", concurrency=0)
    with pytest.raises(echomq.InvalidOptionError, match="without spaces"):
        Worker("q", lambda job: None, connection="redis://localhost", name="a b")


@pytest.mark.parametrize("batch_finish", [True, False])
async def test_batch_finish_false_records_one_outcome_per_call(
    redis_url: str, queue_name: str, batch_finish: bool
) -> None:
    """Ten jobs finish at the same moment (a gate holds them all): with ``batch_finish`` their
    outcomes share finishAndFetch calls; without it each outcome has a call of its own (read
    under MONITOR: the outcomes a call carries are its second argument). Either way every job
    runs once and completes once."""
    n = 10
    gate = asyncio.Event()
    runs: list[str] = []
    sha = scripts.get("finishAndFetch").sha

    async def held(job: Job) -> int:
        runs.append(job.id)
        if len(runs) == n:
            gate.set()
        await gate.wait()
        return 1

    client = Redis.from_url(redis_url, decode_responses=True)

    async def drain() -> None:
        async with Worker(
            queue_name, held, connection=client, concurrency=n, batch_finish=batch_finish
        ):
            await wait_for(
                lambda: _completed_all(client, queue_name, n),
                timeout=10,
                message="the jobs did not complete",
            )

    try:
        await echomq.add_bulk(queue_name, [("j", {}) for _ in range(n)], connection=client)
        per_call = [
            len(items)
            for words in await monitored(redis_url, drain, from_lua=False)
            if words[:2] == ["EVALSHA", sha] and (items := json.loads(words[3 + int(words[2]) + 1]))
        ]
        assert len(runs) == n and len(set(runs)) == n
        assert await client.zcard(f"bull:{queue_name}:completed") == n
        assert sum(per_call) == n, per_call
        if batch_finish:
            assert max(per_call) > 1, per_call
        else:
            assert per_call == [1] * n, per_call
    finally:
        await client.aclose()


async def _completed_all(client: Redis, queue: str, n: int) -> bool:
    return bool(await client.zcard(f"bull:{queue}:completed") == n)
