"""A processor that records every execution outside the queue's keyspace.

Run it in a worker subprocess started with ``cwd=tests/``::

    python -m echomq.cli worker procs.recording:process --queue Q --url URL

Each run first appends ``<job id>:<pid>`` to ``rec:<queue>:runs`` (a list on the server named
by ``$ECHOMQ_TEST_URL``), so a test can count executions per job even for runs cut short by a
crash. The job data steers it: ``sleep`` (seconds before returning), ``block`` (seconds of
``time.sleep`` first: blocking the event loop, the mistake the watchdog names), ``exit`` (true:
``os._exit(1)`` mid-run, a poison job that kills its worker), ``fail_times`` (raise while
``attempts_made`` is below it) and ``value`` (the return value; the job id by default).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import redis.asyncio

from echomq import Job

_clients: dict[int, redis.asyncio.Redis] = {}


def runs_key(queue: str) -> str:
    """The list of ``<job id>:<pid>`` entries, one per execution of a job of ``queue``."""
    return f"rec:{queue}:runs"


def _client() -> redis.asyncio.Redis:
    # One client per process (the CLI runs one event loop).
    pid = os.getpid()
    if pid not in _clients:
        _clients[pid] = redis.asyncio.Redis.from_url(os.environ["ECHOMQ_TEST_URL"])
    return _clients[pid]


async def process(job: Job) -> Any:
    """Record the run, then sleep / fail / return as the job data says."""
    await _client().rpush(runs_key(job.queue_name), f"{job.id}:{os.getpid()}")
    data = job.data if isinstance(job.data, dict) else {}
    if data.get("exit"):
        await asyncio.sleep(0.2)  # the jobs beside it have started
        os._exit(1)
    time.sleep(float(data.get("block", 0)))
    await asyncio.sleep(float(data.get("sleep", 0)))
    if job.attempts_made < int(data.get("fail_times", 0)):
        raise RuntimeError(f"planned failure {job.attempts_made + 1}")
    return data.get("value", job.id)
