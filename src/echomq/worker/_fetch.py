"""Waiting for work: the one place a worker blocks (BZPOPMIN on the queue's marker key).

Idle workers do not poll: they block on the marker ZSET on a dedicated connection, named so
that ``get_workers`` (ours and Node's) can count them. A popped ``"0"`` means "a job is ready";
a popped ``"1"`` carries the due time of the earliest delayed job
(docs/protocol/markers-locks-stalled.md#marker).
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import redis.asyncio

from .._wire import open_channel, send
from ..ops import to_str
from ..protocol.keys import QueueKeys

#: Longest single block; Node caps its delayed waits at 10 s as well.
MAX_BLOCK = 10.0
#: Shortest block Redis >= 7.0.8 accepts as a real timeout (0 would block forever).
MIN_BLOCK = 0.002


class MarkerWaiter:
    """Blocks on the marker key until a job may be ready.

    A due time (the earliest delayed job) is kept on the worker's own clock, not by the
    BZPOPMIN timeout: Redis serves a blocking timeout only at its next clock tick (every 100 ms
    at the default ``hz`` 10), so a delayed job would start up to 100 ms late. When the due time
    comes first, :meth:`wait` returns and leaves the BZPOPMIN in flight; the next call reads
    what it popped (a marker written meanwhile is never lost) before blocking again.
    """

    def __init__(self, keys: QueueKeys, client: redis.asyncio.Redis, drain_delay: float) -> None:
        self._keys = keys
        self._client = client
        # The connection blocks for nobody else, so a channel of its own carries the BZPOPMIN.
        # It is reopened as soon as it is lost: the connection's name is how getWorkers (ours
        # and BullMQ's) lists this worker, also while it is too busy to wait on the marker.
        self._channel = open_channel(client, keep_open=True)
        self._drain_delay = drain_delay
        self._block: asyncio.Future[Any] | None = None  # the BZPOPMIN in flight, if any

    async def wait(self, next_delayed_ms: int = 0) -> None:
        """Return when a job is (probably) ready, or after the drain delay / next due time."""
        deadline = time.time() + self._drain_delay
        if next_delayed_ms > 0:
            deadline = min(deadline, next_delayed_ms / 1000)
        while True:
            if self._block is None:
                timeout = min(max(deadline - time.time(), MIN_BLOCK), MAX_BLOCK)
                command = ("BZPOPMIN", self._keys.marker, timeout)
                self._block = asyncio.ensure_future(send(self._client, self._channel, command))
            block = self._block
            left = deadline - time.time()
            if left > 0 and not block.done():
                await asyncio.wait({block}, timeout=left)
            if not block.done():  # the due time came first: keep the block in flight
                if time.time() >= deadline - 0.001:
                    return
                continue
            self._block = None
            popped = block.result()
            if not popped:
                if time.time() >= deadline - 0.001:
                    return
                continue
            member, score = to_str(popped[1]), float(popped[2])
            if member != "1":
                return
            due = score / 1000
            if due <= time.time() + 0.001:
                return
            deadline = min(deadline, due)

    async def connect(self) -> None:
        """Open the blocking connection (which names itself on connect)."""
        await send(self._client, self._channel, ("PING",))

    async def aclose(self) -> None:
        """Close the blocking connection (a BZPOPMIN in flight is dropped)."""
        block, self._block = self._block, None
        if block is not None:
            block.cancel()
            await asyncio.gather(block, return_exceptions=True)
        if self._channel is not None:
            await self._channel.aclose()
        await self._client.aclose()
