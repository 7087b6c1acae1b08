"""The failing phase: jobs that fail once, then succeed (bench/run.py; bench/failing_jobs.py).

On a flushed Redis, for each concurrency of ``--failing-concurrency`` (50 by default):

1. N jobs are added with 2 attempts and no backoff (``enqueue --mode bulk --attempts 2``, or
   ``--mode seq`` for a library without bulk adds; untimed);
2. one worker process at that concurrency with ``--fail-once``: its processor raises on each
   job's first attempt and returns on its second, through the library's own retry mechanism
   (see bench/peers/_common.py for each library's form).

jobs/s = (N - 1) / (the first attempt's start -> the last job's successful start), in the
worker; worker CPU µs/job (from "ready" to the last job done), Redis CPU µs/job and Redis
commands/job (``INFO`` deltas around the worker process, as in the drain phase), and the
script calls and script µs per job (``INFO commandstats``: ``evalsha`` + ``eval``).

Verification (a :class:`~benchlib.phases.VerificationError` otherwise): every job ran exactly
twice, one failed attempt and one successful run: N successful runs of N distinct jobs, none
missing or run twice, and N failed attempts of N distinct jobs.

A peer whose library cannot express the workload (no retries, or no worker at that
concurrency) answers ``unsupported``; the phase records the reason as ``skipped``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .peers import Peer, run_once
from .phases import VerificationError, start_worker
from .redisproc import RedisServer

ATTEMPTS = 2
QUEUE = "bench-failing"


def add_jobs(
    peer: Peer, redis: RedisServer, queue: str, n: int, batch: int, log: Path
) -> dict[str, Any]:
    """Add ``n`` jobs with ``ATTEMPTS`` attempts, in bulk where the library can (else one by
    one); the adapter's answer (a ``result`` or ``unsupported``)."""
    base = ["--url", redis.url, "--queue", queue, "--n", str(n), "--attempts", str(ATTEMPTS)]
    timeout = max(120.0, n / 20)
    msg = run_once(peer, "enqueue", [*base, "--mode", "bulk", "--batch", str(batch)], log, timeout)
    if "unsupported" in msg:
        msg = run_once(peer, "enqueue", [*base, "--mode", "seq"], log, timeout)
    return msg


def _scripts(redis: RedisServer) -> tuple[float, float]:
    stats = redis.commandstats()
    calls = sum(s["calls"] for k, s in stats.items() if k in ("evalsha", "eval"))
    usec = sum(s["usec"] for k, s in stats.items() if k in ("evalsha", "eval"))
    return calls, usec


def check(peer: Peer, what: str, res: dict[str, Any], n: int, fail_once: bool) -> None:
    """Every job completed once, and (with ``fail_once``) failed once before that."""
    problems = []
    if res["distinct"] != n or res["executions"] != n or res["missing_count"]:
        problems.append(
            f"{res['executions']} successful runs of {res['distinct']} jobs, expected {n} "
            f"(missing {res['missing_count']}, e.g. i={res['missing'][:5]})"
        )
    if res["duplicate_count"]:
        problems.append(f"{res['duplicate_count']} jobs succeeded twice (e.g. {res['duplicates']})")
    failed = (res.get("failed_attempts", 0), res.get("failed_distinct", 0))
    if failed != ((n, n) if fail_once else (0, 0)):
        problems.append(f"{failed[0]} failed attempts of {failed[1]} jobs")
    if problems:
        raise VerificationError(
            f"VERIFICATION FAILED for {peer.name} ({what}): " + "; ".join(problems)
        )


def cell(
    peer: Peer,
    redis: RedisServer,
    queue: str,
    n: int,
    concurrency: int,
    fail_once: bool,
    batch: int,
    log: Path,
    timeout: float = 300.0,
) -> dict[str, Any]:
    """Add the jobs, drain them with one worker process, check and measure; ``{"skipped":
    why}`` when the peer cannot express it."""
    redis.flushall()
    added = add_jobs(peer, redis, queue, n, batch, log)
    if "unsupported" in added:
        return {"skipped": added["unsupported"]}
    args = ["--url", redis.url, "--queue", queue, "--n", str(n)]
    args += ["--concurrency", str(concurrency), "--timeout", str(timeout)]
    if fail_once:
        args.append("--fail-once")
    before, scripts0 = redis.snapshot(), _scripts(redis)
    worker, why = start_worker(peer, args, log)
    if worker is None:
        return {"skipped": why}
    msg = worker.next_message(timeout + 30)
    worker.wait(timeout=60)
    after, scripts1 = redis.snapshot(), _scripts(redis)
    res = msg["result"]
    check(peer, f"{'fail-once' if fail_once else 'succeed'} c={concurrency}", res, n, fail_once)
    span = (res["last_ns"] - res["first_ns"]) / 1e9
    return {
        "rate": (n - 1) / span,
        "seconds": span,
        "worker_cpu_us_per_job": res["cpu_s"] * 1e6 / n,
        "redis_cpu_us_per_job": (after["cpu_s"] - before["cpu_s"]) * 1e6 / n,
        "redis_cmds_per_job": (after["commands"] - before["commands"]) / n,
        "script_calls_per_job": (scripts1[0] - scripts0[0]) / n,
        "script_us_per_job": (scripts1[1] - scripts0[1]) / n,
    }


def failing(
    peer: Peer, redis: RedisServer, n: int, concurrencies: list[int], batch: int, log: Path
) -> dict[str, Any]:
    """The failing phase for one peer and repeat: ``{"c50": figures, ...}``, or ``{"skipped":
    why}`` when the peer cannot run it at any of the concurrencies."""
    out: dict[str, Any] = {}
    for c in concurrencies:
        res = cell(peer, redis, QUEUE, n, c, True, batch, log, max(300.0, n / 5))
        if "skipped" in res:
            out.setdefault("skipped", f"c={c}: {res['skipped']}")
        else:
            out[f"c{c}"] = res
    redis.flushall()
    return out
