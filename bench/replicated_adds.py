#!/usr/bin/env python3
"""Acknowledged adds lost at a Sentinel failover, with ``wait_replicas=0`` and ``1``, and what
waiting for a replica costs per add.

    .venv/bin/python bench/replicated_adds.py [--rounds 5] [--producers 8] [--delays-ms 0,1]
                                              [--cost-adds 2000] [--repeats 3] [--output FILE]

It runs in the repository's ``.venv`` Python (echomq and redis-py importable) and starts its
own servers on free loopback ports, in a temporary directory: ``redis-server`` from ``$PATH``
or the one echomq's embedded server would use (``--redis-server`` to choose).

Loss. Each round builds a fresh Sentinel setup: one primary, one replica, three Sentinels
(quorum 2, ``down-after-milliseconds`` 1000), no persistence. ``--producers`` producers (asyncio
tasks of this process, on one ``Sentinel(...).master_for(...)`` client and one ``Queue``) add
jobs with unique custom ids as fast as they can; every add that returned is written down in
this process (the ledger). After a random ``--kill-after`` delay the primary gets SIGKILL; the
producers keep adding (errors are tried again) until the Sentinels have promoted the replica
and ``--after`` seconds more. Then every id of the ledger is looked up on the new primary:
those missing are acknowledged adds lost by the failover. Adds that raised
``ReplicationError`` are counted apart (the caller was told). Rounds alternate
``wait_replicas`` 0 and 1.

``--delays-ms`` lists the replication links to test. 0: the replica replicates from the
primary directly (loopback). D > 0: the replica's link goes through a relay (this script,
``--relay``, as its own process) that holds the stream D ms in each direction, as a replica
D ms away would be, while the producers stay next to the primary; the kill then takes the
relay down with the primary, so what the replica had not yet received is gone, as when the
primary's host or its network fails rather than its process alone. (The Sentinels'
``failover-timeout`` is 60 s so that they do not repoint the replica at the primary's own
address during a round.)

Cost. Per link, without Sentinels or kills: ``--cost-adds`` adds one at a time on one
``Queue`` (µs per add), and the same number split over ``--producers`` concurrent producers
(adds/s), with ``wait_replicas`` 0 and 1, ``--repeats`` times interleaved; figures are
medians. The client is a plain ``redis.asyncio.Redis`` (``wait_replicas=0`` uses the Queue's
pipelined connection, ``1`` a pooled connection held for the add and its ``WAIT``).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import platform
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SERVICE = "mymaster"
QUEUE = "replicated"
DOWN_AFTER_MS = 1000


# -- the relay: a replication link D ms long (runs as its own process) ------------------------


async def _relay_pipe(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float
) -> None:
    """Forward what ``reader`` gives to ``writer`` ``delay`` seconds later, in order."""
    loop = asyncio.get_running_loop()
    held: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def release() -> None:
        while True:
            due, data = await held.get()
            pause = due - loop.time()
            if pause > 0:
                await asyncio.sleep(pause)
            if not data:
                writer.close()
                return
            writer.write(data)
            await writer.drain()

    sender = asyncio.create_task(release())
    try:
        while True:
            data = await reader.read(65536)
            held.put_nowait((loop.time() + delay, data))
            if not data:
                break
        await sender
    except (ConnectionError, OSError):
        sender.cancel()
        writer.close()


async def _relay(listen: int, target: int, delay_ms: float) -> None:
    delay = delay_ms / 1000

    async def connected(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", target)
        await asyncio.gather(
            _relay_pipe(reader, up_writer, delay),
            _relay_pipe(up_reader, writer, delay),
            return_exceptions=True,
        )

    server = await asyncio.start_server(connected, "127.0.0.1", listen)
    async with server:
        await server.serve_forever()


if len(sys.argv) == 5 and sys.argv[1] == "--relay":
    asyncio.run(_relay(int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])))
    sys.exit(0)


import redis  # noqa: E402  (the relay above needs none of these)
import redis.asyncio  # noqa: E402
from redis.asyncio.sentinel import Sentinel  # noqa: E402

import echomq  # noqa: E402
from echomq.embedded import RedisServer, find_redis_server  # noqa: E402


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--rounds", type=int, default=5, help="failovers per wait_replicas and link")
    p.add_argument("--producers", type=int, default=8, help="concurrent producers (8)")
    p.add_argument("--delays-ms", default="0,1", help="replication link delays to test, ms (0,1)")
    p.add_argument(
        "--kill-after",
        type=float,
        nargs=2,
        default=(1.0, 3.0),
        metavar=("MIN", "MAX"),
        help="seconds of adding before the kill, uniform in [MIN, MAX] (1 3)",
    )
    p.add_argument("--after", type=float, default=0.5, help="seconds of adding after promotion")
    p.add_argument("--wait-timeout", type=float, default=1.0, help="wait_timeout of the adds")
    p.add_argument("--cost-adds", type=int, default=2000, help="adds per cost measurement")
    p.add_argument("--repeats", type=int, default=3, help="cost measurements per cell")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--redis-server", default=None, help="redis-server binary")
    p.add_argument("--output", default=None, help="write the results as JSON here")
    return p.parse_args()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_listening(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


class Setup:
    """A primary, its replica (directly, or through a relay of ``delay_ms``) and, if asked,
    three Sentinels."""

    def __init__(self, workdir: Path, binary: str, delay_ms: float, sentinels: bool) -> None:
        self.workdir, self.binary, self.delay_ms = workdir, binary, delay_ms
        self.with_sentinels = sentinels
        self.primary: RedisServer | None = None
        self.replica: RedisServer | None = None
        self.relay: subprocess.Popen[bytes] | None = None
        self.sentinels: list[tuple[str, int]] = []
        self._sentinel_procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> None:
        self.primary = RedisServer(
            executable=self.binary,
            data_dir=self.workdir / "primary",
            extra_args=["--repl-diskless-sync-delay", "0"],
        )
        self.primary.start()
        link = self.primary.port
        if self.delay_ms > 0:
            link = free_port()
            self.relay = subprocess.Popen(
                [sys.executable, __file__, "--relay", str(link), str(self.primary.port),
                 str(self.delay_ms)],
                stdin=subprocess.DEVNULL,
            )  # fmt: skip
            wait_listening(link)
        self.replica = RedisServer(
            executable=self.binary,
            data_dir=self.workdir / "replica",
            extra_args=["--replicaof", "127.0.0.1", str(link)],
        )
        self.replica.start()
        self._wait_synced()
        if self.with_sentinels:
            for i in range(3):
                self._start_sentinel(i)
            self._wait_sentinels()

    def _start_sentinel(self, i: int) -> None:
        assert self.primary is not None
        port = free_port()
        directory = self.workdir / f"sentinel-{i}"
        directory.mkdir(parents=True)
        config = directory / "sentinel.conf"
        config.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {directory}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary.port} 2\n"
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {SERVICE} 60000\n"
        )
        with open(directory / "sentinel.log", "wb") as log:
            self._sentinel_procs.append(
                subprocess.Popen(
                    [self.binary, str(config), "--sentinel"],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            )
        self.sentinels.append(("127.0.0.1", port))

    def _wait_synced(self) -> None:
        assert self.replica is not None
        client = redis.Redis(port=self.replica.port, decode_responses=True)
        try:
            deadline = time.monotonic() + 30
            while client.info("replication").get("master_link_status") != "up":
                if time.monotonic() > deadline:
                    raise RuntimeError("the replica did not sync")
                time.sleep(0.02)
        finally:
            client.close()

    def _wait_sentinels(self) -> None:
        deadline = time.monotonic() + 30
        for _, port in self.sentinels:
            wait_listening(port)
            client = redis.Redis(port=port, decode_responses=True)
            try:
                while True:
                    info = client.execute_command("SENTINEL", "MASTER", SERVICE)
                    if isinstance(info, list):
                        info = dict(zip(info[::2], info[1::2]))
                    if int(info["num-slaves"]) >= 1 and int(info["num-other-sentinels"]) >= 2:
                        break
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"sentinel {port} not ready: {info}")
                    time.sleep(0.05)
            finally:
                client.close()

    def kill_primary(self) -> None:
        """SIGKILL the primary, and the relay with it (what it held never arrives)."""
        assert self.primary is not None and self.primary.pid is not None
        os.kill(self.primary.pid, signal.SIGKILL)
        if self.relay is not None:
            self.relay.kill()

    async def wait_promoted(self, timeout: float = 30.0) -> None:
        """Until the Sentinels name the replica as the master."""
        assert self.replica is not None
        deadline = time.monotonic() + timeout
        host, port = self.sentinels[0]
        client = redis.asyncio.Redis(host=host, port=port, decode_responses=True)
        try:
            while True:
                addr = await client.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
                if addr and int(addr[1]) == self.replica.port:
                    return
                if time.monotonic() > deadline:
                    raise RuntimeError("no promotion")
                await asyncio.sleep(0.05)
        finally:
            await client.aclose()

    def stop(self) -> None:
        for process in self._sentinel_procs:
            process.kill()
            process.wait()
        if self.relay is not None:
            self.relay.kill()
            self.relay.wait()
        for server in (self.replica, self.primary):
            if server is not None:
                server.stop()


# -- loss ---------------------------------------------------------------------------------------


async def failover_round(
    opts: argparse.Namespace, workdir: Path, binary: str, delay_ms: float, wait: int, index: int,
    rng: random.Random,
) -> dict[str, Any]:  # fmt: skip
    setup = Setup(workdir, binary, delay_ms, sentinels=True)
    try:
        setup.start()
    except BaseException:
        setup.stop()
        raise
    sentinel = Sentinel(setup.sentinels, socket_timeout=1.0)
    client = sentinel.master_for(SERVICE, socket_timeout=3.0, socket_connect_timeout=0.5)
    queue = echomq.Queue(
        QUEUE, connection=client, wait_replicas=wait, wait_timeout=opts.wait_timeout
    )
    ledger: list[str] = []
    flagged: list[str] = []
    errors = collections.Counter[str]()
    stop = asyncio.Event()

    async def producer(p: int) -> None:
        seq = 0
        while not stop.is_set():
            job_id = f"r{index}-w{wait}-p{p}-{seq}"
            seq += 1
            try:
                await queue.add("job", {"p": p, "seq": seq}, job_id=job_id)
            except echomq.ReplicationError:
                flagged.append(job_id)
            except (echomq.EchoMQError, redis.exceptions.RedisError, OSError) as exc:
                errors[type(exc).__name__] += 1
                await asyncio.sleep(0.01)
            else:
                ledger.append(job_id)

    try:
        tasks = [asyncio.create_task(producer(p)) for p in range(opts.producers)]
        await asyncio.sleep(rng.uniform(*opts.kill_after))
        killed = time.monotonic()
        setup.kill_primary()
        await setup.wait_promoted()
        promoted = time.monotonic() - killed
        await asyncio.sleep(opts.after)
        stop.set()
        await asyncio.gather(*tasks)
        assert setup.replica is not None
        lost, flagged_lost = await missing(setup.replica.port, ledger, flagged)
    finally:
        await queue.aclose()
        await client.aclose()
        for connection in sentinel.sentinels:
            await connection.aclose()
        setup.stop()
    return {
        "delay_ms": delay_ms,
        "wait_replicas": wait,
        "round": index,
        "acknowledged": len(ledger),
        "lost": len(lost),
        "lost_ids": lost[:50],
        "flagged": len(flagged),
        "flagged_missing": len(flagged_lost),
        "errors": dict(errors),
        "promoted_after_s": round(promoted, 3),
    }


async def missing(port: int, acked: list[str], flagged: list[str]) -> tuple[list[str], list[str]]:
    """The ids of ``acked`` and of ``flagged`` whose job hash is not on the server."""
    client = redis.asyncio.Redis(port=port)
    prefix = f"bull:{QUEUE}:"
    try:
        found: list[list[str]] = []
        for ids in (acked, flagged):
            gone: list[str] = []
            for start in range(0, len(ids), 1000):
                chunk = ids[start : start + 1000]
                async with client.pipeline(transaction=False) as pipe:
                    for job_id in chunk:
                        pipe.exists(prefix + job_id)
                    replies = await pipe.execute()
                gone += [job_id for job_id, n in zip(chunk, replies) if not n]
            found.append(gone)
        return found[0], found[1]
    finally:
        await client.aclose()


# -- cost ---------------------------------------------------------------------------------------


async def cost_cell(port: int, wait: int, adds: int, producers: int, tag: str) -> dict[str, float]:
    client = redis.asyncio.Redis(port=port)
    try:
        async with echomq.Queue(f"cost-{tag}", connection=client, wait_replicas=wait) as queue:
            for _ in range(200):  # warm-up: scripts loaded, connections open
                await queue.add("warm", {})
            started = time.perf_counter()
            for i in range(adds):
                await queue.add("job", {"i": i})
            sequential = (time.perf_counter() - started) / adds * 1e6

            async def produce(count: int) -> None:
                for i in range(count):
                    await queue.add("job", {"i": i})

            started = time.perf_counter()
            await asyncio.gather(*(produce(adds // producers) for _ in range(producers)))
            concurrent = (adds // producers * producers) / (time.perf_counter() - started)
            await queue.obliterate(force=True)
    finally:
        await client.aclose()
    return {"us_per_add_sequential": sequential, "adds_per_s_concurrent": concurrent}


async def measure_cost(
    opts: argparse.Namespace, workdir: Path, binary: str, delay_ms: float
) -> dict[str, Any]:
    setup = Setup(workdir, binary, delay_ms, sentinels=False)
    cells: dict[int, list[dict[str, float]]] = {0: [], 1: []}
    try:
        setup.start()
        assert setup.primary is not None
        for repeat in range(opts.repeats):
            for wait in (0, 1) if repeat % 2 == 0 else (1, 0):
                cells[wait].append(
                    await cost_cell(
                        setup.primary.port, wait, opts.cost_adds, opts.producers,
                        f"{wait}-{repeat}",
                    )
                )  # fmt: skip
    finally:
        setup.stop()
    return {
        str(wait): {key: statistics.median(c[key] for c in runs) for key in runs[0]}
        for wait, runs in cells.items()
    }


# -- report -------------------------------------------------------------------------------------


def summarize(rounds: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for delay in sorted({r["delay_ms"] for r in rounds}):
        for wait in (0, 1):
            mine = [r for r in rounds if r["delay_ms"] == delay and r["wait_replicas"] == wait]
            if not mine:
                continue
            rows.append(
                {
                    "delay_ms": delay,
                    "wait_replicas": wait,
                    "failovers": len(mine),
                    "acknowledged": sum(r["acknowledged"] for r in mine),
                    "lost": sum(r["lost"] for r in mine),
                    "rounds_with_loss": sum(1 for r in mine if r["lost"]),
                    "max_lost_in_a_round": max(r["lost"] for r in mine),
                    "flagged": sum(r["flagged"] for r in mine),
                    "flagged_missing": sum(r["flagged_missing"] for r in mine),
                    "promoted_after_s_median": statistics.median(
                        r["promoted_after_s"] for r in mine
                    ),
                }
            )
    return rows


def render(data: dict[str, Any]) -> str:
    lines = [
        "Loss: acknowledged adds missing on the new primary after a SIGKILL failover",
        "",
        "| replication link | wait_replicas | failovers | acknowledged adds | lost | rounds "
        "with loss (max) | ReplicationError raised (missing) | promotion after kill (median) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in data["loss"]:
        link = "loopback" if row["delay_ms"] == 0 else f"{row['delay_ms']:g} ms each way"
        lines.append(
            f"| {link} | {row['wait_replicas']} | {row['failovers']} | "
            f"{row['acknowledged']:,} | {row['lost']} | {row['rounds_with_loss']} "
            f"({row['max_lost_in_a_round']}) | {row['flagged']} ({row['flagged_missing']}) | "
            f"{row['promoted_after_s_median']:.2f} s |"
        )
    lines += [
        "",
        "Cost: Queue.add, no failover (medians)",
        "",
        "| replication link | wait_replicas | µs per add, one at a time | adds/s, "
        f"{data['options']['producers']} producers |",
        "|---|---|---|---|",
    ]
    for delay, cells in data["cost"].items():
        link = "loopback" if float(delay) == 0 else f"{float(delay):g} ms each way"
        for wait, cell in cells.items():
            lines.append(
                f"| {link} | {wait} | {cell['us_per_add_sequential']:.0f} | "
                f"{cell['adds_per_s_concurrent']:,.0f} |"
            )
    return "\n".join(lines)


async def main() -> int:
    opts = parse_args()
    binary = opts.redis_server or shutil.which("redis-server") or find_redis_server()
    rng = random.Random(opts.seed)
    delays = [float(d) for d in opts.delays_ms.split(",") if d.strip()]
    workdir = Path(tempfile.mkdtemp(prefix="echomq-replicated-"))
    rounds: list[dict[str, Any]] = []
    cost: dict[str, Any] = {}
    try:
        for delay in delays:
            cost[f"{delay:g}"] = await measure_cost(
                opts, workdir / f"cost-{delay:g}", binary, delay
            )
            print(f"cost, link {delay:g} ms: {cost[f'{delay:g}']}", flush=True)
        for index in range(opts.rounds):
            for delay in delays:
                for wait in (0, 1) if index % 2 == 0 else (1, 0):
                    where = workdir / f"round-{index}-{delay:g}-{wait}"
                    row = await failover_round(opts, where, binary, delay, wait, index, rng)
                    rounds.append(row)
                    print(json.dumps(row), flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    version = subprocess.run(
        [binary, "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    data = {
        "options": vars(opts) | {"kill_after": list(opts.kill_after)},
        "machine": {
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "redis": version,
            "echomq": echomq.__version__,
            "redis_py": redis.__version__,
        },
        "loss": summarize(rounds),
        "rounds": rounds,
        "cost": cost,
    }
    print()
    print(render(data))
    if opts.output:
        Path(opts.output).write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
