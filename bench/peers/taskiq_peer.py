"""Benchmark adapter for taskiq with taskiq-redis.

Idiomatic use: a ``RedisStreamBroker`` (the taskiq-redis broker with acknowledgements;
consumer group created by ``startup()``) with a ``RedisAsyncResultBackend``; a task
declared with ``@broker.task``; ``await noop.kiq(i)`` to enqueue; the worker is taskiq's
own receiver started programmatically (``taskiq.api.run_receiver_task``) with
``max_async_tasks`` as its concurrency; results through ``wait_result()`` polled every
5 ms. taskiq has no bulk-enqueue API.
"""

from __future__ import annotations

import asyncio
import importlib.metadata

import _common as c
from taskiq.api import run_receiver_task
from taskiq_redis import RedisAsyncResultBackend, RedisStreamBroker

TRACKER: c.Tracker | None = None


def make_broker(args):
    broker = RedisStreamBroker(args.url, queue_name=args.queue).with_result_backend(
        RedisAsyncResultBackend(args.url)
    )

    @broker.task(task_name=c.JOB_NAME)
    async def noop(i: int) -> None:
        assert TRACKER is not None
        TRACKER.record(i)

    return broker, noop


async def enqueue(args) -> None:
    if args.mode == "bulk":
        c.unsupported("taskiq has no bulk enqueue API")
        return
    broker, noop = make_broker(args)
    await broker.startup()
    t0 = c.now_ns()
    for i in range(args.n):
        await noop.kiq(i)
    t1 = c.now_ns()
    await broker.shutdown()
    c.emit_result(c.timed_enqueue_result(args.n, t0, t1))


async def worker(args) -> None:
    global TRACKER
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
        try:
            await holder["task"]
        except asyncio.CancelledError:
            pass
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
