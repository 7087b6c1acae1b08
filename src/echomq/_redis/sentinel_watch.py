"""Following a Sentinel failover at once: ``+switch-master`` drops the old master's connections.

A Sentinel-managed client asks the Sentinels for the master each time it connects, so it finds
the new master only once its connections to the old one fail. A master killed outright fails
them at once; a master that stops answering (frozen, SIGSTOP, a network partition) leaves them
waiting for replies, and one that comes back still believes it is the master until the Sentinels
demote it at their next poll (up to 10 s), taking writes meanwhile. The Sentinels announce each
failover on their ``+switch-master`` channel (``<service> <old-ip> <old-port> <new-ip>
<new-port>``); a :class:`SentinelWatch` listens there and disconnects every pool of the service
that it follows, so the calls in flight fail as after any lost connection (and are resent where
echomq resends: the worker's finish calls, its fetches) and the next connection goes to the new
master. ioredis offers the same (``failoverDetector``).

One watch serves one client and the pools made from it (a worker's blocking connection, its
control channel). It listens to one Sentinel at a time and moves to the next when that one is
lost. Only public redis-py APIs are used (the Sentinels' clients, ``pubsub``, pool
``disconnect``).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from typing import Any

import redis.asyncio
import redis.asyncio.sentinel

from .retry import TRANSIENT, RetryBackoff

logger = logging.getLogger("echomq.connection")

#: The Sentinels' channel announcing a completed failover.
SWITCH_MASTER = "+switch-master"
#: Seconds between checks, while listening, that the watch has not been closed.
POLL = 0.25


def sentinel_pool(client: object) -> redis.asyncio.sentinel.SentinelConnectionPool | None:
    """The Sentinel-managed pool of an async client, or None for any other client."""
    pool = getattr(client, "connection_pool", None)
    if isinstance(pool, redis.asyncio.sentinel.SentinelConnectionPool):
        return pool
    return None


class SentinelWatch:
    """Disconnects the pools of one Sentinel service whenever the Sentinels switch its master."""

    def __init__(self, pool: redis.asyncio.sentinel.SentinelConnectionPool) -> None:
        self.service: str = pool.service_name
        self._sentinels: list[redis.asyncio.Redis] = list(pool.sentinel_manager.sentinels)
        self._pools: weakref.WeakSet[redis.asyncio.ConnectionPool] = weakref.WeakSet([pool])
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        #: set once subscribed (again after each reconnect), for tests and start-up
        self.listening = asyncio.Event()
        #: failovers seen (for logs and tests)
        self.switches = 0

    def follow(self, pool: redis.asyncio.ConnectionPool) -> None:
        """Also disconnect ``pool`` at a failover (a pool made from the same client)."""
        self._pools.add(pool)

    def start(self) -> None:
        """Start listening (in the running loop); idempotent."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"echomq-sentinel-watch-{self.service}"
            )

    async def aclose(self) -> None:
        """Stop listening."""
        task, self._task = self._task, None
        self._stopping = True
        if task is not None:
            task.cancel()  # a read on a Sentinel's connection may swallow it: see _run
            await asyncio.wait({task}, timeout=POLL + 1)

    async def _run(self) -> None:
        backoff = RetryBackoff.for_outages()
        turn = 0
        while True:
            sentinel = self._sentinels[turn % len(self._sentinels)]
            turn += 1
            pubsub: Any = sentinel.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(SWITCH_MASTER)
                self.listening.set()
                backoff.reset()
                while not self._stopping:
                    # A bounded read: redis-py can swallow a cancel that lands in a blocking
                    # read on a Sentinel's connection (its socket_timeout applies there).
                    message = await pubsub.get_message(timeout=POLL)
                    if message is not None and message.get("type") == "message":
                        await self._on_switch(message.get("data"))
                return
            except asyncio.CancelledError:
                raise
            except TRANSIENT as exc:  # this Sentinel is gone: listen to the next one
                self.listening.clear()
                logger.debug("sentinel watch of %s: %s; trying another", self.service, exc)
                await backoff.sleep()
            finally:
                try:
                    await asyncio.shield(pubsub.aclose())
                except (asyncio.CancelledError, *TRANSIENT):
                    pass

    async def _on_switch(self, data: Any) -> None:
        text = data.decode() if isinstance(data, bytes) else str(data)
        parts = text.split()
        if len(parts) != 5 or parts[0] != self.service:
            return
        self.switches += 1
        logger.info(
            "Sentinel switched %s from %s:%s to %s:%s; dropping connections to the old master",
            self.service,
            *parts[1:],
            extra={"service": self.service, "master": f"{parts[3]}:{parts[4]}"},
        )
        for pool in list(self._pools):
            try:
                await pool.disconnect(inuse_connections=True)
            except Exception as exc:  # a pool being closed by its owner: nothing to drop
                logger.debug("sentinel watch of %s: disconnect failed: %s", self.service, exc)
