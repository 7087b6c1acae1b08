"""Replicated servers for the failover scenarios: a Sentinel setup or a Redis Cluster.

Each wraps the suite's own setups (``tests/_sentinel.py``: a primary, a replica and three
Sentinels, down-after 1 s; ``tests/_cluster.py``: three primaries with a replica each, node
timeout 1 s) with what a scenario needs: the URL echomq workers and the producer use
(``redis+sentinel://`` / ``redis+cluster://``), the connection options of the BullMQ worker
(ioredis's Sentinel and Cluster clients), a plain client on the node that holds the queue's
keys now, and the faults: SIGKILL or SIGSTOP of that node. :meth:`promoted` waits until
another node holds the keys as a primary that answers. Every process is stopped by
:meth:`stop` (a frozen one is continued first).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import redis.asyncio

from _cluster import ClusterSetup, cluster_url
from _sentinel import DOWN_AFTER_MS, SERVICE, SentinelSetup
from echomq.embedded import RedisServer

#: The failure-detection time of both setups (Sentinel down-after, Cluster node timeout), s.
DETECTION = DOWN_AFTER_MS / 1000
CLUSTER_NODE_TIMEOUT_MS = 1000


class Replicated:
    """What the scenarios use of a replicated setup; see the module docstring."""

    kind = ""
    detection = DETECTION

    def __init__(self) -> None:
        self.victim: RedisServer | None = None
        self._frozen = False

    @property
    def url(self) -> str:
        raise NotImplementedError

    def node_options(self) -> dict[str, Any]:
        """The BullMQ worker's connection options (see node_worker.mjs)."""
        raise NotImplementedError

    def primary(self, queue: str) -> RedisServer:
        """The node that holds ``queue``'s keys as a primary now."""
        raise NotImplementedError

    def node_urls(self) -> list[str]:
        """Plain URLs of every data node."""
        raise NotImplementedError

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def primary_url(self, queue: str) -> str:
        return self.primary(queue).url

    def kill(self, queue: str) -> None:
        """SIGKILL the node holding ``queue``."""
        self.victim = self.primary(queue)
        assert self.victim.pid is not None
        os.kill(self.victim.pid, signal.SIGKILL)

    def freeze(self, queue: str) -> None:
        """SIGSTOP the node holding ``queue`` (connections stay open, nothing answers)."""
        self.victim = self.primary(queue)
        assert self.victim.pid is not None
        os.kill(self.victim.pid, signal.SIGSTOP)
        self._frozen = True

    def thaw(self) -> None:
        """SIGCONT the frozen node: it comes back and is turned into a replica."""
        if self._frozen and self.victim is not None and self.victim.pid is not None:
            os.kill(self.victim.pid, signal.SIGCONT)
        self._frozen = False

    async def promoted(self, queue: str, timeout: float = 30.0) -> float:
        """Wait until a node other than the victim holds ``queue`` as a primary that takes a
        write; unix ms when that was seen."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(Exception):
                node = await asyncio.to_thread(self.primary, queue)
                if node is not self.victim:
                    client = redis.asyncio.Redis.from_url(node.url, socket_timeout=0.5)
                    try:
                        role = await client.execute_command("ROLE")  # type: ignore[no-untyped-call]
                        if role and role[0] in (b"master", "master"):
                            return time.time() * 1000
                    finally:
                        await client.aclose()
            await asyncio.sleep(0.02)
        raise TimeoutError(f"no primary took over {queue} within {timeout:.0f}s")


class SentinelServers(Replicated):
    """:class:`SentinelSetup`: one primary, one replica, three Sentinels (quorum 2)."""

    kind = "sentinel"

    def __init__(self, base: Path) -> None:
        super().__init__()
        self.setup = SentinelSetup(base)

    @property
    def url(self) -> str:
        return self.setup.url()

    def node_options(self) -> dict[str, Any]:
        return {"sentinels": [list(s) for s in self.setup.sentinels], "service": SERVICE}

    def node_urls(self) -> list[str]:
        return [s.url for s in (self.setup.primary, self.setup.replica) if s is not None]

    def primary(self, queue: str) -> RedisServer:
        from redis import Redis

        for host, port in self.setup.sentinels:
            with contextlib.suppress(Exception):
                client = Redis(host=host, port=port, socket_timeout=0.5)
                try:
                    addr = client.execute_command(  # type: ignore[no-untyped-call]
                        "SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE
                    )
                finally:
                    client.close()
                port_now = int(addr[1])
                for server in (self.setup.primary, self.setup.replica):
                    if server is not None and server.port == port_now:
                        return server
        raise RuntimeError("no Sentinel named a primary")

    def start(self) -> None:
        self.setup.start()  # it returns once the replica has synced

    def stop(self) -> None:
        self.thaw()
        self.setup.stop()


class ClusterServers(Replicated):
    """:class:`ClusterSetup`: three primaries with a replica each, node timeout 1 s."""

    kind = "cluster"
    detection = CLUSTER_NODE_TIMEOUT_MS / 1000

    def __init__(self, base: Path) -> None:
        super().__init__()
        self.setup = ClusterSetup(
            base, masters=3, replicas=1, node_timeout_ms=CLUSTER_NODE_TIMEOUT_MS
        )

    @property
    def url(self) -> str:
        return cluster_url(self.setup.urls)

    def node_options(self) -> dict[str, Any]:
        return {"cluster": [["127.0.0.1", n.port] for n in self.setup.nodes]}

    def node_urls(self) -> list[str]:
        return self.setup.urls

    def primary(self, queue: str) -> RedisServer:
        return self._master_of(f"bull:{queue}:marker")

    def _master_of(self, key: str) -> RedisServer:
        from redis import Redis

        slot, ranges = None, None
        for node in self.setup.nodes:
            if node is self.victim or node.pid is None:
                continue
            with contextlib.suppress(Exception):
                client = Redis.from_url(node.url, socket_timeout=0.5)
                try:
                    ranges = client.execute_command("CLUSTER", "SLOTS")  # type: ignore[no-untyped-call]
                    slot = int(client.execute_command("CLUSTER", "KEYSLOT", key))  # type: ignore[no-untyped-call]
                finally:
                    client.close()
                break
        if slot is None or ranges is None:
            raise RuntimeError("no cluster node answered")
        for start, end, primary, *_ in ranges:
            if start <= slot <= end:
                return next(n for n in self.setup.nodes if n.port == int(primary[1]))
        raise RuntimeError(f"no node holds the slot of {key!r}")

    def start(self) -> None:
        self.setup.start()

    def stop(self) -> None:
        self.thaw()
        self.setup.stop()


def replicated(kind: str, base: Path) -> Replicated:
    """A setup of ``kind`` (``sentinel`` or ``cluster``), not started yet."""
    if kind == "sentinel":
        return SentinelServers(base)
    if kind == "cluster":
        return ClusterServers(base)
    raise ValueError(f"unknown topology {kind!r}")
