"""Sans-I/O protocol operations: each builds the script call or commands and parses the reply.

An :class:`Op` is a value: ``await op.run(client)`` runs it on an async client and
``op.run_sync(client)`` on a sync one, so the async and sync APIs are each a line per operation.
Validation happens while an op is built, so a refused call never reaches Redis.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import redis
import redis.asyncio

from . import scripts
from .errors import InvalidJobIdError, PayloadError, error_for_code
from .options import UNSET, JobOptions, moment_to_ms, to_ms
from .protocol import fields
from .protocol.keys import RESERVED_SUFFIXES, QueueKeys

T = TypeVar("T")


def to_str(value: Any) -> str:
    """A reply value as str, whatever ``decode_responses`` is."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def flat_to_dict(reply: Sequence[Any]) -> dict[str, str]:
    """A flat ``[field, value, ...]`` reply as a dict of str."""
    it = iter(reply)
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

    async def run(self, client: redis.asyncio.Redis) -> T:
        """Run on an async client."""
        raise NotImplementedError

    def run_sync(self, client: redis.Redis) -> T:
        """Run on a sync client."""
        raise NotImplementedError


@dataclass(slots=True)
class ScriptOp(Op[T]):
    """A call of one script, and how to read its reply."""

    script: scripts.Script
    keys: list[str]
    args: list[scripts.Arg]
    parse: Callable[[Any], T]

    async def run(self, client: redis.asyncio.Redis) -> T:
        return self.parse(await self.script.run(client, self.keys, self.args))

    def run_sync(self, client: redis.Redis) -> T:
        return self.parse(self.script.run_sync(client, self.keys, self.args))


@dataclass(slots=True)
class CommandOp(Op[T]):
    """Plain commands sent in one round trip (a non-transactional pipeline when several)."""

    commands: list[tuple[Any, ...]]
    parse: Callable[[list[Any]], T]

    async def run(self, client: redis.asyncio.Redis) -> T:
        if len(self.commands) == 1:
            reply = await client.execute_command(*self.commands[0])  # type: ignore[no-untyped-call]
            return self.parse([reply])
        async with client.pipeline(transaction=False) as pipe:
            for command in self.commands:
                pipe.execute_command(*command)
            return self.parse(await pipe.execute())

    def run_sync(self, client: redis.Redis) -> T:
        if len(self.commands) == 1:
            reply = client.execute_command(*self.commands[0])  # type: ignore[no-untyped-call]
            return self.parse([reply])
        with client.pipeline(transaction=False) as pipe:
            for command in self.commands:
                pipe.execute_command(*command)  # type: ignore[no-untyped-call]
            return self.parse(pipe.execute())


def check_code(reply: Any, *, job_id: str | None, command: str, state: str = "") -> Any:
    """Raise the mapped error when a script replied with a negative integer code."""
    if isinstance(reply, int) and reply < 0:
        raise error_for_code(reply, job_id=job_id, command=command, state=state)
    return reply


# ---------------------------------------------------------------------------------------------
# Adding jobs


def validate_job_id(job_id: str) -> None:
    """Refuse custom ids Node refuses, and ids that would collide with a queue key."""
    if not isinstance(job_id, str):
        raise InvalidJobIdError(f"job_id must be a str, got {type(job_id).__name__} {job_id!r}")
    if not job_id:
        raise InvalidJobIdError("job_id must not be empty")
    digits = job_id[1:] if job_id.startswith("-") else job_id
    if digits.isdigit() and digits.isascii() and str(int(job_id)) == job_id:
        raise InvalidJobIdError(
            f"job_id {job_id!r} is an integer string; integer ids are reserved for generated ids,"
            " use a non-numeric id such as 'order-123'"
        )
    if ":" in job_id:
        raise InvalidJobIdError(f"job_id {job_id!r} contains ':'; use another separator")
    if job_id in RESERVED_SUFFIXES:
        raise InvalidJobIdError(f"job_id {job_id!r} is the name of a queue key; choose another id")


@dataclass(frozen=True, slots=True)
class PreparedJob:
    """A validated job ready to be written: everything the add script needs."""

    name: str
    data: Any
    data_json: str
    options: JobOptions
    opts_json: str
    timestamp_ms: int
    delay_ms: int
    priority: int


def prepare_job(name: str, data: Any, options: JobOptions, now: int | None = None) -> PreparedJob:
    """Validate one job and encode it; raises before anything is written."""
    if not isinstance(name, str):
        raise PayloadError(f"job name must be a str, got {type(name).__name__}")
    if options.job_id is not UNSET:
        validate_job_id(options.job_id)
    data_json = fields.dumps(data, "job data")
    size_limit = options.size_limit
    if size_limit is not UNSET:
        size = len(data_json.encode("utf-8"))
        if size > size_limit:
            raise PayloadError(
                f"job data is {size} bytes of JSON, over size_limit={size_limit}; "
                "store large payloads elsewhere and pass a reference"
            )
    timestamp = (
        moment_to_ms(options.timestamp, "timestamp")
        if options.timestamp is not UNSET
        else (now if now is not None else now_ms())
    )
    delay = to_ms(options.delay, "delay") if options.delay is not UNSET else 0
    priority = options.priority if options.priority is not UNSET else 0
    opts_json = fields.dumps(fields.options_to_wire(options), "job options")
    return PreparedJob(name, data, data_json, options, opts_json, timestamp, delay, priority)


def add_job(keys: QueueKeys, job: PreparedJob) -> ScriptOp[str]:
    """The add script call for a prepared job; the reply parses to the job id."""
    script = scripts.get("addJob")
    custom = job.options.job_id if job.options.job_id is not UNSET else ""
    lifo = "1" if job.options.lifo is True else "0"
    return ScriptOp(
        script,
        [
            keys.wait,
            keys.meta,
            keys.id,
            keys.delayed,
            keys.prioritized,
            keys.active,
            keys.events,
            keys.marker,
            keys.pc,
        ],
        [
            keys.base,
            custom,
            job.name,
            job.timestamp_ms,
            job.data_json,
            job.opts_json,
            job.delay_ms,
            job.priority,
            lifo,
            "",
            "",
        ],
        lambda reply: to_str(check_code(reply, job_id=custom or None, command="add")),
    )


def get_job_hash(keys: QueueKeys, job_id: str) -> CommandOp[dict[str, str] | None]:
    """HGETALL of a job; None when it does not exist."""

    def parse(replies: list[Any]) -> dict[str, str] | None:
        raw = replies[0]
        if not raw:
            return None
        return hash_to_dict(raw) if isinstance(raw, Mapping) else flat_to_dict(raw)

    return CommandOp([("HGETALL", keys.job(job_id))], parse)
