"""The operation types shared by every protocol operation, and reply decoding helpers.

An :class:`Op` is a value: what to send and how to read the reply. ``_redis.run.run_op`` runs
it on an async client and its generated twin ``_redis.run_sync.run_op`` on a sync one, so the
async and sync APIs are each a line per operation. Validation happens while an op is built, so
a refused call never reaches Redis.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

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
    """One protocol operation: what to send, and how to read the reply."""

    __slots__ = ()


@dataclass(slots=True)
class ScriptOp(Op[T]):
    """A call of one script, and how to read its reply."""

    script: scripts.Script
    keys: Sequence[str]
    args: list[scripts.Arg]
    parse: Callable[[Any], T]


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


@dataclass(slots=True)
class TransactionOp(Op[list[T]]):
    """Script calls sent in one MULTI/EXEC, so they land together or not at all.

    The scripts are loaded before the transaction: a NOSCRIPT would only surface at EXEC,
    after the other calls ran.
    """

    calls: Sequence[ScriptOp[T]]


@dataclass(slots=True)
class MappedOp(Op[U], Generic[T, U]):
    """Another op whose result goes through ``fn``."""

    op: Op[T]
    fn: Callable[[T], U]


def check_code(reply: Any, *, job_id: str | None, command: str, state: str = "") -> Any:
    """Raise the mapped error when a script replied with a negative integer code."""
    if isinstance(reply, int) and reply < 0:
        raise error_for_code(reply, job_id=job_id, command=command, state=state)
    return reply


#: A multi-step operation: yields ops, receives their results, returns a value. Run it with
#: ``_redis.run.run_plan`` (or its sync twin), so loops over bounded script calls are written once.
Plan = Generator[Op[Any], Any, T]
