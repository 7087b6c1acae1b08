"""How producers fail fast when Redis cannot be reached, and the server addresses they name.

A client echomq opens from a URL for a producer (``echomq.add``, ``Queue`` and their sync twins,
:func:`echomq.client_from_url`) fails fast: each connection it opens (TCP, TLS, and redis-py's
handshake: AUTH, HELLO, CLIENT SETINFO, SELECT) must be done within ``connect_timeout`` or raises
:class:`~echomq.errors.RedisUnavailableError` naming the URL with its password masked, and
redis-py does not retry behind the caller's back (a retry would spend the budget again, unseen).

This is done by a connection class mixed over the one redis-py picks for the URL's scheme,
because only the connection knows when it is connecting: every path that opens a connection
keeps the same bound, with no cost on calls over an open connection. Both classes use only
redis-py's public API. The async one runs the connect under :func:`connect_within`. The sync
one bounds the TCP connect with ``socket_connect_timeout`` and redis-py's handshake, run as the
connection's ``redis_connect_func``, with a timer that calls ``disconnect()`` (shutting the
socket down ends a read waiting on a silent server); a TLS handshake, which redis-py runs before
the socket is the connection's, has ``socket_timeout`` cut to the budget, and the caller's
``socket_timeout`` is back on the socket once connected. The client's pool and a blocking
client copied from it use that class; a pipelined channel (``wire``), which opens its own
connections, reads the budget from the pool's connection settings (:func:`fail_fast_budget`)
and connects through the same :func:`connect_within`. Clients the caller passes are never
changed; a producer call on one re-raises its connection errors and timeouts as
``RedisUnavailableError`` naming ``host:port`` (:func:`raise_unavailable`).
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar, NoReturn
from urllib.parse import parse_qsl, urlencode, urlsplit

import redis
import redis.asyncio
import redis.asyncio.connection
import redis.asyncio.retry
import redis.backoff
import redis.connection
import redis.retry
from redis.exceptions import AuthenticationError, AuthorizationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from ..errors import InvalidOptionError, RedisRefusedError, RedisUnavailableError, ValidationError
from ..options import Duration, to_seconds
from . import topology
from .retry import TRANSIENT, Outage, classify, refused_reply

#: Seconds a producer's URL-made connection has to connect (TCP plus handshake).
DEFAULT_CONNECT_TIMEOUT = 1.0

# -- addresses, for messages and for the per-server checks -----------------------------------


def redact_url(url: str) -> str:
    """``url`` with its password (in the userinfo or a ``password=`` query) shown as ``***``."""
    if topology.is_topology_url(url):
        return topology.redact(url)
    parts = urlsplit(url)
    netloc, query = parts.netloc, parts.query
    if parts.password is None and "password=" not in query:
        return url
    if parts.password is not None:
        netloc = f"{parts.username or ''}:***@{netloc.rpartition('@')[2]}"
    if "password=" in query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, "***" if k == "password" else v) for k, v in pairs], safe="*")
    # Not urlunsplit: it would drop the "//" of a unix:// URL, whose netloc is empty.
    redacted = f"{parts.scheme}://{netloc}{parts.path}"
    if query:
        redacted += f"?{query}"
    if parts.fragment:
        redacted += f"#{parts.fragment}"
    return redacted


def url_address(url: str) -> str:
    """The server a URL points to: ``host:port`` (port 6379 when omitted), the socket path, or
    a Sentinel service or a Cluster with their nodes."""
    if topology.is_topology_url(url):
        try:
            return topology.parse(url).address
        except ValidationError:
            return topology.redact(url)
    parts = urlsplit(url)
    if parts.scheme == "unix":
        return parts.path
    try:
        port = parts.port or 6379
    except ValueError:  # a malformed port: urls.check_url refuses it before a client is made
        port = 6379
    return f"{parts.hostname or 'localhost'}:{port}"


def server_address(client: object) -> str:
    """The server a client talks to: ``host:port``, the socket path, a Sentinel service with its
    Sentinels, or ``cluster`` with its startup nodes."""
    pool = getattr(client, "connection_pool", None)
    service = getattr(pool, "service_name", None)
    if service is not None:  # a Sentinel-managed pool: its master moves, the service does not
        return _sentinel_address(service, getattr(pool, "sentinel_manager", None))
    if pool is not None:
        kwargs = pool.connection_kwargs
        path = kwargs.get("path")
        if path:
            return str(path)
        return f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"
    nodes = getattr(getattr(client, "nodes_manager", None), "startup_nodes", None)
    if nodes:
        return topology.cluster_address(f"{node.host}:{node.port}" for node in nodes.values())
    return "unknown address"


def _sentinel_address(service: str, manager: object) -> str:
    """How messages name the master of a Sentinel-managed client: its service and Sentinels."""
    sentinels = []
    for sentinel in getattr(manager, "sentinels", ()):
        kwargs = getattr(getattr(sentinel, "connection_pool", None), "connection_kwargs", {})
        sentinels.append(f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}")
    return topology.sentinel_address(service, sentinels)


# -- fail-fast connections of URL-made producer clients --------------------------------------


def _unavailable(url: str, reason: str, budget: float) -> RedisUnavailableError:
    return RedisUnavailableError(
        f"cannot reach Redis at {url}: {reason.rstrip('.')}. Check that a Redis server "
        "runs at that address and that this host can reach it (host, port, TLS, firewall); "
        f"on a slow network link raise connect_timeout (now {budget:g} s)",
        address=url,
    )


_NO_ANSWER = "no answer within connect_timeout={budget:g}s (TCP connect and handshake)"


def _bounded(timeout: float | None, budget: float) -> float:
    """A socket timeout of ``timeout`` seconds (None: none) cut to the connect budget."""
    return budget if timeout is None else min(float(timeout), budget)


#: Connection errors that are about the server's reachability; an authentication error is
#: about the credentials, and is raised by redis-py as it is.
_CONNECT_ERRORS = (RedisConnectionError, RedisTimeoutError, OSError)
_AUTH_ERRORS = (AuthenticationError, AuthorizationError)


#: The connection settings that carry a fail-fast client's budget (also read by a Channel).
FAIL_FAST_KEYS = frozenset({"echomq_connect_timeout", "echomq_url"})


def fail_fast_budget(kwargs: Mapping[str, Any]) -> tuple[float, str] | None:
    """The connect budget and redacted URL of a fail-fast client's connection settings (its
    pool's ``connection_kwargs``), or None for any other client."""
    budget = kwargs.get("echomq_connect_timeout")
    return None if budget is None else (float(budget), str(kwargs.get("echomq_url")))


async def connect_within(
    budget: float,
    url: str,
    connect: Callable[[], Awaitable[None]],
    cut_short: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Run ``connect()`` (TCP, TLS and handshake) within ``budget`` seconds, raising
    :class:`RedisUnavailableError` naming ``url`` when it cannot (``cut_short`` is awaited
    after a timeout, to close what was opened); authentication errors pass as they are."""
    try:
        await asyncio.wait_for(connect(), budget)
    except asyncio.TimeoutError:
        if cut_short is not None:
            await cut_short()
        raise _unavailable(url, _NO_ANSWER.format(budget=budget), budget) from None
    except _AUTH_ERRORS:
        raise
    except _CONNECT_ERRORS as exc:
        raise _unavailable(url, str(exc), budget) from exc


class _FailFastAsync(redis.asyncio.connection.AbstractConnection):
    """Mixed before a redis-py async connection class: the whole connect within the budget."""

    def __init__(self, *args: Any, echomq_connect_timeout: float, echomq_url: str, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._echomq_budget = echomq_connect_timeout
        self._echomq_url = echomq_url

    async def connect(self) -> None:
        if self.is_connected:
            return
        await connect_within(
            self._echomq_budget,
            self._echomq_url,
            super().connect,
            self.disconnect,  # a handshake cut short leaves its socket open
        )


class _Attempt:
    """One handshake under a timer: whether the timer fired, or the handshake ended first."""

    __slots__ = ("done", "expired", "lock")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.done = False
        self.expired = False

    def finish(self) -> bool:
        """End the attempt; True when the timer had fired first."""
        with self.lock:
            self.done = True
            return self.expired


class _FailFastSync(redis.connection.AbstractConnection):
    """Mixed before a redis-py sync connection class: the whole connect within the budget.

    A blocking socket cannot be cancelled, and the socket is redis-py's, so the budget is kept
    through public settings and methods only. The TCP connect is bounded by
    ``socket_connect_timeout`` (the caller's, or the budget when smaller). The handshake runs
    as the connection's ``redis_connect_func``, which redis-py calls on every connect once the
    socket is open: there a timer set to what is left of the budget calls :meth:`disconnect`
    when it fires, which shuts the socket down and so ends a read waiting on a silent server.
    A TLS handshake happens before that, inside redis-py's socket opening, where no timer can
    reach it: a TLS connection keeps ``socket_timeout`` at the budget (when smaller) while it
    is not connected, and puts the caller's back on the attribute and on the socket once the
    handshake is done. A connected connection costs nothing more than a flag check.
    """

    #: Whether the connection opens a TLS session before redis-py's handshake.
    _echomq_tls: ClassVar[bool] = False

    def __init__(self, *args: Any, echomq_connect_timeout: float, echomq_url: str, **kwargs: Any):
        budget = echomq_connect_timeout
        connect_timeout = kwargs.get("socket_connect_timeout")
        if connect_timeout is None:  # redis-py's default: the socket_timeout
            connect_timeout = kwargs.get("socket_timeout")
        kwargs["socket_connect_timeout"] = _bounded(connect_timeout, budget)
        self._echomq_user_connect_func = kwargs.get("redis_connect_func")
        # A plain function, called by redis-py as redis_connect_func(connection).
        kwargs["redis_connect_func"] = _FailFastSync._echomq_handshake
        super().__init__(*args, **kwargs)
        self._echomq_budget = budget
        self._echomq_url = echomq_url
        self._echomq_deadline: float | None = None
        self._echomq_connected = False
        self._echomq_given_timeout = self.socket_timeout  # the caller's
        self._echomq_tls_timeout = _bounded(self.socket_timeout, budget)
        if self._echomq_tls:
            self.socket_timeout = self._echomq_tls_timeout

    def connect(self) -> None:
        if self._echomq_connected:  # redis-py calls connect() at every pool checkout
            return
        budget = self._echomq_budget
        self._echomq_deadline = time.monotonic() + budget
        try:
            super().connect()  # type: ignore[no-untyped-call]
        except (RedisUnavailableError, *_AUTH_ERRORS):
            raise
        except _CONNECT_ERRORS as exc:
            timed_out = isinstance(exc, (RedisTimeoutError, TimeoutError))
            reason = _NO_ANSWER.format(budget=budget) if timed_out else str(exc)
            raise _unavailable(self._echomq_url, reason, budget) from exc
        finally:
            self._echomq_deadline = None

    def disconnect(self, *args: Any, **kwargs: Any) -> None:
        self._echomq_connected = False
        if self._echomq_tls:
            self.socket_timeout = self._echomq_tls_timeout  # bounds the next TLS handshake
        super().disconnect(*args, **kwargs)  # type: ignore[no-untyped-call]

    def _echomq_handshake(self) -> None:
        """redis-py's handshake (or the caller's ``redis_connect_func``) within the budget."""
        budget = self._echomq_budget
        if self._echomq_tls:
            self.socket_timeout = self._echomq_given_timeout  # what the handshake's parser keeps
        # A reconnect redis-py starts itself, not through connect(), gets a budget of its own.
        deadline = self._echomq_deadline or time.monotonic() + budget
        left = deadline - time.monotonic()
        if left <= 0:  # the TCP connect or the TLS handshake used it all
            raise _unavailable(self._echomq_url, _NO_ANSWER.format(budget=budget), budget)
        attempt = _Attempt()
        timer = threading.Timer(left, self._echomq_expire, (attempt,))
        timer.daemon = True
        timer.start()
        try:
            if self._echomq_user_connect_func is None:
                self.on_connect()  # type: ignore[no-untyped-call]
            else:
                self._echomq_user_connect_func(self)
            if self._echomq_tls:
                self._echomq_restore_timeout()
        except BaseException as exc:
            self.disconnect()  # redis-py does it for its own errors only: not half-open
            if attempt.finish():
                raise _unavailable(
                    self._echomq_url, _NO_ANSWER.format(budget=budget), budget
                ) from exc
            raise
        finally:
            timer.cancel()
            timer.join()  # no timer thread outlives its connect
        if attempt.finish():
            raise _unavailable(self._echomq_url, _NO_ANSWER.format(budget=budget), budget)
        self._echomq_connected = True

    def _echomq_expire(self, attempt: _Attempt) -> None:
        """The timer's end: cut a handshake still running (in the timer's thread)."""
        with attempt.lock:
            if not attempt.done:
                attempt.expired = True
                self.disconnect()

    def _echomq_restore_timeout(self) -> None:
        """Put the caller's ``socket_timeout`` on the socket of a TLS connection."""
        update = getattr(self, "update_current_socket_timeout", None)
        if update is not None:  # newer redis-py: its own way to change the socket's timeout
            update(self.socket_timeout)
        else:  # older redis-py: a poll leaves the socket at the connection's socket_timeout
            self.can_read(0)


class _FailFastAsyncTCP(_FailFastAsync, redis.asyncio.connection.Connection):
    pass


class _FailFastAsyncSSL(_FailFastAsync, redis.asyncio.connection.SSLConnection):
    pass


class _FailFastAsyncUnix(_FailFastAsync, redis.asyncio.connection.UnixDomainSocketConnection):
    pass


class _FailFastSyncTCP(_FailFastSync, redis.connection.Connection):
    pass


class _FailFastSyncSSL(_FailFastSync, redis.connection.SSLConnection):
    _echomq_tls = True


class _FailFastSyncUnix(_FailFastSync, redis.connection.UnixDomainSocketConnection):
    pass


# Exact classes (not issubclass): a subclass of SSLConnection is also a Connection.
_FAIL_FAST: dict[type, type] = {
    redis.asyncio.connection.Connection: _FailFastAsyncTCP,
    redis.asyncio.connection.SSLConnection: _FailFastAsyncSSL,
    redis.asyncio.connection.UnixDomainSocketConnection: _FailFastAsyncUnix,
    redis.connection.Connection: _FailFastSyncTCP,
    redis.connection.SSLConnection: _FailFastSyncSSL,
    redis.connection.UnixDomainSocketConnection: _FailFastSyncUnix,
}


def fail_fast_class(connection_class: type) -> type:
    """The fail-fast class mixed over redis-py's ``connection_class`` (itself when unknown)."""
    return _FAIL_FAST.get(connection_class, connection_class)


def connect_budget(connect_timeout: Duration) -> float:
    """``connect_timeout`` in seconds, refused unless positive and finite."""
    if type(connect_timeout) is float and 0.0 < connect_timeout < math.inf:
        return connect_timeout  # the common case (the default), on every module-level call
    seconds = to_seconds(connect_timeout, "connect_timeout")
    if seconds <= 0:
        raise InvalidOptionError(f"connect_timeout must be positive, got {connect_timeout!r}")
    return seconds


def fail_fast_options(url: str, budget: float, options: dict[str, Any], retry: object) -> None:
    """Set ``options`` (for redis-py's ``ConnectionPool.from_url``) so its connections fail
    fast: ``budget`` and ``url`` for the connection class, and ``retry`` (none) unless set."""
    if "connection_class" in options:
        raise ValidationError(
            "connection_class cannot be combined with connect_timeout; build the client "
            "yourself with redis-py if you need your own connection class"
        )
    options.setdefault("retry", retry)  # a retry would spend the budget again, unseen
    options["echomq_connect_timeout"] = budget
    options["echomq_url"] = redact_url(url)


#: What a producer call may report as :class:`RedisUnavailableError` (see
#: :func:`raise_unavailable`, which sorts them with the one rule, ``_redis.retry.classify``).
UNREACHABLE = TRANSIENT


def raise_unavailable(exc: Exception, address: str) -> NoReturn:
    """Re-raise ``exc``, a failed producer call, by the one rule for Redis errors: a refusal
    (BUSY, LOADING, OOM, a failover...) as :class:`RedisRefusedError` (nothing was added), a
    lost connection or timeout as :class:`RedisUnavailableError` (the outcome is unknown), each
    naming ``address``; anything else (a script error, an authentication error, one already
    raised as an echomq error) as it is."""
    kind = classify(exc)
    if kind is None or isinstance(exc, (RedisUnavailableError, *_AUTH_ERRORS)):
        raise exc
    if kind is Outage.REFUSED:
        reply = refused_reply(exc)
        raise RedisRefusedError(
            f"Redis at {address} refused the call for now ({reply}: {str(exc).rstrip('.')}); "
            "nothing was added, and the same call may be sent again once Redis is past it "
            "(a running script, a restart loading its data, memory, a failover)",
            address=address,
            reply=reply,
        ) from exc
    raise RedisUnavailableError(
        f"cannot reach Redis at {address}, or it did not answer: {str(exc).rstrip('.')}. "
        "Check that a Redis server runs at that address and that this host can reach it; if "
        "the command had been sent, the job may have been added",
        address=address,
    ) from exc
