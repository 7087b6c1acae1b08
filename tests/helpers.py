"""Small test helpers shared by the whole suite.

- :func:`snapshot` / :func:`snapshot_sync` capture every key of a Redis database as
  ``key -> (TYPE, DUMP)`` so a test can assert that an operation left Redis byte-for-byte
  unchanged (TTLs are not part of the snapshot).
- :func:`wait_for` polls a condition against a deadline; tests synchronise on it instead of
  sleeping.
- :func:`close_sync_cluster` closes a sync ``RedisCluster`` without leaking sockets.
- :func:`spans_named` picks the finished OpenTelemetry spans of one name.
- :func:`queue_key` spells a queue's Redis key under the default ``bull`` prefix, for tests that
  read or change Redis directly.
- :func:`busy_for` keeps a server busy with a script, from another client in a thread.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar, overload

import redis
import redis.asyncio
import redis.cluster

from echomq._redis import topology

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    import echomq
    from echomq.worker._session import Session

T = TypeVar("T")

Snapshot = dict[bytes, tuple[bytes, bytes]]


def queue_key(queue: str, suffix: str) -> str:
    """The Redis key ``bull:<queue>:<suffix>`` of a queue under the default prefix.

    Written out here rather than taken from ``echomq.protocol.keys``, so a test that reads Redis
    through it also checks the key layout BullMQ uses.

    Args:
        queue: The queue name.
        suffix: A state or structure (``"wait"``, ``"events"``, ``"meta"``), a job id, or a job
            id with its own suffix (``"7:lock"``); may be a SCAN glob (``"*:lock"``).

    Returns:
        The key.
    """
    return f"bull:{queue}:{suffix}"


def _as_bytes(value: bytes | str) -> bytes:
    return value.encode() if isinstance(value, str) else value


def _canonical(content: dict[Any, Any] | set[Any]) -> bytes:
    """Hashes and sets by content, sorted: the DUMP of a hashtable-encoded one follows the
    table's internal order, which a rehash step (any read may make one) changes without a
    write; Redis 6.2 shows it. Empty when the key is gone."""
    items = content.items() if isinstance(content, dict) else ((m, b"") for m in content)
    pairs = sorted((_as_bytes(k), _as_bytes(v)) for k, v in items)
    return b"".join(b"%d:%s=%d:%s;" % (len(k), k, len(v), v) for k, v in pairs)


async def snapshot(r: redis.asyncio.Redis, match: str | None = None) -> Snapshot:
    """Return every key of the client's database mapped to ``(TYPE, DUMP)``.

    Hashes and sets are read by content instead of DUMP (see :func:`_canonical`).

    Works with any ``decode_responses`` setting (keys and types are returned as bytes).

    Args:
        r: An async client.
        match: only keys matching this glob, e.g. one queue's ``keys.qualified + "*"``: the
            session server is shared, and keys other tests left with a TTL (a worker's last
            lock or stalled-check) may expire between two snapshots.

    Returns:
        The snapshot, with keys in sorted order.
    """
    keys = sorted([_as_bytes(k) async for k in r.scan_iter(match=match, count=1000)])
    result: Snapshot = {}
    for key in keys:
        kind = _as_bytes(await r.type(key))
        dumped: bytes | None
        if kind == b"hash":
            dumped = _canonical(await r.hgetall(key))
        elif kind == b"set":
            dumped = _canonical(await r.smembers(key))
        else:
            dumped = await r.dump(key)
        if not dumped:  # deleted between SCAN and reading it
            continue
        result[key] = (kind, _as_bytes(dumped))
    return result


def snapshot_sync(r: redis.Redis, match: str | None = None) -> Snapshot:
    """Synchronous twin of :func:`snapshot` for sync-client tests.

    Args:
        r: A sync client.
        match: only keys matching this glob (see :func:`snapshot`).

    Returns:
        The snapshot, with keys in sorted order.
    """
    keys = sorted(_as_bytes(k) for k in r.scan_iter(match=match, count=1000))
    result: Snapshot = {}
    for key in keys:
        kind = _as_bytes(r.type(key))
        dumped: bytes | None
        if kind == b"hash":
            dumped = _canonical(r.hgetall(key))
        elif kind == b"set":
            dumped = _canonical(r.smembers(key))
        else:
            dumped = r.dump(key)
        if not dumped:
            continue
        result[key] = (kind, _as_bytes(dumped))
    return result


async def monitored(
    redis_url: str, action: Callable[[], Awaitable[Any]], *, from_lua: bool
) -> list[list[str]]:
    """Run ``action`` under MONITOR; return the commands it caused, split into words.

    ``from_lua`` selects the commands scripts ran, else those clients sent.
    """
    client = redis.asyncio.Redis.from_url(redis_url, decode_responses=True)
    sentinel = f"end-of-action-{uuid.uuid4().hex}"
    commands: list[list[str]] = []
    try:
        async with client.monitor() as monitor:
            await action()
            await client.echo(sentinel)
            while True:
                info = await monitor.next_command()
                words = str(info["command"]).split(" ")
                if sentinel in words:
                    break
                if (info["client_type"] == "lua") == from_lua:
                    commands.append(words)
    finally:
        await client.aclose()
    return commands


@overload
async def wait_for(
    predicate: Callable[[], Awaitable[T]],
    timeout: float = ...,
    interval: float = ...,
    message: str | None = ...,
) -> T: ...


@overload
async def wait_for(
    predicate: Callable[[], T],
    timeout: float = ...,
    interval: float = ...,
    message: str | None = ...,
) -> T: ...


async def wait_for(
    predicate: Callable[[], object],
    timeout: float = 5.0,
    interval: float = 0.01,
    message: str | None = None,
) -> object:
    """Poll ``predicate`` until it returns a truthy value or ``timeout`` seconds pass.

    Args:
        predicate: A sync or async callable; its truthy result ends the wait.
        timeout: Seconds before giving up.
        interval: Seconds between polls.
        message: Added to the failure message.

    Returns:
        The predicate's first truthy result.

    Raises:
        AssertionError: On timeout, naming the predicate and its last result.
    """
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if inspect.isawaitable(result):
            result = await result
        if result:
            return result
        if time.monotonic() >= deadline:
            name = getattr(predicate, "__qualname__", repr(predicate))
            detail = f": {message}" if message else ""
            raise AssertionError(
                f"condition {name} still false after {timeout}s (last result {result!r}){detail}"
            )
        await asyncio.sleep(interval)


def close_sync_cluster(cluster: redis.cluster.RedisCluster) -> None:
    """Close a sync ``RedisCluster`` and every node connection it opened.

    redis-py 8.1's ``RedisCluster.close()`` leaves the per-node connection pools connected, which
    ``filterwarnings = error`` reports as an unclosed-socket ResourceWarning.

    Args:
        cluster: The client to close.
    """
    topology.close(cluster)  # what echomq does for the sync clients it opens


def spans_named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    """The finished spans called ``name`` that ``exporter`` holds, oldest first."""
    return [s for s in exporter.get_finished_spans() if s.name == name]


def busy_for(url: str, seconds: float) -> threading.Thread:
    """Another client runs a script that keeps Redis busy for ``seconds`` (other clients get
    BUSY once it has run past the server's ``lua-time-limit`` / ``busy-reply-threshold``)."""
    script = """
local t = redis.call('TIME')
local start = t[1] * 1000000 + t[2]
while true do
  local n = redis.call('TIME')
  if n[1] * 1000000 + n[2] - start > tonumber(ARGV[1]) then break end
end
return 1
"""

    def run() -> None:
        client = redis.Redis.from_url(url)
        try:
            client.eval(script, 0, int(seconds * 1_000_000))
        finally:
            client.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def session_of(worker: echomq.Worker) -> Session:
    """The run of a running worker (its held jobs, its process pool, its control channel)."""
    session = worker._session
    assert session is not None, "the worker is not running"
    return session
