"""Who owns a Redis client: the caller (never closed by us) or echomq (opened from a URL).

Nothing connects here: redis-py clients connect lazily on their first command. A client opened
from a URL is made by ``fail_fast`` (with a connect budget when the owner asks for one). An
:class:`AsyncConn` runs ops (``_ops._base``) on its client and, for long-lived owners, on a
pipelined Channel (``wire``, which also chooses each command's way out); this module sits above
both, and nothing below it imports it.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, cast

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.sentinel
import redis.cluster
import redis.exceptions

from .._ops._base import Op, Plan, run_plan, run_plan_sync
from .._ops.scripts import has_hash_tag
from ..errors import ConnectionNotOpenError, ValidationError
from ..options import Duration
from . import restricted, topology
from .fail_fast import (
    async_client_from_url,
    redact_url,
    server_address,
    sync_client_from_url,
    url_address,
)
from .sentinel_watch import SentinelWatch, sentinel_pool
from .wire import Channel, open_channel

if TYPE_CHECKING:
    from ..protocol.keys import QueueKeys

T = TypeVar("T")

AsyncConnection = redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster | str
SyncConnection = redis.Redis | redis.cluster.RedisCluster | str


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


def _hash_tag(key: str) -> str | None:
    """The hash tag Redis Cluster hashes ``key`` by: the first non-empty ``{...}``."""
    start = key.find("{")
    if start < 0:
        return None
    end = key.find("}", start + 1)
    return key[start + 1 : end] if end > start + 1 else None


def check_cluster_flow(client: object, queues: Sequence[QueueKeys]) -> None:
    """On Redis Cluster, refuse a flow whose queues do not all share one hash tag (its
    scripts touch keys of every queue of the flow)."""
    is_cluster = isinstance(
        client, (redis.asyncio.cluster.RedisCluster, redis.cluster.RedisCluster)
    )
    if not is_cluster:
        return
    first = queues[0]
    tag = _hash_tag(first.base)
    if tag is None:
        raise ValidationError(
            f"queue {first.name!r} (prefix {first.prefix!r}) has no hash tag; on Redis Cluster "
            "every queue of a flow must carry the same one, e.g. prefix '{flows}'"
        )
    for keys in queues:
        if _hash_tag(keys.base) != tag:
            raise ValidationError(
                f"queue {keys.name!r} (prefix {keys.prefix!r}) does not share the hash tag "
                f"{{{tag}}} of queue {first.name!r}; on Redis Cluster every queue of a flow "
                "must carry the same hash tag, e.g. prefix '{flows}' for all of them"
            )


@functools.cache
def _cluster_parameters() -> frozenset[str]:
    """Keyword arguments RedisCluster accepts (its stored connection kwargs hold more)."""
    params = inspect.signature(redis.asyncio.cluster.RedisCluster.__init__).parameters
    return frozenset(params) - {"self", "host", "port", "startup_nodes"}


def _name_if_allowed(address: str) -> Callable[[Any], Awaitable[None]]:
    """A ``redis_connect_func``: redis-py's handshake without the connection's name, then
    ``CLIENT SETNAME`` on its own, the connection left unnamed (and the refusal reported once,
    see ``restricted``) when the server has no CLIENT command or the ACL user may not run it."""

    async def handshake(connection: Any) -> None:
        name = connection.client_name
        connection.client_name = None
        try:
            await connection.on_connect()
        finally:
            connection.client_name = name
        if not name:
            return
        await connection.send_command("CLIENT", "SETNAME", name)
        try:
            await connection.read_response()
        except redis.exceptions.ResponseError as exc:
            if not restricted.report("CLIENT SETNAME", address, exc):
                raise

    return handshake


#: Called once, after the first call that succeeded on a connection (the per-server checks).
FirstUse = Callable[["AsyncConn"], Awaitable[None]]


class _Addressed:
    """Where an :class:`AsyncConn` or a :class:`SyncConn` points, from its URL if it was made
    from one, else from its client's settings."""

    __slots__ = ()
    url: str | None
    _client: Any

    @property
    def address(self) -> str:
        """Where the server is, for messages: the URL (password masked), else ``host:port``."""
        if self.url is not None:
            return redact_url(self.url)
        return server_address(self._client)

    @property
    def server(self) -> str:
        """The server's identity for per-server state: ``host:port`` or the socket path."""
        if self.url is not None:
            return url_address(self.url)
        return server_address(self._client)


class AsyncConn(_Addressed):
    """An async client plus whether we must close it, and (for long-lived owners such as a
    Queue, a Worker or QueueEvents) a pipelined :class:`~echomq._redis.wire.Channel` for script
    calls, opened on first use with the client's settings.

    Args:
        connection: a client the caller owns, or a URL to open one from.
        pipelined: send script calls through a Channel.
        connect_timeout: for a URL, the budget of each connect (see the module docstring);
            None keeps redis-py's defaults.

    Attributes:
        first_use: if set, awaited once after the first call that succeeds (it must not
            raise); the per-server checks of producers hook in here.
    """

    __slots__ = ("_channel", "_client", "_pipelined", "_watch", "first_use", "owned", "url")

    def __init__(
        self,
        connection: AsyncConnection,
        *,
        pipelined: bool = False,
        connect_timeout: Duration | None = None,
    ) -> None:
        self._pipelined = pipelined
        self._channel: Channel | None = None
        self._watch: SentinelWatch | None = None
        self.first_use: FirstUse | None = None
        if isinstance(connection, str):
            self._client: redis.asyncio.Redis | None = async_client_from_url(
                connection, connect_timeout
            )
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
            if not self._pipelined:  # a long-lived owner: follow Sentinel failovers
                self._follow_failovers(None)
        return self._channel

    def _follow_failovers(self, pool: redis.asyncio.ConnectionPool | None) -> None:
        """On a Sentinel-managed client, drop the connections of the client (and of ``pool``,
        made from it) as soon as the Sentinels switch masters (``sentinel_watch``)."""
        if self._watch is None:
            own = sentinel_pool(self.client)
            if own is None:
                return
            self._watch = SentinelWatch(own)
        if pool is not None:
            self._watch.follow(pool)
        with contextlib.suppress(RuntimeError):  # no running loop: a later follow starts it
            self._watch.start()

    async def run(self, op: Op[T]) -> T:
        """Run ``op`` on the client, its script calls through the channel when there is one."""
        result = await op.run(self.client, self.channel)
        if self.first_use is not None:
            await self._used()
        return result

    async def run_plan(self, plan: Plan[T]) -> T:
        """Drive a multi-step ``plan`` like :meth:`run`."""
        result = await run_plan(self.client, plan, self.channel)
        if self.first_use is not None:
            await self._used()
        return result

    async def _used(self) -> None:
        hook, self.first_use = self.first_use, None
        if hook is not None:
            await hook(self)

    def new_client(self, **overrides: object) -> redis.asyncio.Redis:
        """A second, independent client to the same server (for blocking commands).

        A ``client_name`` is set on each connection where the server allows it; where it
        refuses ``CLIENT SETNAME`` for good (renamed away, or denied to the ACL user), the
        connection stays unnamed and the refusal is logged once (``restricted``).

        Args:
            **overrides: connection keyword arguments to change (e.g. ``client_name``).
        """
        client = self.client
        if isinstance(client, redis.asyncio.cluster.RedisCluster):
            # the primaries once the client knows the cluster, else its startup nodes
            known = client.get_primaries() or list(client.nodes_manager.startup_nodes.values())
            nodes = [redis.asyncio.cluster.ClusterNode(node.host, node.port) for node in known]
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
        new_pool: redis.asyncio.ConnectionPool
        if isinstance(pool, redis.asyncio.sentinel.SentinelConnectionPool):
            # Sentinel-managed: the new pool asks the same Sentinels for the current master
            # (its back-reference to its pool is made anew, not copied).
            kwargs.pop("connection_pool", None)
            new_pool = redis.asyncio.sentinel.SentinelConnectionPool(  # type: ignore[no-untyped-call]
                pool.service_name,
                pool.sentinel_manager,
                is_master=pool.is_master,
                check_connection=pool.check_connection,
                connection_class=pool.connection_class,
                **kwargs,
            )
        else:
            new_pool = pool.__class__(connection_class=pool.connection_class, **kwargs)
        # from_pool: the new client owns its pool and closes it with itself.
        made = redis.asyncio.Redis.from_pool(new_pool)
        if isinstance(new_pool, redis.asyncio.sentinel.SentinelConnectionPool):
            self._follow_failovers(new_pool)
        named = kwargs.get("client_name") and kwargs.get("redis_connect_func") is None
        if named and open_channel(made) is None:
            # No Channel will carry its commands (a Sentinel pool, RESP3...): redis-py's
            # handshake names its connections, and must carry on where a managed Redis
            # refuses CLIENT SETNAME, as a Channel's handshake does.
            new_pool.connection_kwargs["redis_connect_func"] = _name_if_allowed(self.server)
        return made

    async def aclose(self) -> None:
        """Close the channel, and the client if we opened it; forget both either way."""
        client, self._client = self._client, None
        channel, self._channel = self._channel, None
        watch, self._watch = self._watch, None
        self._pipelined = False
        self.first_use = None
        if watch is not None:
            await watch.aclose()
        if channel is not None:
            await channel.aclose()
        if client is not None and self.owned:
            await topology.aclose(client)


#: The sync twin of :data:`FirstUse`.
SyncFirstUse = Callable[["SyncConn"], None]


class SyncConn(_Addressed):
    """A sync client plus whether we must close it.

    Args:
        connection: a client the caller owns, or a URL to open one from.
        connect_timeout: for a URL, the budget of each connect; None keeps redis-py's defaults.

    Attributes:
        first_use: if set, called once after the first call that succeeds (it must not raise).
    """

    __slots__ = ("_client", "first_use", "owned", "url")

    def __init__(
        self,
        connection: SyncConnection,
        *,
        connect_timeout: Duration | None = None,
    ) -> None:
        self.first_use: SyncFirstUse | None = None
        if isinstance(connection, str):
            self._client: redis.Redis | None = sync_client_from_url(connection, connect_timeout)
            self.owned = True
            self.url: str | None = connection
        elif isinstance(connection, (redis.Redis, redis.cluster.RedisCluster)):
            self._client = cast(redis.Redis, connection)
            self.owned = False
            self.url = None
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

    def run(self, op: Op[T]) -> T:
        """Run ``op`` on the client."""
        result = op.run_sync(self.client)
        if self.first_use is not None:
            self._used()
        return result

    def run_plan(self, plan: Plan[T]) -> T:
        """Drive a multi-step ``plan`` on the client."""
        result = run_plan_sync(self.client, plan)
        if self.first_use is not None:
            self._used()
        return result

    def _used(self) -> None:
        hook, self.first_use = self.first_use, None
        if hook is not None:
            hook(self)

    def close(self) -> None:
        """Close the client if we opened it; forget it either way."""
        client, self._client = self._client, None
        self.first_use = None
        if client is not None and self.owned:
            topology.close(client)
