"""Faults of the worker processes: SIGKILL storms, graceful SIGTERM, poison jobs, a mass crash,
a blocked event loop.

Each test runs its scenario with echomq CLI workers and, as the baseline (always at the
``full`` scale, at ``ci`` where marked), with BullMQ workers running the same processor;
:func:`faultkit.lab.verdict` holds echomq to the invariants and to the baseline.
"""

from __future__ import annotations

import asyncio
import time

import pytest
from faultkit.lab import Lab, Run, now_ms, verdict
from faultkit.scale import TEST_TIMEOUT, pick

# -- 1. SIGKILL storm, 1b. SIGKILL of a wide worker -------------------------------------------


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


async def sigkill_wide(lab: Lab, impl: str) -> Run:
    """One worker of concurrency 50 runs 50 short jobs (50-200 ms) when it is SIGKILLed; a
    second worker of the same size stays alive, a third starts 2 s after the kill (as a
    supervisor would restart the dead one). The orphans' locks expire, a stalled check of a
    live worker puts them back in ``wait``, and the live workers' free slots take them.

    Duplicates allowed: exactly the jobs the victim had started and not finished. Recovery:
    from the kill until every one of them has started again, bounded by lock + 2 stalled
    intervals + the longest job (a free slot) + 1.5 s, and no slower than BullMQ's within a
    stalled interval (the phase of the stalled check at the kill).
    """
    lock, stalled, concurrency = 1.0, 0.5, pick(20, 50)
    n = pick(400, 2000)
    async with lab.run(
        "1b SIGKILL, 50 in flight", impl, lock=lock, stalled=stalled, concurrency=concurrency
    ) as run:
        ids = await run.producer.add_many(n, lambda i: {"ms": 50 + (i * 37) % 151})
        victim, _alive = await run.start_workers(2)
        if await run.in_flight_at_least(victim, concurrency, timeout=20):
            victim.kill()
            killed_at = now_ms()
            run.row.faults = 1
            hit = await run.unfinished(victim)
            run.allow(hit)
            run.marks["orphans"] = len(hit)
            await asyncio.sleep(2.0)
            await run.start_workers(1)
            await run.wait_finished(ids, timeout=60)
            bound = lock + 2 * stalled + 0.2 + 1.5
            run.set_recovery(run.restarted(killed_at, hit), bound)
        await run.finish()
    return run


@pytest.mark.faults_baseline
@pytest.mark.timeout(TEST_TIMEOUT)
async def test_sigkill_with_50_in_flight(lab: Lab, baseline: bool) -> None:
    node = await sigkill_wide(lab, "node") if baseline else None
    echo = await sigkill_wide(lab, "echomq")
    verdict(echo, node, no_slower=0.5)


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


def poison_runs(impl: str, max_stalled: int) -> int:
    """How often a job that kills its worker on every run runs before it fails.

    BullMQ fails it at its stall past the limit: max stalled + 1 runs. echomq isolates it
    there instead (``iso`` = 1: it stalled beside other jobs, which one killed the process is
    not known), runs it once more alone, and fails it at that stall: max stalled + 2 runs
    (docs/protocol/worker-rules.md#isolation).
    """
    return max_stalled + (2 if impl == "echomq" else 1)


async def check_poison(run: Run, job_id: str, runs: int) -> None:
    """The poison ran ``runs`` times, stalled as often, is isolated (echomq) and failed with
    BullMQ's text; a problem of the run otherwise."""
    started = run.ledger.starts()[job_id]
    if started != runs:
        run.problems.append(f"poison {job_id} ran {started} times, not {runs}")
    h = await run.r.hgetall(f"bull:{run.queue}:{job_id}")
    if h.get(b"failedReason") != b"job stalled more than allowable limit":
        run.problems.append(f"poison {job_id} failed with {h.get(b'failedReason')!r}")
    if h.get(b"stc") != str(runs).encode():
        run.problems.append(f"poison {job_id} stalled {h.get(b'stc')!r} times, not {runs}")
    if run.impl == "echomq" and h.get(b"iso") != b"1":
        run.problems.append(f"poison {job_id} has iso {h.get(b'iso')!r}, not b'1'")


async def poison(lab: Lab, impl: str) -> Run:
    """Poison jobs kill their worker process (SIGKILL of itself, or ``os._exit``) on every
    run, among good jobs; a supervisor restarts dead workers. Workers run one job at a time,
    so a poison job shares its process with no other job.

    Each poison job runs :func:`poison_runs` times (echomq: max stalled + 2, the last one
    isolated; BullMQ: max stalled + 1), stalls as often (``stc``), then ends in ``failed``
    ("job stalled more than allowable limit") without running again. The other jobs are
    unaffected: each completes, run once. Duplicates allowed: the poison jobs' extra runs
    only. Recovery: from a poison job's first start to its failure, bounded by runs x (lock +
    2 stalled intervals) + 3 s.
    """
    lock, stalled, max_stalled = 1.0, 0.5, 1
    good, kinds = pick(20, 120), pick(["kill", "exit"], ["kill", "exit", "kill", "exit"])
    runs = poison_runs(impl, max_stalled)
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
        run.allow(poisons, runs - 1)
        bound = runs * (lock + 2 * stalled) + 3
        for job_id in poisons:
            first = run.ledger.first_start(job_id)
            run.set_recovery(await run.recovery(first or now_ms(), [job_id]), bound)
            await check_poison(run, job_id, runs)
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
    concurrency 10, max stalled count 1, dead workers restarted by a supervisor. Every job
    running beside the poison stalls once per death.

    BullMQ fails the poison after its second death, and with it every good job that ran
    beside it at both deaths (their second stall too): "innocents failed", the row's mark,
    reported as the baseline. echomq isolates the poison and those innocents instead (``iso``:
    past the limit, beside others), runs each of them alone: each innocent completes, the
    poison dies a third time alone and fails. For echomq an innocent that ends failed is a
    problem, and the poison must have run 3 times (``stc`` 3, ``iso`` 1).

    Duplicates allowed: the jobs a dead worker was running or had finished within its last
    0.25 s (their outcome may not have been recorded yet), and the poison's extra runs.
    Recovery: from the poison's first start to its failure, bounded by runs x (lock + 2
    stalled intervals) + 3 s (runs: :func:`poison_runs`).
    """
    lock, stalled, max_stalled = 1.0, 0.5, 1
    good = pick(60, 200)
    runs = poison_runs(impl, max_stalled)
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
        run.allow([poison], runs - 1)
        members = await run.r.zrange(f"bull:{run.queue}:failed", 0, -1)
        failed = {m.decode() if isinstance(m, bytes) else str(m) for m in members}
        innocents = sorted(failed - {poison})
        run.marks["innocents_failed"] = len(innocents)
        if impl == "echomq" and innocents:
            run.problems.append(f"{len(innocents)} innocent jobs failed: {innocents}")
        first = run.ledger.first_start(poison) or now_ms()
        bound = runs * (lock + 2 * stalled) + 3
        run.set_recovery(await run.recovery(first, [poison]), bound)
        await check_poison(run, poison, runs)
        await run.finish(expected)
    return run


@pytest.mark.faults_baseline
@pytest.mark.timeout(TEST_TIMEOUT)
async def test_poison_job_fails_no_more_innocents_than_bullmq(lab: Lab, baseline: bool) -> None:
    node = await poison_beside_others(lab, "node") if baseline else None
    echo = await poison_beside_others(lab, "echomq")
    verdict(echo, node)


# -- 10. Stall storm: a mass crash -----------------------------------------------------------


async def mass_crash(lab: Lab, impl: str) -> Run:
    """The issue's stall storm: 10 workers of concurrency 20 run 200 jobs of 3 s, all at once,
    and are all SIGKILLed at once; one surviving worker of concurrency 200, started (and idle:
    nothing waits) before the kill, must take the 200 orphans back. Every orphan has stalled
    once (max stalled count 1): it must run again at once, in the survivor's free slots, not
    one at a time. Each orphan ends completed, ``stc`` 1 and no ``iso``.

    Duplicates allowed: exactly the orphans (the jobs the victims had started and not
    finished). Recovery: from the kill until the last orphan has started again, bounded by
    lock + 2 stalled intervals + 1.5 s, and no slower than BullMQ's within a stalled interval
    (the phase of the survivor's stalled check at the kill).
    """
    lock, stalled, ms = 1.0, 0.5, 3000
    victims_n, concurrency = pick(3, 10), pick(5, 20)
    n = victims_n * concurrency
    async with lab.run(
        "10 stall storm (mass SIGKILL)",
        impl,
        lock=lock,
        stalled=stalled,
        concurrency=concurrency,
        max_stalled=1,
    ) as run:
        ids = await run.producer.add_many(n, lambda i: {"ms": ms})
        victims = await run.start_workers(victims_n)

        def all_started() -> bool:
            return run.ledger.started() >= set(ids)

        if await run.until(all_started, 20, f"{n} jobs to start in {victims_n} workers"):
            await run.start_workers(1, concurrency=n)  # the survivor: nothing for it yet
            for victim in victims:
                victim.proc.kill()  # all at once, reaped below
            killed_at = now_ms()
            for victim in victims:
                victim.kill()
            run.row.faults = len(victims)
            hit: set[str] = set()
            for victim in victims:
                hit |= await run.unfinished(victim)
            run.allow(hit)
            run.marks["orphans"] = len(hit)
            await run.wait_finished(ids, timeout=ms / 1000 + 20)
            run.set_recovery(run.restarted(killed_at, hit), lock + 2 * stalled + 1.5)
            for job_id in sorted(hit):
                h = await run.r.hgetall(f"bull:{run.queue}:{job_id}")
                if h.get(b"stc") != b"1" or b"iso" in h:
                    stc, iso = h.get(b"stc"), h.get(b"iso")
                    run.problems.append(f"orphan {job_id} has stc {stc!r}, iso {iso!r}")
        await run.finish()
    return run


@pytest.mark.faults_baseline
@pytest.mark.timeout(TEST_TIMEOUT)
async def test_mass_crash_recovers_every_orphan_at_once(lab: Lab, baseline: bool) -> None:
    node = await mass_crash(lab, "node") if baseline else None
    echo = await mass_crash(lab, "echomq")
    verdict(echo, node, no_slower=0.5)


# -- 10b. Blocked event loop -----------------------------------------------------------------


async def blocked_loop(lab: Lab, impl: str) -> Run:
    """Async processors that block their worker's event loop (``time.sleep``, as CPU-bound or
    badly written code would) 2.5 s, on every run, with a 1 s lock: 4 such jobs in three
    workers of concurrency 2 (one stays idle, its stalled check every 0.3 s looks for lost
    locks).

    echomq renews its locks from a thread of its own, which the blocked loop does not stop:
    each job runs once and completes, never stalls (no ``stc``, no ``stalled`` event), and no
    duplicate is allowed. BullMQ renews on the blocked loop: its locks lapse, the jobs stall,
    run again and may end failed; its row is the baseline (allowed: max stalled count extra
    runs per job, the most its rule permits). Recovery: from a job's first start until it
    is finished, bounded by concurrency x the block + 1 s (the jobs of one worker block its
    loop in turn).
    """
    lock, stalled, block, concurrency, max_stalled = 1.0, 0.3, 2500, 2, 1
    async with lab.run(
        "10b blocked event loop",
        impl,
        lock=lock,
        stalled=stalled,
        concurrency=concurrency,
        max_stalled=max_stalled,
    ) as run:
        # The workers start first: a job may then be taken by a fetch whose reply is still
        # unread when another job blocks the loop (renewed by token, not from the table).
        await run.start_workers(3)
        ids = await run.producer.add_many(4, lambda i: {"block_ms": block})
        echomq = impl == "echomq"
        final = ("completed",) if echomq else ("completed", "failed")
        expected = dict.fromkeys(ids, final)
        await run.wait_finished(expected, timeout=40)
        run.row.faults = len(ids)
        if not echomq:
            run.allow(ids, max_stalled)
        bound = concurrency * block / 1000 + 1
        for job_id in ids:
            first = run.ledger.first_start(job_id) or now_ms()
            run.set_recovery(await run.recovery(first, [job_id]), bound)
        stalls = {
            fields.get(b"jobId", b"?").decode()
            for _, fields in await run.r.xrange(f"bull:{run.queue}:events")
            if fields.get(b"event") == b"stalled"
        }
        run.marks["stalled"] = len(stalls)
        run.marks["jobs_failed"] = await run.r.zcard(f"bull:{run.queue}:failed")
        if echomq:
            starts = run.ledger.starts()
            for job_id in ids:
                if starts[job_id] != 1:
                    run.problems.append(f"job {job_id} ran {starts[job_id]} times, not once")
                stc = await run.r.hget(f"bull:{run.queue}:{job_id}", "stc")
                if stc is not None:
                    run.problems.append(f"job {job_id} stalled ({stc!r})")
            if stalls:
                run.problems.append(f"stalled events for {sorted(stalls)}")
        await run.finish(expected)
    return run


@pytest.mark.faults_baseline
@pytest.mark.timeout(TEST_TIMEOUT)
async def test_blocked_event_loop_loses_no_job(lab: Lab, baseline: bool) -> None:
    node = await blocked_loop(lab, "node") if baseline else None
    echo = await blocked_loop(lab, "echomq")
    verdict(echo, node)
