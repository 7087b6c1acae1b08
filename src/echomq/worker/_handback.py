"""Handing held jobs back to ``wait``, and the deadline a closing worker gives Redis.

A job the worker holds but will not finish (taken while closing, cancelled with ``requeue``,
rate-limited, cut at the end of the grace period, or met by a bug of ours) goes back to the
front of ``wait`` at once with moveJobFromActiveToWait, rather than waiting out its lock for the
stalled check. Calls ride through outages like every other call of the worker, until the
closing worker's deadline has passed (``give_up``, the lifecycle's
:meth:`~._lifecycle.Lifecycle.finish_deadline_passed`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from .._ops import worker as wops
from .._redis.connection import AsyncConn
from ..errors import error_for_code
from ..protocol import codes
from ..protocol.keys import QueueKeys
from ._lifecycle import FINISH_DEADLINE
from ._outages import OutageLog, call_through_outages

logger = logging.getLogger("echomq.worker")


class HandBack:
    """Hands held jobs back; ``held`` (token -> job id) loses each job once handed back."""

    def __init__(
        self,
        keys: QueueKeys,
        conn: AsyncConn,
        held: dict[str, str],
        give_up: Callable[[], bool],
    ) -> None:
        self._keys = keys
        self._conn = conn
        self._held = held
        self._give_up = give_up  # the closing worker's deadline has passed
        self._tasks: dict[str, asyncio.Task[None]] = {}  # token -> hand-back task

    def spawn(self, job_id: str, token: str, why: str) -> None:
        """Hand a job back in a task of its own (once per token)."""
        if token in self._tasks:
            return
        self._tasks[token] = asyncio.create_task(
            self._hand_back(job_id, token, why), name=f"echomq-hand-back-{job_id}"
        )

    async def wait(self) -> None:
        """Wait for the hand-backs in progress (bounded by the deadline, plus a second)."""
        if self._tasks:
            await asyncio.wait(list(self._tasks.values()), timeout=FINISH_DEADLINE + 1)

    async def _hand_back(self, job_id: str, token: str, why: str) -> None:
        """Put a held job back at the front of ``wait`` now (its lock stays renewed until
        then), rather than leave it to the stalled check."""
        name = self._keys.name
        try:
            code = await self.return_to_wait(job_id, token, "hand back")
        except Exception as exc:  # a script error: the stalled check recovers the job
            code = None
            logger.error("queue=%s job=%s could not be handed back: %s", name, job_id, exc)
        finally:
            self._tasks.pop(token, None)
        if code is None:
            logger.warning(
                "queue=%s job=%s not handed back (Redis unavailable); the stalled check will "
                "recover it once its lock expires",
                name,
                job_id,
            )
        elif code >= 0:
            logger.info(
                "queue=%s job=%s handed back to wait: %s",
                name,
                job_id,
                why,
                extra={"queue": name, "job_id": job_id, "status": "handed-back"},
            )
        else:
            logger.warning(
                "queue=%s job=%s not handed back: %s",
                name,
                job_id,
                error_for_code(code, job_id=job_id, command="hand back", state="active"),
            )

    async def return_to_wait(self, job_id: str, token: str, what: str) -> int | None:
        """Move a held job from active back to the front of wait (moveJobFromActiveToWait),
        through outages; the job is no longer held afterwards, whatever happened.

        Returns the script's reply (the limiter TTL, or an error code), 0 when a resend found
        the lock gone because the lost send had already moved the job, or None when the
        worker gave up (closing, Redis unavailable past the deadline).
        """
        op = wops.move_job_from_active_to_wait(self._keys, job_id, token)
        log = OutageLog(f"queue={self._keys.name} job={job_id} {what}")
        try:
            code = await call_through_outages(
                log.what, lambda _resend: self._conn.run(op), self._give_up, log=log
            )
        finally:
            self._held.pop(token, None)
        if code == codes.JOB_LOCK_NOT_EXIST and log.resent:
            return 0
        return code
