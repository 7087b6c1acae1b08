"""Worker-side protocol operations: take jobs, finish them, renew locks, recover stalled jobs.

``finish_and_fetch`` is the worker's hot path: one script call records the outcome of any
number of active jobs and takes the next ones, with the key effects of BullMQ's
moveToFinished / retryJob / moveToDelayed / moveToActive applied per job
(docs/protocol/scripts.md#script-finishAndFetch).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._json import dumps
from .._tracebacks import format_failure
from ..options import backoff_from_wire, keep_jobs_to_wire, retention_from_wire
from ..protocol import codes, fields
from ..protocol.keys import QueueKeys
from . import scripts
from ._base import CommandOp, ScriptOp, flat_to_dict, to_str

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
    in the order found; none of them took a slot. ``set_aside`` counts the isolated jobs the
    call left where they were, for a worker that is not busy (an isolated job runs alone; see
    :func:`isolated`).
    """

    codes: list[int]
    jobs: list[Fetched]
    rate_limit_ttl_ms: int
    next_delayed_ms: int
    dangling: list[Dangling]
    set_aside: int = 0


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
    group: str | None = None,
) -> list[Any]:
    """One item of a finishAndFetch call (see the script header for the layout).

    ``group`` is the job's group as its hash holds it (``Job.group``): the script then looks in
    ``groups:active`` at once. None (no group, or not known) adds nothing to the item: the
    script looks in ``active``, and only if the job is not there reads its hash's group."""
    keep = keep or {"count": -1}
    item = [
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
    if group:
        item.append(group)
    return item


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
    set_aside = int(reply[5]) if len(reply) > 5 else 0
    return FinishReply(codes, jobs, int(reply[2]), int(reply[3]), dangling, set_aside)


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
    busy: bool = False,
) -> ScriptOp[FinishReply]:
    """Record ``items`` then take up to ``fetch`` jobs, in one script call.

    With ``resend``, the call repeats one whose reply was lost (same items, same tokens): the
    script reports items the lost call recorded with code 1 and returns the jobs it took.
    With ``busy`` (the worker holds jobs other than those of ``items``, or has another fetching
    call in flight), the call takes no isolated job; otherwise it may take one, as its first
    and only job (:func:`isolated`).
    """
    return ScriptOp(
        scripts.get("finishAndFetch"),
        keys.script_keys["finishAndFetch"],
        [
            now,
            dumps(items, "finish items") if items else "[]",
            fetch,
            params.token_prefix,
            token_start,
            params.lock_ms,
            "" if params.limiter_max is None else params.limiter_max,
            "" if params.limiter_duration_ms is None else params.limiter_duration_ms,
            params.name,
            "" if params.metrics_max_points is None else params.metrics_max_points,
            "1" if resend else "",
            "1" if busy else "",
        ],
        _parse_reply,
    )


def isolated(fetched: Fetched) -> bool:
    """Whether a job taken for processing is isolated and will run (it carries no deferred
    failure): it stalled past the max stalled count beside other jobs, so it runs alone in its
    worker, which takes no other job meanwhile (docs/protocol/worker-rules.md#isolation)."""
    return fields.ISOLATED in fetched.hash and fields.DEFERRED_FAILURE not in fetched.hash


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


def _parse_pairs(reply: Any) -> dict[str, str]:
    return {to_str(reply[i + 1]): to_str(reply[i]) for i in range(0, len(reply), 2)}


def extend_locks_by_token(
    keys: QueueKeys, tokens: Sequence[str], lock_ms: int
) -> ScriptOp[dict[str, str]]:
    """Renew the locks of the jobs in ``active`` (or the groups' active list) that hold one of
    ``tokens``: those a fetch took whose reply the worker has not read yet. The reply maps each
    token found to its job id. O(active jobs): for a worker whose event loop is blocked."""
    return ScriptOp(
        scripts.get("extendLocksByToken"),
        keys.script_keys["extendLocksByToken"],
        [lock_ms, *tokens],
        _parse_pairs,
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
        [max_stalled_count, now, stalled_interval_ms, codes.STALLED_TOO_MANY],
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
    keys: QueueKeys,
    scheduler_id: str,
    producer_id: str,
    next_opts: dict[str, Any],
    now: int,
    cron_next: int | None = None,
) -> ScriptOp[str | None]:
    """Create the next iteration of a scheduler whose iteration ``producer_id`` was taken
    (docs/protocol/flows-dedup-schedulers.md#scheduler-continuation); ``cron_next`` is a cron
    scheduler's next run time (ms). The reply parses to the new iteration's id, or None if none
    was made."""
    return ScriptOp(
        scripts.get("continueScheduler"),
        keys.script_keys["continueScheduler"],
        [
            scheduler_id,
            producer_id,
            dumps(next_opts, "job options"),
            now,
            "" if cron_next is None else cron_next,
        ],
        lambda reply: to_str(reply) or None,
    )


# -- pieces of a job's outcome, shared by the worker and the manual Job methods --------------


def builtin_delay_ms(kind: str, attempts_made: int, delay_ms: int, jitter: float) -> int | None:
    """Delay of a built-in backoff strategy, or None when ``kind`` is not built in.

    Args:
        kind: ``fixed`` or ``exponential``.
        attempts_made: attempts made so far, counting the one that just failed (n >= 1).
        delay_ms: the base delay.
        jitter: 0..1.
    """
    if kind == "fixed":
        base = delay_ms
    elif kind == "exponential":
        base = round(2 ** (attempts_made - 1) * delay_ms)
    else:
        return None
    if jitter > 0:
        return int(random.random() * base * jitter + base * (1 - jitter))
    return base


def failure_update(
    error: BaseException, stacktrace: Sequence[str], limit: Any
) -> tuple[str, list[str], list[str]]:
    """The failed reason, the new stacktrace list and the hash fields that record ``error``.

    Args:
        error: what the attempt failed with.
        stacktrace: the job's stacktrace list so far.
        limit: the job's ``stackTraceLimit`` option (None when unset).
    """
    reason = str(error) or type(error).__name__
    if isinstance(limit, int) and not isinstance(limit, bool) and limit >= 0:
        # the limit holds while extracting: with 0 nothing is formatted at all
        traces = [*stacktrace, format_failure(error)][-limit:] if limit else []
    else:
        traces = [*stacktrace, format_failure(error)]
    update = [fields.FAILED_REASON, reason, fields.STACKTRACE, dumps(traces)]
    return reason, traces, update


def keep_of(wire_options: dict[str, Any], completed: bool, default: Any = None) -> dict[str, int]:
    """The retention (``removeOnComplete`` / ``removeOnFail``) of a finished job, as the finish
    item wants it: the job's own option, else ``default`` (a Retention, or None: keep all)."""
    own = wire_options.get("removeOnComplete" if completed else "removeOnFail")
    if own is not None:
        retention = retention_from_wire(own)
        if retention is not None:
            return keep_jobs_to_wire(retention)
    return keep_jobs_to_wire(default)


def backoff_delay_ms(wire_options: dict[str, Any], attempts_made: int) -> int | None:
    """The delay before a retry under the job's built-in backoff: ms (0: at once), or None
    when its backoff type is not built in (a worker's ``backoff_strategy`` decides)."""
    backoff = backoff_from_wire(wire_options.get("backoff"))
    if backoff is None:
        return 0
    return builtin_delay_ms(backoff.type, attempts_made, backoff.delay_ms, backoff.jitter)


def fetch_one(keys: QueueKeys, token: str, lock_ms: int, name: str, now: int) -> ScriptOp[Any]:
    """Take one job locked with exactly ``token`` (finishAndFetch with an empty token counter:
    the prefix is the whole token); the reply is a :class:`FinishReply`."""
    return ScriptOp(
        scripts.get("finishAndFetch"),
        keys.script_keys["finishAndFetch"],
        [now, "[]", 1, token, "", lock_ms, "", "", name, "", ""],
        _parse_reply,
    )


# -- the control channel (docs/protocol/control-channel.md) ---------------------------------

#: The ``reason`` of a cancel that gave none.
DEFAULT_CANCEL_REASON = "cancelled"


@dataclass(frozen=True, slots=True)
class CancelRequest:
    """A cancel request read from a queue's control channel."""

    job_id: str
    reason: str
    requeue: bool


def encode_cancel(job_id: str, reason: str | None, requeue: bool) -> str:
    """The control message asking the worker holding ``job_id`` to cancel it."""
    message = {
        "op": "cancel",
        "id": job_id,
        "reason": reason or DEFAULT_CANCEL_REASON,
        "requeue": requeue,
    }
    return json.dumps(message, separators=(",", ":"))


def decode_control(data: Any) -> CancelRequest | None:
    """The request a control message carries, or None (malformed, or an op this version does
    not know, which a newer echomq may send)."""
    try:
        message = json.loads(to_str(data))
    except (ValueError, TypeError):
        return None
    if not isinstance(message, dict) or message.get("op") != "cancel":
        return None
    job_id, reason = message.get("id"), message.get("reason")
    if not isinstance(job_id, str) or not job_id:
        return None
    if not isinstance(reason, str) or not reason:
        reason = DEFAULT_CANCEL_REASON
    return CancelRequest(job_id, reason, message.get("requeue") is True)


def lock_exists(keys: QueueKeys, job_id: str) -> CommandOp[bool]:
    """Whether ``job_id`` holds a lock: a worker (echomq or Node) is running it."""
    return CommandOp([("EXISTS", keys.lock(job_id))], lambda replies: int(replies[0]) > 0)


def send_cancel(keys: QueueKeys, job_id: str, reason: str | None, requeue: bool) -> CommandOp[int]:
    """PUBLISH a cancel request; the reply counts the echomq workers that received it."""
    message = encode_cancel(job_id, reason, requeue)
    return CommandOp([("PUBLISH", keys.control_channel(), message)], lambda r: int(r[0]))
