"""The producers phase: adds from many concurrent producers (bench/run.py; bench/producers.py).

On a flushed Redis, for each count P of ``--producers`` (10 and 200 by default), one adapter
process makes ``--adds`` adds (20 000; job ``noop``, data ``{"i": I}``) from P concurrent
producers (coroutines, or Node async functions) sharing one queue object (``enqueue --mode
concurrent``, bench/peers/_common.py), after one unmeasured warm-up add. BullMQ for Node runs
twice: as is (ioredis without auto-pipelining, its default) and with ioredis
``enableAutoPipelining`` (the row ``bullmq-node+ap``).

Figures: adds/s = adds / the timed part's wall time (in the adapter); producer CPU µs/add
(getrusage / ``process.cpuUsage`` over the timed part); Redis CPU µs/add and commands/add
(``INFO`` deltas around the adapter process); script µs/add (``INFO commandstats``).

Verification: afterwards Redis holds exactly ``--adds`` jobs ready to run, counted where each
library keeps them (:data:`READY`). A library without an asyncio producer answers
``unsupported`` (recorded as ``skipped``); an adapter that fails (e.g. a connection pool
refusing the 201st connection) is recorded as an ``error`` cell, a result too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .peers import AdapterError, Peer, run_once
from .phases import VerificationError
from .redisproc import RedisServer

QUEUE = "producers"
#: Node's second form: ioredis with auto-pipelining (the report's ``bullmq-node+ap`` row).
NODE_VARIANTS: dict[str, tuple[str, ...]] = {"": (), "ap": ("--auto-pipelining", "1")}


def _ready_command(peer: Peer, queue: str) -> tuple[str, str]:
    """The command that counts the jobs ready to run in ``queue`` (each library's layout)."""
    if peer.name == "arq":
        return ("ZCARD", queue)  # arq's queue is a sorted set named after the queue
    if peer.name == "saq":
        return ("LLEN", f"saq:{queue}:queued")
    if peer.name == "taskiq":
        return ("XLEN", queue)  # taskiq-redis's RedisStreamBroker: a stream named after it
    return ("LLEN", f"bull:{queue}:wait")  # BullMQ for Node, echomq, BullMQ for Python


def _script_usec(redis: RedisServer) -> float:
    """Microseconds Redis has spent running scripts so far (``INFO commandstats``)."""
    stats = redis.commandstats()
    return sum(s["usec"] for k, s in stats.items() if k in ("evalsha", "eval"))


def _last_error(log: Path) -> str:
    """The last line of ``log`` that names an exception (what a failed adapter raised)."""
    lines = log.read_text(errors="replace").splitlines()
    for line in reversed(lines):
        if "Error:" in line or "Exception:" in line:
            return line.strip()
    return ""


def cell(
    peer: Peer,
    redis: RedisServer,
    n: int,
    producers: int,
    extra: tuple[str, ...],
    log: Path,
    queue: str = QUEUE,
) -> dict[str, Any]:
    """One adapter process making the adds; measured from outside for Redis's share."""
    redis.flushall()
    base = ["--url", redis.url, "--queue", queue, "--n", str(n), "--mode", "concurrent"]
    args = [*base, "--producers", str(producers), *extra]
    before, scripts0 = redis.snapshot(), _script_usec(redis)
    try:
        msg = run_once(peer, "enqueue", args, log, max(600.0, n / 20))
    except AdapterError as exc:  # e.g. a pool refusing the 101st connection: a result too
        return {"error": _last_error(log) or str(exc)}
    after, scripts1 = redis.snapshot(), _script_usec(redis)
    if "unsupported" in msg:
        return {"skipped": msg["unsupported"]}
    assert redis.client is not None
    command = _ready_command(peer, queue)
    ready = redis.client.call(*command)
    if ready != n:
        raise VerificationError(
            f"VERIFICATION FAILED for {peer.name} (producers P={producers}): "
            f"{' '.join(command)} = {ready}, expected {n}"
        )
    res = msg["result"]
    return {
        "rate": n / res["seconds"],
        "seconds": res["seconds"],
        "producer_cpu_us_per_add": res["cpu_s"] * 1e6 / n,
        "redis_cpu_us_per_add": (after["cpu_s"] - before["cpu_s"]) * 1e6 / n,
        "script_us_per_add": (scripts1 - scripts0) / n,
        "redis_cmds_per_add": (after["commands"] - before["commands"]) / n,
    }


def producers(
    peer: Peer, redis: RedisServer, n: int, counts: list[int], log: Path
) -> dict[str, Any]:
    """The producers phase for one peer and repeat: ``{"p10": cell, "p200": cell}`` (Node:
    also ``"ap": {...}``), or ``{"skipped": why}``."""
    variants = NODE_VARIANTS if peer.kind == "node" else {"": ()}
    out: dict[str, Any] = {}
    for name, extra in variants.items():
        into = out.setdefault(name, {}) if name else out
        for count in counts:
            res = cell(peer, redis, n, count, extra, log)
            if "skipped" in res:
                redis.flushall()
                return {"skipped": res["skipped"]}
            into[f"p{count}"] = res
    redis.flushall()
    return out
