#!/usr/bin/env python3
"""Groups (issue 23): fairness, throughput and limits, each beside the ungrouped figures.

    python3 bench/groups.py [--workload fairness,throughput,limits] [--repeats 3]
                            [--concurrency 50] [--src PATH]

Runs in the repository's ``.venv`` Python (echomq from ``--src`` when given, so two checkouts
compare in one sitting). Each run starts its own ``redis-server`` (free loopback port, no
persistence) and one ``Worker`` in this process; every time below is taken by the processor
itself (the ledger is kept in this process, never read back from Redis).

- ``fairness``: one group with 20,000 jobs and 100 groups with 10 jobs each, added
  big-group-first (bulk adds of 1,000, then one bulk add of 10 per small group) while a worker
  at ``--concurrency`` runs them, each job sleeping 5 ms. Reported: the big group's drain time
  (first start to its last start) and the small groups' p50 / p99 / max wait (their add to
  their start); the same jobs without groups (today's behaviour: the small jobs queue behind
  the backlog) as the comparison. Target: the small groups' p99 wait under 5 % of the big
  group's drain time.
- ``throughput``: N jobs spread evenly over G groups (G = 10, 1,000 and 100,000; N = 20,000,
  or G when larger), drained by a processor that returns at once; jobs/s (first start to the
  last completion) and Redis CPU µs per job (``INFO cpu``), beside the same jobs ungrouped.
  Targets at 1,000 groups: ≥ 0.8× the ungrouped rate, Redis CPU ≤ 1.3×.
- ``instructions``: the ``throughput`` drain at 1,000 groups (``--groups``) and ungrouped, with
  ``redis-server`` run under ``valgrind --tool=callgrind``: the instructions Redis executes per
  job between the first start and the last completion. Unlike ``INFO cpu`` it does not move
  with the machine's load (which makes the CPU ratio of two runs differ by 30 %), so it shows
  what a change to the scripts costs; it leaves out the kernel's share (the sockets), which is
  the same for both. Needs ``valgrind`` (``apt-get install valgrind``); Redis runs about 50x
  slower under it, so a run takes a few minutes.
- ``commands``: what one command costs Redis when a script calls it, the commands a grouped
  job adds: a Lua loop calls each 20,000 times over 1,000 keys of 25 members (a group's waiting
  jobs, its counter; the index of 1,000 groups), with ``redis-server`` under callgrind;
  reported as instructions per call beyond the loop's own. Needs ``valgrind``.
- ``limits``: 20 groups of 40 jobs (30 ms each) under a group concurrency of 2, at
  ``--concurrency``: the most jobs of one group seen running at once (must be exactly 2); then
  5 groups of 30 jobs under a group rate limit of 10 per second: the most starts of one group
  in any 1 s window, as the limiter counts them (``processedOn``, when the fetch took the job:
  must be at most 10), the most completions in any 1 s window (the processors' own clock; must
  be at most 10: a start's slot frees a window after its job ends), and the elapsed time.
"""

from __future__ import annotations

import argparse
import sys


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--workload", default="fairness,throughput,limits", help="or instructions, commands"
    )
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=50)
    p.add_argument("--groups", default="10,1000,100000", help="throughput group counts")
    p.add_argument("--src", help="an echomq src/ directory to import first")
    p.add_argument(
        "--pin",
        action="store_true",
        help="run redis-server on the second core and this process on the first (Linux)",
    )
    return p.parse_args()


OPTS = parse_args()
if OPTS.src:
    sys.path.insert(0, OPTS.src)

import asyncio  # noqa: E402
import bisect  # noqa: E402
import glob  # noqa: E402
import os  # noqa: E402
import pathlib  # noqa: E402
import shutil  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import AsyncIterator, Callable  # noqa: E402
from contextlib import asynccontextmanager  # noqa: E402
from typing import Any  # noqa: E402

import redis.asyncio  # noqa: E402

import echomq  # noqa: E402
from echomq.embedded import RedisServer, find_redis_server  # noqa: E402

QUEUE = "groups-bench"
Items = list[tuple[str, Any, dict[str, Any]]]


@asynccontextmanager
async def fresh_redis() -> AsyncIterator[redis.asyncio.Redis]:
    server = RedisServer(
        executable=find_redis_server(),
        data_dir=pathlib.Path(tempfile.mkdtemp(prefix="echomq-groups-")),
        appendonly=False,
    )
    server.start()
    if OPTS.pin and server.pid is not None:
        os.sched_setaffinity(server.pid, {1})
        os.sched_setaffinity(0, {0})
    client = redis.asyncio.Redis.from_url(server.url)
    try:
        yield client
    finally:
        await client.aclose()
        server.stop()


async def add_all(
    client: redis.asyncio.Redis, items: list[tuple[str, Any, dict[str, Any]]]
) -> None:
    queue = echomq.Queue(QUEUE, connection=client)
    for start in range(0, len(items), 1000):
        await queue.add_bulk(items[start : start + 1000])


async def redis_cpu(client: redis.asyncio.Redis) -> float:
    info = await client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def drain(
    client: redis.asyncio.Redis,
    total: int,
    process: Callable[[echomq.Job], Any],
    done: asyncio.Event,
) -> None:
    worker = echomq.Worker(
        QUEUE, process, connection=client, concurrency=OPTS.concurrency, drain_delay=0.2
    )
    async with worker:
        await done.wait()
        while await client.zcard(f"bull:{QUEUE}:completed") < total:
            await asyncio.sleep(0.002)


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- fairness ---------------------------------------------------------------------------------


async def fairness_once(grouped: bool) -> dict[str, float]:
    big, small_groups, small_each = 20_000, 100, 10
    total = big + small_groups * small_each
    big_starts: list[float] = []
    small_waits: list[float] = []
    done = asyncio.Event()
    seen = 0

    async def process(job: echomq.Job) -> None:
        nonlocal seen
        now = time.time()
        if job.name == "big":
            big_starts.append(now)
        else:
            small_waits.append(now - job.timestamp.timestamp())
        seen += 1
        if seen == total:
            done.set()
        await asyncio.sleep(0.005)

    async with fresh_redis() as client:
        worker = echomq.Worker(
            QUEUE, process, connection=client, concurrency=OPTS.concurrency, drain_delay=0.2
        )
        async with worker:  # running while the jobs arrive, big group first
            await add_all(client, [("big", {}, {"group": "big"} if grouped else {})] * big)
            queue = echomq.Queue(QUEUE, connection=client)
            for g in range(small_groups):  # each tenant enqueues its own jobs
                await queue.add_bulk(
                    [("small", {}, {"group": f"s{g}"} if grouped else {})] * small_each
                )
            await done.wait()
    drain_time = max(big_starts) - min(big_starts)
    return {
        "big drain s": drain_time,
        "small p50 wait s": pct(small_waits, 0.50),
        "small p99 wait s": pct(small_waits, 0.99),
        "small max wait s": max(small_waits),
        "p99 / drain %": 100 * pct(small_waits, 0.99) / drain_time,
    }


# -- throughput -------------------------------------------------------------------------------


async def throughput_once(groups: int) -> dict[str, float]:
    total = max(20_000, groups)
    items: list[tuple[str, Any, dict[str, Any]]] = [
        ("j", {}, {"group": f"g{i % groups}"} if groups else {}) for i in range(total)
    ]
    done = asyncio.Event()
    seen = 0
    first: float | None = None

    async def process(job: echomq.Job) -> int:
        nonlocal seen, first
        if first is None:
            first = time.perf_counter()
        seen += 1
        if seen == total:
            done.set()
        return 1

    async with fresh_redis() as client:
        await add_all(client, items)
        await client.config_resetstat()
        cpu0 = await redis_cpu(client)
        await drain(client, total, process, done)
        last = time.perf_counter()
        cpu1 = await redis_cpu(client)
    assert first is not None
    return {"jobs/s": total / (last - first), "Redis CPU us/job": (cpu1 - cpu0) * 1e6 / total}


# -- instructions -----------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


class Callgrind:
    """A ``redis-server`` run under callgrind (``async with``), and ``client``, a client of it.
    :meth:`start` starts the count; on leaving, the count is dumped, the server stopped, and
    ``counted`` holds the instructions Redis executed since the start."""

    def __init__(self) -> None:
        self.port = free_port()
        self.out = pathlib.Path(tempfile.mkdtemp(prefix="echomq-callgrind-")) / "callgrind.out"
        self.client = redis.asyncio.Redis(port=self.port)
        self.counted = 0
        self.server: subprocess.Popen[bytes] | None = None

    def _control(self, flag: str) -> None:
        assert self.server is not None
        subprocess.run(
            ["callgrind_control", flag, str(self.server.pid)], check=True, capture_output=True
        )

    def start(self) -> None:
        self._control("-z")

    async def __aenter__(self) -> Callgrind:
        self.server = subprocess.Popen(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={self.out}"]
            + [find_redis_server(), "--port", str(self.port), "--bind", "127.0.0.1"]
            + ["--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(600):
            try:
                await self.client.ping()
                break
            except redis.exceptions.ConnectionError:
                await asyncio.sleep(0.1)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        try:
            if exc[0] is None:
                self._control("-d")
        finally:
            await self.client.aclose()
            self.server.terminate()
            self.server.wait()
        dumps = sorted(glob.glob(f"{self.out}.*"))  # the dump taken on leaving
        for line in pathlib.Path(dumps[0]).read_text().splitlines() if dumps else ():
            if line.startswith(("summary:", "totals:")):
                self.counted = max(self.counted, int(line.split()[1]))
        shutil.rmtree(self.out.parent)


async def instructions_once(groups: int) -> dict[str, float]:
    """The drain of ``throughput_once`` with Redis under callgrind: instructions per job."""
    total = 20_000
    items: list[tuple[str, Any, dict[str, Any]]] = [
        ("j", {}, {"group": f"g{i % groups}"} if groups else {}) for i in range(total)
    ]
    async with Callgrind() as redis_server:
        await add_all(redis_server.client, items)
        done = asyncio.Event()
        seen = 0

        async def process(job: echomq.Job) -> int:
            nonlocal seen
            seen += 1
            if seen == total:
                done.set()
            return 1

        redis_server.start()
        await drain(redis_server.client, total, process, done)
    return {"Redis instructions/job": redis_server.counted / total}


# -- commands ---------------------------------------------------------------------------------

#: Each command as a script calls it inside the loop of ``commands_once`` (``W``/``L``/``R``:
#: the 1,000 group ZSETs, LISTs and counters; ``G``: the index's members; ``n``: which one).
COMMANDS = {
    "ZPOPMIN group ZSET": 'redis.call("ZPOPMIN", W[n])',
    "LPOP group LIST": 'redis.call("LPOP", L[n])',
    "RPOPLPUSH rotation": 'redis.call("RPOPLPUSH", "ready", "ready")',
    "INCRBY counter": 'redis.call("INCRBY", R[n], "2")',
    "ZINCRBY index": 'tonumber(redis.call("ZINCRBY", "index", "-1", G[n]))',
    "EXISTS": 'redis.call("EXISTS", W[n])',
}

COMMANDS_SETUP = """
for g = 1, 1000 do
  for j = 1, 25 do
    redis.call("ZADD", "w:" .. g, 2147483648 + j, "id" .. j)
    redis.call("RPUSH", "l:" .. g, "id" .. j)
  end
  redis.call("SET", "r:" .. g, "100")
  redis.call("ZADD", "index", 25, "g" .. g)
end
redis.call("RPUSH", "ready", "a", "b", "c")
"""

COMMANDS_LOOP = """
local W, L, R, G = {}, {}, {}, {}
for j = 1, 1000 do
  W[j] = "w:" .. j; L[j] = "l:" .. j; R[j] = "r:" .. j; G[j] = "g" .. j
end
for i = 1, 20000 do
  local n = i % 1000 + 1
  BODY
end
"""


async def commands_once(body: str) -> float:
    """Instructions Redis executes for 20,000 iterations of a loop running ``body``."""
    async with Callgrind() as redis_server:
        await redis_server.client.eval(COMMANDS_SETUP, 0)
        redis_server.start()
        await redis_server.client.eval(COMMANDS_LOOP.replace("BODY", body), 0)
    return redis_server.counted / 20_000


# -- limits -----------------------------------------------------------------------------------


async def limits_once() -> dict[str, float]:
    running: Counter[str] = Counter()
    most: Counter[str] = Counter()
    ends: dict[str, list[float]] = {}
    starts: dict[str, list[float]] = {}
    done = asyncio.Event()
    seen = 0
    total = 0

    async def process(job: echomq.Job) -> None:
        nonlocal seen
        group = str(job.options.group)
        if job.processed_on is not None:  # when the fetch took it: the limiter's clock
            starts.setdefault(group, []).append(job.processed_on.timestamp())
        running[group] += 1
        most[group] = max(most[group], running[group])
        try:
            await asyncio.sleep(0.03 if job.name == "c" else 0.0)
        finally:
            running[group] -= 1
            ends.setdefault(group, []).append(time.monotonic())
            seen += 1
            if seen == total:
                done.set()

    async with fresh_redis() as client:
        queue = echomq.Queue(QUEUE, connection=client)
        await queue.set_group_concurrency(2)
        items: Items = [("c", {}, {"group": f"c{g}"}) for g in range(20) for _ in range(40)]
        total = len(items)
        await add_all(client, items)
        await drain(client, total, process, done)
        concurrency_most = max(most.values())

        await queue.remove_group_concurrency()
        await queue.set_group_rate_limit(10, 1.0)
        ends.clear()
        starts.clear()
        done.clear()
        seen = 0
        items = [("r", {}, {"group": f"r{g}"}) for g in range(5) for _ in range(30)]
        total = len(items)
        started = time.monotonic()
        await add_all(client, items)
        await drain(client, 800 + total, process, done)
        elapsed = time.monotonic() - started
    return {
        "most running per group (limit 2)": float(concurrency_most),
        "most starts per group in 1 s (limit 10)": float(most_in_a_second(starts)),
        "most ends per group in 1 s": float(most_in_a_second(ends)),
        "rate-limited run s": elapsed,
    }


def most_in_a_second(times_by_group: dict[str, list[float]]) -> int:
    """The most entries of one group in any half-open interval of 1 s."""
    most = 0
    for times in times_by_group.values():
        times.sort()
        for i, t in enumerate(times):
            most = max(most, bisect.bisect_left(times, t + 1.0 - 1e-6) - i)
    return most


# -- report -----------------------------------------------------------------------------------


def show(label: str, runs: list[dict[str, float]]) -> dict[str, float]:
    for n, run in enumerate(runs, 1):
        print(f"  {label} repeat {n}: " + "  ".join(f"{k} {v:,.3f}" for k, v in run.items()))
    medians = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    low = {k: min(r[k] for r in runs) for k in runs[0]}
    high = {k: max(r[k] for r in runs) for k in runs[0]}
    print(
        f"  {label} median: "
        + "  ".join(f"{k} {medians[k]:,.3f} ({low[k]:,.3f}-{high[k]:,.3f})" for k in medians),
        flush=True,
    )
    return medians


def main() -> int:
    workloads = OPTS.workload.split(",")
    print(f"echomq from {pathlib.Path(echomq.__file__).parent}, concurrency {OPTS.concurrency}")
    if "fairness" in workloads:
        print("fairness")
        runs: dict[bool, list[dict[str, float]]] = {True: [], False: []}
        for _ in range(OPTS.repeats):  # alternating, so drift hits both alike
            for grouped in (True, False):
                runs[grouped].append(asyncio.run(fairness_once(grouped)))
        show("grouped", runs[True])
        show("ungrouped", runs[False])
    if "throughput" in workloads:
        print("throughput")
        counts = [int(c) for c in OPTS.groups.split(",")]
        by: dict[int, list[dict[str, float]]] = {c: [] for c in [0, *counts]}
        ratios: dict[int, list[tuple[float, float]]] = {c: [] for c in counts}
        for _ in range(OPTS.repeats):
            base = asyncio.run(throughput_once(0))
            by[0].append(base)
            for c in counts:
                run = asyncio.run(throughput_once(c))
                by[c].append(run)
                ratios[c].append(
                    (
                        run["jobs/s"] / base["jobs/s"],
                        run["Redis CPU us/job"] / base["Redis CPU us/job"],
                    )
                )
        show("ungrouped", by[0])
        for c in counts:
            show(f"{c} groups", by[c])
            rate = statistics.median(r for r, _ in ratios[c])
            cpu = statistics.median(c2 for _, c2 in ratios[c])
            print(
                f"  {c} groups vs ungrouped (same repeat): jobs/s {rate:.2f}x, Redis CPU {cpu:.2f}x"
            )
    if "instructions" in workloads:
        print("instructions (Redis under callgrind)")
        if shutil.which("valgrind") is None:
            print("  valgrind is not installed: apt-get install valgrind", file=sys.stderr)
            return 1
        base_ir = show("ungrouped", [asyncio.run(instructions_once(0))])
        for c in [int(c) for c in OPTS.groups.split(",")]:
            run = show(f"{c} groups", [asyncio.run(instructions_once(c))])
            ratio = run["Redis instructions/job"] / base_ir["Redis instructions/job"]
            print(f"  {c} groups vs ungrouped: Redis instructions {ratio:.2f}x")
    if "commands" in workloads:
        print("commands (Redis under callgrind): instructions per call from a script")
        if shutil.which("valgrind") is None:
            print("  valgrind is not installed: apt-get install valgrind", file=sys.stderr)
            return 1
        loop = asyncio.run(commands_once("local x = W[n]"))
        for name, body in COMMANDS.items():
            cost = asyncio.run(commands_once(f"local x = {body}")) - loop
            print(f"  {name}: {cost:,.0f}")
    if "limits" in workloads:
        print("limits")
        show("limits", [asyncio.run(limits_once()) for _ in range(OPTS.repeats)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
