"""Faults of the data: job hashes no worker can run, written raw among good jobs.

A foreign producer, a bug or a partial restore can leave a job whose ``data`` or ``opts`` is
not JSON, or an id in ``wait`` with no hash at all. Nothing here goes through echomq's
producer: the hashes are written with plain Redis commands.
"""

from __future__ import annotations

import pickle
import time

import pytest
from faultkit.lab import Lab, Run, verdict
from faultkit.scale import TEST_TIMEOUT, pick

#: id -> (data, opts) of the corrupt jobs; each must end in ``failed`` without running.
CORRUPT: dict[str, tuple[bytes, bytes]] = {
    "bad-garbage": (b"\xff\xfe\x00 not even text", b"{}"),
    "bad-pickle": (pickle.dumps({"ms": 10}), b"{}"),
    "bad-truncated": (b'{"ms": 10, "more": [1, 2', b"{}"),
    "bad-opts": (b'{"ms": 10}', b"{attempts: 3"),
    "bad-opts-array": (b'{"ms": 10}', b"[1, 2, 3]"),
}
DANGLING = "dangling"
DATA_REASON = "job data is not valid JSON"


async def write_corrupt(run: Run) -> None:
    """The corrupt hashes and the dangling id, queued in ``wait`` like any job."""
    now = str(int(time.time() * 1000))
    for job_id, (data, opts) in CORRUPT.items():
        fields: dict[str, bytes | str] = {"name": "raw", "data": data, "opts": opts}
        fields.update(timestamp=now, delay="0")
        await run.r.hset(f"bull:{run.queue}:{job_id}", mapping=fields)  # type: ignore[arg-type]
        await run.r.lpush(f"bull:{run.queue}:wait", job_id)
    await run.r.lpush(f"bull:{run.queue}:wait", DANGLING)
    await run.r.zadd(f"bull:{run.queue}:marker", {"0": 0})  # wake idle workers


async def corrupt_jobs(lab: Lab, impl: str) -> Run:
    """Corrupt jobs (data that is garbage bytes, pickle bytes or truncated JSON; opts that is
    not JSON or not an object) and a dangling id are written raw in the middle of a stream
    of good jobs.

    Each corrupt job must end in ``failed`` with a reason (for bad data, one starting "job
    data is not valid JSON") without its processor ever starting; the dangling id must be
    removed from ``wait`` with no hash created for it; every good job completes. Duplicates
    allowed: none. Recovery: from writing them until every corrupt job is failed and the
    dangling id is gone, bounded by 1 s (the first fetch must deal with them, no stalled
    cycle).
    """
    n = pick(30, 150)
    async with lab.run("11 corrupt job data", impl, lock=2.0, stalled=0.5) as run:
        await run.start_workers(2)
        run.producer.stream(n, lambda i: {"ms": 50}, every=0.02)
        await run.until(lambda: len(run.producer.acked) >= n // 3, 20, "the first good jobs")
        written = time.time() * 1000
        await write_corrupt(run)
        run.row.faults = len(CORRUPT) + 1

        async def dealt_with() -> bool:
            gone = await run.r.lpos(f"bull:{run.queue}:wait", DANGLING) is None
            failed = await run.r.zmscore(f"bull:{run.queue}:failed", list(CORRUPT))
            return gone and all(score is not None for score in failed)

        if await run.until(dealt_with, 15, "the corrupt jobs to fail and the dangling id"):
            run.set_recovery((time.time() * 1000 - written) / 1000, 1.0)
        else:
            run.set_recovery(None, 1.0)
        await run.producer.join(timeout=60)
        await run.wait_finished(run.producer.acked, timeout=20)
        expected = dict.fromkeys(run.producer.acked, ("completed",))
        expected.update(dict.fromkeys(CORRUPT, ("failed",)))
        await run.finish(expected, absent=[DANGLING])
        starts = run.ledger.starts()
        for job_id in [*CORRUPT, DANGLING]:
            if starts[job_id]:
                run.problems.append(f"{job_id} was given to the processor {starts[job_id]}x")
        for job_id, (data, _) in CORRUPT.items():
            raw = await run.r.hget(f"bull:{run.queue}:{job_id}", "failedReason")
            reason = raw.decode() if isinstance(raw, bytes) else str(raw or "")
            bad_data = data != b'{"ms": 10}'
            if not reason or (bad_data and not reason.startswith(DATA_REASON)):
                run.problems.append(f"{job_id} failed with reason {reason!r}")
        if await run.r.exists(f"bull:{run.queue}:{DANGLING}"):
            run.problems.append(f"a hash was created for the dangling id {DANGLING}")
        run.row.jobs += 1  # the dangling id
    return run


@pytest.mark.timeout(TEST_TIMEOUT)
async def test_corrupt_jobs(lab: Lab, baseline: bool) -> None:
    node = await corrupt_jobs(lab, "node") if baseline else None
    echo = await corrupt_jobs(lab, "echomq")
    verdict(echo, node)
