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

from .._ops import worker as wops
from .._redis.connection import AsyncConn
from .._redis.retry import TRANSIENT, RetryBackoff
from ..protocol.keys import QueueKeys

logger = logging.getLogger("echomq.worker")


class LockRenewer:
    """Renews the locks returned by ``held()`` (token -> job id) every ``interval`` seconds."""

    def __init__(
        self,
        keys: QueueKeys,
        conn: AsyncConn,
        held: Callable[[], dict[str, str]],
        lock_ms: int,
        interval: float,
        on_lost: Callable[[list[str]], None] | None = None,
    ) -> None:
        self._on_lost = on_lost
        self._keys = keys
        self._conn = conn
        self._held = held
        self._lock_ms = lock_ms
        self._interval = interval

    async def renew_once(self) -> list[str]:
        """Renew every held lock now; returns the ids whose lock was lost."""
        held = self._held()
        if not held:
            return []
        tokens = list(held)
        op = wops.extend_locks(self._keys, [held[t] for t in tokens], tokens, self._lock_ms)
        lost = await self._conn.run(op)
        if lost:  # a job whose outcome was recorded meanwhile lost its lock on purpose
            still, token_of = self._held(), {held[t]: t for t in tokens}
            lost = [job_id for job_id in lost if token_of.get(job_id) in still]
        for job_id in lost:
            logger.warning(
                "queue=%s job=%s lock could not be renewed; another worker may take it",
                self._keys.name,
                job_id,
            )
        if lost and self._on_lost is not None:
            self._on_lost(lost)
        return lost

    async def run(self, keep_going: Callable[[], bool]) -> None:
        """Renew until cancelled or ``keep_going()`` turns false.

        A renewal that fails (Redis busy, loading, unreachable) is tried again within
        milliseconds, backing off up to the renewal interval, so that a short outage does not
        eat the lock's remaining time.
        """
        delay = self._interval
        backoff = RetryBackoff(first=0.05, cap=self._interval)
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
            delay = self._interval
