"""The operation types shared by every protocol operation, and reply decoding helpers.

An :class:`Op` is a value: ``await op.run(client)`` runs it on an async client and
``op.run_sync(client)`` on a sync one, so the async and sync APIs are each a line per operation.
Validation happens while an op is built, so a refused call never reaches Redis.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

from .._redis.wire import Channel
from ..errors import error_for_code
from . import scripts

T = TypeVar("T")
U = TypeVar("U")


def to_str(value: Any) -> str:
    """A reply value as str, whatever ``decode_responses`` is."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def flat_to_dict(reply: Sequence[Any]) -> dict[str, str]:
    """A flat ``[field, value, ...]`` reply as a dict of str."""
    it = iter(reply)
    if reply and isinstance(reply[0], bytes):  # the common case: decode_responses off
        return {k.decode(): v.decode("utf-8", "replace") for k, v in zip(it, it)}
    return {to_str(k): to_str(v) for k, v in zip(it, it)}


def hash_to_dict(reply: Mapping[Any, Any]) -> dict[str, str]:
    """An HGETALL reply (bytes or str) as a dict of str."""
    return {to_str(k): to_str(v) for k, v in reply.items()}


def now_ms() -> int:
    """The client clock in epoch milliseconds (the protocol's timestamps)."""
    return int(time.time() * 1000)


class Op(Generic[T]):
    """One protocol operation, ready to run on an async or a sync client."""

    __slots__ = ()

    async def run(self, client: redis.asyncio.Redis, channel: Channel | None = None) -> T:
        """Run on an async client; single calls go through ``channel`` when one is given."""
        raise NotImplementedError

    def run_sync(self, client: redis.Redis) -> T:
        """Run on a sync client."""
        raise NotImplementedError


@dataclass(slots=True)
class ScriptOp(Op[T]):
    """A call of one script, and how to read its reply."""

    script: scripts.Script
    keys: Sequence[str]
    args: list[scripts.Arg]
    parse: Callable[[Any], T]

    async def run(self, client: redis.asyncio.Redis, channel: Channel | None = None) -> T:
        return self.parse(await self.script.run(client, self.keys, self.args, channel))

    def run_sync(self, client: redis.Redis) -> T:
        return self.parse(self.script.run_sync(client, self.keys, self.args))


@dataclass(slots=True)
class CommandOp(Op[T]):
    """Plain commands sent in one round trip (a non-transactional pipeline when several).

    Always on the client, never a Channel: parsers may rely on redis-py's reply callbacks.
    """

    commands: list[tuple[Any, ...]]
    parse: Callable[[list[Any]], T]
    #: On a cluster client, run the commands on the node holding this key's slot (commands
    #: about connections, such as CLIENT LIST, have no key to route them by).
    route: str | None = None

    async def run(self, client: redis.asyncio.Redis, channel: Channel | None = None) -> T:
        if self.route is not None and isinstance(client, redis.asyncio.cluster.RedisCluster):
            await client.initialize()
            node = client.get_node_from_key(self.route)
            return self.parse(
                [await client.execute_command(*c, target_nodes=node) for c in self.commands]
            )
        if len(self.commands) == 1:
            reply = await client.execute_command(*self.commands[0])  # type: ignore[no-untyped-call]
            return self.parse([reply])
        async with client.pipeline(transaction=False) as pipe:
            for command in self.commands:
                pipe.execute_command(*command)
            return self.parse(await pipe.execute())

    def run_sync(self, client: redis.Redis) -> T:
        if self.route is not None and isinstance(client, redis.cluster.RedisCluster):
            node = client.get_node_from_key(self.route)
            return self.parse(
                [client.execute_command(*c, target_nodes=node) for c in self.commands]
            )
        if len(self.commands) == 1:
            reply = client.execute_command(*self.commands[0])  # type: ignore[no-untyped-call]
            return self.parse([reply])
        with client.pipeline(transaction=False) as pipe:
            for command in self.commands:
                pipe.execute_command(*command)  # type: ignore[no-untyped-call]
            return self.parse(pipe.execute())


@dataclass(slots=True)
class TransactionOp(Op[list[T]]):
    """Script calls sent in one MULTI/EXEC, so they land together or not at all.

    The scripts are loaded before the transaction: a NOSCRIPT would only surface at EXEC,
    after the other calls ran.
    """

    calls: Sequence[ScriptOp[T]]

    async def run(self, client: redis.asyncio.Redis, channel: Channel | None = None) -> list[T]:
        await scripts.ensure_loaded(client, [call.script for call in self.calls])
        async with client.pipeline(transaction=True) as pipe:
            for call in self.calls:
                call.script.queue(pipe, call.keys, call.args)
            replies = await pipe.execute()
        return [call.parse(reply) for call, reply in zip(self.calls, replies)]

    def run_sync(self, client: redis.Redis) -> list[T]:
        scripts.ensure_loaded_sync(client, [call.script for call in self.calls])
        with client.pipeline(transaction=True) as pipe:
            for call in self.calls:
                call.script.queue(pipe, call.keys, call.args)
            replies = pipe.execute()
        return [call.parse(reply) for call, reply in zip(self.calls, replies)]


@dataclass(slots=True)
class MappedOp(Op[U], Generic[T, U]):
    """Another op whose result goes through ``fn``."""

    op: Op[T]
    fn: Callable[[T], U]

    async def run(self, client: redis.asyncio.Redis, channel: Channel | None = None) -> U:
        return self.fn(await self.op.run(client, channel))

    def run_sync(self, client: redis.Redis) -> U:
        return self.fn(self.op.run_sync(client))


def check_code(reply: Any, *, job_id: str | None, command: str, state: str = "") -> Any:
    """Raise the mapped error when a script replied with a negative integer code."""
    if isinstance(reply, int) and reply < 0:
        raise error_for_code(reply, job_id=job_id, command=command, state=state)
    return reply


#: A multi-step operation: yields ops, receives their results, returns a value. Run it with
#: :func:`run_plan` or :func:`run_plan_sync`, so loops over bounded script calls are written once.
Plan = Generator[Op[Any], Any, T]


async def run_plan(client: redis.asyncio.Redis, plan: Plan[T], channel: Channel | None = None) -> T:
    """Drive ``plan`` on an async client (and ``channel``, when given) until it returns."""
    try:
        op = next(plan)
        while True:
            op = plan.send(await op.run(client, channel))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]


def run_plan_sync(client: redis.Redis, plan: Plan[T]) -> T:
    """Drive ``plan`` on a sync client until it returns."""
    try:
        op = next(plan)
        while True:
            op = plan.send(op.run_sync(client))
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
