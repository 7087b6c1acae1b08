"""Benchmark adapter for arq.

Idiomatic use: ``create_pool`` + ``enqueue_job("noop", i)``; one ``Worker`` with
``max_jobs`` as its concurrency and arq's default ``poll_delay`` (0.5 s: arq polls its
queue sorted set, so an idle worker notices a new job only at the next poll); results
through ``job.result()`` polled every 5 ms. arq has no bulk-enqueue API.

At ``max_jobs=1`` arq's poll loop starts one job per poll (its semaphore holds
``max_jobs + 1`` slots and the loop stops once ``max_jobs`` jobs are counted), i.e. 2 jobs/s
with the default poll delay; the c=1 drain is therefore reported as unsupported rather
than run for over an hour.

Retries: arq retries a job whose function raises ``Retry`` (any other exception fails it for
good), up to the function's ``max_tries``; with ``--fail-once`` the function is declared with
``max_tries=2`` (``--attempts`` at the enqueue has no arq equivalent) and raises ``Retry()``,
without ``defer``, on ``ctx["job_try"] == 1``. Delayed jobs: ``enqueue_job(..., _defer_by=s)``.
Concurrent producers share one ``ArqRedis`` pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata

import _common as c
from arq import create_pool
from arq.connections import RedisSettings
from arq.jobs import JobStatus
from arq.worker import Retry, Worker, func


def settings(args) -> RedisSettings:
    return RedisSettings.from_dsn(args.url)


async def enqueue(args) -> None:
    if c.refused(args, bulk="arq has no bulk enqueue API"):
        return
    pool = await create_pool(settings(args), default_queue_name=args.queue)
    await pool.ping()

    async def add(i: int) -> None:
        await pool.enqueue_job(c.JOB_NAME, i)

    async def add_delayed(jobs: list[tuple[int, int]]) -> None:
        [(i, d)] = jobs
        await pool.enqueue_job(c.JOB_NAME, i, _defer_by=d / 1000)

    result = await c.run_mode_async(args, add, pool.flushdb, add_delayed)
    if result is not None:
        await pool.aclose()
        c.emit_result(result)
        return
    t0 = c.now_ns()
    for i in range(args.n):
        await pool.enqueue_job(c.JOB_NAME, i)
    t1 = c.now_ns()
    await pool.aclose()
    c.emit_result(c.timed_enqueue_result(args.n, t0, t1))


async def worker(args) -> None:
    if args.concurrency == 1 and not args.latency:
        c.unsupported(
            "arq starts at most one job per poll at max_jobs=1 (2 jobs/s with the "
            "default poll_delay of 0.5 s), so a c=1 drain is not run"
        )
        return
    done = asyncio.Event()
    tracker = c.async_tracker(args, done)

    async def noop(ctx, i: int):
        tracker.attempt(i, args.fail_once and ctx["job_try"] == 1, Retry())
        return None

    w = Worker(
        functions=[func(noop, name=c.JOB_NAME, max_tries=2 if args.fail_once else None)],
        redis_settings=settings(args),
        queue_name=args.queue,
        max_jobs=args.concurrency,
        handle_signals=False,
    )
    holder = {}

    async def start():
        holder["task"] = asyncio.create_task(w.async_run())

    async def stop():
        holder["task"].cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await holder["task"]
        await w.close()

    await c.drive_async_worker(args, tracker, start, stop, done)


async def latency(args) -> None:
    pool = await create_pool(settings(args), default_queue_name=args.queue)
    await pool.ping()

    async def send_and_wait(i: int) -> bool:
        job = await pool.enqueue_job(c.JOB_NAME, i)
        try:
            await job.result(timeout=5, poll_delay=0.005)
        except asyncio.TimeoutError:
            return False
        return await job.status() == JobStatus.complete

    result = await c.run_latency_async(args.n, args.budget, args.gap, send_and_wait)
    await pool.aclose()
    c.emit_result(result)


def main() -> None:
    args = c.parse_args()
    if args.role == "version":
        c.emit_result({"version": importlib.metadata.version("arq")})
        return
    role = {"enqueue": enqueue, "worker": worker, "latency": latency}[args.role]
    c.run_main(lambda: role(args), args.uvloop)


if __name__ == "__main__":
    main()
