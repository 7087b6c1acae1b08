"""How a command leaves the process: a pipelined Channel of our own, or redis-py's client.

redis-py's asyncio client spends more client CPU on each call than the round trip costs on
loopback: a pool checkout with a readiness probe, a timeout context, packing in Python, and
several event-loop hops. A :class:`Channel` is one connection that echomq owns from end to end:
it opens the socket itself (TCP, TLS or a unix socket) with the settings the caller's client was
given (its public ``connection_pool.connection_kwargs``, completed by the defaults of the
connection class's constructor: :mod:`~echomq._redis.client_settings`), performs the handshake
itself (AUTH with the username and password or the credential provider, CLIENT SETNAME, CLIENT
SETINFO, SELECT), then packs commands with hiredis, writes them to the transport and matches
replies to callers in order, as ioredis does. Concurrent callers share it, and their calls
pipeline automatically: a call made when none is in flight is written at once, by the call
itself (a lone call waits for nothing); calls made while a round trip is in flight are collected
and written together, with one ``transport.write`` (one send) as soon as 2 are pending, then 4,
8 and 16 at a time, and what is left at the end of the event-loop iteration
(:data:`_FIRST_CHUNK`): 200 producers awaiting adds on one Queue cost about 15 writes per round
instead of 200, and Redis starts on the first calls while the last ones are being made
(ioredis's ``enableAutoPipelining`` sends each tick's commands as one pipeline, a lone command
included). Only public APIs are used: hiredis's ``Reader`` and ``pack_command``, redis-py's
exception classes and the pool's ``connection_kwargs``.

Semantics kept from redis-py: error replies raise the same exception classes, chosen by the
reply's first word as redis-py does (:data:`_ERRORS`: NoScriptError, OutOfMemoryError,
BusyLoadingError, ReadOnlyError... which the worker's outage handling relies on),
``decode_responses`` decodes replies, ``socket_connect_timeout`` bounds the connect,
``socket_timeout`` the handshake and, when the client was given one, each call, a lost
connection raises :class:`redis.exceptions.ConnectionError`. A client echomq made from a URL
with a connect budget (``fail_fast``) has the whole connect done within that budget. A call is
never sent twice: a connection found closed *before* a call is reopened, one lost *after* it
fails the call (a non-idempotent script may or may not have run, as with any client), as it
fails the calls collected for the iteration's write (those never left). Each call keeps its
own reply or error: an error reply fails only its own call.

Every command goes out one of two ways, chosen by :func:`send`: on a Channel (the hot script
calls of a Queue, a Worker and QueueEvents), or through the client's own pool (``batched``,
which batches concurrent calls too), for clients a Channel cannot mirror and callers without a
Channel, such as the module-level functions, whose connection of their own would have nobody to
close it. :func:`open_channel` gives None for clients it cannot mirror: Redis Cluster,
single-connection clients, RESP3, a connection class other than redis-py's three (or echomq's
fail-fast variants of them), and any setting it does not know
(:mod:`~echomq._redis.client_settings` reads them) - a setting is never dropped silently.
Replies on a Channel are raw (no redis-py reply callback), so a reply parser handles both forms.
A blocking command holds up every call queued behind it, so only a Channel its caller has to
itself carries one (the worker's BZPOPMIN, the events reader's XREAD)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import socket
import weakref
from collections.abc import Awaitable, Callable
from typing import Any, cast

import hiredis
import redis.asyncio
import redis.asyncio.connection
from redis import exceptions as rx

from . import batched, restricted
from .client_settings import Settings, read_settings, ssl_context
from .fail_fast import connect_within

logger = logging.getLogger("echomq.connection")

_NOT_ENOUGH = object()
#: Calls made while a round trip is in flight are written as soon as 2 of them are pending,
#: then 4, 8 and 16 at a time (the rest at the end of the event-loop iteration): Redis starts
#: on the first ones while the others are being made. One write per iteration would leave
#: Redis idle until the iteration's last call is made, then the client idle while Redis works
#: through them all (at 10 producers, 0.6x the adds/s of a write per call).
_FIRST_CHUNK, _MAX_CHUNK = 2, 16
_pack = hiredis.pack_command

#: Error replies by their first word, as redis-py maps them; a dict maps the rest of an
#: ``ERR`` message. A known word is removed from the message (as redis-py does), an unknown
#: one is kept, so ``str(error)`` is the same whichever way a command went out.
_ERRORS: dict[str, type[rx.RedisError] | dict[str, type[rx.RedisError]]] = {
    "ERR": {
        "max number of clients reached": rx.ConnectionError,
        "invalid password": rx.AuthenticationError,
        "Client sent AUTH, but no password is set": rx.AuthenticationError,
        "AUTH <password> called without any password configured for the default user. "
        "Are you sure your configuration is correct?": rx.AuthenticationError,
    },
    "OOM": rx.OutOfMemoryError,
    "WRONGPASS": rx.AuthenticationError,
    "NOAUTH": rx.AuthenticationError,
    "NOPERM": rx.NoPermissionError,
    "EXECABORT": rx.ExecAbortError,
    "LOADING": rx.BusyLoadingError,
    "NOSCRIPT": rx.NoScriptError,
    "READONLY": rx.ReadOnlyError,
    "TRYAGAIN": rx.TryAgainError,
    "CLUSTERDOWN": rx.ClusterDownError,
    "MASTERDOWN": rx.MasterDownError,
}


def parse_error(message: str) -> rx.RedisError:
    """The redis-py exception for an error reply (``message`` without the leading ``-``)."""
    code, _, rest = message.partition(" ")
    kind = _ERRORS.get(code)
    if kind is None:
        return rx.ResponseError(message)
    if isinstance(kind, dict):
        return kind.get(rest, rx.ResponseError)(rest)
    return kind(rest)


# -- the connection ---------------------------------------------------------------------------


class _Wire(asyncio.Protocol):
    """The transport's protocol: feeds bytes to hiredis and resolves waiters in order."""

    transport: asyncio.Transport

    def __init__(
        self, encoding: str | None, errors: str, on_lost: Callable[[], None] | None = None
    ) -> None:
        self._on_lost = on_lost  # told when the server or the network closed the connection
        self.waiters: collections.deque[asyncio.Future[Any]] = collections.deque()
        # Packed calls made while a round trip was in flight, not yet written (each has its
        # waiter in ``waiters`` already): written when ``chunk`` of them are pending (2, then
        # 4, 8, 16 within one event-loop iteration), and by flush() at the iteration's end.
        self.pending: list[bytes] = []
        self.chunk = _FIRST_CHUNK
        self.flushing = False  # flush() is scheduled for the end of this iteration
        # When each call left, while a timeout is set (none of the handshake's is then pending).
        self.sent: collections.deque[float] = collections.deque()
        # socket_timeout, once the handshake is done: one watchdog timer looks at the oldest
        # call (replies come in order), rather than a timer per call.
        self.timeout: float | None = None
        self._watchdog: asyncio.TimerHandle | None = None
        options: dict[str, Any] = {
            "protocolError": rx.InvalidResponse,
            "replyError": parse_error,
            "notEnoughData": _NOT_ENOUGH,
        }
        if encoding is not None:
            options["encoding"] = encoding
            options["errors"] = errors
        self._reader = hiredis.Reader(**options)
        self.lost = False
        self.ready = False  # the handshake is done: a loss is worth a warning
        self.loop = asyncio.get_running_loop()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not registered as asyncio.Transport: no isinstance check
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        reader = self._reader
        reader.feed(data)
        waiters, sent = self.waiters, self.sent
        while True:
            try:
                reply = reader.gets()
            except rx.InvalidResponse as exc:
                self.fail(rx.ConnectionError(f"protocol error from Redis: {exc}"))
                return
            if reply is _NOT_ENOUGH:
                return
            if not waiters:
                self.fail(rx.ConnectionError("Redis sent a reply nobody asked for"))
                return
            waiter = waiters.popleft()
            if sent:
                sent.popleft()
            if waiter.done():  # the caller was cancelled or timed out: skip its reply
                continue
            if isinstance(reply, rx.RedisError):
                waiter.set_exception(reply)
            else:
                waiter.set_result(reply)

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        unexpected = not self.lost  # not closed by us
        if unexpected and self.ready:
            logger.warning(
                "connection to Redis lost (%s); the next call opens a new one",
                exc or "closed by the server",
            )
        self._drop(rx.ConnectionError(f"connection to Redis lost: {exc or 'closed by server'}"))
        if unexpected and self.ready and self._on_lost is not None:
            self._on_lost()

    def send(self, command: tuple[Any, ...]) -> asyncio.Future[Any]:
        """Send ``command``: at once when no call is in flight, else with the other calls of
        this event-loop iteration (see the module docstring). The future gets its reply.

        This is the hot path of every add and every finished job."""
        waiter: asyncio.Future[Any] = self.loop.create_future()
        if not self.waiters:
            self.transport.write(_pack(command))
        else:
            pending = self.pending
            pending.append(_pack(command))
            if len(pending) >= self.chunk:
                self.pending = []
                self.transport.write(b"".join(pending))
                if self.chunk < _MAX_CHUNK:
                    self.chunk *= 2
            if not self.flushing:
                self.flushing = True
                self.loop.call_soon(self.flush)
        self.waiters.append(waiter)
        if self.timeout is not None:
            self.sent_now()
        return waiter

    def flush(self) -> None:
        """At the end of an event-loop iteration: write the calls still pending, in one write."""
        self.flushing = False
        self.chunk = _FIRST_CHUNK
        pending = self.pending
        if pending and not self.lost:
            self.pending = []
            self.transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def sent_now(self) -> None:
        """Note a call just written, for the watchdog."""
        now = self.loop.time()
        self.sent.append(now)
        if self._watchdog is None and self.timeout is not None:
            self._watchdog = self.loop.call_at(now + self.timeout, self._watch)

    def _watch(self) -> None:
        """Fail the oldest call if it has waited ``timeout``, else look again when it will
        have (the connection fails with it: a late reply would be taken for the next call's)."""
        self._watchdog = None
        if not self.waiters or self.timeout is None or self.lost:
            return
        due = self.sent[0] + self.timeout
        if self.loop.time() < due:
            self._watchdog = self.loop.call_at(due, self._watch)
            return
        oldest = self.waiters[0]
        if not oldest.done():
            oldest.set_exception(
                rx.TimeoutError(f"no reply from Redis within socket_timeout={self.timeout}s")
            )
        self.fail(rx.TimeoutError("Timeout reading from Redis"))

    def fail(self, error: Exception) -> None:
        """Fail every pending call and close the transport."""
        self._drop(error)
        self.transport.abort()

    def _drop(self, error: Exception) -> None:
        self.lost = True
        self.pending = []  # never written: their calls fail below like those in flight
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        self.sent.clear()
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                with contextlib.suppress(RuntimeError):  # its event loop is already closed
                    waiter.set_exception(error)

    def close(self) -> None:
        """Close the transport; pending calls fail."""
        self._drop(rx.ConnectionError("connection closed by echomq"))
        with contextlib.suppress(RuntimeError, AttributeError):  # loop closed / never opened
            self.transport.close()


async def _within(timeout: float | None, step: Awaitable[Any], what: str) -> Any:
    """``step`` bounded by ``timeout`` (None: unbounded), a timeout raised as redis-py's."""
    if timeout is None:
        return await step
    try:
        return await asyncio.wait_for(step, timeout)
    except asyncio.TimeoutError:
        raise rx.TimeoutError(f"Timeout {what}") from None


async def _credentials(s: Settings) -> tuple[str, ...] | None:
    """AUTH's arguments: from the credential provider, else the username and password."""
    provider = s.credential_provider
    if provider is not None:
        fetch = getattr(provider, "get_credentials_async", None)
        creds = await fetch() if fetch is not None else provider.get_credentials()
        return tuple(creds)
    if s.password is None and not s.username:
        return None
    password = s.password or ""
    return (s.username, password) if s.username else (password,)


async def _replies(waiters: list[asyncio.Future[Any]]) -> list[Any]:
    """The replies (or errors) of pipelined calls; if cut short, none is left unretrieved."""
    replies: list[Any] = []
    try:
        for waiter in waiters:
            try:
                replies.append(await waiter)
            except rx.RedisError as exc:
                replies.append(exc)
        return replies
    finally:
        for waiter in waiters:
            if waiter.done() and not waiter.cancelled():
                waiter.exception()  # retrieved: no "exception was never retrieved" log
            else:
                waiter.cancel()


async def _open(s: Settings, wire: _Wire) -> None:
    """Connect ``wire`` and perform the handshake redis-py's connection would."""
    loop = asyncio.get_running_loop()
    where = s.address if isinstance(s.address, str) else "{}:{}".format(*s.address)
    try:
        if isinstance(s.address, str):
            connect = loop.create_unix_connection(lambda: wire, s.address)
        else:
            host, port = s.address
            context = ssl_context(s.tls) if s.kind == "tls" else None
            connect = loop.create_connection(lambda: wire, host, port, ssl=context)
        await _within(s.connect_timeout, connect, f"connecting to Redis at {where}")
    except OSError as exc:  # refused, unreachable, TLS errors
        raise rx.ConnectionError(f"Error connecting to Redis at {where}: {exc}") from exc
    if s.keepalive:
        sock = wire.transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            for option, value in s.keepalive_options.items():
                sock.setsockopt(socket.IPPROTO_TCP, option, value)
    # The handshake in one round trip; AUTH first, so the others run authenticated.
    steps: list[tuple[Any, ...]] = []
    creds = await _credentials(s)
    if creds:
        steps.append(("AUTH", *creds))
    if s.client_name:
        steps.append(("CLIENT", "SETNAME", s.client_name))
    lib_name, lib_version = s.lib
    if lib_name:
        steps.append(("CLIENT", "SETINFO", "LIB-NAME", lib_name))
    if lib_version:
        steps.append(("CLIENT", "SETINFO", "LIB-VER", lib_version))
    if s.db:
        steps.append(("SELECT", s.db))
    if not steps:
        return
    replies = await _within(
        s.timeout,
        _replies([wire.send(step) for step in steps]),
        f"reading the handshake's replies from Redis at {where}",
    )
    for step, reply in zip(steps, replies):
        if not isinstance(reply, BaseException) or step[1:2] == ("SETINFO",):
            continue  # an old server without CLIENT SETINFO is fine, as for redis-py
        if isinstance(reply, (rx.AuthenticationError, rx.ConnectionError)):
            raise reply
        if step[1:2] == ("SETNAME",) and restricted.report("CLIENT SETNAME", where, reply):
            continue  # renamed away or denied by ACL (managed Redis): the connection is unnamed
        raise rx.ConnectionError(f"Redis refused {step[0]} {step[1]} on connect: {reply}")


def _close_wire(holder: list[_Wire | None]) -> None:
    wire = holder[0]
    if wire is not None:
        holder[0] = None
        wire.close()


class Channel:
    """One lazily opened, pipelined connection mirroring a client's settings.

    Use :func:`open_channel` to make one; ``await channel.call(command)`` sends a command and
    gives its raw reply; :meth:`aclose` closes it (also done when the Channel is garbage
    collected).
    """

    __slots__ = (
        *("__weakref__", "_settings", "_holder", "_lock", "_lock_loop"),
        *("_keep_open", "_reopening", "_closed"),
    )

    def __init__(self, settings: Settings, *, keep_open: bool = False) -> None:
        self._settings = settings
        # keep_open: reopen a lost connection at once rather than at the next call, so a
        # worker's named blocking connection stays visible to getWorkers while it is busy.
        self._keep_open = keep_open
        self._reopening: asyncio.Task[None] | None = None
        self._closed = False
        self._holder: list[_Wire | None] = [None]
        self._lock: asyncio.Lock | None = None  # made on first use, for that event loop
        self._lock_loop: asyncio.AbstractEventLoop | None = None
        weakref.finalize(self, _close_wire, self._holder)

    def call(self, command: tuple[Any, ...]) -> Awaitable[Any]:
        """Send ``command``; awaiting the result gives its reply (error replies raise).

        The command is sent (or collected for this iteration's write) when ``call`` is called,
        and once connected the awaitable is the reply's future itself: no coroutine of its own
        on the hot path of every add and every finished job.
        """
        loop = asyncio.get_running_loop()
        wire = self._holder[0]
        if wire is None or wire.lost or wire.loop is not loop:
            return self._connect_and_call(loop, command)
        return wire.send(command)

    async def _connect_and_call(
        self, loop: asyncio.AbstractEventLoop, command: tuple[Any, ...]
    ) -> Any:
        wire = await self._connect(loop)
        return await wire.send(command)

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
            s = self._settings
            on_lost = _weak_call(self._reopen_soon) if self._keep_open else None
            wire = _Wire(s.encoding, s.errors, on_lost)
            try:
                if s.budget is None:
                    await _open(s, wire)
                else:
                    budget, url = s.budget
                    await connect_within(budget, url, lambda: _open(s, wire))
            except BaseException:
                wire.lost = True
                wire.close()
                raise
            if wire.lost:  # closed during the handshake's last read
                raise rx.ConnectionError("connection to Redis closed while opening")
            wire.ready = True
            wire.timeout = s.call_timeout
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
            except (rx.RedisError, OSError) as exc:
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
    settings = read_settings(client)
    return None if settings is None else Channel(settings, keep_open=keep_open)


def send(
    client: redis.asyncio.Redis, channel: Channel | None, command: tuple[Any, ...]
) -> Awaitable[Any]:
    """One command and its reply: on ``channel`` when there is one (a raw reply), else by the
    client's public API (with redis-py's reply callback applied), concurrent calls batched
    into pipelines (``batched``). Never a blocking command: it would hold up its batch."""
    if channel is not None:
        return channel.call(command)
    return batched.call(client, command)
