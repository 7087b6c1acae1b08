"""Who owns a Redis client: the caller (never closed by us) or echomq (opened from a URL).

Nothing connects here: redis-py clients connect lazily on their first command. An entry point
given no connection takes the one :func:`resolve_connection` picks (``default``). A client opened
from a URL is made by :func:`async_client_from_url` (its connections fail fast when the owner
gives a connect budget, ``fail_fast``; a Sentinel or Cluster URL, ``topology``, gives redis-py's
own clients for them). An :class:`AsyncConn` runs ops (``run``) on its client and, for
long-lived owners, on a pipelined Channel (``wire``, which also chooses each command's way out).

Written once, for asyncio; ``_redis/connection_sync.py`` is its generated blocking twin
(``scripts/unasync.py``): ``SyncConn``, ``sync_client_from_url``. What only an event loop has
(the pipelined Channel, following Sentinel failovers, a second client for blocking commands)
is marked async-only.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar, cast

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.retry
import redis.asyncio.sentinel
import redis.backoff
import redis.cluster
import redis.exceptions
import redis.retry
import redis.sentinel

from .._ops._base import Op, Plan
from ..errors import ConnectionNotOpenError, ValidationError
from ..options import Duration
from . import default, restricted, topology
from .fail_fast import (
    connect_budget,
    fail_fast_class,
    fail_fast_options,
    redact_url,
    server_address,
    url_address,
)
from .run import run_op, run_plan
from .sentinel_watch import SentinelWatch, sentinel_pool
from .urls import check_url
from .wire import Channel, open_channel

T = TypeVar("T")

#: What ``connection=`` accepts.
AsyncConnection = redis.asyncio.Redis | redis.asyncio.cluster.RedisCluster | str


def resolve_connection(connection: AsyncConnection | None) -> AsyncConnection:
    """``connection``, or when None the one the connection rule picks for this API
    (``_redis.default``: the default set, ``$ECHOMQ_REDIS_URL``, a running embedded Redis).

    Raises:
        ConnectionNotOpenError: None given and no connection anywhere, or a default client
            of the other API's kind.
    """
    if connection is not None:
        return connection
    return cast(AsyncConnection, default.pick(is_async=True))


def async_client_from_url(
    url: str, connect_timeout: Duration | None, **options: Any
) -> redis.asyncio.Redis:
    """A client for ``url``; with ``connect_timeout``, one whose connections fail fast.

    Args:
        url: a ``redis://``, ``rediss://`` or ``unix://`` URL, or a Sentinel or Cluster URL
            (``topology``).
        connect_timeout: seconds (or timedelta) for TCP plus handshake (for Sentinel and
            Cluster: for each TCP connect), or None for redis-py's own defaults.
        **options: more keyword arguments for redis-py's ``from_url``.
    """
    check_url(url)
    budget = None if connect_timeout is None else connect_budget(connect_timeout)
    if topology.is_topology_url(url):
        return _topology_client(topology.parse(url), budget, options)
    if budget is None:
        return redis.asyncio.Redis.from_url(url, **options)
    retry = redis.asyncio.retry.Retry(redis.backoff.NoBackoff(), 0)
    fail_fast_options(url, budget, options, retry)
    single = options.pop("single_connection_client", False)
    pool = redis.asyncio.ConnectionPool.from_url(url, **options)
    pool.connection_class = fail_fast_class(pool.connection_class)
    client = redis.asyncio.Redis(connection_pool=pool, single_connection_client=single)
    client.auto_close_connection_pool = True  # closed with the client, as from_url does
    return client


def _topology_client(
    t: topology.Topology, budget: float | None, options: dict[str, Any]
) -> redis.asyncio.Redis:
    """A Sentinel-managed client (it asks the Sentinels for the current master), or a
    ``RedisCluster`` (typed as a client: it offers the commands echomq uses)."""
    kwargs = topology.node_kwargs(t, budget, options)
    if t.kind == "sentinel":
        assert t.service is not None
        sentinel = redis.asyncio.sentinel.Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
            list(t.nodes), sentinel_kwargs=topology.sentinel_kwargs(t, budget)
        )
        if t.tls:
            kwargs["ssl"] = True
        master: redis.asyncio.Redis = sentinel.master_for(  # type: ignore[no-untyped-call, unused-ignore]
            t.service, db=t.db, **kwargs
        )
        return master
    nodes = [
        redis.asyncio.cluster.ClusterNode(host, port)  # type: ignore[no-untyped-call, unused-ignore]
        for host, port in t.nodes
    ]
    cluster = redis.asyncio.cluster.RedisCluster(startup_nodes=nodes, ssl=t.tls, **kwargs)
    return cast(redis.asyncio.Redis, cluster)


#: Called once, after the first call that succeeded on a connection (the per-server checks).
FirstUse = Callable[["AsyncConn"], Awaitable[None]]


class AsyncConn:
    """A client plus whether we must close it, and (for long-lived owners such as a Queue, a
    Worker or QueueEvents) a pipelined :class:`~echomq._redis.wire.Channel` for script calls,
    opened on first use with the client's settings.

    Args:
        connection: a client the caller owns, or a URL to open one from.
        pipelined: (async API only) send script calls through a Channel.
        connect_timeout: for a URL, the budget of each connect (see the module docstring);
            None keeps redis-py's defaults.

    Attributes:
        first_use: if set, called (and awaited) once after the first call that succeeds (it
            must not raise); the per-server checks of producers hook in here.
    """

    __slots__ = ("_channel", "_client", "_pipelined", "_watch", "first_use", "owned", "url")

    def __init__(
        self,
        connection: AsyncConnection,
        *,
        # unasync: async-only
        pipelined: bool = False,
        # unasync: end
        connect_timeout: Duration | None = None,
    ) -> None:
        self._channel: Channel | None = None
        # unasync: async-only
        self._pipelined = pipelined
        self._watch: SentinelWatch | None = None
        # unasync: end
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

    @property
    def client(self) -> redis.asyncio.Redis:
        """The client; raises :class:`ConnectionNotOpenError` once closed."""
        if self._client is None:
            raise ConnectionNotOpenError(
                "this object's connection was closed; use one that is still open, or pass a "
                "redis.asyncio.Redis client you own"
            )
        return self._client

    @property
    def channel(self) -> Channel | None:
        """The pipelined channel for script calls, or None (not pipelined, a sync owner, or a
        client a channel cannot mirror, such as Redis Cluster)."""
        # unasync: async-only
        if self._channel is None and self._pipelined:
            self._channel = open_channel(self.client)
            self._pipelined = self._channel is not None
            if not self._pipelined:  # a long-lived owner: follow Sentinel failovers
                self._follow_failovers(None)
        # unasync: end
        return self._channel

    async def run(self, op: Op[T]) -> T:
        """Run ``op`` on the client, its script calls through the channel when there is one."""
        result = await run_op(self.client, op, self.channel)
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

    # unasync: async-only
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

    def new_client(self, *, follow: bool = True, **overrides: object) -> redis.asyncio.Redis:
        """A second, independent client to the same server (for blocking commands).

        A ``client_name`` is set on each connection where the server allows it; where it
        refuses ``CLIENT SETNAME`` for good (renamed away, or denied to the ACL user), the
        connection stays unnamed and the refusal is logged once (``restricted``).

        Args:
            follow: on a Sentinel-managed client, drop the new client's connections as soon as
                the Sentinels switch masters, from this loop; False for a client used on
                another event loop (it finds the new master when a connection fails).
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
        if follow and isinstance(new_pool, redis.asyncio.sentinel.SentinelConnectionPool):
            self._follow_failovers(new_pool)
        named = kwargs.get("client_name") and kwargs.get("redis_connect_func") is None
        if named and open_channel(made) is None:
            # No Channel will carry its commands (a Sentinel pool, RESP3...): redis-py's
            # handshake names its connections, and must carry on where a managed Redis
            # refuses CLIENT SETNAME, as a Channel's handshake does.
            new_pool.connection_kwargs["redis_connect_func"] = _name_if_allowed(self.server)
        return made

    # unasync: end

    async def aclose(self) -> None:
        """Close the channel, and the client if we opened it; forget both either way."""
        client, self._client = self._client, None
        self.first_use = None
        # unasync: async-only
        channel, self._channel = self._channel, None
        watch, self._watch = self._watch, None
        self._pipelined = False
        if watch is not None:
            await watch.aclose()
        if channel is not None:
            await channel.aclose()
        # unasync: end
        if client is not None and self.owned:
            await topology.aclose(client)


# unasync: async-only
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


# unasync: end
