"""The measured phases of one repeat for one peer, and the verification of every run.

One repeat on a flushed Redis:

1. ``enqueue --mode seq`` N jobs (one awaited ``add`` after another) -> sequential rate;
   then one worker at concurrency 1 drains those N jobs -> drain rate c=1.
2. Flush; ``enqueue --mode bulk`` N jobs in batches (falls back to seq to prefill when the
   library has no bulk API) -> bulk rate; one worker at concurrency 50 drains them.
3. Flush; an idle worker at concurrency 1 and a producer sending one job at a time
   -> enqueue->processor-start and enqueue->result-seen latencies.
4. Flows (only peers with a flow API): see ``benchlib/flows.py``.

``--phases`` picks a subset of ``seq`` (1), ``bulk`` (2), ``latency`` (3) and ``flow`` (4).

Drain rate = (N - 1) / (last processor start - first processor start): it excludes the
worker's process start-up and connection set-up. Redis CPU and command counts are
``INFO`` deltas taken before the worker process is launched and after it exits (so they
include its few start-up and shutdown commands). Client CPU is the worker's own
``getrusage`` (or ``process.cpuUsage()``) delta from "ready" to "all N jobs ran".
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from .peers import Adapter, AdapterError, Peer, run_once
from .redisproc import RedisServer


class VerificationError(RuntimeError):
    """A job did not run exactly once."""


def check_worker(
    peer: Peer, what: str, res: dict[str, Any], expected: list[int] | None = None
) -> None:
    """Fail loudly unless every expected job ran exactly once."""
    problems = []
    if expected is None:
        if res["missing_count"]:
            problems.append(f"{res['missing_count']} jobs never ran (e.g. i={res['missing']})")
        if res["distinct"] != res["expected"]:
            problems.append(f"{res['distinct']} distinct jobs ran, expected {res['expected']}")
        if res["executions"] != res["expected"]:
            problems.append(f"{res['executions']} executions for {res['expected']} jobs")
    else:
        starts = res.get("starts", {})
        lost = [i for i in expected if str(i) not in starts]
        if lost:
            problems.append(f"{len(lost)} sampled jobs never ran (e.g. i={lost[:10]})")
        if res["executions"] != len(expected):
            problems.append(f"{res['executions']} executions for {len(expected)} sampled jobs")
    if res["duplicate_count"]:
        problems.append(
            f"{res['duplicate_count']} duplicate executions (e.g. i={res['duplicates']})"
        )
    if res.get("unexpected"):
        problems.append(f"unexpected i values ran: {res['unexpected']}")
    if problems:
        raise VerificationError(
            f"VERIFICATION FAILED for {peer.name} ({what}): " + "; ".join(problems)
        )


def start_worker(peer: Peer, args: list[str], log: Path) -> tuple[Adapter | None, str]:
    """A worker process that has reported ``ready``, or (None, why) when it answered
    ``unsupported``."""
    a = Adapter(peer, "worker", args, log)
    msg = a.next_message(60)
    if "unsupported" in msg:
        a.wait()
        return None, msg["unsupported"]
    if not msg.get("ready"):
        a.kill()
        raise AdapterError(f"{peer.name}: expected ready, got {msg}")
    return a, ""


def _base_args(url: str, qname: str, n: int) -> list[str]:
    return ["--url", url, "--queue", qname, "--n", str(n)]


def enqueue(
    peer: Peer,
    redis: RedisServer,
    qname: str,
    n: int,
    mode: str,
    batch: int,
    log: Path,
    timeout: float,
) -> dict[str, Any] | None:
    before = redis.snapshot()
    msg = run_once(
        peer,
        "enqueue",
        [*_base_args(redis.url, qname, n), "--mode", mode, "--batch", str(batch)],
        log,
        timeout,
    )
    after = redis.snapshot()
    if "unsupported" in msg:
        return None
    res = msg["result"]
    return {
        "rate": n / res["seconds"],
        "seconds": res["seconds"],
        "redis_cmds_per_job": (after["commands"] - before["commands"]) / n,
        "redis_cpu_us_per_job": (after["cpu_s"] - before["cpu_s"]) * 1e6 / n,
    }


def drain(
    peer: Peer, redis: RedisServer, qname: str, n: int, concurrency: int, log: Path, timeout: float
) -> dict[str, Any] | None:
    before = redis.snapshot()
    args = [*_base_args(redis.url, qname, n), "--concurrency", str(concurrency)]
    a, _why = start_worker(peer, [*args, "--timeout", str(timeout)], log)
    if a is None:
        return None
    msg = a.next_message(timeout + 30)
    a.wait(timeout=60)
    after = redis.snapshot()
    res = msg["result"]
    check_worker(peer, f"drain c={concurrency}", res)
    span = (res["last_ns"] - res["first_ns"]) / 1e9
    return {
        "rate": (n - 1) / span if span > 0 else None,
        "first_to_last_s": span,
        "ready_to_last_s": (res["last_ns"] - res["ready_ns"]) / 1e9,
        "client_cpu_us_per_job": res["cpu_s"] * 1e6 / n,
        "redis_cmds_per_job": (after["commands"] - before["commands"]) / n,
        "redis_cpu_us_per_job": (after["cpu_s"] - before["cpu_s"]) * 1e6 / n,
    }


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    k = min(len(s) - 1, max(0, round(q * (len(s) - 1))))
    return s[k]


def latency(
    peer: Peer, redis: RedisServer, qname: str, samples: int, budget: float, log: Path
) -> dict[str, Any]:
    w = Adapter(
        peer,
        "worker",
        [
            *_base_args(redis.url, qname, samples),
            "--concurrency",
            "1",
            "--latency",
            "--timeout",
            str(budget + 120),
        ],
        log,
    )
    msg = w.next_message(60)
    if not msg.get("ready"):
        w.kill()
        raise RuntimeError(f"{peer.name}: latency worker not ready: {msg}")
    time.sleep(1.0)  # let the worker settle into its idle wait
    try:
        prod = run_once(
            peer,
            "latency",
            [*_base_args(redis.url, qname, samples), "--budget", str(budget)],
            log,
            budget + 60,
        )
    finally:
        w.close_stdin()
    wres = w.next_message(60)["result"]
    w.wait(timeout=60)
    rows = prod["result"]["samples"]
    check_worker(peer, "latency", wres, [r[0] for r in rows])
    starts = wres["starts"]
    to_start = [(starts[str(i)] - t0) / 1e6 for i, t0, _ in rows]
    to_result = [(t1 - t0) / 1e6 for _, t0, t1 in rows if t1 is not None]
    return {
        "samples": len(rows),
        "results_seen": len(to_result),
        "start_p50_ms": _pct(to_start, 0.50),
        "start_p99_ms": _pct(to_start, 0.99),
        "result_p50_ms": _pct(to_result, 0.50) if len(to_result) == len(rows) else None,
        "result_p99_ms": _pct(to_result, 0.99) if len(to_result) == len(rows) else None,
    }


PHASES = ("seq", "bulk", "latency", "flow")  # flow: see benchlib/flows.py
#: Phases run only when --phases names them (scheduler: benchlib/schedulers.py, ~35 s a peer;
#: failing, producers, lateness: benchlib/failing.py, producers.py, lateness.py).
EXTRA_PHASES = ("scheduler", "failing", "producers", "lateness")


def one_repeat(
    peer: Peer, redis: RedisServer, n: int, opts: Any, log: Path, phases: set[str] | None = None
) -> dict[str, Any]:
    """The seq, bulk and latency phases of one repeat (those in ``phases``; all by default);
    returns the flat metrics of this repeat. The flow phase is run by ``flows.flow``."""
    phases = set(PHASES) if phases is None else phases
    t_enq = max(120.0, n / 20)
    t_drain = max(120.0, n / 5)  # rq forks per job: ~30 jobs/s
    out: dict[str, Any] = {}
    if "seq" in phases:
        redis.flushall()
        seq = enqueue(peer, redis, "bench-c1", n, "seq", opts.batch, log, t_enq)
        assert seq is not None, "every adapter supports sequential enqueue"
        out["enqueue_seq"] = seq
        out["drain_c1"] = drain(peer, redis, "bench-c1", n, 1, log, t_drain)
    if "bulk" in phases:
        redis.flushall()
        bulk = enqueue(peer, redis, "bench-c50", n, "bulk", opts.batch, log, t_enq)
        out["enqueue_bulk"] = bulk
        if bulk is None:
            enqueue(peer, redis, "bench-c50", n, "seq", opts.batch, log, t_enq)  # prefill
        out["drain_c50"] = drain(peer, redis, "bench-c50", n, 50, log, t_drain)
    redis.flushall()
    if "latency" in phases and opts.latency_samples > 0:
        out["latency"] = latency(
            peer, redis, "bench-lat", opts.latency_samples, opts.latency_budget, log
        )
    redis.flushall()
    return out
