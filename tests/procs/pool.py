"""Sync processors that run in a worker's process pool (imported by path in each child)."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from echomq.sync import Job


def square(job: Job) -> dict[str, Any]:
    """Return the square of ``x`` and the pid of the child that computed it."""
    return {"y": job.data["x"] ** 2, "pid": os.getpid()}


def report(job: Job) -> int:
    """Update progress and log twice, from the child."""
    job.update_progress(50)
    job.log(f"child {os.getpid()} says hello")
    job.update_progress({"done": True})
    return job.log("second line")


def pid(job: Job) -> int:
    """The pid of the child."""
    return os.getpid()


def wait_for_file(job: Job) -> int:
    """Write the child's pid to ``data["pidfile"]``, then wait until ``data["release"]``
    exists (a job a test can kill mid-way)."""
    Path(job.data["pidfile"]).write_text(str(os.getpid()))
    release = Path(job.data["release"])
    deadline = time.monotonic() + 30
    while not release.exists() and time.monotonic() < deadline:
        time.sleep(0.01)
    return os.getpid()


def sleep(job: Job) -> str:
    """Sleep ``data["seconds"]``."""
    time.sleep(job.data["seconds"])
    return "slept"


def noisy(job: Job) -> str:
    """Print to stdout and stderr, and ignore SIGTERM."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    print("hello from the child on stdout", flush=True)
    print("hello from the child on stderr", file=sys.stderr, flush=True)
    sys.stdout.write("x" * 100_000 + "\n")
    return "printed"


def not_json(job: Job) -> object:
    """Return something JSON cannot encode."""
    return {"when": object()}


def boom(job: Job) -> None:
    """Fail with a ValueError."""
    raise ValueError(f"boom on attempt {job.attempts_made + 1}")


def exit_hard(job: Job) -> None:
    """Leave the child at once, as a crash would."""
    os._exit(3)


def busy(job: Job) -> dict[str, Any]:
    """About ``data["ms"]`` milliseconds of pure-Python work; returns the child's pid and when
    the work started and ended, by ``time.monotonic()`` (one clock for every process of the
    machine on Linux and macOS, so runs in different children compare)."""
    start = time.monotonic()
    deadline = time.perf_counter() + job.data["ms"] / 1000
    while time.perf_counter() < deadline:
        pass
    return {"pid": os.getpid(), "start": start, "end": time.monotonic()}


def _nested() -> Any:
    def inner(job: Job) -> None:
        return None

    return inner


nested = _nested()
