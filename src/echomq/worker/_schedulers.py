"""Continuing job schedulers: when a worker takes an iteration of a job scheduler (every or
cron), the next iteration is created before the job runs, as BullMQ's workers do
(docs/protocol/flows-dedup-schedulers.md#scheduler-continuation).

So schedulers made by echomq (``Queue.upsert_job_scheduler``) or by BullMQ keep going whichever
workers share the queue. A cron scheduler's next time is computed by :mod:`echomq._cron`
exactly as BullMQ computes it; an expression it refuses (one echomq cannot evaluate identically)
is processed without a next iteration, and a warning says to run a BullMQ worker for that queue.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any

from .. import _cron
from .._ops import worker as wops
from .._redis.connection import AsyncConn
from .._redis.retry import TRANSIENT
from ..errors import InvalidOptionError
from ..job import Job
from ..protocol.keys import QueueKeys
from ._outages import call_through_outages

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


def next_iteration_options(job: Job, now_ms: int) -> tuple[dict[str, Any], int | None] | None:
    """The next iteration's stored options and, for a cron scheduler, its run time (ms); None
    when the scheduler stops here (its ``limit`` reached, ``endDate`` passed, no next cron time)
    or the job carries no usable ``repeat``.

    Raises:
        InvalidOptionError: the cron expression or time zone cannot be evaluated exactly.
    """
    repeat = job.wire_options.get("repeat")
    if not isinstance(repeat, dict):
        return None
    pattern = repeat.get("pattern")
    is_every = isinstance(repeat.get("every"), (int, float)) and not isinstance(
        repeat.get("every"), bool
    )
    if not is_every and not (isinstance(pattern, str) and pattern):
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
    opts.setdefault("attempts", 0)  # a BullMQ job's opts always carry it, so its successors do
    if is_every:
        return opts, None
    # BullMQ's "now" for a continuation: never before the run time of the iteration taken.
    prev = job.wire_options.get("prevMillis")
    after = max(now_ms, int(prev)) if isinstance(prev, (int, float)) else now_ms
    start = repeat.get("startDate")
    tz = repeat.get("tz")
    next_ms = _cron.next_cron_ms(
        str(pattern),
        after,
        tz if isinstance(tz, str) and tz else None,
        start_ms=int(start) if isinstance(start, (int, float)) else None,
        end_ms=int(end) if isinstance(end, (int, float)) else None,
    )
    if next_ms is None:
        return None
    opts["prevMillis"] = next_ms
    return opts, next_ms


class SchedulerContinuer:
    """Creates next iterations for the scheduler jobs a worker takes."""

    def __init__(
        self, keys: QueueKeys, conn: AsyncConn, give_up: Callable[[], bool] = lambda: False
    ) -> None:
        self._keys = keys
        self._conn = conn
        self._give_up = give_up
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
        now = int(time.time() * 1000)
        try:
            planned = next_iteration_options(job, now)
        except InvalidOptionError as exc:
            self._warn_once(
                scheduler_id,
                job.id,
                "queue=%s job=%s belongs to cron job scheduler %s whose next time echomq "
                f"cannot compute ({str(exc).replace('%', '%%')}); run a BullMQ worker on this "
                "queue to keep it going",
            )
            return
        if planned is None:
            return
        opts, cron_next = planned
        op = wops.continue_scheduler(self._keys, scheduler_id, job.id, opts, now, cron_next)
        # Through outages, as BullMQ retries this step: a scheduler whose next iteration is not
        # made stops for good. A resend is harmless: once the first call made the next
        # iteration, this job is no longer the scheduler's current one and nothing is created.
        what = f"queue={self._keys.name} job={job.id} next iteration of scheduler {scheduler_id}"
        try:
            created = await call_through_outages(
                what, lambda _resend: self._conn.run(op), self._give_up
            )
        except TRANSIENT as exc:  # not an outage (e.g. a script error): logged, the job runs
            logger.error("%s not created: %s", what, exc)
            return
        if created is None:
            logger.error("%s not created: Redis stayed unavailable while closing", what)
            return
        if created:
            logger.debug(
                "queue=%s scheduler %s: next iteration %s", self._keys.name, scheduler_id, created
            )

    def _warn_once(self, scheduler_id: str, job_id: str, message: str) -> None:
        if scheduler_id not in self._warned:
            self._warned.add(scheduler_id)
            logger.warning(message, self._keys.name, job_id, scheduler_id)
