#!/usr/bin/env python3
"""One echomq worker draining a queue, with Redis's own accounting: how many script calls it
made, how many jobs each carried, and the CPU Redis spent per job.

    python3 bench/worker_drain.py [--jobs 20000] [--concurrency 50] [--repeats 3]
                                  [--src PATH] [--label NAME]

It runs in the repository's ``.venv`` Python (or any Python with echomq and redis-py),
with ``--src`` put first on ``sys.path`` so that two checkouts can be compared in one sitting
(``--src /path/to/other/checkout/src``). Each repeat starts its own ``redis-server`` (free
loopback port, no persistence), adds ``--jobs`` jobs in bulk, resets Redis's statistics, and
drains them with one ``Worker`` whose processor returns 1. Reported per repeat and as medians:
jobs/s (first job taken to last completion recorded), Redis CPU µs per job (``INFO cpu``,
user + sys), script time µs per job and calls (``INFO commandstats``, ``evalsha``), jobs per
call, and the worker process's CPU µs per job. bench/run.py's ``drain c=50`` compares the
same drain against BullMQ for Node; this script shows where Redis's time goes.
"""

from __future__ import annotations

import argparse
import sys


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--jobs", type=int, default=20000)
    p.add_argument("--concurrency", type=int, default=50)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--src", help="an echomq src/ directory to import first")
    p.add_argument("--label", default="echomq")
    return p.parse_args()


OPTS = parse_args()
if OPTS.src:
    sys.path.insert(0, OPTS.src)

import asyncio  # noqa: E402
import pathlib  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import redis.asyncio  # noqa: E402

import echomq  # noqa: E402
from echomq.embedded import RedisServer, find_redis_server  # noqa: E402


async def drain_once(jobs: int, concurrency: int) -> dict[str, float]:
    server = RedisServer(
        executable=find_redis_server(),
        data_dir=pathlib.Path(tempfile.mkdtemp(prefix="echomq-drain-")),
        appendonly=False,
    )
    server.start()
    client = redis.asyncio.Redis.from_url(server.url)
    try:
        for start in range(0, jobs, 1000):
            batch = [("j", {"i": i}) for i in range(start, min(jobs, start + 1000))]
            await echomq.add_bulk("drain", batch, connection=client)
        await client.config_resetstat()
        cpu0 = await client.info("cpu")
        seen = 0
        first: float | None = None
        all_seen = asyncio.Event()

        async def process(job: echomq.Job) -> int:
            nonlocal seen, first
            if first is None:
                first = time.perf_counter()
            seen += 1
            if seen == jobs:
                all_seen.set()
            return 1

        usage0 = resource.getrusage(resource.RUSAGE_SELF)
        worker = echomq.Worker(
            "drain", process, connection=client, concurrency=concurrency, drain_delay=0.2
        )
        async with worker:
            await all_seen.wait()
            while await client.zcard("bull:drain:completed") < jobs:
                await asyncio.sleep(0.002)
            last = time.perf_counter()
        usage1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu1 = await client.info("cpu")
        stats = (await client.info("commandstats")).get("cmdstat_evalsha", {})
        redis_cpu = sum(cpu1[k] - cpu0[k] for k in ("used_cpu_user", "used_cpu_sys"))
        worker_cpu = sum(getattr(usage1, k) - getattr(usage0, k) for k in ("ru_utime", "ru_stime"))
        calls = max(1, int(stats.get("calls", 0)))
        assert first is not None
        return {
            "jobs/s": jobs / (last - first),
            "Redis CPU us/job": redis_cpu * 1e6 / jobs,
            "script us/job": float(stats.get("usec", 0)) / jobs,
            "script calls": float(calls),
            "jobs/call": jobs / calls,
            "worker CPU us/job": worker_cpu * 1e6 / jobs,
        }
    finally:
        await client.aclose()
        server.stop()


def main() -> int:
    runs = []
    for n in range(OPTS.repeats):
        run = asyncio.run(drain_once(OPTS.jobs, OPTS.concurrency))
        runs.append(run)
        shown = "  ".join(f"{k} {v:,.1f}" for k, v in run.items())
        print(f"{OPTS.label} repeat {n + 1}: {shown}", flush=True)
    medians = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    print(f"{OPTS.label} median: " + "  ".join(f"{k} {v:,.1f}" for k, v in medians.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
