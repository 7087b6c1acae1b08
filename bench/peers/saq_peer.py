"""Benchmark adapter for SAQ (Redis queue).

Idiomatic use: ``Queue.from_url`` + ``queue.enqueue("noop", i=i)`` (the job's kwargs are
its data); one ``Worker`` with ``concurrency``; results through ``job.refresh(
until_complete=...)``, which waits on SAQ's pub/sub job-update notifications. SAQ has no
bulk-enqueue API (``Queue.map`` enqueues concurrently and then waits for results), so
bulk enqueue is reported as unsupported.

Retries: the job's ``retries`` (SAQ's total number of attempts) set to ``--attempts``, with its
default ``retry_delay`` of 0; the function raises while ``ctx["job"].attempts == 1``. Delayed
jobs: ``scheduled`` = ``time.time()`` + the delay (epoch seconds; a float keeps the ms), which
the worker's schedule timer (every 1 s by default) moves to the queue. Concurrent producers
share one ``Queue``.
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import time

import _common as c
from saq import Queue, Worker
from saq.job import Status


async def enqueue(args) -> None:
    if c.refused(args, bulk="SAQ has no bulk enqueue API"):
        return
    queue = Queue.from_url(args.url, name=args.queue)
    await queue.connect()
    await queue.count("queued")  # warm the connection outside the timing

    async def add(i: int) -> None:
        await queue.enqueue(c.JOB_NAME, i=i)

    async def add_delayed(jobs: list[tuple[int, int]]) -> None:
        [(i, d)] = jobs
        await queue.enqueue(c.JOB_NAME, i=i, scheduled=time.time() + d / 1000)

    result = await c.run_mode_async(args, add, queue.redis.flushdb, add_delayed)
    if result is not None:
        await queue.disconnect()
        c.emit_result(result)
        return
    options = {"retries": args.attempts} if args.attempts > 1 else {}
    t0 = c.now_ns()
    for i in range(args.n):
        await queue.enqueue(c.JOB_NAME, i=i, **options)
    t1 = c.now_ns()
    await queue.disconnect()
    c.emit_result(c.timed_enqueue_result(args.n, t0, t1))


async def worker(args) -> None:
    done = asyncio.Event()
    tracker = c.async_tracker(args, done)

    async def noop(ctx, *, i: int):
        tracker.attempt(i, args.fail_once and ctx["job"].attempts == 1)
        return None

    queue = Queue.from_url(args.url, name=args.queue)
    await queue.connect()
    w = Worker(queue, functions=[(c.JOB_NAME, noop)], concurrency=args.concurrency)
    holder = {}

    async def start():
        holder["task"] = asyncio.create_task(w.start())

    async def stop():
        await w.stop()
        await holder["task"]
        await queue.disconnect()

    await c.drive_async_worker(args, tracker, start, stop, done)


async def latency(args) -> None:
    queue = Queue.from_url(args.url, name=args.queue)
    await queue.connect()
    await queue.count("queued")

    async def send_and_wait(i: int) -> bool:
        job = await queue.enqueue(c.JOB_NAME, i=i)
        try:
            await job.refresh(until_complete=5)
        except asyncio.TimeoutError:
            return False
        return job.status == Status.COMPLETE

    result = await c.run_latency_async(args.n, args.budget, args.gap, send_and_wait)
    await queue.disconnect()
    c.emit_result(result)


def main() -> None:
    args = c.parse_args()
    if args.role == "version":
        c.emit_result({"version": importlib.metadata.version("saq")})
        return
    role = {"enqueue": enqueue, "worker": worker, "latency": latency}[args.role]
    c.run_main(lambda: role(args), args.uvloop)


if __name__ == "__main__":
    main()
