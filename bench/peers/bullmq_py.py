"""Benchmark adapter for the BullMQ Python port (PyPI ``bullmq``).

Idiomatic use: ``Queue.add`` / ``Queue.addBulk``; one ``Worker`` with the
``concurrency`` option; results through ``QueueEvents`` listening on the per-job
``completed:<id>`` channel (the port has no ``waitUntilFinished``). Retries: the ``attempts``
job option (no backoff), the processor raising on ``job.attemptsMade == 0``; delayed jobs: the
``delay`` option in ``addBulk``; concurrent producers share one ``Queue``.
"""

from __future__ import annotations

import asyncio
import importlib.metadata

import _common as c
from bullmq import Queue, QueueEvents, Worker


async def enqueue(args) -> None:
    queue = Queue(args.queue, {"connection": args.url})
    await queue.getJobCounts()  # connect (and load scripts lazily) outside the timing

    async def add(i: int) -> None:
        await queue.add(c.JOB_NAME, {"i": i})

    async def add_delayed(jobs: list[tuple[int, int]]) -> None:
        await queue.addBulk(
            [{"name": c.JOB_NAME, "data": {"i": i}, "opts": {"delay": d}} for i, d in jobs]
        )

    result = await c.run_mode_async(args, add, queue.client.flushdb, add_delayed, args.batch)
    if result is not None:
        await queue.close()
        c.emit_result(result)
        return
    opts = {"attempts": args.attempts} if args.attempts > 1 else {}
    t0 = c.now_ns()
    if args.mode == "seq":
        for i in range(args.n):
            await queue.add(c.JOB_NAME, {"i": i}, opts)
    else:
        for chunk in c.chunks(args.n, args.batch):
            await queue.addBulk(
                [{"name": c.JOB_NAME, "data": {"i": i}, "opts": opts} for i in chunk]
            )
    t1 = c.now_ns()
    await queue.close()
    c.emit_result(c.timed_enqueue_result(args.n, t0, t1))


async def worker(args) -> None:
    done = asyncio.Event()
    tracker = c.async_tracker(args, done)

    async def process(job, token):
        tracker.attempt(job.data["i"], args.fail_once and job.attemptsMade == 0)
        return None

    opts = {"connection": args.url, "concurrency": args.concurrency, "autorun": False}
    w = Worker(args.queue, process, opts)
    holder = {}

    async def start():
        holder["task"] = asyncio.create_task(w.run())

    async def stop():
        await w.close()
        await holder["task"]

    await c.drive_async_worker(args, tracker, start, stop, done)


async def latency(args) -> None:
    queue = Queue(args.queue, {"connection": args.url})
    events = QueueEvents(args.queue, {"connection": args.url})
    await queue.getJobCounts()
    await asyncio.sleep(0.2)  # let QueueEvents start its XREAD at "$"
    loop = asyncio.get_running_loop()

    async def send_and_wait(i: int) -> bool:
        # The id is only known after add() returns, and the job may complete before the
        # listener is attached; so listen on the generic channel and match the id.
        fut = loop.create_future()
        wanted: dict[str, str] = {}

        def on_completed(payload, *rest):
            if wanted.get("id") == payload.get("jobId") and not fut.done():
                fut.set_result(True)
            else:
                seen.add(payload.get("jobId"))

        seen: set[str] = set()
        events.on("completed", on_completed)
        try:
            job = await queue.add(c.JOB_NAME, {"i": i})
            wanted["id"] = job.id
            if job.id in seen:
                return True
            await asyncio.wait_for(fut, 5)
            return True
        except asyncio.TimeoutError:
            return False
        finally:
            events.off("completed", on_completed)

    result = await c.run_latency_async(args.n, args.budget, args.gap, send_and_wait)
    await events.close()
    await queue.close()
    c.emit_result(result)


def main() -> None:
    args = c.parse_args()
    if args.role == "version":
        c.emit_result({"version": importlib.metadata.version("bullmq")})
        return
    role = {"enqueue": enqueue, "worker": worker, "latency": latency}[args.role]
    c.run_main(lambda: role(args), args.uvloop)


if __name__ == "__main__":
    main()
