"""Faults of the Redis server: kill -9 and restart (AOF), SIGSTOP, BUSY scripts, OOM.

Every scenario runs one shape: two workers (two jobs each) process a stream of jobs the
producer keeps adding; each fault hits while a worker runs jobs, so outcomes are due while
Redis cannot take them, and adds are refused meanwhile (the producer retries them with the
same id). Each fault is shorter than the lock duration, so no lock has to expire: the
physics allows no duplicate at all. Recovery: from the end of a fault until the test sees
every job that had started and was not finished when it began finished in Redis (seen, not
``finishedOn``: that is the worker's clock when it built the call, which may be long before
Redis ran it).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest
import redis.asyncio
from faultkit.lab import Lab, Run, now_ms, verdict
from faultkit.scale import TEST_TIMEOUT, pick

LOCK, STALLED, JOB_MS = 4.0, 1.0, 300

Inject = Callable[[Run], Awaitable[float]]


async def redis_fault(
    lab: Lab,
    impl: str,
    scenario: str,
    inject: Inject,
    *,
    server_args: list[str],
    bound: float,
    evidence: str | None = None,
    lock: float = LOCK,
) -> Run:
    """Run the shared shape with ``inject`` as the fault (it returns when the fault ended,
    in unix ms); ``evidence`` names an ``INFO errorstats`` counter that must have grown,
    proving the fault reached clients; ``lock`` is the workers' lock duration, longer than
    the fault."""
    n, faults = pick(60, 300), pick(1, 3)
    async with lab.run(
        scenario, impl, server_args=server_args, lock=lock, stalled=STALLED, concurrency=2
    ) as run:
        await run.start_workers(2)
        run.producer.stream(n, lambda i: {"ms": JOB_MS}, every=0.02)
        for _ in range(faults):
            if await run.busy_worker(2, timeout=20) is None:
                break
            hit = await run.unfinished()
            ended = await inject(run)
            run.row.faults += 1
            seen = await run.observe_finished(hit, timeout=lock * 3 + 10)
            run.set_recovery(None if seen is None else max(0.0, seen - ended) / 1000, bound)
        await run.producer.join(timeout=60)
        await run.wait_finished(run.producer.acked, timeout=30)
        for worker in run.workers.procs:
            if not worker.alive:
                run.problems.append(f"{worker!r} died")
        if evidence is not None:
            stats = await run.r.info("errorstats")
            count = stats.get(f"errorstat_{evidence}", {}).get("count", 0)
            if count <= run.marks.get("own_errors", 0):  # the test's own probe does not count
                run.problems.append(f"no client got {evidence}: the fault did not bite")
        await run.finish()
    return run


# -- 4. kill -9 with AOF (appendfsync always) ------------------------------------------------


async def kill_redis(run: Run) -> float:
    run.server.kill9()
    await asyncio.sleep(1.0)  # the outage
    run.server.start()  # same port, same directory: the AOF is replayed
    return now_ms()


async def redis_kill9(lab: Lab, impl: str) -> Run:
    """Redis is killed with SIGKILL (1 s outage) and restarted on the same directory with
    ``appendonly yes`` + ``appendfsync always``: no acknowledged add or recorded outcome is
    lost, workers reconnect and finish. Bound: lock + 2 stalled intervals + 2 s (a fetch
    whose reply died with the server leaves its jobs locked until the lock expires)."""
    return await redis_fault(
        lab,
        impl,
        "4 Redis kill -9, AOF always",
        kill_redis,
        server_args=["--appendonly", "yes", "--appendfsync", "always"],
        bound=LOCK + 2 * STALLED + 2,
    )


@pytest.mark.timeout(TEST_TIMEOUT)
async def test_redis_kill9_with_aof(lab: Lab, baseline: bool) -> None:
    node = await redis_kill9(lab, "node") if baseline else None
    echo = await redis_kill9(lab, "echomq")
    verdict(echo, node)


# -- 5. SIGSTOP ------------------------------------------------------------------------------

#: How long Redis stays frozen (the issue's figure at the full scale).
FREEZE = pick(2.0, 10.0)


async def freeze_redis(run: Run) -> float:
    run.server.freeze()
    await asyncio.sleep(FREEZE)
    run.server.thaw()
    return now_ms()


async def redis_sigstop(lab: Lab, impl: str) -> Run:
    """Redis is frozen with SIGSTOP for 2 s (10 s at the full scale), then SIGCONT: commands
    wait and then go through. The lock is 3x the freeze (30 s at the full scale, both
    implementations' default): renewed every half lock, a lock outlives any freeze shorter
    than half of it, so none has to expire. Bound: the job time + 2 s."""
    return await redis_fault(
        lab,
        impl,
        f"5 Redis SIGSTOP {FREEZE:.0f} s",
        freeze_redis,
        server_args=[],
        bound=JOB_MS / 1000 + 2,
        lock=max(LOCK, 3 * FREEZE),
    )


@pytest.mark.timeout(TEST_TIMEOUT)
async def test_redis_sigstop(lab: Lab, baseline: bool) -> None:
    node = await redis_sigstop(lab, "node") if baseline else None
    echo = await redis_sigstop(lab, "echomq")
    verdict(echo, node)


# -- 6. BUSY -----------------------------------------------------------------------------------

#: A foreign script that spins for ARGV[1] ms (reading the server clock), keeping Redis busy.
SPIN = """
local t = redis.call('TIME')
local stop = tonumber(t[1]) * 1000000 + tonumber(t[2]) + tonumber(ARGV[1]) * 1000
while true do
  local n = redis.call('TIME')
  if tonumber(n[1]) * 1000000 + tonumber(n[2]) >= stop then return 1 end
end
"""


async def busy_redis(run: Run) -> float:
    foreign = redis.asyncio.Redis.from_url(run.server.url, client_name="faults-foreign")
    try:
        await foreign.eval(SPIN, 0, 2000)  # others get BUSY after busy-reply-threshold
    finally:
        await foreign.aclose()
    return now_ms()


async def redis_busy(lab: Lab, impl: str) -> Run:
    """A foreign Lua script spins for 2 s with ``busy-reply-threshold 100``: every other
    command gets ``BUSY`` meanwhile, the finish calls of the running jobs included. Those
    outcomes must be held and sent again once Redis answers, with the locks still renewed:
    no duplicate, no lost outcome. Bound: the job time + 2 s."""
    return await redis_fault(
        lab,
        impl,
        "6 BUSY script 2 s",
        busy_redis,
        server_args=["--busy-reply-threshold", "100"],
        bound=JOB_MS / 1000 + 2,
        evidence="BUSY",
    )


@pytest.mark.faults_baseline
@pytest.mark.timeout(TEST_TIMEOUT)
async def test_redis_busy_script(lab: Lab, baseline: bool) -> None:
    node = await redis_busy(lab, "node") if baseline else None
    echo = await redis_busy(lab, "echomq")
    verdict(echo, node)


# -- 7. OOM ------------------------------------------------------------------------------------

MAXMEMORY = 64 * 1024 * 1024


async def fill_redis(run: Run) -> float:
    # Adds go on through the fault (and are retried until acknowledged): a client always meets
    # the OOM, whatever the workers were doing then. A worker's finish call may not: Redis
    # refuses a script only when its first write may grow memory, and a finish starts by
    # removing the job from `active`.
    run.producer.stream(20, lambda i: {"ms": JOB_MS}, every=0.1)
    # Ballast keys until even a small write is refused. Redis counts a command's own
    # arguments when it decides, so big keys stop short of the limit: go on with smaller ones.
    # Memory then falls back under the limit on its own (Redis shrinks the query buffer the
    # big values left behind), which would let the clients' small writes through: top the
    # ballast up for as long as the outage lasts.
    ballast: list[str] = []

    async def top_up() -> None:
        for size in (1 << 20, 1 << 16, 1 << 12, 1 << 8):
            chunk = b"\0" * size
            while len(ballast) < 200_000:
                try:
                    await run.r.set(f"faults:ballast:{len(ballast)}", chunk)
                except redis.exceptions.OutOfMemoryError:
                    run.marks["own_errors"] = run.marks.get("own_errors", 0) + 1
                    break
                ballast.append(f"faults:ballast:{len(ballast)}")

    outage_ends = time.monotonic() + 2.0  # out of memory, well under the lock duration
    while time.monotonic() < outage_ends:
        await top_up()
        await asyncio.sleep(0.05)
    for start in range(0, len(ballast), 500):
        await run.r.delete(*ballast[start : start + 500])
    return now_ms()


async def redis_oom(lab: Lab, impl: str) -> Run:
    """A ballast key takes Redis past ``maxmemory`` (``noeviction``) for 2 s, then is freed:
    adds, fetches and lock renewals are refused with OOM meanwhile. Outcomes due then must be
    held and recorded afterwards: no duplicate, no lost outcome. Bound: the job time + 2 s."""
    return await redis_fault(
        lab,
        impl,
        "7 OOM (noeviction) 2 s",
        fill_redis,
        server_args=["--maxmemory", str(MAXMEMORY), "--maxmemory-policy", "noeviction"],
        bound=JOB_MS / 1000 + 2,
        evidence="OOM",
    )


@pytest.mark.timeout(TEST_TIMEOUT)
async def test_redis_oom(lab: Lab, baseline: bool) -> None:
    node = await redis_oom(lab, "node") if baseline else None
    echo = await redis_oom(lab, "echomq")
    verdict(echo, node)


# -- 16. Restarted empty -----------------------------------------------------------------------


async def redis_restarted_empty(lab: Lab, impl: str) -> Run:
    """Redis (no persistence) is killed with SIGKILL under load and restarted empty on the
    same port after 1 s: every job it held is gone, by physics. Each worker must take a new job
    as soon as the server answers again: jobs added then (acknowledged by the new server) run
    and complete, once. Recovery: from the moment the server answers again until the first
    of those jobs starts (ledger), bounded by 1 s; a job is added at once then, so the bound
    does not wait for the producer's own retry pace. Duplicates allowed: none among the jobs
    added after the restart. Only the jobs added after the last restart are audited at the
    end (each restart's jobs are seen completed before the next kill wipes them)."""
    n, faults = pick(30, 120), pick(1, 3)
    async with lab.run(
        "16 Redis restarted empty", impl, lock=LOCK, stalled=STALLED, concurrency=2
    ) as run:
        await run.start_workers(2)
        after: list[str] = []
        for _ in range(faults):
            run.producer.stream(n // faults, lambda i: {"ms": 100}, every=0.02)
            if await run.busy_worker(2, timeout=20) is None:
                break
            run.server.kill9()
            await asyncio.sleep(1.0)  # the outage
            run.server.start()  # same port, nothing persisted: an empty server
            answered = now_ms()
            run.row.faults += 1
            await run.producer.add({"ms": 100})  # a job at once, whatever the stream's pace
            await run.producer.join(timeout=60)  # the adds refused meanwhile, now on it
            acked_since = [j for j, t in run.producer.acked.items() if t * 1000 >= answered]
            after = acked_since  # the jobs of an earlier restart went with the next kill
            if not await run.wait_finished(acked_since, timeout=20):
                break
            starts = [
                e.t_ms
                for e in run.ledger.entries()
                if e.event == "start" and e.job_id in set(acked_since) and e.t_ms >= answered
            ]
            first = min(starts, default=None)
            run.set_recovery(None if first is None else (first - answered) / 1000, 1.0)
        await run.finish(dict.fromkeys(after, ("completed",)))
        extra = {j: c - 1 for j, c in run.ledger.starts().items() if j in after and c > 1}
        if extra:
            run.problems.append(f"jobs added after the restart ran more than once: {extra}")
    return run


@pytest.mark.faults_baseline
@pytest.mark.timeout(TEST_TIMEOUT)
async def test_redis_restarted_empty(lab: Lab, baseline: bool) -> None:
    node = await redis_restarted_empty(lab, "node") if baseline else None
    echo = await redis_restarted_empty(lab, "echomq")
    verdict(echo, node)
