# Generated from src/echomq/_redis/connection.py by scripts/unasync.py: do not edit.
# Edit the source, then run `python scripts/unasync.py` (scripts/check fails while this
# file is stale).
"""Who owns a Redis client: the caller (never closed by us) or echomq (opened from a URL).

Nothing connects here: redis-py clients connect lazily on their first command. An entry point
given no connection takes the one :func:`resolve_connection` picks (``default``). A client opened
from a URL is made by :func:`sync_client_from_url` (its connections fail fast when the owner
gives a connect budget, ``fail_fast``; a Sentinel or Cluster URL, ``topology``, gives redis-py's
own clients for them). An :class:`SyncConn` runs ops (``run``) on its client and, for
long-lived owners, on a pipelined Channel (``wire``, which also chooses each command's way out).

Written once, for asyncio; ``_redis/connection_sync.py`` is its generated blocking twin
(``scripts/unasync.py``): ``SyncConn``, ``sync_client_from_url``. What only an event loop has
(the pipelined Channel, following Sentinel failovers, a second client for blocking commands)
is marked async-only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar, cast

import redis
import redis.backoff
import redis.cluster
import redis.exceptions
import redis.retry
import redis.sentinel

from .._ops._base import Op, Plan
from ..errors import ConnectionNotOpenError, ValidationError
from ..options import Duration
from . import default, topology
from .fail_fast import (
    connect_budget,
    fail_fast_class,
    fail_fast_options,
    redact_url,
    server_address,
    url_address,
)
from .run_sync import run_op, run_plan
from .urls import check_url
from .wire import Channel

T = TypeVar("T")

#: What ``connection=`` accepts.
SyncConnection = redis.Redis | redis.cluster.RedisCluster | str


def resolve_connection(connection: SyncConnection | None) -> SyncConnection:
    """``connection``, or when None the one the connection rule picks for this API
    (``_redis.default``: the default set, ``$ECHOMQ_REDIS_URL``, a running embedded Redis).

    Raises:
        ConnectionNotOpenError: None given and no connection anywhere, or a default client
            of the other API's kind.
    """
    if connection is not None:
        return connection
    return cast(SyncConnection, default.pick(is_async=False))


def sync_client_from_url(url: str, connect_timeout: Duration | None, **options: Any) -> redis.Redis:
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
        return redis.Redis.from_url(url, **options)
    retry = redis.retry.Retry(redis.backoff.NoBackoff(), 0)
    fail_fast_options(url, budget, options, retry)
    single = options.pop("single_connection_client", False)
    pool = redis.ConnectionPool.from_url(url, **options)
    pool.connection_class = fail_fast_class(pool.connection_class)
    client = redis.Redis(connection_pool=pool, single_connection_client=single)
    client.auto_close_connection_pool = True  # closed with the client, as from_url does
    return client


def _topology_client(
    t: topology.Topology, budget: float | None, options: dict[str, Any]
) -> redis.Redis:
    """A Sentinel-managed client (it asks the Sentinels for the current master), or a
    ``RedisCluster`` (typed as a client: it offers the commands echomq uses)."""
    kwargs = topology.node_kwargs(t, budget, options)
    if t.kind == "sentinel":
        assert t.service is not None
        sentinel = redis.sentinel.Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
            list(t.nodes), sentinel_kwargs=topology.sentinel_kwargs(t, budget)
        )
        if t.tls:
            kwargs["ssl"] = True
        master: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call, unused-ignore]
            t.service, db=t.db, **kwargs
        )
        return master
    nodes = [
        redis.cluster.ClusterNode(host, port)  # type: ignore[no-untyped-call, unused-ignore]
        for host, port in t.nodes
    ]
    cluster = redis.cluster.RedisCluster(startup_nodes=nodes, ssl=t.tls, **kwargs)
    return cast(redis.Redis, cluster)


#: Called once, after the first call that succeeded on a connection (the per-server checks).
FirstUse = Callable[["SyncConn"], None]


class SyncConn:
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
        connection: SyncConnection,
        *,
        connect_timeout: Duration | None = None,
    ) -> None:
        self._channel: Channel | None = None
        self.first_use: FirstUse | None = None
        if isinstance(connection, str):
            self._client: redis.Redis | None = sync_client_from_url(connection, connect_timeout)
            self.owned = True
            self.url: str | None = connection
        elif isinstance(connection, (redis.Redis, redis.cluster.RedisCluster)):
            # A RedisCluster offers the commands echomq uses; typed as Redis internally.
            self._client = cast(redis.Redis, connection)
            self.owned = False
            self.url = None
        else:
            raise ValidationError(
                "connection must be a redis.Redis, a redis.cluster.RedisCluster "
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
    def client(self) -> redis.Redis:
        """The client; raises :class:`ConnectionNotOpenError` once closed."""
        if self._client is None:
            raise ConnectionNotOpenError(
                "this object's connection was closed; use one that is still open, or pass a "
                "redis.Redis client you own"
            )
        return self._client

    @property
    def channel(self) -> Channel | None:
        """The pipelined channel for script calls, or None (not pipelined, a sync owner, or a
        client a channel cannot mirror, such as Redis Cluster)."""
        return self._channel

    def run(self, op: Op[T]) -> T:
        """Run ``op`` on the client, its script calls through the channel when there is one."""
        result = run_op(self.client, op, self.channel)
        if self.first_use is not None:
            self._used()
        return result

    def run_plan(self, plan: Plan[T]) -> T:
        """Drive a multi-step ``plan`` like :meth:`run`."""
        result = run_plan(self.client, plan, self.channel)
        if self.first_use is not None:
            self._used()
        return result

    def _used(self) -> None:
        hook, self.first_use = self.first_use, None
        if hook is not None:
            hook(self)

    def close(self) -> None:
        """Close the channel, and the client if we opened it; forget both either way."""
        client, self._client = self._client, None
        self.first_use = None
        if client is not None and self.owned:
            topology.close(client)
