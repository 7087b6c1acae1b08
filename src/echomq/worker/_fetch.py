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

from .._ops import to_str
from .._redis.wire import open_channel, send
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
    comes first, :meth:`wait` returns and leaves the BZPOPMIN in flight (its own timeout ends
    it at most a tick later). The next call reads what it popped; if it pops a marker while
    nobody waits on it (the worker is busy), the marker is put back for the other idle workers
    of the queue, which it would otherwise have kept from waking. A due time learnt while a
    wait is under way (a finish call that took the last ready jobs) shortens that wait:
    :meth:`due_by`.
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
        self._waiting = False  # wait() is reading self._block
        self._deadline = 0.0  # when the wait under way returns at the latest (unix s)
        self._nudge: asyncio.Future[None] | None = None  # set when that deadline moved earlier
        self._put_back: set[asyncio.Task[Any]] = set()

    async def wait(self, next_delayed_ms: int = 0) -> None:
        """Return when a job is (probably) ready, or after the drain delay / next due time."""
        self._deadline = time.time() + self._drain_delay
        if next_delayed_ms > 0:
            self._deadline = min(self._deadline, next_delayed_ms / 1000)
        while True:
            deadline = self._deadline
            if self._block is None:
                timeout = min(max(deadline - time.time(), MIN_BLOCK), MAX_BLOCK)
                command = ("BZPOPMIN", self._keys.marker, timeout)
                self._block = asyncio.ensure_future(send(self._client, self._channel, command))
            block = self._block
            left = deadline - time.time()
            if left > 0 and not block.done():
                self._waiting = True
                self._nudge = asyncio.get_running_loop().create_future()
                try:
                    await asyncio.wait(
                        {block, self._nudge}, timeout=left, return_when=asyncio.FIRST_COMPLETED
                    )
                finally:
                    self._waiting = False
                    self._nudge = None
                if self._deadline < deadline:  # due_by moved it earlier: wait again until then
                    continue
            if not block.done():  # the due time came first: leave the block in flight
                if time.time() >= deadline - 0.001:
                    block.add_done_callback(self._unread)
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
            self._deadline = min(self._deadline, due)

    def due_by(self, next_delayed_ms: int) -> None:
        """A delayed job falls due at ``next_delayed_ms`` (unix ms): a wait under way returns
        then at the latest, instead of after the drain delay."""
        due = next_delayed_ms / 1000
        if next_delayed_ms > 0 and self._waiting and due < self._deadline:
            self._deadline = due
            if self._nudge is not None and not self._nudge.done():
                self._nudge.set_result(None)

    def _unread(self, block: asyncio.Future[Any]) -> None:
        """A block left in flight ended: unless a wait() reads it, put back what it popped."""
        if self._waiting or self._block is not block:
            return
        self._block = None
        if block.cancelled() or block.exception() is not None or not block.result():
            return
        popped = block.result()
        # NX: a marker written since is newer than the one popped.
        command = ("ZADD", self._keys.marker, "NX", popped[2], popped[1])
        task = asyncio.ensure_future(send(self._client, self._channel, command))
        self._put_back.add(task)
        task.add_done_callback(self._put_back_done)

    def _put_back_done(self, task: asyncio.Task[Any]) -> None:
        self._put_back.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a lost put-back costs the others a drain delay

    async def connect(self) -> None:
        """Open the blocking connection (which names itself on connect)."""
        await send(self._client, self._channel, ("PING",))

    async def aclose(self) -> None:
        """Close the blocking connection (a BZPOPMIN in flight is dropped)."""
        block, self._block = self._block, None
        pending = [*self._put_back] + ([block] if block is not None else [])
        for future in pending:
            future.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        if self._channel is not None:
            await self._channel.aclose()
        await self._client.aclose()
