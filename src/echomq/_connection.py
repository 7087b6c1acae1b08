"""Who owns a Redis client: the caller (never closed by us) or echomq (opened from a URL).

Nothing connects here: redis-py clients connect lazily on their first command.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

from ._wire import Channel, open_channel
from .errors import ConnectionNotOpenError, ValidationError

if TYPE_CHECKING:
    from .ops._base import Op, Plan
    from .protocol.keys import QueueKeys

T = TypeVar("T")

AsyncConnection = redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster | str
SyncConnection = redis.Redis | redis.cluster.RedisCluster | str

_SCHEMES = ("redis://", "rediss://", "unix://")


_pack: Callable[[tuple[Any, ...]], bytes] | None
try:
    from hiredis import pack_command as _pack
except ImportError:  # pragma: no cover - hiredis is a dependency, but stay usable without it
    _pack = None


async def execute(client: redis.asyncio.Redis, command: tuple[Any, ...]) -> Any:
    """Send one command and read its raw reply (no redis-py reply callback is applied).

    On a plain pooled client this takes a connection from the client's own pool and packs the
    command with hiredis: redis-py's generic path (pure-Python packing, retry wrapper, reply
    callbacks) costs more than the round trip itself for the worker's hot calls. The
    connection's own settings (auth, TLS, database, decoding) apply unchanged; any error or
    cancellation mid-call drops the connection, as redis-py does. Other clients (Cluster,
    single-connection clients) take the generic path.
    """
    pool = getattr(client, "connection_pool", None)
    if _pack is None or pool is None or getattr(client, "connection", None) is not None:
        return await client.execute_command(*command)  # type: ignore[no-untyped-call]
    conn = await pool.get_connection()
    try:
        await conn.send_packed_command(_pack(command), check_health=False)
        return await conn.read_response()
    except BaseException:
        await conn.disconnect()
        raise
    finally:
        await pool.release(conn)


async def send(
    client: redis.asyncio.Redis, channel: Channel | None, command: tuple[Any, ...]
) -> Any:
    """One command and its raw reply: on ``channel`` when there is one, else as :func:`execute`
    does on ``client``."""
    if channel is not None:
        return await channel.call(command)
    return await execute(client, command)


def has_hash_tag(key: str) -> bool:
    """Whether ``key`` carries a Redis Cluster hash tag (a non-empty ``{...}``)."""
    start = key.find("{")
    return start >= 0 and key.find("}", start + 1) > start + 1


def check_cluster_keys(client: object, keys: QueueKeys) -> None:
    """On Redis Cluster, refuse a queue whose keys would spread over several slots."""
    is_cluster = isinstance(
        client, (redis.asyncio.cluster.RedisCluster, redis.cluster.RedisCluster)
    )
    if is_cluster and not has_hash_tag(keys.base):
        raise ValidationError(
            f"queue {keys.name!r} with prefix {keys.prefix!r} has no hash tag, so its keys "
            "would land in different Redis Cluster slots; use a prefix like '{bull}' or a "
            "queue name like '{" + keys.name + "}'"
        )


@functools.cache
def _cluster_parameters() -> frozenset[str]:
    """Keyword arguments RedisCluster accepts (its stored connection kwargs hold more)."""
    params = inspect.signature(redis.asyncio.cluster.RedisCluster.__init__).parameters
    return frozenset(params) - {"self", "host", "port", "startup_nodes"}


def _check_url(url: str) -> None:
    if not url.startswith(_SCHEMES):
        raise ValidationError(
            f"connection URL {url!r} must start with redis://, rediss:// or unix://"
        )


class AsyncConn:
    """An async client plus whether we must close it, and (for long-lived owners such as a
    Queue, a Worker or QueueEvents) a pipelined :class:`~echomq._wire.Channel` for script
    calls, opened on first use with the client's settings.
    """

    __slots__ = ("_channel", "_client", "_pipelined", "owned", "url")

    def __init__(self, connection: AsyncConnection, *, pipelined: bool = False) -> None:
        self._pipelined = pipelined
        self._channel: Channel | None = None
        if isinstance(connection, str):
            _check_url(connection)
            self._client: redis.asyncio.Redis | None = redis.asyncio.Redis.from_url(connection)
            self.owned = True
            self.url: str | None = connection
        elif isinstance(connection, (redis.asyncio.Redis, redis.asyncio.cluster.RedisCluster)):
            # A RedisCluster offers the commands echomq uses; typed as Redis internally.
            self._client = cast(redis.asyncio.Redis, connection)
            self.owned = False
            self.url = None
        else:
            raise ValidationError(
                "connection must be a redis.asyncio.Redis, a redis.asyncio.cluster.RedisCluster "
                f"or a redis:// / rediss:// / unix:// URL, got {type(connection).__name__}"
            )

    @property
    def client(self) -> redis.asyncio.Redis:
        """The client; raises :class:`ConnectionNotOpenError` once closed."""
        if self._client is None:
            raise ConnectionNotOpenError(
                "this object's connection was closed; use a Queue that is still open, or pass a "
                "redis.asyncio.Redis client you own"
            )
        return self._client

    @property
    def channel(self) -> Channel | None:
        """The pipelined channel for script calls, or None (not pipelined, or a client a
        channel cannot mirror, such as Redis Cluster)."""
        if self._channel is None and self._pipelined:
            self._channel = open_channel(self.client)
            self._pipelined = self._channel is not None
        return self._channel

    async def run(self, op: Op[T]) -> T:
        """Run ``op`` on the client, its script calls through the channel when there is one."""
        return await op.run(self.client, self.channel)

    async def run_plan(self, plan: Plan[T]) -> T:
        """Drive a multi-step ``plan`` like :meth:`run`."""
        from .ops._base import run_plan  # ops import this module

        return await run_plan(self.client, plan, self.channel)

    def new_client(self, **overrides: object) -> redis.asyncio.Redis:
        """A second, independent client to the same server (for blocking commands).

        Args:
            **overrides: connection keyword arguments to change (e.g. ``client_name``).
        """
        client = self.client
        if isinstance(client, redis.asyncio.cluster.RedisCluster):
            nodes = [
                redis.asyncio.cluster.ClusterNode(node.host, node.port)
                for node in client.get_primaries()
            ]
            accepted = _cluster_parameters()
            options: dict[str, Any] = {
                k: v for k, v in {**client.connection_kwargs, **overrides}.items() if k in accepted
            }
            return cast(
                redis.asyncio.Redis,
                redis.asyncio.cluster.RedisCluster(startup_nodes=nodes, **options),
            )
        pool = client.connection_pool
        kwargs = {**pool.connection_kwargs, **overrides}
        # from_pool: the new client owns its pool and closes it with itself.
        return redis.asyncio.Redis.from_pool(
            pool.__class__(connection_class=pool.connection_class, **kwargs)
        )

    async def aclose(self) -> None:
        """Close the channel, and the client if we opened it; forget both either way."""
        client, self._client = self._client, None
        channel, self._channel = self._channel, None
        self._pipelined = False
        if channel is not None:
            await channel.aclose()
        if client is not None and self.owned:
            await client.aclose()


class SyncConn:
    """A sync client plus whether we must close it."""

    __slots__ = ("_client", "owned")

    def __init__(self, connection: SyncConnection) -> None:
        if isinstance(connection, str):
            _check_url(connection)
            self._client: redis.Redis | None = redis.Redis.from_url(connection)
            self.owned = True
        elif isinstance(connection, (redis.Redis, redis.cluster.RedisCluster)):
            self._client = cast(redis.Redis, connection)
            self.owned = False
        else:
            raise ValidationError(
                "connection must be a redis.Redis, a redis.cluster.RedisCluster or a redis:// /"
                f" rediss:// / unix:// URL, got {type(connection).__name__}"
            )

    @property
    def client(self) -> redis.Redis:
        """The client; raises :class:`ConnectionNotOpenError` once closed."""
        if self._client is None:
            raise ConnectionNotOpenError(
                "this object's connection was closed; pass a redis.Redis client you own"
            )
        return self._client

    def close(self) -> None:
        """Close the client if we opened it; forget it either way."""
        client, self._client = self._client, None
        if client is not None and self.owned:
            client.close()
