"""A batch processor that records every execution outside the queue's keyspace.

Run it in a worker subprocess started with ``cwd=tests/`` and ``--batch-size``::

    python -m echomq.cli worker procs.batching:process --queue Q --url URL --batch-size 4

Like ``procs.recording``: each job of a batch first appends ``<job id>:<pid>`` to
``rec:<queue>:runs``; then the batch sleeps for the largest ``sleep`` of its jobs' data and
returns each job's id.
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

from echomq import Job
from procs.recording import _client, runs_key


async def process(jobs: list[Job]) -> list[Any]:
    """Record each job's run, sleep as the data says, return the ids."""
    client = _client()
    for job in jobs:
        await client.rpush(runs_key(job.queue_name), f"{job.id}:{os.getpid()}")
    sleeps = [float(job.data.get("sleep", 0)) for job in jobs if isinstance(job.data, dict)]
    await asyncio.sleep(max(sleeps, default=0))
    return [job.id for job in jobs]
