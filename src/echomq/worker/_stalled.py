"""Stalled recovery: periodically move jobs whose workers died back to wait.

The script itself throttles to one effective check per interval across the fleet
(the ``stalled-check`` key), so every worker may run this loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from .._ops import now_ms
from .._ops import worker as wops
from .._redis.connection import AsyncConn
from .._redis.retry import TRANSIENT
from .._redis.server_checks import ServerWatch
from ..protocol.keys import QueueKeys

logger = logging.getLogger("echomq.worker")


@dataclass(eq=False, slots=True)
class StalledChecker:
    """Runs the stalled check at start and then every ``interval`` seconds."""

    keys: QueueKeys
    conn: AsyncConn
    interval: float
    max_stalled_count: int
    on_recovered: Callable[[list[str]], None] | None = None

    async def check_once(self) -> list[str]:
        """Run one check; returns the ids moved back to wait.

        Ids the check removed from active because their job hash is missing are logged (one
        WARNING each), not returned.
        """
        op = wops.move_stalled_jobs_to_wait(
            self.keys, self.max_stalled_count, round(self.interval * 1000), now_ms()
        )
        reply = await self.conn.run(op)
        queue = self.keys.name
        for job_id in reply.recovered:
            logger.warning(
                "queue=%s job=%s stalled (its worker lost the lock); moved back to wait",
                queue,
                job_id,
                extra={"queue": queue, "job_id": job_id, "status": "stalled"},
            )
        for job_id in reply.dangling:
            logger.warning(
                "queue=%s job=%s was in active but its hash is missing; removed",
                queue,
                job_id,
                extra={
                    "queue": queue,
                    "job_id": job_id,
                    "status": "dangling",
                    "structure": "active",
                },
            )
        if reply.recovered and self.on_recovered is not None:
            self.on_recovered(reply.recovered)
        return reply.recovered

    async def run(self, keep_going: Callable[[], bool]) -> None:
        """Check until cancelled or ``keep_going()`` turns false.

        After each check come the server checks (``echomq._redis.server_checks.ServerWatch``): the
        eviction policy after the first, the clock skew after every one. They only log, and
        never delay a stalled check.
        """
        server = ServerWatch(self.conn)
        while keep_going():
            try:
                await self.check_once()
            except TRANSIENT as exc:
                logger.warning("stalled check failed (%s: %s)", type(exc).__name__, exc)
            await server.check()
            await asyncio.sleep(self.interval)
