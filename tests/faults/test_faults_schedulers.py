"""Faults under job schedulers: a worker SIGKILLed while it runs an iteration, and Redis
restarted from its AOF.

An ``every`` scheduler is made with ``Queue.upsert_job_scheduler`` (the layout BullMQ shares,
so the Node baseline's BullMQ workers continue the same scheduler). Its iterations run the
fault suite's processor, which writes every start and finish to the ledger, outside the
server under test. Iteration ids are ``repeat:<scheduler id>:<scheduled ms>``, so the ledger
alone tells which time slots ran. Each scenario checks that:

- every iteration that started ran to completion exactly once (one ``finish`` line), and
  only the iterations a SIGKILL cut short started twice (:meth:`Run.allow`);
- no time slot was doubled: the slots that ran are distinct and at least ``every`` apart;
- the scheduler went on after the fault (new slots started after it), and at the end it
  still exists with exactly one pending iteration.

The final audit (every iteration that ran is completed once, no leftover lock) runs after
the workers were stopped gracefully, so no iteration is running meanwhile.
"""

from __future__ import annotations

import asyncio

import pytest
from faultkit.audit import states
from faultkit.lab import COMPLETED, Lab, Run, now_ms, verdict
from faultkit.scale import TEST_TIMEOUT, pick

from echomq import Queue

SCHEDULER = "tick"
PREFIX = f"repeat:{SCHEDULER}:"
PENDING = ("wait", "delayed", "prioritized", "paused", "active")


def slot(job_id: str) -> int | None:
    """The scheduled ms of an iteration id, or None for another job."""
    if not job_id.startswith(PREFIX):
        return None
    tail = job_id[len(PREFIX) :]
    return int(tail) if tail.isdigit() else None


async def upsert(run: Run, every: float, ms: int) -> None:
    queue = Queue(run.queue, connection=run.producer.client)
    await queue.upsert_job_scheduler(
        SCHEDULER, every=every, template={"name": "tick", "data": {"ms": ms}}
    )


def iterations_since(run: Run, since_ms: float) -> set[str]:
    """Iterations whose first start (per the ledger) is after ``since_ms``."""
    first: dict[str, float] = {}
    for e in run.ledger.entries():
        if e.event == "start" and slot(e.job_id) is not None:
            first.setdefault(e.job_id, e.t_ms)
    return {job_id for job_id, t in first.items() if t > since_ms}


async def wait_iterations_since(run: Run, since_ms: float, n: int, timeout: float) -> None:
    await run.until(
        lambda: len(iterations_since(run, since_ms)) >= n,
        timeout,
        f"{n} iterations started after the fault",
    )


async def stop_workers(run: Run, grace: float) -> None:
    """SIGTERM every live worker and wait: running iterations finish, locks are released."""
    await run.workers.stop_supervising()
    alive = run.workers.alive()
    for worker in alive:
        worker.terminate()
    for worker in alive:
        code = await worker.wait_exit(timeout=grace + 20)
        if code != 0:
            run.problems.append(f"{worker!r} exited with {code} after SIGTERM")


async def check_schedule(run: Run, every_ms: int) -> dict[str, tuple[str, ...]]:
    """The ledger and Redis checks shared by the scenarios; the audit's ``expected``."""
    entries = run.ledger.entries()
    started = {e.job_id for e in entries if e.event == "start"}
    strays = sorted(j for j in started if slot(j) is None)
    if strays:
        run.problems.append(f"jobs that are no iteration of {SCHEDULER} ran: {strays[:5]}")
    finishes: dict[str, int] = {}
    for e in entries:
        if e.event == "finish":
            finishes[e.job_id] = finishes.get(e.job_id, 0) + 1
    for job_id in sorted(started):
        if finishes.get(job_id, 0) != 1:
            run.problems.append(f"{job_id} ran to completion {finishes.get(job_id, 0)} times")
    slots = sorted(s for j in started if (s := slot(j)) is not None)
    close = [(a, b) for a, b in zip(slots, slots[1:]) if b - a < every_ms]
    if close:
        run.problems.append(f"time slots closer than every={every_ms} ms (doubled): {close[:5]}")
    found = await states(run.r, run.queue)
    pending = sorted(
        j for j, where in found.items() if slot(j) is not None and set(where) & set(PENDING)
    )
    if len(pending) != 1:
        run.problems.append(f"{len(pending)} pending iterations at the end, expected 1: {pending}")
    scheduler = await Queue(run.queue, connection=run.producer.client).get_job_scheduler(SCHEDULER)
    if scheduler is None:
        run.problems.append(f"scheduler {SCHEDULER} is gone")
    elif (scheduler.iteration_count or 0) < len(slots):
        run.problems.append(
            f"scheduler iteration count {scheduler.iteration_count} < {len(slots)} iterations run"
        )
    run.marks["iterations"] = len(slots)
    return dict.fromkeys(started, COMPLETED)


# -- S1. SIGKILL of the worker running an iteration ------------------------------------------


async def kill_iteration_holder(lab: Lab, impl: str) -> Run:
    """Two workers (one job at a time each) run an every-scheduler of 0.5 s whose iterations
    take 0.6 s; the worker running an iteration is SIGKILLed and replaced.

    The killed iteration is re-run once its lock expires (its one allowed duplicate); the
    scheduler goes on without it: the next iteration was made when it was taken. No slot is
    doubled and every iteration completes once. Recovery: from the kill until the cut
    iteration started again, bounded by lock + 2 stalled intervals + the job time + 1.5 s.
    """
    lock, stalled, every, ms = 1.0, 0.5, 0.5, 600
    after = pick(6, 20)
    async with lab.run(
        "S1 SIGKILL holding an iteration",
        impl,
        lock=lock,
        stalled=stalled,
        concurrency=1,
        close_grace=5.0,
    ) as run:
        await run.start_workers(2)
        await upsert(run, every, ms)
        hit: set[str] = set()
        killed_at = now_ms()
        for _ in range(3):  # a victim whose iteration ended just before the kill: again
            victim = await run.busy_worker(1, timeout=15)
            if victim is None:
                break
            victim.kill()
            killed_at = now_ms()
            hit = await run.unfinished(victim)  # after the kill: exactly what will re-run
            run.allow(hit)
            run.row.faults += 1
            await run.start_workers(1)
            if hit:
                break
        if not hit:
            run.problems.append("no kill landed while the victim held an iteration")
        else:
            await wait_iterations_since(run, killed_at, after, timeout=after * every + 10)
            await run.until(
                lambda: run.restarted(killed_at, hit) is not None,
                lock + 2 * stalled + 10,
                "the cut iteration to start again",
            )
            run.set_recovery(run.restarted(killed_at, hit), lock + 2 * stalled + ms / 1000 + 1.5)
        await stop_workers(run, 5.0)
        expected = await check_schedule(run, round(every * 1000))
        await run.finish(expected)
    return run


@pytest.mark.faults_baseline
@pytest.mark.timeout(TEST_TIMEOUT)
async def test_sigkill_while_holding_an_iteration(lab: Lab, baseline: bool) -> None:
    node = await kill_iteration_holder(lab, "node") if baseline else None
    echo = await kill_iteration_holder(lab, "echomq")
    verdict(echo, node)


# -- S2. Redis kill -9 and restart from the AOF ---------------------------------------------


async def redis_restart(lab: Lab, impl: str) -> Run:
    """Redis (``appendonly yes``, ``appendfsync always``) is SIGKILLed while a worker runs an
    iteration, and restarted on the same directory after 1 s.

    Right after the restart the scheduler's hash, its entry in the ``repeat`` set and the
    iteration that was pending before the kill are all there (or that iteration already
    ran); the workers reconnect and the scheduler keeps producing iterations. The outage is
    shorter than the lock, so no duplicate is allowed. Recovery: from the restart until a
    new iteration started, bounded by lock + 2 stalled intervals + every + 2 s (a fetch
    whose reply died with the server leaves its job locked until the lock expires).
    """
    lock, stalled, every, ms = 4.0, 1.0, 0.5, 300
    after = pick(6, 20)
    async with lab.run(
        "S2 Redis kill -9 under a scheduler, AOF always",
        impl,
        server_args=["--appendonly", "yes", "--appendfsync", "always"],
        lock=lock,
        stalled=stalled,
        concurrency=1,
        close_grace=5.0,
    ) as run:
        await run.start_workers(2)
        await upsert(run, every, ms)
        base = f"bull:{run.queue}"
        if await run.busy_worker(1, timeout=15) is not None:
            before = await states(run.r, run.queue)
            pending = {
                j for j, w in before.items() if slot(j) is not None and set(w) & set(PENDING)
            }
            run.server.kill9()
            await asyncio.sleep(1.0)
            run.server.start()
            restarted_at = now_ms()
            for client in (run.r, run.producer.client):  # drop the connections the kill cut
                await client.connection_pool.disconnect()
            run.row.faults = 1
            ids = sorted(pending)

            async def look() -> list[object]:
                pipe = run.r.pipeline(transaction=False)
                pipe.exists(f"{base}:repeat:{SCHEDULER}")
                pipe.zscore(f"{base}:repeat", SCHEDULER)
                for job_id in ids:
                    pipe.exists(f"{base}:{job_id}")
                return list(await pipe.execute())

            seen = await run.until(look, 10, "the restarted server to answer")
            hash_there, score, *jobs_there = seen or [0, None]
            if not hash_there or score is None:
                run.problems.append(
                    f"after the restart: scheduler hash {bool(hash_there)}, score {score!r}"
                )
            if not pending:
                run.problems.append("no pending iteration was seen before the kill")
            for job_id, there in zip(ids, jobs_there):
                if not there:
                    run.problems.append(f"pending iteration {job_id} lost by the restart")
            await wait_iterations_since(run, restarted_at, after, timeout=after * every + 15)
            fresh = iterations_since(run, restarted_at)
            first = min(
                (e.t_ms for e in run.ledger.entries() if e.job_id in fresh and e.event == "start"),
                default=None,
            )
            run.set_recovery(
                None if first is None else (first - restarted_at) / 1000,
                lock + 2 * stalled + every + 2,
            )
        await stop_workers(run, 5.0)
        expected = await check_schedule(run, round(every * 1000))
        await run.finish(expected)
    return run


@pytest.mark.timeout(TEST_TIMEOUT)
async def test_redis_restart_with_aof_keeps_schedulers(lab: Lab, baseline: bool) -> None:
    node = await redis_restart(lab, "node") if baseline else None
    echo = await redis_restart(lab, "echomq")
    verdict(echo, node)
