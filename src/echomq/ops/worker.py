"""Worker-side protocol operations: take jobs, finish them, renew locks, recover stalled jobs.

``finish_and_fetch`` is the worker's hot path: one script call records the outcome of any
number of active jobs and takes the next ones, with the key effects of BullMQ's
moveToFinished / retryJob / moveToDelayed / moveToActive applied per job
(docs/protocol/scripts.md#script-finishAndFetch).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .. import scripts
from ..protocol import fields
from ..protocol.keys import QueueKeys
from ._base import ScriptOp, flat_to_dict, to_str

#: Item kinds of finishAndFetch.
COMPLETE = "C"
FAIL = "F"
RETRY = "R"
DELAY = "D"


@dataclass(frozen=True, slots=True)
class FetchParams:
    """What the fetch half of a call needs to know about the worker."""

    token_prefix: str
    lock_ms: int
    limiter_max: int | None = None
    limiter_duration_ms: int | None = None
    name: str = ""
    metrics_max_points: int | None = None


@dataclass(slots=True)
class Fetched:
    """One job taken for processing: its id, lock token and hash."""

    id: str
    token: str
    hash: dict[str, str]


@dataclass(frozen=True, slots=True)
class Dangling:
    """An id found in a state structure (``wait``, ``prioritized``, ``delayed`` or ``active``)
    whose job hash does not exist; the script removed it from that structure."""

    id: str
    structure: str


@dataclass(slots=True)
class FinishReply:
    """The reply of finishAndFetch.

    ``dangling`` lists the ids the call dropped because their job hash was missing (from
    ``wait`` or ``prioritized`` while fetching, from ``delayed`` while promoting due jobs),
    in the order found; none of them took a slot.
    """

    codes: list[int]
    jobs: list[Fetched]
    rate_limit_ttl_ms: int
    next_delayed_ms: int
    dangling: list[Dangling]


@dataclass(slots=True)
class StalledReply:
    """The reply of the stalled check: ids moved back to wait, and dangling ids (no job hash)
    removed from ``active``."""

    recovered: list[str]
    dangling: list[str]


def finish_item(
    kind: str,
    job_id: str,
    token: str,
    value: str = "",
    *,
    attempts: int = 0,
    keep: dict[str, int] | None = None,
    fields: Sequence[str] = (),
    delay_ms: int = 0,
    flag: bool = False,
) -> list[Any]:
    """One item of a finishAndFetch call (see the script header for the layout)."""
    keep = keep or {"count": -1}
    return [
        kind,
        job_id,
        token,
        value,
        attempts,
        keep.get("count", -1),
        keep.get("age", ""),
        keep.get("limit", ""),
        list(fields),
        delay_ms,
        1 if flag else 0,
    ]


def _parse_reply(reply: Any) -> FinishReply:
    codes = [int(c) for c in reply[0]]
    flat = reply[1]
    jobs = [
        Fetched(to_str(flat[i]), to_str(flat[i + 1]), flat_to_dict(flat[i + 2]))
        for i in range(0, len(flat), 3)
    ]
    pairs = reply[4]
    dangling = (
        [Dangling(to_str(pairs[i]), to_str(pairs[i + 1])) for i in range(0, len(pairs), 2)]
        if pairs
        else _NONE_DANGLING
    )
    return FinishReply(codes, jobs, int(reply[2]), int(reply[3]), dangling)


#: Shared by every reply that dropped no dangling id (almost all of them; never mutated).
_NONE_DANGLING: list[Dangling] = []


def finish_and_fetch(
    keys: QueueKeys,
    items: Sequence[list[Any]],
    fetch: int,
    token_start: int,
    params: FetchParams,
    now: int,
    *,
    resend: bool = False,
) -> ScriptOp[FinishReply]:
    """Record ``items`` then take up to ``fetch`` jobs, in one script call.

    With ``resend``, the call repeats one whose reply was lost (same items, same tokens): the
    script reports items the lost call recorded with code 1 and returns the jobs it took.
    """
    return ScriptOp(
        scripts.get("finishAndFetch"),
        keys.script_keys["finishAndFetch"],
        [
            now,
            fields.dumps(items, "finish items") if items else "[]",
            fetch,
            params.token_prefix,
            token_start,
            params.lock_ms,
            "" if params.limiter_max is None else params.limiter_max,
            "" if params.limiter_duration_ms is None else params.limiter_duration_ms,
            params.name,
            "" if params.metrics_max_points is None else params.metrics_max_points,
            "1" if resend else "",
        ],
        _parse_reply,
    )


def extend_locks(
    keys: QueueKeys, job_ids: Sequence[str], tokens: Sequence[str], lock_ms: int
) -> ScriptOp[list[str]]:
    """Renew the locks of many jobs; the reply lists the ids that could not be renewed."""
    return ScriptOp(
        scripts.get("extendLocks"),
        keys.script_keys["extendLocks"],
        [lock_ms, *[v for pair in zip(job_ids, tokens) for v in pair]],
        lambda reply: [to_str(x) for x in reply],
    )


def _parse_stalled(reply: Any) -> StalledReply:
    return StalledReply([to_str(x) for x in reply[0]], [to_str(x) for x in reply[1]])


def move_stalled_jobs_to_wait(
    keys: QueueKeys, max_stalled_count: int, stalled_interval_ms: int, now: int
) -> ScriptOp[StalledReply]:
    """The fleet-wide stalled check: the ids it moved back to wait, and the dangling ids (no
    job hash) it removed from active."""
    return ScriptOp(
        scripts.get("moveStalledJobsToWait"),
        keys.script_keys["moveStalledJobsToWait"],
        [max_stalled_count, now, stalled_interval_ms],
        _parse_stalled,
    )


def move_job_from_active_to_wait(keys: QueueKeys, job_id: str, token: str) -> ScriptOp[int]:
    """Put a rate-limited job back at the front; returns the limiter TTL.

    See docs/protocol/scripts.md#script-moveJobFromActiveToWait.
    """
    return ScriptOp(
        scripts.get("moveJobFromActiveToWait"),
        keys.script_keys["moveJobFromActiveToWait"],
        [job_id, token],
        lambda reply: int(reply),
    )


def continue_scheduler(
    keys: QueueKeys, scheduler_id: str, producer_id: str, next_opts: dict[str, Any], now: int
) -> ScriptOp[str | None]:
    """Create the next iteration of an every-scheduler whose iteration ``producer_id`` was taken
    (docs/protocol/flows-dedup-schedulers.md#scheduler-continuation); the reply parses to the
    new iteration's id, or None if none was made."""
    return ScriptOp(
        scripts.get("continueScheduler"),
        keys.script_keys["continueScheduler"],
        [scheduler_id, producer_id, fields.dumps(next_opts, "job options"), now],
        lambda reply: to_str(reply) or None,
    )
