"""The cpu phase's adapter for the Python peers: echomq, Celery and rq.

    python bench/peers/cpu_peer.py <echomq|celery|rq> --url URL --n 2000 --ms 20 --workers 2

Run inside the peer's own virtualenv. It enqueues ``n`` jobs of ``ms`` milliseconds of
pure-Python work (untimed), starts ``workers`` worker processes the library's usual way,
waits until every job has recorded its run in the log file (bench/peers/cpu_jobs.py), stops
the workers, and prints one ``@@bench {"result": ...}`` line with the runs it read:

* echomq: one ``Worker(processes=workers, concurrency=workers + 1)`` (sync processor in a
  pool of child processes; the parent keeps the connection, the locks and the fetch loop; the
  one extra slot keeps a job ready for the next free child, as docs/workers.md advises for
  short jobs; Celery prefetches 4 per process by default);
* Celery: ``celery worker --pool prefork --concurrency workers`` on the Redis broker;
* rq: ``workers`` rq worker processes in burst mode (each forks a work horse per job).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common as c

HERE = Path(__file__).resolve().parent
QUEUE = "cpu"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("lib", choices=["echomq", "celery", "rq", "rq-worker", "version"])
    p.add_argument("--url", default="redis://127.0.0.1:6379/0")
    p.add_argument("--n", type=int, default=2000)
    p.add_argument("--ms", type=float, default=20.0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--timeout", type=float, default=600.0)
    return p.parse_args()


def lines_in(path: str) -> int:
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def wait_all(path: str, n: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while lines_in(path) < n:
        if time.monotonic() > deadline:
            raise SystemExit(f"only {lines_in(path)} of {n} jobs ran within {timeout}s")
        time.sleep(0.05)


def read_runs(path: str) -> list[list[int]]:
    with open(path) as f:
        return [[int(x) for x in row.split()] for row in f if row.strip()]


def run_echomq(args: argparse.Namespace, log: str) -> int:
    import asyncio

    from cpu_jobs import echomq_burn

    import echomq

    async def main() -> int:
        for chunk in c.chunks(args.n, 1000):
            await echomq.add_bulk(
                QUEUE, [("burn", {"i": i, "ms": args.ms}) for i in chunk], connection=args.url
            )
        ready = c.now_ns()
        worker = echomq.Worker(
            QUEUE,
            echomq_burn,
            connection=args.url,
            processes=args.workers,
            concurrency=args.workers + 1,  # one job ready for the next free child
            drain_delay=1,
        )
        async with worker:
            deadline = time.monotonic() + args.timeout
            while lines_in(log) < args.n and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        return ready

    return asyncio.run(main())


def run_celery(args: argparse.Namespace, log: str) -> int:
    os.environ["ECHOMQ_BENCH_CELERY_BROKER"] = args.url
    sys.path.insert(0, str(HERE))
    from cpu_celery import burn

    for i in range(args.n):
        burn.apply_async((i, args.ms))
    ready = c.now_ns()
    cmd = [
        sys.executable, "-m", "celery", "-A", "cpu_celery", "worker", "--pool", "prefork",
        "--concurrency", str(args.workers), "--without-gossip", "--without-mingle",
        "--without-heartbeat", "--loglevel", "WARNING",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=HERE, stdout=sys.stderr)
    try:
        wait_all(log, args.n, args.timeout)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    return ready


def run_rq(args: argparse.Namespace, log: str) -> int:
    from redis import Redis
    from rq import Queue

    conn = Redis.from_url(args.url)
    q = Queue(QUEUE, connection=conn)
    for chunk in c.chunks(args.n, 1000):
        q.enqueue_many([Queue.prepare_data("cpu_jobs.rq_burn", (i, args.ms)) for i in chunk])
    ready = c.now_ns()
    cmd = [sys.executable, str(Path(__file__)), "rq-worker", "--url", args.url]
    procs = [subprocess.Popen(cmd, cwd=HERE, stdout=sys.stderr) for _ in range(args.workers)]
    try:
        wait_all(log, args.n, args.timeout)
    finally:
        for proc in procs:
            try:
                proc.wait(30)  # burst workers stop once the queue is empty
            except subprocess.TimeoutExpired:
                proc.kill()
    return ready


def rq_worker(args: argparse.Namespace) -> None:
    from redis import Redis
    from rq import Queue, Worker

    conn = Redis.from_url(args.url)
    Worker([Queue(QUEUE, connection=conn)], connection=conn).work(
        burst=True, logging_level="WARNING"
    )


def main() -> None:
    args = parse_args()
    if args.lib == "rq-worker":
        rq_worker(args)
        return
    if args.lib == "version":
        c.emit_result({"version": sys.version.split()[0]})
        return
    fd, log = tempfile.mkstemp(prefix=f"cpu-{args.lib}-", suffix=".log")
    os.close(fd)
    os.environ["ECHOMQ_BENCH_CPU_LOG"] = log
    run = {"echomq": run_echomq, "celery": run_celery, "rq": run_rq}[args.lib]
    ready = run(args, log)
    runs = read_runs(log)
    os.unlink(log)
    c.emit_result({"ready_ns": ready, "runs": runs})


if __name__ == "__main__":
    main()
