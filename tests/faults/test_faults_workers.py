"""Faults of the worker processes: SIGKILL storms, graceful SIGTERM, poison jobs, stall storms.

Each test runs its scenario with echomq CLI workers and, as the baseline (always at the
``full`` scale, at ``ci`` where marked), with BullMQ workers running the same processor;
:func:`faultkit.lab.verdict` holds echomq to the invariants and to the baseline.
"""

from __future__ import annotations

import time

import pytest
from faultkit.lab import Lab, Run, now_ms, verdict
from faultkit.scale import TEST_TIMEOUT, pick

# -- 1. SIGKILL storm ------------------------------------------------------------------------


async def sigkill_storm(lab: Lab, impl: str) -> Run:
    """Workers are SIGKILLed mid-job, one after another, and replaced.

    Each kill lands while the victim runs ``concurrency`` jobs. Duplicates allowed: exactly
    the jobs the victim had started and not finished (they are re-run once their lock
    expires); nothing else. The stall limit is above the number of kills, so a job hit by
    two kills is re-run rather than failed. Recovery: from each kill until every job the
    victim was running has started again in another worker (a later kill may hit it again),
    bounded by lock + 2 stalled intervals + the job time (a free slot) + 1.5 s.
    """
    lock, stalled, ms, concurrency = 1.0, 0.5, 400, 2
    n, kills = pick(40, 240), pick(3, 12)
    async with lab.run(
        "1 SIGKILL storm",
        impl,
        lock=lock,
        stalled=stalled,
        concurrency=concurrency,
        max_stalled=kills + 1,
    ) as run:
        ids = await run.producer.add_many(n, lambda i: {"ms": ms})
        await run.start_workers(3)
        hits: list[tuple[float, set[str]]] = []
        for _ in range(kills):
            victim = await run.busy_worker(concurrency, timeout=20)
            if victim is None:
                break
            victim.kill()
            killed_at = now_ms()
            hit = await run.unfinished(victim)
            run.allow(hit)
            hits.append((killed_at, hit))
            await run.start_workers(1)
        run.row.faults = len(hits)
        await run.wait_finished(ids, timeout=30)
        bound = lock + 2 * stalled + ms / 1000 + 1.5
        for killed_at, hit in hits:
            run.set_recovery(run.restarted(killed_at, hit), bound)
        await run.finish()
    return run


@pytest.mark.faults_baseline
@pytest.mark.timeout(TEST_TIMEOUT)
async def test_sigkill_storm(lab: Lab, baseline: bool) -> None:
    node = await sigkill_storm(lab, "node") if baseline else None
    echo = await sigkill_storm(lab, "echomq")
    verdict(echo, node)


# -- 2. Graceful SIGTERM with long jobs ------------------------------------------------------


async def graceful_sigterm(lab: Lab, impl: str) -> Run:
    """Workers get SIGTERM while running jobs 2.5x longer than the lock duration, with a
    close grace longer than the jobs; each is replaced at once, so other workers' stalled
    checks run all along.

    The stopping worker must keep renewing its locks until its outcomes are recorded, so:
    no duplicates at all, every job completed by the worker that started it, exit code 0.
    Recovery: from SIGTERM until the stopping worker's jobs are completed, bounded by the job
    time + 1.5 s.
    """
    lock, stalled, ms, concurrency = 1.0, 0.5, 2500, 2
    n, terms = pick(10, 36), pick(2, 6)
    async with lab.run(
        "2 graceful SIGTERM, long jobs",
        impl,
        lock=lock,
        stalled=stalled,
        concurrency=concurrency,
        close_grace=ms / 1000 * 3,
    ) as run:
        ids = await run.producer.add_many(n, lambda i: {"ms": ms})
        await run.start_workers(2)
        bound = ms / 1000 + 1.5
        for _ in range(terms):
            victim = await run.busy_worker(concurrency, timeout=20)
            if victim is None:
                break
            held = run.ledger.in_flight(victim.pid)
            victim.terminate()
            stopped_at = now_ms()
            run.row.faults += 1
            await run.start_workers(1)
            code = await victim.wait_exit(timeout=ms / 1000 * 3 + 20)
            if code != 0:
                run.problems.append(f"{victim!r} exited with {code} after SIGTERM")
            run.set_recovery(await run.recovery(stopped_at, held), bound)
            left = await run.unfinished(victim)
            if left:
                run.problems.append(f"{victim!r} stopped without finishing {sorted(left)}")
        await run.wait_finished(ids, timeout=40)
        await run.finish()
    return run


@pytest.mark.timeout(TEST_TIMEOUT)
async def test_graceful_sigterm_runs_no_job_twice(lab: Lab, baseline: bool) -> None:
    node = await graceful_sigterm(lab, "node") if baseline else None
    echo = await graceful_sigterm(lab, "echomq")
    verdict(echo, node)


async def forced_grace_end(lab: Lab) -> Run:
    """SIGTERM with a close grace shorter than the running jobs: when the grace ends, the
    unfinished jobs go back to ``wait`` at once (not after their lock expires), so another
    worker starts them again within the grace + 2 s, well under the 6 s lock.

    Duplicates allowed: exactly the jobs cut short (they are run again). Recovery: from
    SIGTERM until they are completed, bounded by grace + job time + 2 s. echomq only: BullMQ
    has no close grace (its close waits for running jobs however long they take).
    """
    lock, grace, ms = 6.0, 0.5, 2000
    async with lab.run(
        "2b SIGTERM, grace ends first", "echomq", lock=lock, stalled=0.5, close_grace=grace
    ) as run:
        ids = await run.producer.add_many(pick(2, 6), lambda i: {"ms": ms})
        victim, *_ = await run.start_workers(1, concurrency=len(ids))
        cut = await run.in_flight_at_least(victim, len(ids), timeout=20)
        await run.start_workers(1, concurrency=len(ids))
        victim.terminate()
        stopped_at = time.time()
        run.row.faults = 1
        run.allow(cut)
        code = await victim.wait_exit(timeout=grace + 20)
        if code != 0:
            run.problems.append(f"{victim!r} exited with {code} after SIGTERM")

        def restarted() -> bool:
            return all(run.ledger.starts()[job_id] >= 2 for job_id in cut)

        await run.until(restarted, lock + 10, "the cut jobs to start again")
        restart = max(
            (
                e.t_ms
                for e in run.ledger.entries()
                if e.job_id in cut and e.pid != victim.pid and e.event == "start"
            ),
            default=now_ms(),
        )
        if restart / 1000 - stopped_at > grace + 2:
            run.problems.append(
                f"the cut jobs started again {restart / 1000 - stopped_at:.2f}s after SIGTERM "
                f"(grace {grace}s): they were not put back in wait at once"
            )
        await run.wait_finished(ids, timeout=lock + 10)
        run.set_recovery(await run.recovery(stopped_at * 1000, cut), grace + ms / 1000 + 2)
        await run.finish()
    return run


@pytest.mark.timeout(TEST_TIMEOUT)
async def test_forced_end_of_grace_puts_jobs_back_at_once(lab: Lab) -> None:
    verdict(await forced_grace_end(lab))


# -- 3. Poison job ---------------------------------------------------------------------------


async def poison(lab: Lab, impl: str) -> Run:
    """Poison jobs kill their worker process (SIGKILL of itself, or ``os._exit``) on every
    run, among good jobs; a supervisor restarts dead workers. Workers run one job at a time,
    so a poison job shares its process with no other job.

    Each poison job stalls max-stalled-count + 1 times (so it runs at most that often), then
    ends in ``failed`` ("job stalled more than allowable limit") without running again. The
    other jobs are unaffected: each completes, run once. Duplicates allowed: the poison jobs'
    extra runs only. Recovery: from a poison job's first start to its failure, bounded by
    (max stalled + 1) x (lock + 2 stalled intervals) + 3 s.
    """
    lock, stalled, max_stalled = 1.0, 0.5, 1
    good, kinds = pick(20, 120), pick(["kill", "exit"], ["kill", "exit", "kill", "exit"])
    async with lab.run(
        "3 poison job", impl, lock=lock, stalled=stalled, max_stalled=max_stalled, concurrency=1
    ) as run:
        await run.start_workers(3)  # before the jobs: a poison job may kill its first taker
        run.workers.supervise(3)
        poisons = [await run.producer.add({"poison": kind}) for kind in kinds]
        ids = await run.producer.add_many(good, lambda i: {"ms": 200})
        expected = dict.fromkeys(ids, ("completed",))
        expected.update(dict.fromkeys(poisons, ("failed",)))
        await run.wait_finished(expected, timeout=30)
        await run.workers.stop_supervising()
        run.row.faults = sum(1 for w in run.workers.procs if not w.alive)
        run.allow(poisons, max_stalled)
        bound = (max_stalled + 1) * (lock + 2 * stalled) + 3
        starts = run.ledger.starts()
        for job_id in poisons:
            first = run.ledger.first_start(job_id)
            run.set_recovery(await run.recovery(first or now_ms(), [job_id]), bound)
            if not 1 <= starts[job_id] <= max_stalled + 1:
                run.problems.append(f"poison {job_id} ran {starts[job_id]} times")
            h = await run.r.hgetall(f"bull:{run.queue}:{job_id}")
            if h.get(b"failedReason") != b"job stalled more than allowable limit":
                run.problems.append(f"poison {job_id} failed with {h.get(b'failedReason')!r}")
            if h.get(b"stc") != str(max_stalled + 1).encode():
                run.problems.append(f"poison {job_id} stalled {h.get(b'stc')!r} times")
        await run.finish(expected)
    return run


@pytest.mark.faults_baseline
@pytest.mark.timeout(TEST_TIMEOUT)
async def test_poison_job(lab: Lab, baseline: bool) -> None:
    node = await poison(lab, "node") if baseline else None
    echo = await poison(lab, "echomq")
    verdict(echo, node)


async def poison_beside_others(lab: Lab, impl: str) -> Run:
    """The issue's shape: one poison job (``os._exit``) among good jobs, two workers of
    concurrency 10, max stalled count 1, dead workers restarted by a supervisor. The poison
    kills its worker twice, then ends failed. Every job running beside it stalls once per
    death; a good job that ran beside it at both deaths stalls twice and ends failed too
    ("innocents failed", the row's mark): echomq must not fail more of them than BullMQ in
    the same run. Every other good job completes.

    Duplicates allowed: the jobs a dead worker was running or had finished within its last
    0.25 s (their outcome may not have been recorded yet), and the poison's second run.
    Recovery: from the poison's first start to its failure, bounded by 2 x (lock + 2 stalled
    intervals) + 3 s.
    """
    lock, stalled, max_stalled = 1.0, 0.5, 1
    good = pick(60, 200)
    async with lab.run(
        "3b poison job, concurrency 10",
        impl,
        lock=lock,
        stalled=stalled,
        max_stalled=max_stalled,
        concurrency=10,
    ) as run:
        await run.start_workers(2)
        run.workers.supervise(2)
        ids = await run.producer.add_many(good // 2, lambda i: {"ms": 200})
        poison = await run.producer.add({"poison": "exit"})
        ids += await run.producer.add_many(good - good // 2, lambda i: {"ms": 200})
        expected: dict[str, tuple[str, ...]] = dict.fromkeys(ids, ("completed", "failed"))
        expected[poison] = ("failed",)
        await run.wait_finished(expected, timeout=40)
        await run.workers.stop_supervising()
        dead = {w.pid for w in run.workers.procs if not w.alive}
        run.row.faults = len(dead)
        entries = run.ledger.entries()
        for pid in dead:
            # Jobs whose outcome the death may have cut: still running, or returned within
            # the last 0.25 s (their outcome waited for the next finish call).
            died = max(e.t_ms for e in entries if e.pid == pid)
            recent = {
                e.job_id
                for e in entries
                if e.pid == pid and e.event == "finish" and e.t_ms >= died - 250
            }
            run.allow((run.ledger.in_flight(pid) | recent) - {poison})
        run.allow([poison], max_stalled)
        members = await run.r.zrange(f"bull:{run.queue}:failed", 0, -1)
        failed = {m.decode() if isinstance(m, bytes) else str(m) for m in members}
        run.marks["innocents_failed"] = len(failed - {poison})
        first = run.ledger.first_start(poison) or now_ms()
        bound = (max_stalled + 1) * (lock + 2 * stalled) + 3
        run.set_recovery(await run.recovery(first, [poison]), bound)
        await run.finish(expected)
    return run


@pytest.mark.faults_baseline
@pytest.mark.timeout(TEST_TIMEOUT)
async def test_poison_job_fails_no_more_innocents_than_bullmq(lab: Lab, baseline: bool) -> None:
    node = await poison_beside_others(lab, "node") if baseline else None
    echo = await poison_beside_others(lab, "echomq")
    if node is not None:
        ours, theirs = echo.marks["innocents_failed"], node.marks["innocents_failed"]
        if ours > theirs:
            echo.problems.append(f"{ours:.0f} innocent jobs failed, BullMQ {theirs:.0f}")
    verdict(echo, node)


# -- 10. Stall storm -------------------------------------------------------------------------


async def stall_storm(lab: Lab, impl: str) -> Run:
    """Processors block their worker's event loop (no lock renewal) far longer than the
    lock: every such run stalls and the job is recovered by another worker's stalled check.

    A third of the jobs block on their first run only: each must run exactly twice and
    complete. Some jobs block on every run: they must run max-stalled-count + 1 times and end
    in ``failed``. The others must run once. Duplicates allowed: exactly those. Recovery:
    from a blocking job's first start to its completion, bounded by twice the block + lock +
    2 stalled intervals + 1 s: while every worker blocks, no stalled check runs, and the
    recovered job may wait for a worker that is itself blocked.
    """
    lock, stalled, block = 1.0, 0.5, 3500
    n, always = pick(12, 60), pick(1, 3)
    async with lab.run(
        "10 stall storm", impl, lock=lock, stalled=stalled, concurrency=1, max_stalled=1
    ) as run:
        hard = [await run.producer.add({"block_ms": block}) for _ in range(always)]
        ids = await run.producer.add_many(
            n, lambda i: {"block_ms": block, "block_first": True} if i % 3 == 0 else {"ms": 100}
        )
        once = [job_id for i, job_id in enumerate(ids) if i % 3 == 0]
        await run.start_workers(3)
        expected = dict.fromkeys(ids, ("completed",))
        expected.update(dict.fromkeys(hard, ("failed",)))
        await run.wait_finished(expected, timeout=60)
        run.allow(once)
        run.allow(hard)
        run.row.faults = len(once) + 2 * len(hard)
        starts = run.ledger.starts()
        for job_id in once + hard:
            if starts[job_id] != 2:
                run.problems.append(f"blocking job {job_id} ran {starts[job_id]} times, not 2")
        bound = 2 * block / 1000 + lock + 2 * stalled + 1
        for job_id in once:
            first = run.ledger.first_start(job_id) or now_ms()
            run.set_recovery(await run.recovery(first, [job_id]), bound)
        await run.finish(expected)
    return run


@pytest.mark.faults_baseline
@pytest.mark.timeout(TEST_TIMEOUT)
async def test_stall_storm(lab: Lab, baseline: bool) -> None:
    node = await stall_storm(lab, "node") if baseline else None
    echo = await stall_storm(lab, "echomq")
    verdict(echo, node)
