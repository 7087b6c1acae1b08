"""Benchmark adapter for taskiq with taskiq-redis.

Idiomatic use: a ``RedisStreamBroker`` (the taskiq-redis broker with acknowledgements;
consumer group created by ``startup()``) with a ``RedisAsyncResultBackend``; a task
declared with ``@broker.task``; ``await noop.kiq(i)`` to enqueue; the worker is taskiq's
own receiver started programmatically (``taskiq.api.run_receiver_task``) with
``max_async_tasks`` as its concurrency; results through ``wait_result()`` polled every
5 ms. taskiq has no bulk-enqueue API.

Retries: taskiq's ``SimpleRetryMiddleware`` on the broker; the enqueue side asks for them per
message with the labels ``retry_on_error=True`` and ``max_retries`` = ``--attempts`` (the
middleware re-sends at once, with ``_retries`` incremented; it has no delay), and the task
raises while that label is 0 (read through taskiq's ``Context``). Delayed jobs: taskiq-redis's
brokers have no delayed send (a delay goes through a schedule source and the separate
``taskiq scheduler`` process), so the lateness phase is unsupported. Concurrent producers share
one broker.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata

import _common as c
import redis.asyncio as aioredis
from taskiq import Context, TaskiqDepends
from taskiq.api import run_receiver_task
from taskiq.middlewares import SimpleRetryMiddleware
from taskiq_redis import RedisAsyncResultBackend, RedisStreamBroker

TRACKER: c.Tracker | None = None
NO_DELAYS = "taskiq-redis has no delayed send (only schedule sources and a scheduler)"


def make_broker(args):
    broker = RedisStreamBroker(args.url, queue_name=args.queue).with_result_backend(
        RedisAsyncResultBackend(args.url)
    )
    if args.fail_once or args.attempts > 1:
        broker = broker.with_middlewares(SimpleRetryMiddleware())

    if args.fail_once:

        @broker.task(task_name=c.JOB_NAME)
        async def noop(i: int, context: Context = TaskiqDepends()) -> None:  # noqa: B008
            assert TRACKER is not None
            TRACKER.attempt(i, int(context.message.labels.get("_retries", 0)) == 0)
    else:

        @broker.task(task_name=c.JOB_NAME)
        async def noop(i: int) -> None:
            assert TRACKER is not None
            TRACKER.record(i)

    return broker, noop


async def enqueue(args) -> None:
    if c.refused(args, bulk="taskiq has no bulk enqueue API", delayed=NO_DELAYS):
        return
    broker, noop = make_broker(args)
    await broker.startup()
    if args.mode == "concurrent":

        async def flush() -> None:  # a client of our own: the broker has no flush
            async with aioredis.Redis.from_url(args.url) as conn:
                await conn.flushdb()

        result = await c.run_concurrent_async(args, noop.kiq, flush)
        await broker.shutdown()
        c.emit_result(result)
        return
    kicker = noop.kicker()
    if args.attempts > 1:
        kicker = kicker.with_labels(retry_on_error=True, max_retries=args.attempts)
    t0 = c.now_ns()
    for i in range(args.n):
        await kicker.kiq(i)
    t1 = c.now_ns()
    await broker.shutdown()
    c.emit_result(c.timed_enqueue_result(args.n, t0, t1))


async def worker(args) -> None:
    global TRACKER
    if args.delayed:
        c.unsupported(NO_DELAYS)
        return
    done = asyncio.Event()
    TRACKER = tracker = c.async_tracker(args, done)
    broker, _noop = make_broker(args)
    broker.is_worker_process = True
    await broker.startup()
    holder = {}

    async def start():
        holder["task"] = asyncio.create_task(
            run_receiver_task(broker, max_async_tasks=args.concurrency)
        )

    async def stop():
        holder["task"].cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await holder["task"]
        await broker.shutdown()

    await c.drive_async_worker(args, tracker, start, stop, done)


async def latency(args) -> None:
    broker, noop = make_broker(args)
    await broker.startup()

    async def send_and_wait(i: int) -> bool:
        task = await noop.kiq(i)
        try:
            res = await task.wait_result(check_interval=0.005, timeout=5)
        except Exception:  # taskiq raises its own TaskiqResultTimeoutError
            return False
        return not res.is_err

    result = await c.run_latency_async(args.n, args.budget, args.gap, send_and_wait)
    await broker.shutdown()
    c.emit_result(result)


def main() -> None:
    args = c.parse_args()
    if args.role == "version":
        c.emit_result(
            {
                "version": f"{importlib.metadata.version('taskiq')} + taskiq-redis "
                f"{importlib.metadata.version('taskiq-redis')}"
            }
        )
        return
    role = {"enqueue": enqueue, "worker": worker, "latency": latency}[args.role]
    c.run_main(lambda: role(args), args.uvloop)


if __name__ == "__main__":
    main()
