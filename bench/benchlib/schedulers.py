"""The scheduler phase: many ``every`` job schedulers kept going by one worker process.

On a flushed Redis, for a peer with job schedulers (``Peer.schedulers``), one adapter
process (role ``schedulers``):

1. upserts N schedulers ``s0`` .. ``s<N-1>`` (default 1 000) of ``every`` = 1 s on one queue,
   each iteration a job named ``tick`` with data ``{"k": k}`` (timed, not in the figures);
2. runs one worker at concurrency 50 (the processor records its start and returns) for a
   2 s warm-up, then for the measured window of ``--scheduler-duration`` s (default 30),
   announced to the harness, which reads Redis's CPU time at its start and end;
3. closes the worker and reports every processor start.

Figures over the window: iterations started per second against the ideal N / every; Redis
CPU µs per iteration (the window's ``used_cpu_sys + used_cpu_user`` delta over the
iterations started in it); lateness p50/p99 = processor start - the iteration's scheduled
time (the ms in its id ``repeat:<scheduler id>:<ms>``; both are this machine's wall clock).

Verification (any failure is a :class:`VerificationError`): no iteration id ran twice, no
scheduler ran two iterations less than ``every`` apart (a doubled slot), every scheduler ran
at least once, and afterwards Redis holds the N schedulers with exactly one pending
iteration each (``delayed`` + ``wait`` + ``prioritized`` = N, nothing ``active``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .peers import Adapter, Peer
from .phases import VerificationError, _pct
from .redisproc import RedisServer

PREFIX = "bull"
CONCURRENCY = 50
QUEUE = "bench-sched"


def _expect(msg: dict[str, Any], key: str, value: Any, peer: Peer) -> None:
    if msg.get(key) != value:
        raise RuntimeError(f"{peer.name}: expected {key}={value!r}, got {msg}")


def check(peer: Peer, redis: RedisServer, res: dict[str, Any], n: int) -> None:
    """The worker's record and the queue left in Redis, as the module docstring says."""
    problems = []
    if res["duplicate_count"]:
        problems.append(f"{res['duplicate_count']} iterations ran twice")
    if res["doubled_slots"]:
        problems.append(f"{res['doubled_slots']} doubled slots (< every apart)")
    if res["schedulers_seen"] != n:
        problems.append(f"{res['schedulers_seen']} schedulers ran, expected {n}")
    client = redis.client
    assert client is not None
    base = f"{PREFIX}:{QUEUE}"
    count, delayed, wait, prio, active = client.pipeline(
        [
            ("ZCARD", f"{base}:repeat"),
            ("ZCARD", f"{base}:delayed"),
            ("LLEN", f"{base}:wait"),
            ("ZCARD", f"{base}:prioritized"),
            ("LLEN", f"{base}:active"),
        ]
    )
    assert isinstance(delayed, int) and isinstance(wait, int) and isinstance(prio, int)
    if count != n:
        problems.append(f"{count} schedulers left in Redis, expected {n}")
    if delayed + wait + prio != n or active:
        problems.append(
            f"pending iterations: {delayed} delayed + {wait} wait + {prio} prioritized "
            f"(expected {n} in all), {active} active"
        )
    if problems:
        raise VerificationError(
            f"VERIFICATION FAILED for {peer.name} (scheduler): " + "; ".join(problems)
        )


def scheduler(
    peer: Peer, redis: RedisServer, n: int, every: float, duration: float, log: Path
) -> dict[str, Any] | None:
    """The scheduler phase for one peer and repeat; None when the peer has no schedulers."""
    if not peer.schedulers:
        return None
    redis.flushall()
    a = Adapter(
        peer,
        "schedulers",
        ["--url", redis.url, "--queue", QUEUE, "--n", str(n), "--every", str(every)]
        + ["--duration", str(duration), "--concurrency", str(CONCURRENCY)],
        log,
    )
    try:
        msg = a.next_message(max(120.0, n / 10))
        _expect(msg, "ready", True, peer)
        _expect(a.next_message(60), "window", "start", peer)
        before = redis.snapshot()
        _expect(a.next_message(duration + 60), "window", "end", peer)
        after = redis.snapshot()
        msg = a.next_message(120)
    except BaseException:
        a.kill()
        raise
    a.wait(timeout=60)
    res = msg["result"]
    check(peer, redis, res, n)
    late = res.pop("lateness_ms")
    started = res["window_starts"]
    out = {
        "iterations_per_s": started / res["window_s"],
        "ideal_per_s": n / every,
        "of_ideal": started / res["window_s"] / (n / every),
        "redis_cpu_us_per_iteration": (after["cpu_s"] - before["cpu_s"]) * 1e6 / max(1, started),
        "redis_cmds_per_iteration": (after["commands"] - before["commands"]) / max(1, started),
        "worker_cpu_us_per_iteration": res["cpu_s"] * 1e6 / max(1, started),
        "lateness_p50_ms": _pct(late, 0.50),
        "lateness_p99_ms": _pct(late, 0.99),
        "lateness_max_ms": max(late) if late else None,
        "upsert_s": res["upsert_s"],
        "window_s": res["window_s"],
        "iterations": started,
    }
    redis.flushall()
    return out
