"""The registry heartbeat: the worker's entry in its queue's worker registry.

Once the worker has connected, it writes its entry (who it is, where it runs, the jobs it
holds) and then refreshes it every ``heartbeat_interval`` seconds, with a time to live of
:data:`TTL_BEATS` intervals: a worker that dies, or loses Redis for that long, drops out of
``get_workers()`` on its own. A clean close removes the entry. One small script call per
interval, whatever the number of jobs (docs/protocol/workers.md).

The heartbeat never stops the worker: a failed write is logged (at most every 30 seconds while
failures last) and tried again at the next beat.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.metadata
import logging
import os
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from .._ops import now_ms
from .._ops import workers as reg
from .._redis.connection import AsyncConn
from .._redis.retry import TRANSIENT
from ..protocol.keys import QueueKeys

logger = logging.getLogger("echomq.worker")

#: An entry lives this many heartbeat intervals without a refresh.
TTL_BEATS = 3
#: Seconds between two warnings about failing heartbeats.
_WARN_EVERY = 30.0
#: The longest a clean close waits to remove the entry (it expires anyway).
_REMOVE_TIMEOUT = 2.0


@functools.cache
def _version() -> str:
    """echomq's installed version (read from its metadata: the package's ``__init__`` is a
    layer above the worker's)."""
    try:
        return importlib.metadata.version("echomq")
    except importlib.metadata.PackageNotFoundError:  # run from a source tree
        return "unknown"


@dataclass(eq=False, slots=True)
class Heartbeat:
    """Keeps the worker's registry entry alive while ``keep_going()`` holds."""

    keys: QueueKeys
    conn: AsyncConn
    worker_id: str
    worker_name: str | None
    client_name: str
    interval: float
    #: the worker's concurrency now (it may change while running)
    concurrency: Callable[[], int]
    #: the ids of the jobs the worker holds now
    jobs: Callable[[], list[str]]
    started_ms: int = field(default_factory=now_ms)
    _last_warning: float = 0.0

    @property
    def ttl_ms(self) -> int:
        """How long an entry lives without a refresh (ms)."""
        return max(round(self.interval * TTL_BEATS * 1000), 1)

    async def beat_once(self) -> None:
        """Write the entry now."""
        entry = reg.WorkerEntry(
            id=self.worker_id,
            name=self.worker_name,
            host=socket.gethostname(),
            pid=os.getpid(),
            concurrency=self.concurrency(),
            started_ms=self.started_ms,
            jobs=self.jobs(),
            version=_version(),
            client_name=self.client_name,
        )
        await self.conn.run(reg.heartbeat(self.keys, entry, self.ttl_ms, now_ms()))

    async def run(self, keep_going: Callable[[], bool]) -> None:
        """Beat at once, then every interval, until cancelled or ``keep_going()`` turns false."""
        while keep_going():
            try:
                await self.beat_once()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the heartbeat must never take the worker down
                self._warn(exc)
            await asyncio.sleep(self.interval)

    def _warn(self, exc: BaseException) -> None:
        now = time.monotonic()
        if now - self._last_warning < _WARN_EVERY:
            return
        self._last_warning = now
        level = logging.WARNING if isinstance(exc, TRANSIENT) else logging.ERROR
        logger.log(
            level,
            "queue=%s worker registry heartbeat failed (%s: %s); retrying every %.1fs",
            self.keys.name,
            type(exc).__name__,
            exc,
            self.interval,
            extra={"queue": self.keys.name, "worker_id": self.worker_id},
        )

    async def remove(self) -> None:
        """Remove the entry (a clean close); on failure it simply expires."""
        try:
            op = reg.unregister(self.keys, self.worker_id, now_ms())
            await asyncio.wait_for(self.conn.run(op), _REMOVE_TIMEOUT)
        except Exception as exc:
            logger.info(
                "queue=%s worker %s: could not remove its registry entry (%s: %s); it expires "
                "within %.1fs",
                self.keys.name,
                self.worker_id,
                type(exc).__name__,
                exc,
                self.ttl_ms / 1000,
            )
