"""Continuing job schedulers: when a worker takes an iteration of an ``every`` scheduler, the
next iteration is created before the job runs, as BullMQ's workers do
(docs/protocol/flows-dedup-schedulers.md#scheduler-continuation).

echomq has no API to create schedulers; this keeps those created by BullMQ (``upsertJobScheduler``)
running when echomq workers share the queue. Cron schedulers are not continued: their next time
comes from BullMQ's cron parser, which echomq does not reproduce; such an iteration is processed
and a warning says to run a BullMQ worker for that queue.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Any

from .._connection import AsyncConn
from .._retry import TRANSIENT
from ..job import Job
from ..ops import worker as wops
from ..protocol.keys import QueueKeys

logger = logging.getLogger("echomq.worker")

#: The v5 repeat-key shape BullMQ v6 refuses to continue
#: (docs/protocol/flows-dedup-schedulers.md#legacy-repeatable).
_LEGACY_KEY = re.compile(r"^[^:]*:[^:]*:(\d*):[^:]*:(.+)$")


def is_legacy_repeat_key(key: str) -> bool:
    """Whether ``key`` has the legacy (v5 repeatable job) shape."""
    match = _LEGACY_KEY.match(key)
    if match is None:
        return False
    tail = match.group(2)
    return " " in tail or tail.isdigit()


def next_iteration_options(job: Job, now_ms: int) -> dict[str, Any] | None:
    """The next iteration's stored options, or None when the scheduler stops here (its
    ``limit`` reached or ``endDate`` passed) or is not an every-scheduler."""
    repeat = job.wire_options.get("repeat")
    if not isinstance(repeat, dict) or not isinstance(repeat.get("every"), (int, float)):
        return None
    count = repeat.get("count")
    iteration = (count if isinstance(count, int) else 0) + 1
    limit = repeat.get("limit")
    if isinstance(limit, int) and limit > 0 and iteration > limit:
        return None
    end = repeat.get("endDate")
    if isinstance(end, (int, float)) and end < now_ms:
        return None
    opts = {k: v for k, v in job.wire_options.items() if k not in ("jobId", "delay", "timestamp")}
    opts["repeat"] = {**repeat, "count": iteration}
    return opts


class SchedulerContinuer:
    """Creates next iterations for the scheduler jobs a worker takes."""

    def __init__(self, keys: QueueKeys, conn: AsyncConn) -> None:
        self._keys = keys
        self._conn = conn
        self._warned: set[str] = set()

    async def on_taken(self, job: Job) -> None:
        """Called before a job with ``repeat_job_key`` runs; never raises (the job runs anyway)."""
        scheduler_id = job.repeat_job_key
        if not scheduler_id:
            return
        if is_legacy_repeat_key(scheduler_id):
            self._warn_once(
                scheduler_id,
                job.id,
                "queue=%s job=%s belongs to legacy repeatable job %s (BullMQ v5): no next "
                "iteration is created; convert it to a job scheduler",
            )
            return
        repeat = job.wire_options.get("repeat")
        if isinstance(repeat, dict) and "pattern" in repeat:
            self._warn_once(
                scheduler_id,
                job.id,
                "queue=%s job=%s belongs to cron job scheduler %s: echomq workers do not create "
                "cron iterations; run a BullMQ worker on this queue to keep it going",
            )
            return
        now = int(time.time() * 1000)
        opts = next_iteration_options(job, now)
        if opts is None:
            return
        op = wops.continue_scheduler(self._keys, scheduler_id, job.id, opts, now)
        try:
            created = await self._conn.run(op)
        except TRANSIENT as exc:
            logger.error(
                "queue=%s job=%s next iteration of job scheduler %s not created: %s",
                self._keys.name,
                job.id,
                scheduler_id,
                exc,
            )
            return
        if created:
            logger.debug(
                "queue=%s scheduler %s: next iteration %s", self._keys.name, scheduler_id, created
            )

    def _warn_once(self, scheduler_id: str, job_id: str, message: str) -> None:
        if scheduler_id not in self._warned:
            self._warned.add(scheduler_id)
            logger.warning(message, self._keys.name, job_id, scheduler_id)
