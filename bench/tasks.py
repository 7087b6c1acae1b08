#!/usr/bin/env python3
"""Tasks: what ``@echomq.task`` costs over ``add`` + a processor, beside BullMQ for Node.

    .venv/bin/python bench/tasks.py [--jobs 10000] [--concurrency 1,50] [--repeats 3]
                                    [--no-node] [--src PATH]

Runs in the repository's ``.venv`` Python (echomq from ``--src`` when given; pydantic installed,
as with the ``echomq[pydantic]`` extra, so the task's arguments are validated on both sides).
Each measurement starts on an empty private ``redis-server`` (free loopback port, no
persistence). Every job carries two string arguments, ``{"to": ..., "name": ...}``.

- ``enqueue``: ``--jobs`` sequential enqueues, one awaited call at a time on one client:
  ``await echomq.add("bench", "send", {...}, connection=r)`` against
  ``await send.aenqueue(to, name=...)`` (binding and validation, then the same add), and
  BullMQ's ``queue.add`` (bench/node/bullmq_peer.mjs, role ``enqueue --mode seq``). Reported:
  µs per enqueue.
- ``run``: ``--jobs`` jobs added in bulk, then drained by one worker at each ``--concurrency``:
  ``Worker("bench", processor)`` reading ``job.data["to"]`` against
  ``Worker.for_tasks([send])`` (dispatch by name, validation, the call by keyword), and BullMQ's
  ``Worker`` (role ``worker``). Reported: jobs/s from the first processor start to the last.

Each figure is the median of ``--repeats`` runs; the three peers alternate within a repeat.
Node needs ``npm ci --prefix bench/node`` once (``--no-node`` leaves it out).
"""

from __future__ import annotations

import argparse
import sys


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--jobs", type=int, default=10_000)
    p.add_argument("--concurrency", default="1,50")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--no-node", action="store_true")
    p.add_argument("--src", help="an echomq src/ directory to import first")
    return p.parse_args()


OPTS = parse_args()
if OPTS.src:
    sys.path.insert(0, OPTS.src)

import asyncio  # noqa: E402
import json  # noqa: E402
import pathlib  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import AsyncIterator, Callable  # noqa: E402
from contextlib import asynccontextmanager  # noqa: E402

import redis.asyncio  # noqa: E402

import echomq  # noqa: E402

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from benchlib.redisproc import RedisServer  # noqa: E402

NODE_PEER = HERE / "node" / "bullmq_peer.mjs"


@echomq.task(queue="bench", name="send")
async def send(to: str, name: str = "there") -> None:
    return None


@asynccontextmanager
async def fresh_redis() -> AsyncIterator[tuple[str, redis.asyncio.Redis]]:
    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(pathlib.Path(tmp))
        server.start()
        client = redis.asyncio.Redis.from_url(server.url)
        try:
            yield server.url, client
        finally:
            await client.aclose()
            server.stop()


def data(i: int) -> dict[str, str]:
    return {"to": f"user{i}@example.com", "name": f"user {i}"}


async def enqueue_echomq(kind: str) -> float:
    """µs per sequential enqueue."""
    async with fresh_redis() as (_url, r):
        await echomq.add("bench", "send", data(-1), connection=r)  # loads the scripts
        await r.flushdb()
        task = send.using(connection=r)
        t0 = time.perf_counter()
        if kind == "add":
            for i in range(OPTS.jobs):
                await echomq.add("bench", "send", data(i), connection=r)
        else:
            for i in range(OPTS.jobs):
                await task.aenqueue(f"user{i}@example.com", name=f"user {i}")
        return (time.perf_counter() - t0) / OPTS.jobs * 1e6


async def run_echomq(kind: str, concurrency: int) -> float:
    """jobs/s, first processor start to the last."""
    async with fresh_redis() as (_url, r):
        for s in range(0, OPTS.jobs, 1000):
            await echomq.add_bulk(
                "bench",
                [("send", data(i)) for i in range(s, min(OPTS.jobs, s + 1000))],
                connection=r,
            )
        starts: list[float] = []
        done = asyncio.Event()

        def mark() -> None:
            starts.append(time.perf_counter())
            if len(starts) >= OPTS.jobs:
                done.set()

        if kind == "add":

            async def processor(job: echomq.Job) -> None:
                mark()
                assert job.data["to"]

            worker = echomq.Worker("bench", processor, connection=r, concurrency=concurrency)
        else:
            send_marked = echomq.task(queue="bench", name="send")(_marked(mark))
            worker = echomq.Worker.for_tasks([send_marked], connection=r, concurrency=concurrency)
        async with worker:
            await asyncio.wait_for(done.wait(), 600)
        return (len(starts) - 1) / (starts[-1] - starts[0])


def _marked(mark: Callable[[], None]) -> Callable[..., object]:
    async def send(to: str, name: str = "there") -> None:
        mark()

    return send


def node(role: str, url: str, *extra: str) -> dict[str, float]:
    """Run the Node peer in ``role`` and return its result. Its stdin stays open until the
    result came: a worker stops early when its stdin ends."""
    cmd = ["node", str(NODE_PEER), role, "--url", url, "--queue", "bench", "--n", str(OPTS.jobs)]
    proc = subprocess.Popen(
        [*cmd, *extra], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.stdout is not None and proc.stdin is not None
    result = None
    for raw in proc.stdout:
        line = raw.decode()
        if line.startswith("@@bench "):
            msg = json.loads(line[8:])
            if "result" in msg:
                result = msg["result"]
                break
    proc.stdin.close()
    err = proc.stderr.read() if proc.stderr is not None else b""
    proc.wait(timeout=60)
    if result is None:
        raise RuntimeError(f"node {role}: no result\n{err.decode()[-2000:]}")
    return result  # type: ignore[no-any-return]


async def enqueue_node() -> float:
    async with fresh_redis() as (url, _r):
        result = node("enqueue", url, "--mode", "seq")
        return result["seconds"] / OPTS.jobs * 1e6


async def run_node(concurrency: int) -> float:
    async with fresh_redis() as (url, _r):
        node("enqueue", url, "--mode", "bulk", "--batch", "1000")
        result = node("worker", url, "--concurrency", str(concurrency), "--timeout", "600")
        if result.get("missing_count"):
            raise RuntimeError(f"node worker missed {result['missing_count']} jobs")
        return (OPTS.jobs - 1) / ((result["last_ns"] - result["first_ns"]) / 1e9)


async def main() -> int:
    concurrencies = [int(c) for c in OPTS.concurrency.split(",")]
    peers = ["add", "task"] + ([] if OPTS.no_node else ["node"])
    enq: dict[str, list[float]] = {p: [] for p in peers}
    runs: dict[tuple[str, int], list[float]] = {(p, c): [] for p in peers for c in concurrencies}
    for rep in range(OPTS.repeats):
        order = peers if rep % 2 == 0 else peers[::-1]
        for p in order:
            enq[p].append(await (enqueue_node() if p == "node" else enqueue_echomq(p)))
        for c in concurrencies:
            for p in order:
                runs[p, c].append(await (run_node(c) if p == "node" else run_echomq(p, c)))
    label = {"add": "echomq add + processor", "task": "echomq task", "node": "BullMQ (Node)"}
    print(f"{OPTS.jobs} jobs, median of {OPTS.repeats}; Python {sys.version.split()[0]}")
    head = " | ".join(f"run c={c} (jobs/s)" for c in concurrencies)
    print(f"| Path | enqueue (µs/job) | {head} |")
    print("|---|---:|" + "---:|" * len(concurrencies))
    for p in peers:
        cells = " | ".join(f"{statistics.median(runs[p, c]):,.0f}" for c in concurrencies)
        print(f"| {label[p]} | {statistics.median(enq[p]):.1f} | {cells} |")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
