"""Commands that go out through the caller's own client, batched when they come at once.

The module-level functions (``await echomq.add(..., connection=redis)``) have no Channel
(``wire``): nothing would close it, as the caller owns the client and each call returns at
once. Their commands go out on connections of the client's own pool, which ``client.aclose()``
closes. Sent one by one, 200 concurrent adds would take 200 pooled connections (redis-py's
pool refuses a 101st by default), a pool checkout and a round trip each, and redis-py's packing
in Python; :func:`call` does this instead:

- when none of the client's calls is in flight, a call goes out at once (a lone call waits
  for nothing);
- calls made while others are in flight are collected until the end of the event-loop
  iteration, then written together on one pooled connection, their replies read in order.

Each call keeps its own reply and error: an error reply fails only its own call, and a
connection error or timeout fails the calls of its batch, as it would fail each of them sent
alone. redis-py's reply callbacks (``Redis.parse_response``), its retry policy
(``Connection.retry``, as its pipelines use it) and its connection handling (health checks,
``socket_timeout``, reconnects) apply as to a single command, so what a caller gets does not
depend on whether its call was batched. Commands are packed with hiredis, as a Channel packs
them, when the client encodes as hiredis does (UTF-8, strict), else by the connection.

Not batched (sent one by one by ``execute_command``, as before): Redis Cluster clients (their
commands are routed by slot) and single-connection clients (they own one connection). Only
commands that cannot block may come here (script calls and the per-server checks' reads): a
blocking command would hold up its batch.

The batching state is kept per client in a weak-keyed map, so it never outlives the client and
holds no connection between calls; it is tied to the event loop that made it.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

import hiredis
import redis.asyncio
from redis import exceptions as rx

from . import pools

_pack = hiredis.pack_command
Waiter = asyncio.Future[Any]
Command = tuple[Any, ...]


def _packs_like_hiredis(client: redis.asyncio.Redis) -> bool:
    """Whether ``client``'s connections turn arguments into the bytes hiredis would (UTF-8,
    strict, redis-py's own encoder)."""
    given = client.connection_pool.connection_kwargs
    if "encoder_class" in given or given.get("encoding_errors", "strict") != "strict":
        return False
    encoding = str(given.get("encoding") or "utf-8")
    return encoding.lower().replace("-", "").replace("_", "") == "utf8"


async def _run(client: redis.asyncio.Redis, commands: list[Command], fast_pack: bool) -> list[Any]:
    """``commands``' replies (error replies in place, as exceptions), written at once on one
    connection of ``client``'s pool. The client's retry policy applies as to single
    commands: after a connection error, only the commands not yet answered are sent again."""
    replies: list[Any] = []

    async def attempt() -> list[Any]:
        todo = commands[len(replies) :]
        if fast_pack:
            await conn.send_packed_command(b"".join([_pack(command) for command in todo]))
        else:
            await conn.send_packed_command(conn.pack_commands(todo))
        for command in todo:
            try:
                replies.append(await client.parse_response(conn, command[0]))
            except rx.ResponseError as exc:
                replies.append(exc)
        return replies

    pool = client.connection_pool
    conn = await pools.take(pool)
    try:
        return await conn.retry.call_with_retry(attempt, lambda _: conn.disconnect())  # type: ignore[no-any-return]
    finally:
        await pool.release(conn)


class _Batches:
    """The batching state of one client on one event loop."""

    __slots__ = ("busy", "fast_pack", "loop", "pending", "tasks")

    def __init__(self, loop: asyncio.AbstractEventLoop, client: redis.asyncio.Redis) -> None:
        self.loop = loop
        self.fast_pack = _packs_like_hiredis(client)  # else packed by the connection
        self.busy = 0  # calls sent or collected, not yet answered
        self.pending: list[tuple[Command, Waiter]] = []  # to send at the iteration's end
        self.tasks: set[asyncio.Task[None]] = set()  # the batches being sent

    def flush(self, client: redis.asyncio.Redis) -> None:
        """Send the calls collected during this iteration as one batch (less those whose
        callers were cancelled meanwhile: they have not left)."""
        batch = [call for call in self.pending if not call[1].done()]
        self.busy -= len(self.pending) - len(batch)
        self.pending = []
        if not batch:
            return
        task = self.loop.create_task(self._send(client, batch))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _send(self, client: redis.asyncio.Redis, batch: list[tuple[Command, Waiter]]) -> None:
        try:
            replies = await _run(client, [command for command, _ in batch], self.fast_pack)
        except asyncio.CancelledError:  # the event loop is closing
            for _, waiter in batch:
                waiter.cancel()
            raise
        except Exception as exc:  # connection lost, timeout...: each call of the batch fails
            for _, waiter in batch:
                if not waiter.done():
                    waiter.set_exception(exc)
            return
        finally:
            self.busy -= len(batch)
        for (_, waiter), reply in zip(batch, replies):
            if waiter.done():  # its caller was cancelled
                continue
            if isinstance(reply, Exception):
                waiter.set_exception(reply)
            else:
                waiter.set_result(reply)


_BATCHES: weakref.WeakKeyDictionary[redis.asyncio.Redis, _Batches] = weakref.WeakKeyDictionary()
_BATCHED_CLASSES: dict[type, bool] = {}


def _batchable(client: redis.asyncio.Redis) -> bool:
    kind = type(client)
    known = _BATCHED_CLASSES.get(kind)
    if known is None:  # remembered per class: isinstance through typing costs µs a call
        known = _BATCHED_CLASSES[kind] = issubclass(kind, redis.asyncio.Redis)
    return known and not client.single_connection_client


async def call(client: redis.asyncio.Redis, command: Command) -> Any:
    """``command``'s reply through ``client`` (redis-py's reply callback applied): at once
    when none of its calls is in flight, else with the others made in this iteration."""
    if not _batchable(client):
        return await client.execute_command(*command)  # type: ignore[no-untyped-call]
    loop = asyncio.get_running_loop()
    batches = _BATCHES.get(client)
    if batches is None or batches.loop is not loop:
        batches = _BATCHES[client] = _Batches(loop, client)
    batches.busy += 1
    if batches.busy == 1:  # idle: at once
        try:
            (reply,) = await _run(client, [command], batches.fast_pack)
        finally:
            batches.busy -= 1
        if isinstance(reply, Exception):
            raise reply
        return reply
    waiter: Waiter = loop.create_future()
    if not batches.pending:
        loop.call_soon(batches.flush, client)
    batches.pending.append((command, waiter))
    return await waiter
