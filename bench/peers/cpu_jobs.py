"""The cpu phase's job: about ``ms`` milliseconds of pure-Python work (standard library only).

Every Python peer runs the same loop: integer arithmetic until ``ms`` milliseconds of wall
time have passed (the deadline makes every peer's job equally long, whatever the machine, so
the time a worker slot spends beyond it is the library's overhead). Each job appends
``"<i> <start_ns> <end_ns>"`` (``time.monotonic_ns()``) to the file named by
``ECHOMQ_BENCH_CPU_LOG``: one short O_APPEND write per job is atomic on Linux, and it works
from a forked child, a pool process or a thread alike.

``echomq_burn`` is imported by path in echomq's pool children, ``rq_burn`` by rq's work
horses; Celery's task (bench/peers/cpu_celery.py) calls :func:`burn`.
"""

from __future__ import annotations

import os
import time
from typing import Any


def burn(i: int, ms: float) -> int:
    """Spin for ``ms`` milliseconds of pure-Python work; record the run; return a checksum."""
    start = time.monotonic_ns()
    deadline = start + int(ms * 1_000_000)
    acc = 0
    n = 0
    while True:
        for k in range(200):  # ~10 µs of arithmetic between clock reads
            acc = (acc * 31 + k + n) % 1_000_003
        n += 1
        if time.monotonic_ns() >= deadline:
            break
    end = time.monotonic_ns()
    line = f"{i} {start} {end}\n".encode()
    fd = os.open(os.environ["ECHOMQ_BENCH_CPU_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)
    return acc


def echomq_burn(job: Any) -> int:
    """echomq's sync processor (runs in a pool child)."""
    return burn(job.data["i"], job.data["ms"])


def rq_burn(i: int, ms: float) -> int:
    """rq's job function."""
    return burn(i, ms)
