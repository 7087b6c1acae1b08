"""Lock renewal: every interval, all locks of a worker are renewed in one script call.

A lock that could not be renewed is reported; the job keeps running (as in Node) and its
finish will be refused by the script, after which the stalled checker deals with it. The
renewer runs in every worker state that holds jobs (running and closing), so a job waiting
for its outcome to be recorded never loses its lock to a worker that is shutting down.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass

from .._ops import worker as wops
from .._redis.connection import AsyncConn
from .._redis.retry import TRANSIENT, RetryBackoff
from ..protocol.keys import QueueKeys

logger = logging.getLogger("echomq.worker")


@dataclass(eq=False, slots=True)
class LockRenewer:
    """Renews the locks returned by ``held()`` (token -> job id) every ``interval`` seconds."""

    keys: QueueKeys
    conn: AsyncConn
    held: Callable[[], dict[str, str]]
    lock_ms: int
    interval: float
    on_lost: Callable[[list[str]], None] | None = None

    async def renew_once(self) -> list[str]:
        """Renew every held lock now; returns the ids whose lock was lost."""
        held = self.held()
        if not held:
            return []
        tokens = list(held)
        op = wops.extend_locks(self.keys, [held[t] for t in tokens], tokens, self.lock_ms)
        lost = await self.conn.run(op)
        if lost:  # a job whose outcome was recorded meanwhile lost its lock on purpose
            still, token_of = self.held(), {held[t]: t for t in tokens}
            lost = [job_id for job_id in lost if token_of.get(job_id) in still]
        for job_id in lost:
            logger.warning(
                "queue=%s job=%s lock could not be renewed; another worker may take it",
                self.keys.name,
                job_id,
            )
        if lost and self.on_lost is not None:
            self.on_lost(lost)
        return lost

    async def run(self, keep_going: Callable[[], bool]) -> None:
        """Renew until cancelled or ``keep_going()`` turns false.

        A renewal that fails (Redis busy, loading, unreachable) is tried again within
        milliseconds, backing off up to the renewal interval, so that a short outage does not
        eat the lock's remaining time.
        """
        delay = self.interval
        backoff = RetryBackoff(first=0.05, cap=self.interval)
        failures = 0
        while keep_going():
            await asyncio.sleep(delay)
            try:
                await self.renew_once()
            except TRANSIENT as exc:
                if failures % 20 == 0:
                    logger.warning(
                        "lock renewal failed (%s: %s); retrying", type(exc).__name__, exc
                    )
                failures += 1
                delay = backoff.advance()
                continue
            failures = 0
            backoff.reset()
            delay = self.interval
