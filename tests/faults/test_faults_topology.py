"""Failovers: the primary behind Sentinel killed or frozen, a Cluster primary killed.

Each run starts its own replicated setup (:mod:`faultkit.topology`): a primary, a replica and
three Sentinels (down-after 1 s), or three primaries with a replica each (node timeout 1 s).
Workers and the producer reach it only through its URL form (``redis+sentinel://`` /
``redis+cluster://``; the BullMQ baseline through ioredis's Sentinel and Cluster clients).
Two workers (two jobs each) run a stream of jobs the producer keeps adding; the fault hits
while they run jobs. The producer's adds that raise or time out are retried with the same id
until acknowledged; the ledger of acknowledged adds and of executions is kept outside Redis.

The test's clock starts at the fault. *Promotion* is when another node first answers as the
primary holding the queue; *recovery* is when the first job completed after the fault shows
on that new primary (seen by the test), bounded by the failure-detection time (Sentinel
``down-after-milliseconds``, Cluster ``cluster-node-timeout``) + 1 s, or by the promotion + 1 s
when the servers take longer than the detection time to promote a replica (they do here:
Sentinel about 2.2 s, Cluster about 2 s, with a 1 s detection time). Duplicates are allowed
only for jobs that started between 1 s before the fault and the end of the outage (the
recovery, or for a frozen primary the moment it is back and demoted): their locks, or the
outcome calls that would have released them, may have been cut by the failover.
"""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio
from faultkit.lab import Lab, Run, now_ms, verdict
from faultkit.scale import TEST_TIMEOUT, pick
from faultkit.topology import Replicated

LOCK, STALLED, JOB_MS = 4.0, 1.0, 200
#: How long a frozen primary stays frozen after the replica was promoted.
FROZEN_AFTER_PROMOTION = 0.5


def replicated(run: Run) -> Replicated:
    return run.topology


async def first_completion_after(run: Run, since_ms: float, timeout: float) -> float | None:
    """Unix ms when the test first sees, on the current primary, a job completed after
    ``since_ms`` (seen, not ``finishedOn``: a call built before the fault and sent again
    after the promotion carries the worker's time of building it)."""

    async def first() -> float | None:
        found = await run.r.zrangebyscore(
            f"bull:{run.queue}:completed", since_ms, "+inf", start=0, num=1
        )
        return now_ms() if found else None

    result: float | None = await run.until(first, timeout, "a job completed on the new primary")
    return result


async def demoted(run: Run, timeout: float) -> float:
    """Wait until the thawed victim answers as a replica; unix ms then (now on timeout)."""
    victim = replicated(run).victim
    assert victim is not None
    client = redis.asyncio.Redis.from_url(victim.url, socket_timeout=0.5)
    try:

        async def is_replica() -> bool:
            role = await client.execute_command("ROLE")  # type: ignore[no-untyped-call]
            return bool(role) and role[0] in (b"slave", "slave")

        await run.until(is_replica, timeout, "the old primary to become a replica")
    finally:
        await client.aclose()
    return now_ms()


def allow_cut(run: Run, start_ms: float, end_ms: float) -> None:
    """Allow one more start of every job that started in [start_ms, end_ms]."""
    run.allow(
        {
            e.job_id
            for e in run.ledger.entries()
            if e.event == "start" and start_ms <= e.t_ms <= end_ms
        }
    )


async def failover(lab: Lab, impl: str, scenario: str, topology: str, freeze: bool) -> Run:
    """The shared shape (module docstring): ``freeze`` SIGSTOPs the primary until its
    replica has been promoted (then 0.5 s more) instead of SIGKILLing it."""
    n = pick(60, 300)
    async with lab.run(
        scenario, impl, topology=topology, lock=LOCK, stalled=STALLED, concurrency=2
    ) as run:
        servers = replicated(run)
        await run.start_workers(2)
        run.producer.stream(n, lambda i: {"ms": JOB_MS}, every=0.02)
        await run.busy_worker(2, timeout=20)
        await asyncio.sleep(0.3)  # a few completions and adds on the first primary
        fault = now_ms()
        if freeze:
            servers.freeze(run.queue)
        else:
            servers.kill(run.queue)
        run.row.faults = 1
        promoted = await servers.promoted(run.queue, timeout=30)
        run.marks["promotion"] = (promoted - fault) / 1000
        end = promoted
        if freeze:
            await asyncio.sleep(FROZEN_AFTER_PROMOTION)
            servers.thaw()
        await run.follow_primary()
        first = await first_completion_after(run, fault, timeout=30)
        # The bound asked for is detection + 1 s; when the servers' own promotion takes
        # longer than the detection, no client can meet it: then 1 s after the promotion.
        bound = max(servers.detection, run.marks["promotion"]) + 1.0
        run.set_recovery(None if first is None else max(0.0, first - fault) / 1000, bound)
        end = max(end, first or now_ms())
        if freeze:
            end = max(end, await demoted(run, timeout=20))
        await run.producer.join(timeout=90)
        await run.wait_finished(run.producer.acked, timeout=30)
        for worker in run.workers.procs:
            if not worker.alive:
                run.problems.append(f"{worker!r} died")
        allow_cut(run, fault - 1000, end + 500)
        await run.finish()
    return run


@pytest.mark.faults_baseline
@pytest.mark.timeout(TEST_TIMEOUT)
async def test_sentinel_primary_killed(lab: Lab, baseline: bool) -> None:
    async def one(impl: str) -> Run:
        return await failover(lab, impl, "13 Sentinel: primary kill -9", "sentinel", False)

    node = await one("node") if baseline else None
    verdict(await one("echomq"), node)


@pytest.mark.timeout(TEST_TIMEOUT)
async def test_sentinel_primary_frozen_past_down_after(lab: Lab, baseline: bool) -> None:
    """The frozen primary's connections neither fail nor answer, and once thawed it is still a
    primary until the Sentinels demote it (their INFO poll, every 10 s). echomq drops its
    connections to the old master when the Sentinels announce the new one (+switch-master,
    echomq._redis.sentinel_watch), so it recovers as after a kill; BullMQ (ioredis without its
    failoverDetector) stays on the old master until it is demoted, about 10 s after the thaw."""

    async def one(impl: str) -> Run:
        return await failover(lab, impl, "14 Sentinel: primary SIGSTOP", "sentinel", True)

    node = await one("node") if baseline else None
    verdict(await one("echomq"), node)


@pytest.mark.timeout(TEST_TIMEOUT)  # the baseline at full scale only: a cluster is slow to start
async def test_cluster_primary_killed(lab: Lab, baseline: bool) -> None:
    async def one(impl: str) -> Run:
        return await failover(lab, impl, "15 Cluster: slot primary kill -9", "cluster", False)

    node = await one("node") if baseline else None
    verdict(await one("echomq"), node)
