"""Managed Redis: the restrictions of hosted services, and a worker SIGKILLed mid-run.

Each run starts a restricted server (:mod:`faultkit.managed`), as managed services
(ElastiCache, Memorystore, Azure, Upstash) run them:

- **18**: ``CONFIG`` and ``CLIENT`` renamed away (``rename-command ... ""``): no connection can
  be named or listed, so a worker counts as ready once it has started a job (the ledger);
- **19**: the ACL user ``app`` with ``~bull:* &bull:* +@all -@dangerous`` (no ``INFO``,
  ``CONFIG``, ``CLIENT LIST``, ``KEYS``...), the default user switched off.

The producer and the workers connect as the restricted client (the test's own audit as the
ACL server's admin). Three workers (two jobs each) run a stream of jobs; a worker running two
jobs is SIGKILLed and replaced (once at the ci scale, three times at full), the next kill only
once the previous victim's jobs have started again: the stalled check recovers them with
scripts only, which no restriction takes away. Duplicates allowed: the victims' unfinished
jobs. Recovery: from each kill until each of those jobs has started again in another worker,
bounded as in scenario 1 (lock + 2 stalled intervals + the job time + 1.5 s).

Every echomq worker says each refused command once, at INFO (18: ``CLIENT SETNAME`` and
``CONFIG GET``; 19: ``CONFIG GET``), and logs no WARNING or ERROR but the "stalled" lines of
the victims' jobs.

BullMQ: it ignores an unknown ``CLIENT`` and runs on 18 as it is. As the ACL user it cannot
start with its defaults: its version check sends ``INFO``, refused (``NOPERM``), and it tries
again at once, for ever, never taking a job. That run's row says so ("fails at start: ..."),
and BullMQ with its ``skipVersionCheck`` option (no ``INFO``) is then the baseline of 19.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from faultkit.lab import Lab, Run, now_ms, verdict
from faultkit.managed import KINDS
from faultkit.scale import TEST_TIMEOUT, pick

SCENARIOS = {
    "renamed": "18 managed Redis: CONFIG, CLIENT renamed away",
    "acl": "19 managed Redis: ACL user limited to bull:*",
}
LOCK, STALLED, JOB_MS, CONCURRENCY, WORKERS = 1.0, 0.5, 200, 2, 3
BOUND = LOCK + 2 * STALLED + JOB_MS / 1000 + 1.5
_STALLED_LINE = re.compile(r" job=(\S+) stalled \(")


def log_problems(run: Run, hit: set[str]) -> list[str]:
    """What the echomq workers' logs show beyond the refusals (once each, at INFO) and the
    stalled lines of the killed workers' jobs."""
    assert run.managed is not None
    problems = []
    for worker in run.workers.procs:
        for line in worker.errors(limit=None):
            found = _STALLED_LINE.search(line)
            if found is None or found.group(1) not in hit:
                problems.append(f"{worker!r} logged: {line}")
        lines = worker.log().splitlines()
        for command in run.managed.refused:
            said = [line for line in lines if f"refused {command} (" in line]
            if len(said) > 1 or (not said and worker.alive):  # a victim may die before
                problems.append(f"{worker!r} reported the refused {command} {len(said)} times")
            problems += [f"{worker!r} not at INFO: {line}" for line in said if " INFO " not in line]
    return problems


async def managed_redis(lab: Lab, impl: str, kind: str, **node_options: Any) -> Run:
    """The scenario of the module docstring on a ``kind`` server; ``node_options`` go to the
    BullMQ worker (see node_worker.mjs)."""
    n, kills = pick(40, 300), pick(1, 3)
    async with lab.run(
        SCENARIOS[kind],
        impl,
        managed=kind,
        lock=LOCK,
        stalled=STALLED,
        concurrency=CONCURRENCY,
        max_stalled=kills + 1,
        node_options=node_options or None,
    ) as run:
        run.producer.stream(n, lambda i: {"ms": JOB_MS}, every=0.01)
        failure = await run.wait_first_jobs(run.workers.start() for _ in range(WORKERS))
        if failure is not None:
            if impl == "node":
                await run.abandon(f"fails at start: {failure.removeprefix('worker error: ')}")
                return run
            run.problems.append(f"an echomq worker cannot start: {failure}")
        hits: list[tuple[float, set[str]]] = []
        while failure is None and len(hits) < kills:
            victim = await run.busy_worker(CONCURRENCY, timeout=20)
            if victim is None:
                break
            victim.kill()
            killed_at, hit = now_ms(), await run.unfinished(victim)
            run.allow(hit)
            hits.append((killed_at, hit))
            run.row.faults += 1
            run.workers.start()  # a replacement, as a supervisor would start (not waited for)

            def again(since: float = killed_at, jobs: set[str] = hit) -> bool:
                return run.restarted(since, jobs) is not None

            await run.until(again, BOUND + 10, "the killed worker's jobs to start again")
        await run.producer.join(timeout=60)
        await run.wait_finished(run.producer.acked, timeout=30)
        for killed_at, hit in hits:
            run.set_recovery(run.restarted(killed_at, hit), BOUND)
        if impl == "echomq":
            run.problems += log_problems(run, set().union(*(h for _, h in hits)))
        await run.finish()
    return run


async def bullmq(lab: Lab, kind: str) -> Run:
    """BullMQ with its defaults; where those cannot start, with ``skipVersionCheck``."""
    run = await managed_redis(lab, "node", kind)
    if run.abandoned:
        run = await managed_redis(lab, "node", kind, skipVersionCheck=True)
        run.row.verdict = "baseline (skipVersionCheck)"
    return run


@pytest.mark.faults_baseline
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.timeout(TEST_TIMEOUT)
async def test_managed_redis(lab: Lab, baseline: bool, kind: str) -> None:
    node = await bullmq(lab, kind) if baseline else None
    verdict(await managed_redis(lab, "echomq", kind), node)
