"""A pipelined connection for the hot script calls of a Queue, a Worker or QueueEvents.

redis-py's asyncio client spends more client CPU on each call than the round trip costs on
loopback: a pool checkout with a readiness probe, a timeout context, packing in Python, and
several event-loop hops. A :class:`Channel` is one connection of its own, opened with the
same settings as the caller's client (redis-py performs the handshake: AUTH, TLS, SELECT,
CLIENT SETNAME), after which commands are packed by hiredis, written straight to the
transport and matched to their replies in order, as ioredis does. Concurrent callers share
it, so their calls pipeline.

Semantics kept from redis-py: error replies raise the same exception classes (NoScriptError,
ResponseError...), ``decode_responses`` decodes replies, ``socket_timeout`` bounds each call,
and a lost connection raises :class:`redis.exceptions.ConnectionError`. A call is never sent
twice: a connection found closed *before* a write is reopened, one lost *after* a write fails
the call (a non-idempotent script may or may not have run, as with any client).

Clients a Channel cannot mirror (Redis Cluster, single-connection clients, RESP3, a
connection class without asyncio streams) get ``None`` from :func:`open_channel`, and their
callers keep redis-py's path. A blocking command holds up every call queued behind it, so
only a Channel its caller has to itself carries one (the events reader's XREAD).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import weakref
from collections.abc import Callable
from typing import Any

import hiredis
import redis.asyncio
import redis.asyncio.connection
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import InvalidResponse, NoScriptError, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

try:  # redis-py's own error-reply parser, so error classes match its other paths
    from redis._parsers.base import BaseParser

    _parse_error: Any = BaseParser.parse_error
except ImportError:  # pragma: no cover - depends on redis-py internals

    def _parse_error(message: str) -> ResponseError:
        if message.startswith("NOSCRIPT "):  # the one class echomq itself relies on
            return NoScriptError(message[len("NOSCRIPT ") :])
        return ResponseError(message)


logger = logging.getLogger("echomq.connection")

_NOT_ENOUGH = object()


class _Wire(asyncio.Protocol):
    """The transport's protocol: feeds bytes to hiredis and resolves waiters in order."""

    def __init__(
        self,
        transport: asyncio.WriteTransport,
        keep: object,
        encoding: str | None,
        errors: str,
        on_lost: Callable[[], None] | None = None,
    ) -> None:
        self.transport = transport
        self._on_lost = on_lost  # told when the server or the network closed the connection
        self._keep = keep  # the handshake's StreamWriter: its __del__ would close the transport
        self.waiters: collections.deque[asyncio.Future[Any]] = collections.deque()
        options: dict[str, Any] = {
            "protocolError": InvalidResponse,
            "replyError": _parse_error,
            "notEnoughData": _NOT_ENOUGH,
        }
        if encoding is not None:
            options["encoding"] = encoding
            options["errors"] = errors
        self._reader = hiredis.Reader(**options)
        self.lost = False
        self.loop = asyncio.get_running_loop()

    def data_received(self, data: bytes) -> None:
        reader = self._reader
        reader.feed(data)
        waiters = self.waiters
        while True:
            try:
                reply = reader.gets()
            except InvalidResponse as exc:
                self.fail(RedisConnectionError(f"protocol error from Redis: {exc}"))
                return
            if reply is _NOT_ENOUGH:
                return
            if not waiters:
                self.fail(RedisConnectionError("Redis sent a reply nobody asked for"))
                return
            waiter = waiters.popleft()
            if waiter.done():  # the caller was cancelled or timed out: skip its reply
                continue
            if isinstance(reply, ResponseError):
                waiter.set_exception(reply)
            else:
                waiter.set_result(reply)

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        unexpected = not self.lost  # not closed by us
        if unexpected:
            logger.warning(
                "connection to Redis lost (%s); the next call opens a new one",
                exc or "closed by the server",
            )
        self._drop(RedisConnectionError(f"connection to Redis lost: {exc or 'closed by server'}"))
        if unexpected and self._on_lost is not None:
            self._on_lost()

    def fail(self, error: Exception) -> None:
        """Fail every pending call and close the transport."""
        self._drop(error)
        self.transport.abort()

    def _drop(self, error: Exception) -> None:
        self.lost = True
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                with contextlib.suppress(RuntimeError):  # its event loop is already closed
                    waiter.set_exception(error)

    def close(self) -> None:
        """Close the transport; pending calls fail."""
        self._drop(RedisConnectionError("connection closed by echomq"))
        with contextlib.suppress(RuntimeError):  # the event loop may already be closed
            self.transport.close()


def _close_wire(holder: list[_Wire | None]) -> None:
    wire = holder[0]
    if wire is not None:
        holder[0] = None
        wire.close()


class Channel:
    """One lazily opened, pipelined connection mirroring a client's settings.

    Use :func:`open_channel` to make one; :meth:`call` sends a command and returns its raw
    reply; :meth:`aclose` closes it (also done when the Channel is garbage collected).
    """

    __slots__ = (
        *("__weakref__", "_client", "_holder", "_lock", "_lock_loop"),
        *("_timeout", "_encoding", "_errors", "_keep_open", "_reopening", "_closed"),
    )

    def __init__(self, client: redis.asyncio.Redis, *, keep_open: bool = False) -> None:
        self._client = client
        # keep_open: reopen a lost connection at once rather than at the next call, so a
        # worker's named blocking connection stays visible to getWorkers while it is busy.
        self._keep_open = keep_open
        self._reopening: asyncio.Task[None] | None = None
        self._closed = False
        kwargs = client.connection_pool.connection_kwargs
        self._timeout: float | None = kwargs.get("socket_timeout")
        decode = kwargs.get("decode_responses", False)
        self._encoding: str | None = kwargs.get("encoding", "utf-8") if decode else None
        self._errors: str = kwargs.get("encoding_errors", "strict")
        self._holder: list[_Wire | None] = [None]
        self._lock: asyncio.Lock | None = None  # made on first use, for that event loop
        self._lock_loop: asyncio.AbstractEventLoop | None = None
        weakref.finalize(self, _close_wire, self._holder)

    async def call(self, command: tuple[Any, ...]) -> Any:
        """Send ``command`` and wait for its reply (error replies raise)."""
        loop = asyncio.get_running_loop()
        wire = self._holder[0]
        if wire is None or wire.lost or wire.loop is not loop:
            wire = await self._connect(loop)
        waiter: asyncio.Future[Any] = loop.create_future()
        wire.transport.write(hiredis.pack_command(command))
        wire.waiters.append(waiter)
        if self._timeout is None:
            return await waiter
        try:
            return await asyncio.wait_for(waiter, self._timeout)
        except asyncio.TimeoutError:
            wire.fail(RedisTimeoutError("Timeout reading from Redis"))
            raise RedisTimeoutError(
                f"no reply from Redis within socket_timeout={self._timeout}s"
            ) from None

    async def _connect(self, loop: asyncio.AbstractEventLoop) -> _Wire:
        if self._lock is None or self._lock_loop is not loop:  # a Lock serves one event loop
            self._lock, self._lock_loop = asyncio.Lock(), loop
        async with self._lock:
            wire = self._holder[0]
            if wire is not None and not wire.lost and wire.loop is loop:
                return wire
            if wire is not None:
                # Lost, or opened on another (probably closed) event loop, whose transport
                # cannot be read from here: open a new connection on this loop.
                _close_wire(self._holder)
            pool = self._client.connection_pool
            connection = pool.connection_class(**pool.connection_kwargs)
            # redis-py's own handshake: AUTH, TLS, SELECT, CLIENT SETNAME
            await connection.connect()  # type: ignore[no-untyped-call]
            writer = getattr(connection, "_writer", None)
            if not isinstance(writer, asyncio.StreamWriter):  # pragma: no cover - redis-py change
                await connection.disconnect()
                raise RedisConnectionError("this redis-py connection class has no asyncio stream")
            # The connection object lets go of the socket; from here the Channel owns it.
            connection._writer = connection._reader = None
            transport = writer.transport
            on_lost = _weak_call(self._reopen_soon) if self._keep_open else None
            wire = _Wire(transport, writer, self._encoding, self._errors, on_lost)
            transport.set_protocol(wire)
            if transport.is_closing():  # closed during the handshake's last read
                wire.lost = True
                raise RedisConnectionError("connection to Redis closed while opening")
            self._holder[0] = wire
            return wire

    def _reopen_soon(self) -> None:
        if self._closed or (self._reopening is not None and not self._reopening.done()):
            return
        self._reopening = asyncio.get_running_loop().create_task(self._reopen())

    async def _reopen(self) -> None:
        """Reconnect until it works or the channel is closed (backing off 50 ms to 5 s)."""
        delay = 0.05
        while not self._closed:
            try:
                await self._connect(asyncio.get_running_loop())
                return
            except (RedisError, OSError) as exc:
                logger.debug("reopening a connection to Redis failed (%s); retrying", exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def aclose(self) -> None:
        """Close the connection and stop reopening it (a later :meth:`call` still opens a
        new one)."""
        self._closed = True
        reopening, self._reopening = self._reopening, None
        if reopening is not None and not reopening.done():
            reopening.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reopening
        _close_wire(self._holder)
        await asyncio.sleep(0)  # let the transport finish closing


def _weak_call(method: Callable[[], None]) -> Callable[[], None]:
    """``method`` without keeping its object alive (a lost connection must not pin a Channel
    that nobody uses any more)."""
    ref = weakref.WeakMethod(method)

    def call() -> None:
        bound = ref()
        if bound is not None:
            bound()

    return call


def open_channel(client: redis.asyncio.Redis, *, keep_open: bool = False) -> Channel | None:
    """A Channel mirroring ``client``, or None when its settings cannot be mirrored.

    Args:
        client: the client whose settings the channel's connection takes.
        keep_open: reopen the connection as soon as it is lost (for a named blocking
            connection that must stay listed), not only at the next call.
    """
    pool = getattr(client, "connection_pool", None)
    if pool is None or getattr(client, "single_connection_client", True):
        return None  # Redis Cluster, or a client asked to use one connection only
    if not issubclass(pool.connection_class, redis.asyncio.connection.AbstractConnection):
        return None
    if str(pool.connection_kwargs.get("protocol") or 2) != "2":
        return None  # RESP3 may carry push messages between replies
    return Channel(client, keep_open=keep_open)
