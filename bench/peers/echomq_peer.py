"""Benchmark adapter for echomq (installed from this repository into bench/.venvs/echomq).

Use of the public API only: ``Queue.add`` / ``Queue.add_bulk`` of one ``echomq.Queue`` over a
``redis.asyncio.Redis`` the producer owns (as the Node adapter uses one ``Queue``); one
``echomq.Worker`` with ``concurrency``; results through ``job.wait_until_finished`` on a shared
``echomq.QueueEvents``; flows through ``echomq.FlowProducer.add_bulk`` (one transaction per
batch of trees, as Node's ``FlowProducer.addBulk``).
The ``idle`` role (bench/idle_latency.py) runs ``Worker`` and ``Queue.add`` in one process.
``--uvloop`` runs the same code on uvloop's event loop. With ``--fail-once`` (bench/failing_jobs.py,
the failing phase) the processor raises on a job's first attempt (``attempts`` given at the add,
no backoff), as the Node adapter's throws; delayed jobs (the lateness phase) are ``add_bulk``
with a ``delay`` option.
"""

from __future__ import annotations

import asyncio
import importlib.metadata

import _common as c
import redis.asyncio as aioredis

import echomq


def flow_tree(args, tree: int):
    kids = [
        echomq.FlowJob(c.CHILD_NAME, args.queue, {"i": c.flow_index(tree, k, args.children)})
        for k in range(args.children)
    ]
    data = {"i": c.flow_index(tree, None, args.children)}
    return echomq.FlowJob(c.PARENT_NAME, args.queue, data, children=kids)


async def enqueue_flows(args) -> None:
    conn = aioredis.Redis.from_url(args.url)
    await conn.ping()
    async with echomq.FlowProducer(connection=conn, prefix="bull") as flows:
        await flows.add_bulk([flow_tree(args, -1)])  # load scripts, as the Node adapter does
        await conn.flushdb()  # drop the warm-up tree (this Redis is private to the benchmark)
        cpu0, t0 = c.cpu_seconds(), c.now_ns()
        for chunk in c.chunks(args.n, args.batch):
            await flows.add_bulk([flow_tree(args, t) for t in chunk])
        t1, cpu1 = c.now_ns(), c.cpu_seconds()
    await conn.aclose()
    c.emit_result(c.timed_enqueue_result(args.n, t0, t1) | {"cpu_s": cpu1 - cpu0})


async def enqueue(args) -> None:
    if args.mode == "flow":
        await enqueue_flows(args)
        return
    conn = aioredis.Redis.from_url(args.url)
    await conn.ping()
    queue = echomq.Queue(args.queue, connection=conn)
    # --mode concurrent: on one Queue (--api queue), or through the module-level echomq.add with
    # one shared client (--api module); --mode delayed: add_bulk with a delay option
    if args.api == "queue":

        async def add(i: int) -> None:
            await queue.add(c.JOB_NAME, {"i": i})
    else:

        async def add(i: int) -> None:
            await echomq.add(args.queue, c.JOB_NAME, {"i": i}, connection=conn)

    async def add_delayed(jobs: list[tuple[int, int]]) -> None:
        await queue.add_bulk([(c.JOB_NAME, {"i": i}, {"delay": d / 1000}) for i, d in jobs])

    result = await c.run_mode_async(args, add, conn.flushdb, add_delayed, args.batch)
    if result is None:
        result = await enqueue_timed(args, queue, conn)
    await queue.aclose()
    await conn.aclose()
    c.emit_result(result)


async def enqueue_timed(args, queue, conn) -> dict:
    """``--mode seq`` or ``bulk``, after a warm-up add (then a flush)."""
    await queue.add("warm-up", {"i": -1})  # load scripts, open connections
    await conn.flushdb()  # drop the warm-up job (this Redis is private to the benchmark)
    options = {"attempts": args.attempts} if args.attempts > 1 else {}
    t0 = c.now_ns()
    if args.mode == "seq":
        for i in range(args.n):
            await queue.add(c.JOB_NAME, {"i": i}, **options)
    else:
        for chunk in c.chunks(args.n, args.batch):
            if options:
                await queue.add_bulk([(c.JOB_NAME, {"i": i}, options) for i in chunk])
            else:
                await queue.add_bulk([(c.JOB_NAME, {"i": i}) for i in chunk])
    return c.timed_enqueue_result(args.n, t0, c.now_ns())


async def worker(args) -> None:
    done = asyncio.Event()
    tracker = c.async_tracker(args, done)

    async def process(job):
        tracker.record(job.data["i"])
        return None

    async def process_flow(job):
        tracker.record(job.data["i"])
        tracker.record_end(job.data["i"])
        return 1

    async def process_fail_once(job):
        tracker.attempt(job.data["i"], job.attempts_made == 0)
        return None

    processor = process_flow if args.flow else process_fail_once if args.fail_once else process
    w = echomq.Worker(args.queue, processor, connection=args.url, concurrency=args.concurrency)
    holder = {}

    async def start():
        holder["task"] = asyncio.create_task(w.run())

    async def stop():
        await w.close()
        await holder["task"]

    await c.drive_async_worker(args, tracker, start, stop, done)


async def latency(args) -> None:
    conn = aioredis.Redis.from_url(args.url)
    await conn.ping()
    queue = echomq.Queue(args.queue, connection=conn)
    async with echomq.QueueEvents(args.queue, connection=args.url) as events:

        async def send_and_wait(i: int) -> bool:
            job = await queue.add(c.JOB_NAME, {"i": i})
            try:
                await job.wait_until_finished(events, timeout=5)
            except (asyncio.TimeoutError, TimeoutError):
                return False
            return True

        result = await c.run_latency_async(args.n, args.budget, args.gap, send_and_wait)
    await queue.aclose()
    await conn.aclose()
    c.emit_result(result)


async def schedulers(args) -> None:
    """``--n`` every-schedulers of ``--every`` s run by one worker (benchlib/schedulers.py)."""
    conn = aioredis.Redis.from_url(args.url)
    await conn.ping()
    queue = echomq.Queue(args.queue, connection=conn)
    t0 = c.now_ns()
    for k in range(args.n):
        await queue.upsert_job_scheduler(
            f"s{k}", every=args.every, template={"name": c.TICK_NAME, "data": {"k": k}}
        )
    upsert_s = (c.now_ns() - t0) / 1e9
    rec = c.SchedulerRecorder(args.every)

    async def process(job):
        rec.record(job.id, job.timestamp.timestamp() * 1000 + job.delay * 1000)
        return None

    w = echomq.Worker(args.queue, process, connection=args.url, concurrency=args.concurrency)
    await c.drive_scheduler_run(args, rec, w.run, w.close, upsert_s)
    await queue.aclose()
    await conn.aclose()


async def idle(args) -> None:
    """One cell of bench/idle_latency.py: a worker with default options but ``concurrency``
    (so the default 5 s ``drain_delay``) and its producer in this process."""
    probe = c.IdleProbe()

    async def process(job):
        await probe.process(job.data["i"], job.data["ms"])
        return None

    conn = aioredis.Redis.from_url(args.url)
    await conn.ping()
    queue = echomq.Queue(args.queue, connection=conn)
    w = echomq.Worker(args.queue, process, connection=args.url, concurrency=args.concurrency)
    running = asyncio.create_task(w.run())

    async def add(i: int, ms: float, delay_ms: float) -> None:
        options = {"delay": delay_ms / 1000} if delay_ms else {}
        await queue.add(c.JOB_NAME, {"i": i, "ms": ms}, **options)

    try:
        result = await c.run_idle_async(args, probe, add)
    finally:
        await w.close()
        await running
        await queue.aclose()
        await conn.aclose()
    c.emit_result(result)


def main() -> None:
    args = c.parse_args()
    if args.role == "version":
        c.emit_result(
            {"version": importlib.metadata.version("echomq") + (" (uvloop)" if args.uvloop else "")}
        )
        return
    roles = {
        "enqueue": enqueue,
        "worker": worker,
        "latency": latency,
        "schedulers": schedulers,
        "idle": idle,
    }
    role = roles[args.role]
    c.run_main(lambda: role(args), args.uvloop)


if __name__ == "__main__":
    main()
