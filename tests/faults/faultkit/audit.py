"""The final audit of a queue's keys, read straight from Redis (no echomq code involved).

A job must be in exactly one of the state structures
(docs/protocol/keys.md#states): ``wait``, ``paused``,
``active``, ``prioritized``, ``delayed``, ``completed``, ``failed``, ``waiting-children``.
At the end of a scenario there must be no ``:lock`` key left, and each finished job must
have exactly one outcome event (``completed`` or ``failed``) in the events stream: an
outcome recorded twice would show as two.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio

from helpers import queue_key

LISTS = ("wait", "paused", "active")
ZSETS = ("prioritized", "delayed", "completed", "failed", "waiting-children")
FINAL = ("completed", "failed")


def _s(value: bytes | str) -> str:
    return value.decode(errors="backslashreplace") if isinstance(value, bytes) else value


async def states(r: redis.asyncio.Redis, queue: str) -> dict[str, list[str]]:
    """Every id found in a state structure, mapped to the structures holding it."""
    pipe = r.pipeline(transaction=True)
    for name in LISTS:
        pipe.lrange(queue_key(queue, name), 0, -1)
    for name in ZSETS:
        pipe.zrange(queue_key(queue, name), 0, -1)
    replies = await pipe.execute()
    found: dict[str, list[str]] = {}
    for name, members in zip((*LISTS, *ZSETS), replies):
        for member in members:
            found.setdefault(_s(member), []).append(name)
    return found


async def finished(r: redis.asyncio.Redis, queue: str) -> set[str]:
    """Ids in ``completed`` or ``failed``."""
    pipe = r.pipeline(transaction=False)
    for name in FINAL:
        pipe.zrange(queue_key(queue, name), 0, -1)
    done: set[str] = set()
    for members in await pipe.execute():
        done.update(_s(m) for m in members)
    return done


async def finished_at(r: redis.asyncio.Redis, queue: str, ids: Iterable[str]) -> dict[str, float]:
    """``finishedOn`` (unix ms) of the given jobs that have one."""
    wanted = list(ids)
    pipe = r.pipeline(transaction=False)
    for job_id in wanted:
        pipe.hget(queue_key(queue, job_id), "finishedOn")
    return {job_id: float(value) for job_id, value in zip(wanted, await pipe.execute()) if value}


async def locks(r: redis.asyncio.Redis, queue: str) -> list[str]:
    """Every ``bull:<queue>:*:lock`` key."""
    return sorted([_s(k) async for k in r.scan_iter(match=queue_key(queue, "*:lock"), count=1000)])


async def stream(r: redis.asyncio.Redis, queue: str) -> list[tuple[str, dict[str, str]]]:
    """Every entry of the queue's events stream, oldest first, as ``(id, fields)``."""
    out: list[tuple[str, dict[str, str]]] = []
    last = "-"
    while True:
        batch: Any = await r.xrange(queue_key(queue, "events"), min=last, max="+", count=5000)
        if last != "-":
            batch = batch[1:]
        if not batch:
            return out
        out.extend((_s(i), {_s(k): _s(v) for k, v in raw.items()}) for i, raw in batch)
        last = out[-1][0]


async def outcome_events(r: redis.asyncio.Redis, queue: str) -> dict[str, Counter[str]]:
    """``completed`` / ``failed`` / ``stalled`` events per job id."""
    out: dict[str, Counter[str]] = {
        "completed": Counter(),
        "failed": Counter(),
        "stalled": Counter(),
    }
    for _, fields in await stream(r, queue):
        event = fields.get("event", "")
        if event in out and "jobId" in fields:
            out[event][fields["jobId"]] += 1
    return out


@dataclass
class Audit:
    """What the audit found, and the problems among it (empty when all is well)."""

    states: dict[str, list[str]]
    lost: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    hashes: dict[str, dict[str, str]] = field(default_factory=dict)

    def assert_clean(self) -> None:
        assert not self.problems, "audit found:\n  " + "\n  ".join(self.problems)


async def audit(
    r: redis.asyncio.Redis,
    queue: str,
    expected: Mapping[str, Iterable[str]],
    *,
    absent: Iterable[str] = (),
    attempts: Mapping[str, int] | None = None,
) -> Audit:
    """Check the queue against ``expected`` (job id -> the final states it may be in).

    Args:
        r: a client of the server under test.
        queue: the queue.
        expected: every acknowledged job and the states it may end in.
        absent: ids that must be in no state at all (e.g. a dangling id the worker removed).
        attempts: attemptsMade of a completed job, for the jobs where it is not 1 (a job that
            failed an attempt and was retried).
    """
    found = await states(r, queue)
    result = Audit(found)
    for job_id, where in found.items():
        if len(where) > 1:
            result.problems.append(f"job {job_id} is in several states: {where}")
    for job_id, allowed in expected.items():
        where = found.get(job_id, [])
        if len(where) != 1 or where[0] not in set(allowed):
            result.lost.append(job_id)
            result.problems.append(f"job {job_id} is in {where or 'no state'}, not {allowed}")
    for job_id in absent:
        if job_id in found:
            result.problems.append(f"job {job_id} should be gone but is in {found[job_id]}")
    if leftover := await locks(r, queue):
        result.problems.append(f"leftover locks: {leftover}")
    events = await outcome_events(r, queue)
    pipe = r.pipeline(transaction=False)
    ids = list(expected)
    for job_id in ids:
        pipe.hgetall(queue_key(queue, job_id))
    for job_id, raw in zip(ids, await pipe.execute()):
        result.hashes[job_id] = {_s(k): _s(v) for k, v in raw.items()}
    for job_id in ids:
        where = found.get(job_id, [])
        if where != ["completed"] and where != ["failed"]:
            continue
        state = where[0]
        n = events[state][job_id]
        if n != 1:
            result.problems.append(f"job {job_id}: {n} '{state}' events (one outcome expected)")
        h = result.hashes[job_id]
        if state == "completed" and h.get("returnvalue") != json.dumps(job_id):
            result.problems.append(f"job {job_id}: return value {h.get('returnvalue')!r}")
        made = str((attempts or {}).get(job_id, 1))
        if state == "completed" and h.get("atm") != made:
            result.problems.append(
                f"job {job_id}: attemptsMade {h.get('atm')!r}, expected {made!r}"
            )
    return result
