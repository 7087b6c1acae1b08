"""Replicated adds: an add's script calls, then Redis ``WAIT``, on one connection held for both.

``WAIT numreplicas timeout`` blocks until that many replicas have acknowledged every write
*of the connection it runs on* (Redis tracks the replication offset of each client's last
write), or until the timeout; it replies with the count. So the add and its ``WAIT`` must share
one connection, with nothing in between that could reconnect it: a ``WAIT`` on a new
connection has no write to wait for and answers at once with every connected replica, a false
acknowledgement, and the likeliest moment for a reconnect is a failover, the one ``WAIT`` is
for. Hence a :class:`ReplicatedOp` is run (``_redis.run``) on one connection taken from the
client's pool (on a Cluster client, from the node that holds the queue's slot; on a
Sentinel-managed client, from the current master): the calls and the ``WAIT`` are written in
one go and every reply is read on it; a lost connection fails the call (the add may or may not
have run, as for any add) and is never retried on another connection. A queue's pipelined
Channel is not used: concurrent callers share it, and a ``WAIT`` would hold all of them up.

Bulk calls keep their MULTI/EXEC (``WAIT`` inside a transaction does not wait, so it follows
the EXEC); their scripts are loaded before, as for a :class:`~echomq._ops.TransactionOp`. A
single call that meets NOSCRIPT loads the script and runs again once. On a cluster, a
``MOVED`` reply (nothing was written: the node refused the call) refreshes the slot map and
runs again once; a lost connection refreshes it for the next call.

:func:`check_replicated` turns what ``WAIT`` answered into the
:class:`~echomq.errors.ReplicationError` the caller sees, holding the jobs that were added.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from redis import exceptions as rx

from ..errors import InvalidOptionError, ReplicationError
from ..options import UNSET, Duration, _Unset, check_timeout
from ._base import MappedOp, Op, ScriptOp, TransactionOp

if TYPE_CHECKING:  # the job model imports ops
    from .._job_model import JobData

T = TypeVar("T")

#: The longest ``wait_timeout`` accepted (a day): a larger one would make Redis refuse the
#: ``WAIT`` after the add was written.
MAX_WAIT_TIMEOUT = 86_400.0


@dataclass(frozen=True, slots=True)
class ReplicaWait:
    """How many replicas must acknowledge an add (``wait_replicas``) and how long to wait for
    them (``wait_timeout``, seconds). Make it with :meth:`build`, which validates."""

    replicas: int = 0
    timeout: float = 1.0

    @classmethod
    def build(cls, replicas: int, timeout: Duration) -> ReplicaWait:
        """Validate ``wait_replicas`` and ``wait_timeout``.

        Raises:
            InvalidOptionError: ``replicas`` is not an int >= 0, or ``timeout`` is not a
                positive, finite duration of at most a day.
        """
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise InvalidOptionError(
                "wait_replicas must be an int >= 0 (how many replicas must acknowledge the add; "
                f"0 waits for none), got {replicas!r}"
            )
        seconds = check_timeout(timeout, "wait_timeout")  # also refuses bools and NaN
        if seconds > MAX_WAIT_TIMEOUT:
            raise InvalidOptionError(
                f"wait_timeout must be at most {MAX_WAIT_TIMEOUT:g} seconds, got {timeout!r}"
            )
        return cls(replicas, seconds)

    def merged(self, replicas: int | _Unset, timeout: Duration | _Unset) -> ReplicaWait:
        """These settings with the per-call ones given (not UNSET) replacing them, validated."""
        if replicas is UNSET and timeout is UNSET:
            return self
        return ReplicaWait.build(
            self.replicas if replicas is UNSET else replicas,
            self.timeout if timeout is UNSET else timeout,
        )

    @property
    def timeout_ms(self) -> int:
        """The ``WAIT`` timeout in whole milliseconds, rounded up (0 would wait for ever)."""
        return max(1, math.ceil(self.timeout * 1000))


#: No replica to wait for: what a Queue and the module functions use by default.
NO_WAIT = ReplicaWait()


@dataclass(slots=True)
class ReplicatedOp(Op[tuple[T, "int | rx.RedisError"]]):
    """Script calls then ``WAIT`` on one held connection (see the module docstring).

    Parses to ``(result, acknowledged)``: the result the calls parse to, and how many replicas
    acknowledged them, or the error ``WAIT`` itself replied (the calls did run).
    """

    calls: Sequence[ScriptOp[Any]]
    combine: Callable[[list[Any]], T]
    atomic: bool
    wait: ReplicaWait

    def commands(self) -> list[tuple[Any, ...]]:
        """The calls (in MULTI/EXEC when atomic), then the ``WAIT``."""
        commands: list[tuple[Any, ...]] = [
            ("EVALSHA", c.script.sha, c.script.numkeys, *c.keys, *c.args) for c in self.calls
        ]
        if self.atomic:
            commands = [("MULTI",), *commands, ("EXEC",)]
        return [*commands, ("WAIT", self.wait.replicas, self.wait.timeout_ms)]

    def check(self, client: object) -> None:
        """Refuse calls whose keys do not fit ``client`` (``Script.check``)."""
        for call in self.calls:
            call.script.check(call.keys, client)

    def retry_reason(self, replies: list[Any]) -> type[rx.RedisError] | None:
        """Why the calls may run again (nothing was written: MOVED, or NOSCRIPT on a single
        call), or None."""
        first = replies[1] if self.atomic else replies[0]
        if isinstance(first, rx.MovedError):
            return rx.MovedError
        if not self.atomic and isinstance(first, rx.NoScriptError):
            return rx.NoScriptError
        return None

    def read(self, replies: list[Any]) -> tuple[T, int | rx.RedisError]:
        """The result and the acknowledgement from the replies of :meth:`commands`; a refused
        call raises."""
        acked = replies[-1]
        if self.atomic:
            for reply in replies[:-2]:  # MULTI, then each call's QUEUED or refusal
                if isinstance(reply, Exception):
                    raise reply  # refused while queued: the EXEC aborted, nothing was written
            results = replies[-2]
            if isinstance(results, Exception):
                raise results
        else:
            results = replies[:-1]
        for reply in results:
            if isinstance(reply, Exception):
                raise reply
        value = self.combine([call.parse(r) for call, r in zip(self.calls, results)])
        return value, acked if isinstance(acked, rx.RedisError) else int(acked)


def replicated(op: Op[T], wait: ReplicaWait) -> ReplicatedOp[T]:
    """``op`` (an add: one script call, or a MULTI/EXEC of them, possibly mapped) followed by
    ``WAIT`` for ``wait.replicas`` replicas."""
    fn: Callable[[Any], T] | None = None
    if isinstance(op, MappedOp):
        fn, op = op.fn, op.op
    if isinstance(op, ScriptOp):
        single = fn or (lambda value: value)
        return ReplicatedOp([op], lambda results: single(results[0]), False, wait)
    if isinstance(op, TransactionOp):
        many = fn or (lambda values: values)
        return ReplicatedOp(list(op.calls), many, True, wait)
    raise TypeError(f"cannot wait for replicas after a {type(op).__name__}")


def check_replicated(
    wait: ReplicaWait, acked: int | rx.RedisError, jobs: Sequence[JobData], result: object
) -> None:
    """Raise :class:`ReplicationError` (holding ``jobs`` and ``result``, what the add
    returns) when fewer replicas than ``wait`` asks for acknowledged the add."""
    if isinstance(acked, int) and acked >= wait.replicas:
        return
    first = jobs[0]
    one = len(jobs) == 1
    what = f"job {first.id}" if one else f"{len(jobs)} jobs (the first, {first.id},"
    it, were = ("it", "was") if one else ("them", "were")
    if isinstance(acked, Exception):
        heard = f"WAIT failed ({acked}), so whether a replica has {it} is unknown"
    else:
        heard = (
            f"only {acked} of the {wait.replicas} replica(s) asked for acknowledged {it} "
            f"within {wait.timeout:g} s"
        )
    raise ReplicationError(
        f"{what} of queue {first.queue_name!r}{'' if one else ')'} {were} added on the primary, "
        f"but {heard}. {'It exists' if one else 'They exist'} and will run, but a failover "
        f"before a replica has {it} would lose {it}. Check the replicas (INFO replication) or "
        f"raise wait_timeout; adding {it} again would add {it} twice unless "
        f"{'it has a custom job_id' if one else 'they have custom job ids'}",
        jobs=list(jobs),
        result=result,
        wait_replicas=wait.replicas,
        acknowledged=acked if isinstance(acked, int) else 0,
    ) from (acked if isinstance(acked, Exception) else None)
