#!/usr/bin/env python3
"""Batches: jobs/s of a bulk-insert processor, one job per call vs a batch per call.

    .venv/bin/python bench/batches.py [--jobs 20000] [--batch-size 100] [--batch-wait 0.05]
                                      [--modes batch,single-100,single-1]
                                      [--synchronous NORMAL] [--dir PATH] [--src PATH]

Runs in the repository's ``.venv`` Python (echomq from ``--src`` when given). Each mode starts
its own ``redis-server`` (free loopback port, no persistence) and a fresh SQLite database file
(WAL, ``synchronous=NORMAL`` unless ``--synchronous``) in a temporary directory (under
``--dir``), adds ``--jobs`` jobs (bulk adds of
1,000) before its worker starts, then times one ``Worker`` in this process from its start to
the last ``completed`` hook. Every processor call does one bulk insert: ``executemany`` of its
jobs' rows in one transaction. Modes:

- ``batch``: ``batch=Batch(size=--batch-size, wait=--batch-wait)`` (concurrency = the size);
  one insert per batch; ``batch-C``: the same at concurrency C (C >= the size: the next batch
  fills while one runs);
- ``single-100``: one job per call at concurrency 100 (the jobs are fetched and finished 100 at
  a time, but each call inserts one row in its own transaction);
- ``single-1``: one job per call at concurrency 1.

Printed per mode: jobs/s, seconds, processor calls, and the rows found in SQLite afterwards
(must equal ``--jobs``).
"""

from __future__ import annotations

import argparse
import sys


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--jobs", type=int, default=20_000, help="jobs per mode (default 20000)")
    p.add_argument("--batch-size", type=int, default=100, help="batch size (default 100)")
    p.add_argument(
        "--batch-wait", type=float, default=0.05, help="batch wait, seconds (default 0.05)"
    )
    p.add_argument(
        "--modes",
        default="batch,batch-300,single-100,single-1",
        help="comma-separated modes to run",
    )
    p.add_argument(
        "--synchronous",
        choices=["OFF", "NORMAL", "FULL"],
        default="NORMAL",
        help="SQLite's synchronous pragma (default NORMAL; FULL syncs the WAL at each commit)",
    )
    p.add_argument("--dir", help="where the SQLite files go (default: a temporary directory)")
    p.add_argument("--src", help="an echomq src/ directory to import first")
    return p.parse_args()


OPTS = parse_args()
if OPTS.src:
    sys.path.insert(0, OPTS.src)

import asyncio  # noqa: E402
import pathlib  # noqa: E402
import sqlite3  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import AsyncIterator  # noqa: E402
from contextlib import asynccontextmanager  # noqa: E402
from typing import Any  # noqa: E402

import redis.asyncio  # noqa: E402

import echomq  # noqa: E402
from echomq.embedded import RedisServer, find_redis_server  # noqa: E402

QUEUE = "batches-bench"


@asynccontextmanager
async def fresh_redis(workdir: pathlib.Path) -> AsyncIterator[redis.asyncio.Redis]:
    server = RedisServer(
        executable=find_redis_server(), data_dir=workdir / "redis", appendonly=False
    )
    server.start()
    client = redis.asyncio.Redis.from_url(server.url)
    try:
        yield client
    finally:
        await client.aclose()
        server.stop()


def open_db(path: pathlib.Path) -> sqlite3.Connection:
    db = sqlite3.connect(path)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(f"PRAGMA synchronous={OPTS.synchronous}")
    db.execute("CREATE TABLE events (job_id TEXT PRIMARY KEY, user TEXT, amount INTEGER)")
    return db


async def run_mode(mode: str, workdir: pathlib.Path) -> dict[str, Any]:
    n = OPTS.jobs
    db = open_db(workdir / f"{mode}.sqlite3")
    calls = 0

    def insert(jobs: list[echomq.Job]) -> None:
        nonlocal calls
        calls += 1
        rows = [(job.id, job.data["user"], job.data["amount"]) for job in jobs]
        with db:  # one transaction
            db.executemany("INSERT INTO events VALUES (?, ?, ?)", rows)

    async def one(job: echomq.Job) -> None:
        insert([job])

    async def many(jobs: list[echomq.Job]) -> list[None]:
        insert(jobs)
        return [None] * len(jobs)

    options: dict[str, Any] = {"drain_delay": 0.2, "remove_on_complete": True}
    if mode.startswith("batch"):
        processor: Any = many
        options["batch"] = echomq.Batch(size=OPTS.batch_size, wait=OPTS.batch_wait)
        if mode.startswith("batch-"):  # batch-C: concurrency C (>= the size)
            options["concurrency"] = int(mode.removeprefix("batch-"))
    else:
        processor = one
        options["concurrency"] = int(mode.removeprefix("single-"))
    async with fresh_redis(workdir / mode) as client:
        queue = echomq.Queue(QUEUE, connection=client)
        for start in range(0, n, 1000):
            items = [
                ("event", {"user": f"u{i % 97}", "amount": i})
                for i in range(start, min(n, start + 1000))
            ]
            await queue.add_bulk(items)
        done = asyncio.Event()
        completed = 0

        def count(job: echomq.Job, result: Any) -> None:
            nonlocal completed
            completed += 1
            if completed == n:
                done.set()

        worker = echomq.Worker(QUEUE, processor, connection=client, **options)
        worker.on("completed", count)
        started = time.perf_counter()
        async with worker:
            await done.wait()
            elapsed = time.perf_counter() - started
        await queue.aclose()
    rows = db.execute("SELECT COUNT(*) FROM events").fetchone()[0]
    db.close()
    return {"mode": mode, "jobs/s": n / elapsed, "seconds": elapsed, "calls": calls, "rows": rows}


async def main() -> None:
    print(
        f"{OPTS.jobs} jobs per mode; batch size {OPTS.batch_size}, wait {OPTS.batch_wait:g} s; "
        f"SQLite synchronous={OPTS.synchronous}; "
        f"Python {sys.version.split()[0]}, echomq {echomq.__version__}"
    )
    print(f"{'mode':<12} {'jobs/s':>10} {'seconds':>9} {'calls':>8} {'rows':>8}")
    with tempfile.TemporaryDirectory(prefix="echomq-batches-", dir=OPTS.dir) as tmp:
        for mode in OPTS.modes.split(","):
            workdir = pathlib.Path(tmp) / mode
            workdir.mkdir()
            r = await run_mode(mode, workdir)
            print(
                f"{r['mode']:<12} {r['jobs/s']:>10.0f} {r['seconds']:>9.2f} {r['calls']:>8} "
                f"{r['rows']:>8}",
                flush=True,
            )
            if r["rows"] != OPTS.jobs:
                raise SystemExit(f"{mode}: {r['rows']} rows, expected {OPTS.jobs}")


if __name__ == "__main__":
    asyncio.run(main())
