"""A TCP proxy between clients and Redis that can lose replies and cut connections.

It parses RESP (2 and 3) in both directions, so it knows which reply answers which command (Redis
answers in order on each connection). Faults:

- :meth:`FaultProxy.drop_replies` ("applied but not acknowledged"): a command matching the
  predicate is forwarded and executed by Redis, but its reply is swallowed and both sides
  of that connection are closed, as when a network path dies right after the request went
  out. The swallowed reply is kept in :attr:`FaultProxy.dropped`.
- :meth:`FaultProxy.cut_all`: close every connection now.

Only request/reply traffic is supported (no pub/sub, MONITOR or client-side caching pushes),
which is all the workers, producers and events readers use.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

Predicate = Callable[[list[bytes]], bool]

_INCOMPLETE = object()


class RespError(ValueError):
    """Bytes that are not RESP2."""


def parse(buf: bytes | bytearray, pos: int = 0) -> tuple[Any, int]:
    """Parse one RESP2 or RESP3 value at ``pos``; ``(value, end)``, or ``(_INCOMPLETE, pos)``.

    Simple strings, errors, doubles and big numbers come back as ``bytes``, integers as
    ``int``, bulk and verbatim strings as ``bytes``, nulls as ``None``, booleans as ``bool``,
    arrays, sets and pushes as ``list``, maps (and attributes) as a flat ``list`` of keys and
    values.
    """
    if pos >= len(buf):
        return _INCOMPLETE, pos
    line_end = buf.find(b"\r\n", pos)
    if line_end < 0:
        return _INCOMPLETE, pos
    kind, head = buf[pos : pos + 1], bytes(buf[pos + 1 : line_end])
    after = line_end + 2
    if kind in (b"+", b"-", b",", b"("):
        return head, after
    if kind == b":":
        return int(head), after
    if kind == b"_":
        return None, after
    if kind == b"#":
        return head == b"t", after
    if kind in (b"$", b"!", b"="):
        n = int(head)
        if n < 0:
            return None, after
        if len(buf) < after + n + 2:
            return _INCOMPLETE, pos
        return bytes(buf[after : after + n]), after + n + 2
    if kind in (b"*", b"~", b">", b"%", b"|"):
        n = int(head)
        if n < 0:
            return None, after
        if kind in (b"%", b"|"):
            n *= 2
        items = []
        for _ in range(n):
            item, after = parse(buf, after)
            if item is _INCOMPLETE:
                return _INCOMPLETE, pos
            items.append(item)
        if kind == b"|":  # an attribute comes before the value it describes
            return parse(buf, after)
        return items, after
    raise RespError(f"unexpected RESP type byte {kind!r}")


def flatten(value: Any) -> list[bytes]:
    """Every bulk string inside a parsed reply, depth first."""
    if isinstance(value, bytes):
        return [value]
    if isinstance(value, list):
        return [leaf for item in value for leaf in flatten(item)]
    return []


@dataclass(frozen=True, slots=True)
class Dropped:
    """A reply the proxy swallowed."""

    t: float  # time.time() when it was swallowed
    command: list[bytes]
    reply: Any


class _Pair:
    """One client connection and its upstream connection."""

    def __init__(self, proxy: FaultProxy, client: asyncio.StreamWriter) -> None:
        self.proxy = proxy
        self.client = client
        self.upstream: asyncio.StreamWriter | None = None
        self.pending: deque[tuple[list[bytes], bool]] = deque()  # (command, drop its reply)
        self.tasks: list[asyncio.Task[None]] = []

    def close(self) -> None:
        for writer in (self.client, self.upstream):
            if writer is not None:
                with contextlib.suppress(Exception):
                    writer.transport.abort()

    async def requests(self, reader: asyncio.StreamReader) -> None:
        buf = bytearray()
        assert self.upstream is not None
        while data := await reader.read(65536):
            buf += data
            pos = 0
            while True:
                command, end = parse(buf, pos)
                if command is _INCOMPLETE:
                    break
                args = command if isinstance(command, list) else [command]
                drop = self.proxy._should_drop(args)
                self.pending.append((args, drop))
                self.upstream.write(bytes(buf[pos:end]))
                pos = end
            del buf[:pos]
        self.close()

    async def replies(self, reader: asyncio.StreamReader) -> None:
        buf = bytearray()
        while data := await reader.read(65536):
            buf += data
            pos = 0
            while True:
                reply, end = parse(buf, pos)
                if reply is _INCOMPLETE:
                    break
                command, drop = self.pending.popleft() if self.pending else ([], False)
                if drop:
                    self.proxy.dropped.append(Dropped(time.time(), command, reply))
                    self.client.write(bytes(buf[:pos]))  # the replies before it still go out
                    self.close()
                    return
                pos = end
            if pos:
                self.client.write(bytes(buf[:pos]))
                del buf[:pos]
        self.close()


class FaultProxy:
    """Listens on a free loopback port and forwards to ``upstream_port``."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.port = 0
        self.dropped: list[Dropped] = []
        self.connections = 0
        self._server: asyncio.Server | None = None
        self._pairs: set[_Pair] = set()
        self._handlers: set[asyncio.Task[Any]] = set()
        self._predicate: Predicate | None = None
        self._drops_left = 0
        self._every = 1
        self._seen = 0

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    def drop_replies(self, predicate: Predicate, *, count: int, every: int = 1) -> None:
        """Swallow the reply of every ``every``-th matching command, ``count`` times."""
        self._predicate, self._drops_left, self._every, self._seen = predicate, count, every, 0

    def _should_drop(self, args: list[bytes]) -> bool:
        if self._predicate is None or self._drops_left <= 0 or not self._predicate(args):
            return False
        self._seen += 1
        if self._seen % self._every:
            return False
        self._drops_left -= 1
        return True

    def cut_all(self) -> int:
        """Close every proxied connection; returns how many were open."""
        pairs = list(self._pairs)
        for pair in pairs:
            pair.close()
        return len(pairs)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        pair = _Pair(self, writer)
        handler = asyncio.current_task()
        if handler is not None:
            self._handlers.add(handler)
        try:
            up_reader, pair.upstream = await asyncio.open_connection(
                "127.0.0.1", self.upstream_port
            )
        except OSError:
            writer.transport.abort()
            return
        self.connections += 1
        self._pairs.add(pair)
        try:
            await asyncio.gather(pair.requests(reader), pair.replies(up_reader))
        except (OSError, RespError):
            pass
        finally:
            pair.close()
            self._pairs.discard(pair)
            if handler is not None:
                self._handlers.discard(handler)

    async def aclose(self) -> None:
        self._predicate = None
        if self._server is not None:
            self._server.close()
        self.cut_all()
        handlers = list(self._handlers)
        if handlers:  # they end once their aborted connections report EOF
            _, pending = await asyncio.wait(handlers, timeout=5)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
