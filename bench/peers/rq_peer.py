"""Benchmark adapter for rq.

Idiomatic use: ``Queue.enqueue("rq_jobs.noop", i)``, ``Queue.enqueue_many`` (one
pipeline) for bulk; rq's default ``Worker``, which forks a work horse per job (its
isolation model); results through ``job.latest_result(timeout=...)``, which blocks on
rq's result stream. One rq worker process runs one job at a time (``WorkerPool`` runs
several processes), so the c=50 drain is reported as unsupported. The drain worker runs
in burst mode (stops when the queue is empty); the jobs record their execution in a file
(see rq_jobs.py) that the worker reads afterwards.

Retries: ``retry=Retry(max=--attempts - 1)`` at the enqueue (no interval: rq puts the job back
on its queue at once), and with ``--fail-once`` the worker runs the jobs through
``rq_jobs.noop`` with ``ECHOMQ_BENCH_RQ_FAIL_ONCE`` set, which raises while the job has
``retries_left``. rq's producer is synchronous (no producers phase),
and its one-job-at-a-time worker has no concurrency-50 form (no failing or lateness phase at
concurrency 50).
"""

from __future__ import annotations

import importlib.metadata
import os
import signal
import sys
import tempfile

import _common as c
from redis import Redis
from rq import Queue, Retry, Worker

FUNC = "rq_jobs.noop"
#: Why there is no lateness phase even at concurrency 1 (where a worker could run).
ONE_AT_A_TIME = "not implemented: rq's worker runs one job at a time"


def enqueue(args) -> None:
    if c.refused(args, concurrent=c.SYNC_PRODUCER, delayed=ONE_AT_A_TIME):
        return
    conn = Redis.from_url(args.url)
    q = Queue(args.queue, connection=conn)
    conn.ping()
    options = {"retry": Retry(max=args.attempts - 1)} if args.attempts > 1 else {}
    t0 = c.now_ns()
    if args.mode == "seq":
        for i in range(args.n):
            q.enqueue(FUNC, i, **options)
    else:
        for chunk in c.chunks(args.n, args.batch):
            q.enqueue_many([Queue.prepare_data(FUNC, (i,), **options) for i in chunk])
    t1 = c.now_ns()
    c.emit_result(c.timed_enqueue_result(args.n, t0, t1))


def worker(args) -> None:
    if args.concurrency > 1:
        c.unsupported("an rq worker process runs one job at a time")
        return
    if args.delayed:
        c.unsupported(ONE_AT_A_TIME)
        return
    fd, path = tempfile.mkstemp(prefix="rq-bench-", suffix=".log")
    os.close(fd)
    os.environ["ECHOMQ_BENCH_RQ_LOG"] = path
    if args.fail_once:
        os.environ["ECHOMQ_BENCH_RQ_FAIL_ONCE"] = "1"
    tracker = c.Tracker(args.n)
    conn = Redis.from_url(args.url)
    w = Worker([Queue(args.queue, connection=conn)], connection=conn)
    if args.latency:
        # rq's signal handler turns SIGINT into a warm shutdown.
        c.watch_stdin(lambda: os.kill(os.getpid(), signal.SIGINT))
    cpu0 = c.cpu_seconds()
    ready = c.now_ns()
    c.emit_ready()
    w.work(burst=not args.latency, logging_level="WARNING")
    stop_ns = c.now_ns()
    cpu = c.cpu_seconds() - cpu0
    with open(path) as f:
        for row in f:
            kind, i, t = row.split()
            if kind == "F":
                tracker.record_failure(int(i))
            else:
                tracker.record(int(i), int(t))
    os.unlink(path)
    if not args.latency and tracker.last_ns is not None:
        stop_ns = tracker.last_ns
    c.emit_result(
        tracker.summary(ready_ns=ready, stop_ns=stop_ns, cpu_s=cpu, with_starts=args.latency)
    )


def latency(args) -> None:
    conn = Redis.from_url(args.url)
    q = Queue(args.queue, connection=conn)
    conn.ping()

    def send_and_wait(i: int) -> bool:
        job = q.enqueue(FUNC, i)
        result = job.latest_result(timeout=5)
        return result is not None and result.type == result.Type.SUCCESSFUL

    c.emit_result(c.run_latency_sync(args.n, args.budget, args.gap, send_and_wait))


def main() -> None:
    roles = {"enqueue": enqueue, "worker": worker, "latency": latency}
    c.dispatch(lambda: importlib.metadata.version("rq"), roles)
    sys.stdout.flush()


if __name__ == "__main__":
    main()
