"""The lateness phase: how late delayed jobs start after their due time (bench/run.py).

On a flushed Redis, for each peer with delayed jobs:

1. one worker process at concurrency ``--lateness-concurrency`` (50) starts and reports ready
   (``worker --delayed``: it records each processor start on the wall clock), and is given
   1 s to settle into its wait (some start consuming only after their ready);
2. one producer process adds N jobs (``--lateness-jobs``, default ``--jobs``) up front, job
   ``i`` delayed by a whole number of ms spread uniformly over ``--lateness-span`` s (10;
   ``delay_ms`` in bench/peers/_common.py, the same in every adapter), in bulk calls of
   ``--batch`` where the library has a bulk add that takes a delay, else one by one
   (``enqueue --mode delayed``). It reports each job's due time: the wall clock (whole ms,
   rounded down) read just before the add call that carried it, plus its delay, which is at or
   before the due time the library itself computes;
3. the worker stops once every job has run.

Lateness = processor start - due time, in ms (``time.time()`` / ``performance.timeOrigin +
performance.now()``: both the wall clock of this machine). Figures: p50, p99 and max over the N
jobs, and how many started before their due time (``early``; the earliest in ``min``), which
a library should never do. The producer runs while the worker waits for the first jobs, so
the adds' own CPU (a second or more for libraries that add one by one) falls inside the window.

Verification: every job ran exactly once (:func:`benchlib.phases.check_worker`). Peers whose
library has no delayed jobs, or no worker at that concurrency, answer ``unsupported``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from .peers import Peer, run_once
from .phases import _pct, check_worker, start_worker
from .redisproc import RedisServer

QUEUE = "bench-delayed"
SETTLE_S = 1.0  # after the worker's ready, before the adds: its start-up is over


def lateness(
    peer: Peer,
    redis: RedisServer,
    n: int,
    span: float,
    concurrency: int,
    batch: int,
    log: Path,
) -> dict[str, Any]:
    """The lateness phase for one peer and repeat: its figures, or ``{"skipped": why}``."""
    redis.flushall()
    timeout = span + max(120.0, n / 20)
    base = ["--url", redis.url, "--queue", QUEUE, "--n", str(n)]
    worker, why = start_worker(
        peer,
        [*base, "--concurrency", str(concurrency), "--delayed", "--timeout", str(timeout)],
        log,
    )
    if worker is None:
        return {"skipped": why}
    time.sleep(SETTLE_S)
    try:
        added = run_once(
            peer,
            "enqueue",
            [*base, "--mode", "delayed", "--span", str(span), "--batch", str(batch)],
            log,
            timeout,
        )
    except BaseException:
        worker.kill()
        raise
    if "unsupported" in added:
        worker.close_stdin()  # the worker stops on EOF
        worker.next_message(60)
        worker.wait(timeout=60)
        return {"skipped": added["unsupported"]}
    msg = worker.next_message(timeout + 30)
    worker.wait(timeout=60)
    res = msg["result"]
    check_worker(peer, f"lateness c={concurrency}", res)
    due = added["result"]["due_ms"]
    late = [res["starts"][str(i)] / 1e6 - due[i] for i in range(n)]
    early = [x for x in late if x < 0]
    redis.flushall()
    return {
        "p50_ms": _pct(late, 0.50),
        "p99_ms": _pct(late, 0.99),
        "max_ms": max(late),
        "mean_ms": sum(late) / n,
        "early": len(early),
        "min_ms": min(late),
        "enqueue_s": added["result"]["seconds"],
        "last_start_after_first_due_s": (max(res["starts"].values()) / 1e6 - min(due)) / 1e3,
    }
