"""The few places where redis-py's async and sync APIs differ, each as an async function and
its ``_sync`` counterpart.

``_redis/run.py`` and ``_redis/connection.py`` are written once, for asyncio, and their blocking
twins are generated from them (``scripts/unasync.py``, which turns ``variants.NAME`` into
``variants.NAME_sync``). What the generator cannot derive by removing ``await`` lives here: a
single command (an async owner may send it on a pipelined Channel, a sync one through the
client), one connection held from a pool or a cluster node, and one reply read with a
timeout. Nothing here decides anything; each pair is the same step in the two APIs.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Iterator
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from redis import exceptions as rx

from . import pools
from .wire import Channel, send


def call(
    client: redis.asyncio.Redis, channel: Channel | None, command: tuple[Any, ...]
) -> Awaitable[Any]:
    """One command and its reply, on ``channel`` when there is one (``wire.send``)."""
    return send(client, channel, command)


def call_sync(client: redis.Redis, channel: Channel | None, command: tuple[Any, ...]) -> Any:
    """One command and its reply, through the client (a sync owner has no channel)."""
    return client.execute_command(*command)  # type: ignore[no-untyped-call]


async def load_script(client: redis.asyncio.Redis, channel: Channel | None, text: str) -> None:
    """``SCRIPT LOAD`` on ``channel`` when there is one, else by redis-py (which loads it on
    every primary of a Cluster)."""
    if channel is not None:
        await channel.call(("SCRIPT", "LOAD", text))
    else:
        await client.script_load(text)


def load_script_sync(client: redis.Redis, channel: Channel | None, text: str) -> None:
    """``SCRIPT LOAD`` by redis-py (on every primary of a Cluster)."""
    client.script_load(text)


@contextlib.asynccontextmanager
async def held(client: redis.asyncio.Redis, route: str) -> AsyncIterator[Any]:
    """One connection, held until the block ends: from the pool of the node that holds
    ``route``'s slot on a Cluster client, else from the client's pool (on a Sentinel-managed
    client, a connection to the current master)."""
    if isinstance(client, redis.asyncio.cluster.RedisCluster):
        await client.initialize()
        node = client.get_node_from_key(route)
        if node is None:  # only for a replica lookup; typed Optional by redis-py
            raise rx.SlotNotCoveredError(f"no node holds the slot of {route!r}")
        connection = node.acquire_connection()
        try:
            yield connection
        finally:
            node.release(connection)
        return
    pool = client.connection_pool
    connection = await pools.take(pool)
    try:
        yield connection
    finally:
        await pool.release(connection)


@contextlib.contextmanager
def held_sync(client: redis.Redis, route: str) -> Iterator[Any]:
    """One connection, held until the block ends (see :func:`held`)."""
    if isinstance(client, redis.cluster.RedisCluster):
        node = client.get_node_from_key(route)
        pool = client.get_redis_connection(node).connection_pool
    else:
        pool = client.connection_pool
    connection = pools.take_sync(pool)
    try:
        yield connection
    finally:
        pool.release(connection)


async def read_reply(connection: Any, timeout: float | None) -> Any:
    """One reply read on ``connection``, waiting ``timeout`` seconds at most (None: the
    connection's socket timeout)."""
    return await connection.read_response(timeout=timeout)


def read_reply_sync(connection: Any, timeout: float | None) -> Any:
    """One reply read on ``connection`` (see :func:`read_reply`)."""
    if timeout is None:
        return connection.read_response()
    return connection.read_response(timeout=timeout)


async def cluster_ready(client: redis.asyncio.cluster.RedisCluster) -> None:
    """Have an async Cluster client read its slot map (it does so lazily, on its first
    command); a sync one reads it when made."""
    await client.initialize()


def cluster_ready_sync(client: redis.cluster.RedisCluster) -> None:
    """Nothing to do: a sync Cluster client reads its slot map when made."""
