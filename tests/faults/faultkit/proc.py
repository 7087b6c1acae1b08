"""The processor of the fault suite's echomq workers: ``echomq worker faultkit.proc:process``.

The worker runs with ``cwd=tests/faults`` (the CLI makes the current directory importable) and
``$FAULTS_LEDGER`` naming the ledger file. ``node_worker.mjs`` implements the same processor
for BullMQ, so both sides see the same workload. The job data steers each run:

``ms``
    sleep this long without blocking the event loop (``asyncio.sleep``).
``block_ms``
    then block the whole event loop this long (``time.sleep`` in an async processor, as a
    CPU-bound or badly written processor would), so the worker renews no lock meanwhile.
``block_first``
    block only on the job's first start (``attempts_started == 1``).
``poison``
    ``"kill"``: the process SIGKILLs itself; ``"exit"``: it calls ``os._exit(3)``. Either
    way, after writing the ``start`` line, on every run.
``fail_first``
    raise on the job's first attempt (``attempts_made == 0``), after the sleep and the
    ``finish`` line (the processor returned, with an error): with ``attempts`` >= 2 the job is
    retried, at once or after its backoff.

It returns the job id, so the audit can check each return value. A grouped job's ledger lines
carry its group, as the worker gave it to the processor (``job.options.group``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from typing import Any

from echomq import Job

from .ledger import FINISH, START, LedgerWriter

LEDGER_ENV = "FAULTS_LEDGER"

_writers: dict[int, LedgerWriter] = {}


def _ledger() -> LedgerWriter:
    pid = os.getpid()
    if pid not in _writers:  # one descriptor per process (forks do not share it)
        _writers[pid] = LedgerWriter(os.environ[LEDGER_ENV])
    return _writers[pid]


async def process(job: Job) -> Any:
    """Record the start, behave as the job data says, record the finish."""
    spec = job.data if isinstance(job.data, dict) else {}
    group = job.options.group if isinstance(job.options.group, str) else None
    ledger = _ledger()
    ledger.write(job.id, START, group)
    poison = spec.get("poison")
    if poison == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif poison == "exit":
        os._exit(3)
    await asyncio.sleep(float(spec.get("ms", 0)) / 1000)
    block = float(spec.get("block_ms", 0)) / 1000
    if block and (not spec.get("block_first") or job.attempts_started <= 1):
        time.sleep(block)  # blocking the loop is the point
    ledger.write(job.id, FINISH, group)
    if spec.get("fail_first") and job.attempts_made == 0:
        raise RuntimeError(f"job {job.id} fails its first attempt (fail_first)")
    return job.id
