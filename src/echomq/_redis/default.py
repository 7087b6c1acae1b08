"""The connection rule: which Redis a call uses when it was given no ``connection``.

Every public entry point that takes ``connection=`` (the module-level functions, ``Queue``,
``Worker``, ``QueueEvents``, ``FlowProducer``, tasks, and their twins in ``echomq.sync``) asks
:func:`pick` when it got None, and :func:`pick` answers in this order:

1. the connection given to :func:`set_default_connection` (a URL or a client);
2. ``$ECHOMQ_REDIS_URL``;
3. the per-user embedded Redis (:mod:`echomq.embedded`), **only if it is already running**
   (``echomq demo`` and ``echomq server start`` start it), saying so once per process: a
   WARNING on the ``echomq.connection`` logger naming its URL and how to use your own Redis
   (with no logging configured, Python prints it on stderr);
4. else :class:`~echomq.ConnectionNotOpenError`, naming the ways to give one.

Invariants: nothing here starts a server (a misconfigured production process must fail, not
enqueue into a daemon it started), connects, or closes anything. A URL is returned as a URL, so
the object that opens it owns it and closes it, as a URL passed in. The default and the
environment are read on every call, so a default set (or a variable changed) later applies to
the calls made after it. The async API gets async clients and the sync API sync ones: a default
client of the other kind is refused with a message saying what to pass instead.
"""

from __future__ import annotations

import logging
import os
import threading

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

from ..embedded import embedded_server_status
from ..errors import ConnectionNotOpenError, ValidationError

#: The environment variable read when no connection was given or set.
ENV_VAR = "ECHOMQ_REDIS_URL"

#: What :func:`set_default_connection` accepts (None forgets the default).
DefaultConnection = (
    str
    | redis.asyncio.Redis
    | redis.asyncio.cluster.RedisCluster
    | redis.Redis
    | redis.cluster.RedisCluster
)

logger = logging.getLogger("echomq.connection")

_ASYNC_CLIENTS = (redis.asyncio.Redis, redis.asyncio.cluster.RedisCluster)
_SYNC_CLIENTS = (redis.Redis, redis.cluster.RedisCluster)

_default: list[DefaultConnection] = []  # one slot: the process-wide default connection
_noticed: list[str] = []  # the embedded URL the notice named; empty until it was logged
_lock = threading.Lock()  # the sync API may resolve from several threads at once


def set_default_connection(connection: DefaultConnection | None) -> None:
    """Set the connection every call uses when it is given none (``connection=``, or a task's
    ``using(connection=...)``), before ``ECHOMQ_REDIS_URL`` and the embedded Redis.

    Objects read it when they are made (a ``Queue``, a ``Worker``...), calls when they run.

    Args:
        connection: a Redis URL (it serves the async and the sync API: each object or call
            opens its own client from it and closes it), a ``redis.asyncio.Redis`` or
            ``RedisCluster`` (for the async API), a ``redis.Redis`` or ``RedisCluster`` (for
            ``echomq.sync`` and a task's ``enqueue`` / ``result``), or None to forget the
            default. A client you set is never closed by echomq.

    Raises:
        ValidationError: ``connection`` is none of those.
    """
    if connection is not None and not isinstance(
        connection, (str, *_ASYNC_CLIENTS, *_SYNC_CLIENTS)
    ):
        raise ValidationError(
            "set_default_connection takes a Redis URL, a redis.asyncio.Redis, a redis.Redis "
            f"(or a RedisCluster of either kind), or None; got {type(connection).__name__}"
        )
    with _lock:
        _default.clear()
        if connection is not None:
            _default.append(connection)


def default_redis_url() -> str:
    """The Redis URL a call given no connection uses, by the connection rule: the URL given
    to :func:`set_default_connection`, else ``$ECHOMQ_REDIS_URL``, else the URL of the
    embedded Redis if it is running (saying so once, as any call would).

    For code that needs a client of its own on the same Redis, e.g.
    ``redis.asyncio.Redis.from_url(echomq.default_redis_url())``. Nothing is started or
    opened.

    Raises:
        ConnectionNotOpenError: no connection anywhere (the message says how to give one), or
            the default is a client, which has no URL to give (use that client).
    """
    chosen = _default[0] if _default else None
    if chosen is None:
        return _found_url()
    if isinstance(chosen, str):
        return chosen
    raise ConnectionNotOpenError(
        f"the default connection is a {_kind(chosen)} client, not a URL: use that client, or "
        "give echomq.set_default_connection a URL"
    )


def pick(*, is_async: bool) -> DefaultConnection:
    """The connection for an entry point that was given none (see the module docstring).

    Args:
        is_async: the asking API is the async one (else ``echomq.sync`` or a task's sync
            ``enqueue`` / ``result``).

    Returns:
        The default client, or a URL for the caller to open (and close).

    Raises:
        ConnectionNotOpenError: no connection anywhere, or a default client of the other
            kind.
    """
    chosen = _default[0] if _default else None
    if chosen is None:
        return _found_url()
    if not isinstance(chosen, str):
        refuse_other_kind(
            chosen,
            is_async=is_async,
            given="the default connection (set with echomq.set_default_connection)",
        )
    return chosen


def refuse_other_kind(client: object, *, is_async: bool, given: str) -> None:
    """Raise when ``client`` is a client of the other API's kind.

    Args:
        client: a client (a URL serves both kinds and is never refused).
        is_async: the asking API is the async one.
        given: what the client is, for the message (``"the default connection"``).

    Raises:
        ConnectionNotOpenError: a sync client for the async API, or the reverse.
    """
    if is_async and isinstance(client, _SYNC_CLIENTS):
        raise ConnectionNotOpenError(
            f"{given} is a {_kind(client)} client, which the async API cannot use: give a "
            "redis.asyncio.Redis or a URL (a URL serves both APIs), or use echomq.sync"
        )
    if not is_async and isinstance(client, _ASYNC_CLIENTS):
        raise ConnectionNotOpenError(
            f"{given} is a {_kind(client)} client, which the sync API (echomq.sync, a task's "
            "enqueue/result) cannot use: give a redis.Redis or a URL (a URL serves both APIs), "
            "or use the async API"
        )


def _kind(client: object) -> str:
    """``redis.asyncio.Redis`` or ``redis.Redis`` (and the Cluster classes), for messages."""
    cls = type(client)
    for base in (*_ASYNC_CLIENTS, *_SYNC_CLIENTS):
        if isinstance(client, base):
            cls = base
            break
    return f"{cls.__module__.replace('.client', '')}.{cls.__qualname__}"


def _found_url() -> str:
    """``$ECHOMQ_REDIS_URL``, else the running embedded server's URL, else the error."""
    url = os.environ.get(ENV_VAR)
    if url:
        return url
    status = embedded_server_status()
    if status.state in ("running", "loading"):
        _notice(status.url)
        return status.url
    raise ConnectionNotOpenError(
        "no Redis connection: pass connection= (a Redis URL or a client you own), call "
        "echomq.set_default_connection(url_or_client) once at start-up, set the "
        f"{ENV_VAR} environment variable, or start the embedded Redis with "
        f"`echomq server start` (none runs in {status.data_dir})"
    )


def _notice(url: str) -> None:
    """Log, once per process, that calls without a connection use the embedded Redis."""
    with _lock:
        if _noticed:
            return
        _noticed.append(url)
    logger.warning(
        "echomq found no connection (none given, %s not set): using the embedded Redis at "
        "%s; to use your own Redis, set %s or pass connection=",
        ENV_VAR,
        url,
        ENV_VAR,
        extra={"redis": url},
    )
