"""Queue-wide operations: remove, drain, clean, obliterate, retry_jobs, promote_jobs.

(docs/protocol/scripts.md#script-removeJob and the sections after it.) Operations that may
touch many jobs run as a
*plan*: a generator that yields one bounded script call at a time and receives its parsed reply,
so no single script holds Redis for long and the same plan drives the async API and the sync
one (``_redis.run.run_plan`` and its generated twin). Every plan validates its
arguments when it is built, before its first call is yielded, so a refused call writes nothing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final, TypeVar

from ..errors import (
    ActiveJobsError,
    InvalidOptionError,
    JobLockedError,
    QueueNotPausedError,
    ValidationError,
)
from ..options import Duration, moment_to_ms, to_ms
from ..protocol.keys import QueueKeys
from . import scripts
from ._base import Plan, ScriptOp, check_code, now_ms, to_str

T = TypeVar("T")

#: A multi-call operation: yields ops, is sent each op's result, returns the final value.

#: The most jobs one drain, clean or obliterate script call removes.
BATCH: Final = 1000

#: Accepted ``clean`` states and the key suffix each names.
CLEAN_STATES: Final[dict[str, str]] = {
    "completed": "completed",
    "failed": "failed",
    "wait": "wait",
    "waiting": "wait",
    "active": "active",
    "paused": "paused",
    "prioritized": "prioritized",
    "delayed": "delayed",
}

#: Accepted ``retry_jobs`` states.
RETRY_STATES: Final = ("failed", "completed")

#: The states moveJobsToWait takes jobs from (retry_jobs, promote_jobs).
MOVE_TO_WAIT_STATES: Final = ("completed", "failed", "delayed")


# -- validation ----------------------------------------------------------------------------


def _check_count(value: object, field: str, *, allow_zero: bool) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidOptionError(f"{field} must be an int, got {value!r}")
    low = 0 if allow_zero else 1
    if value < low:
        raise InvalidOptionError(f"{field} must be >= {low}, got {value}")
    return value


def clean_state(state: str) -> str:
    """The key suffix of a ``clean`` state name; raises for names ``clean`` does not accept."""
    suffix = CLEAN_STATES.get(state) if isinstance(state, str) else None
    if suffix is None:
        allowed = ", ".join(sorted(CLEAN_STATES))
        raise ValidationError(f"clean() state must be one of {allowed}; got {state!r}")
    return suffix


# -- remove --------------------------------------------------------------------------------


def remove_job(keys: QueueKeys, job_id: str, *, remove_children: bool = True) -> ScriptOp[bool]:
    """Remove one job (and by default the children recorded on it).

    The reply parses to True when the job existed, False when there was no such job.
    Raises :class:`JobLockedError` when a worker holds the job or a pending child, and
    :class:`~echomq.JobBelongsToSchedulerError` for a scheduler's current iteration.
    """
    if not isinstance(job_id, str) or not job_id:
        raise ValidationError(f"job_id must be a non-empty str, got {job_id!r}")

    def parse(reply: Any) -> bool:
        code = check_code(reply, job_id=job_id, command="remove")
        if code == 0:
            what = "it or one of its children" if remove_children else "it"
            raise JobLockedError(
                f"job {job_id} could not be removed because a worker holds a lock on {what}; "
                "wait for the job to finish (or its lock to expire) and try again"
            )
        return bool(code == 1)

    return ScriptOp(
        scripts.get("removeJob"),
        keys.script_keys["removeJob"],
        [job_id, "1" if remove_children else "0"],
        parse,
    )


def _while_more(first: ScriptOp[bool], following: Callable[[], ScriptOp[bool]]) -> Plan[None]:
    """The plan that runs ``first``, then ``following()`` for as long as a call answers that
    more remain. ``first`` is built by the caller, so its arguments are checked at once."""

    def plan() -> Plan[None]:
        more = yield first
        while more:
            more = yield following()

    return plan()


# -- drain ---------------------------------------------------------------------------------


def drain_batch(keys: QueueKeys, *, delayed: bool, budget: int = BATCH) -> ScriptOp[bool]:
    """One drain call removing at most ``budget`` jobs; parses to True when more may remain."""
    _check_count(budget, "budget", allow_zero=False)
    return ScriptOp(
        scripts.get("drain"),
        keys.script_keys["drain"],
        ["1" if delayed else "0", budget],
        lambda reply: int(reply) == 1,
    )


def drain_plan(keys: QueueKeys, *, delayed: bool = False, budget: int = BATCH) -> Plan[None]:
    """Remove every waiting (and prioritized; with ``delayed``, delayed) job, grouped ones
    included, in bounded calls."""
    batch = functools.partial(drain_batch, keys, delayed=delayed, budget=budget)
    return _while_more(batch(), batch)


# -- clean ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CleanBatch:
    """The reply of one clean call: ids removed, and how many entries it inspected."""

    removed: list[str]
    inspected: int


def clean_batch(
    keys: QueueKeys, *, cutoff_ms: int, batch: int, state: str, skip: int = 0
) -> ScriptOp[CleanBatch]:
    """One clean call inspecting at most ``batch`` entries of ``state`` (a key suffix)."""
    if state not in CLEAN_STATES.values():
        allowed = ", ".join(sorted(set(CLEAN_STATES.values())))
        raise ValidationError(f"clean state must be a key suffix ({allowed}); got {state!r}")
    _check_count(batch, "batch", allow_zero=False)
    _check_count(skip, "skip", allow_zero=True)

    def parse(reply: Any) -> CleanBatch:
        return CleanBatch([to_str(i) for i in reply[0]], int(reply[1]))

    return ScriptOp(
        scripts.get("cleanJobsInSet"),
        keys.script_keys["cleanJobsInSet"],
        [cutoff_ms, batch, state, skip],
        parse,
    )


def clean_plan(
    keys: QueueKeys,
    grace: Duration,
    limit: int = 0,
    state: str = "completed",
    *,
    now: int | None = None,
    batch: int = BATCH,
) -> Plan[list[str]]:
    """Remove jobs of ``state`` older than ``grace``, at most ``limit`` (0 = all), in batches.

    ``wait``, ``delayed`` and ``active`` include their grouped jobs, after the ungrouped ones.

    Each call inspects at most ``batch`` entries; entries it keeps (too recent, locked, a
    scheduler's current iteration) are skipped by the next call, so the scan goes on until it
    reaches the end of the state or ``limit`` jobs were removed.
    """
    suffix = clean_state(state)
    grace_ms = to_ms(grace, "grace")
    _check_count(limit, "limit", allow_zero=True)
    _check_count(batch, "batch", allow_zero=False)
    cutoff = (now if now is not None else now_ms()) - grace_ms

    def plan() -> Plan[list[str]]:
        removed: list[str] = []
        skip = 0
        while True:
            size = batch if limit == 0 else min(batch, limit - len(removed))
            if size <= 0:
                return removed
            result: CleanBatch = yield clean_batch(
                keys, cutoff_ms=cutoff, batch=size, state=suffix, skip=skip
            )
            removed.extend(result.removed)
            skip += result.inspected - len(result.removed)
            if result.inspected < size:
                return removed

    return plan()


# -- obliterate ----------------------------------------------------------------------------


def obliterate_batch(
    keys: QueueKeys, *, force: bool, budget: int = BATCH, pause: bool = True
) -> ScriptOp[bool]:
    """One obliterate call deleting at most ``budget`` jobs; True when it must be called again.

    With ``pause`` an unpaused queue is paused in the same atomic step (after the active-jobs
    check), so a refused call leaves Redis unchanged.
    """
    _check_count(budget, "budget", allow_zero=False)

    def parse(reply: Any) -> bool:
        code = int(reply)
        if code == -1:
            raise QueueNotPausedError(
                f"queue {keys.name!r} is not paused (it was resumed while being obliterated); "
                "pause it and call obliterate() again"
            )
        if code == -2:
            raise ActiveJobsError(
                f"queue {keys.name!r} has active jobs; stop its workers, or pass force=True to "
                "delete the active jobs too"
            )
        return code == 1

    return ScriptOp(
        scripts.get("obliterate"),
        keys.script_keys["obliterate"],
        [budget, "force" if force else "", "1" if pause else "0"],
        parse,
    )


def obliterate_plan(keys: QueueKeys, *, force: bool = False, budget: int = BATCH) -> Plan[None]:
    """Pause the queue and delete it, one bounded call at a time.

    Only the first call pauses: if the queue is resumed part-way through, the next call
    refuses with :class:`QueueNotPausedError` instead of fighting the resume.
    """
    first = obliterate_batch(keys, force=force, budget=budget, pause=True)
    return _while_more(
        first, functools.partial(obliterate_batch, keys, force=force, budget=budget, pause=False)
    )


# -- retry_jobs / promote_jobs -------------------------------------------------------------


def move_jobs_to_wait(
    keys: QueueKeys, *, state: str, count: int, max_score: int | str, now: int | None = None
) -> ScriptOp[bool]:
    """One moveJobsToWait call (``state`` = completed, failed or delayed); True if more remain.

    Grouped jobs return to their groups; ``delayed`` takes the grouped delayed jobs too.
    """
    _check_count(count, "count", allow_zero=False)
    if state not in MOVE_TO_WAIT_STATES:
        raise ValidationError(
            f"state must be one of {', '.join(MOVE_TO_WAIT_STATES)}; got {state!r}"
        )
    return ScriptOp(
        scripts.get("moveJobsToWait"),
        keys.script_keys["moveJobsToWait"],
        [count, max_score, state, now if now is not None else now_ms()],
        lambda reply: int(reply) == 1,
    )


def retry_jobs_plan(
    keys: QueueKeys,
    state: str = "failed",
    count: int = BATCH,
    timestamp: datetime | float | None = None,
) -> Plan[None]:
    """Move failed (or completed) jobs finished at or before ``timestamp`` back to wait.

    ``timestamp`` is a datetime or epoch seconds (default: now); ``count`` jobs per call.
    """
    if state not in RETRY_STATES:
        raise ValidationError(f"retry_jobs() state must be 'failed' or 'completed'; got {state!r}")
    _check_count(count, "count", allow_zero=False)
    max_score = now_ms() if timestamp is None else moment_to_ms(timestamp, "timestamp")
    return _move_all(keys, state, count, max_score)


def promote_jobs_plan(keys: QueueKeys, count: int = BATCH) -> Plan[None]:
    """Move every delayed job to wait now, ``count`` per call."""
    _check_count(count, "count", allow_zero=False)
    return _move_all(keys, "delayed", count, "+inf")


def _move_all(keys: QueueKeys, state: str, count: int, max_score: int | str) -> Plan[None]:
    batch = functools.partial(
        move_jobs_to_wait, keys, state=state, count=count, max_score=max_score
    )
    return _while_more(batch(), batch)
