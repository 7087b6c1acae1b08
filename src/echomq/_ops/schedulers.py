"""Job scheduler operations: upsert, remove and the getters
(docs/protocol/flows-dedup-schedulers.md#schedulers,
docs/protocol/scripts.md#script-addJobScheduler,
docs/protocol/scripts.md#script-removeJobScheduler).

The next run time of a cron scheduler is computed here, on the client, as BullMQ does; an
every-scheduler's is computed by the script from the stored state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .. import _cron
from .._json import dumps
from ..options import JobOptions
from ..protocol import fields
from ..protocol.keys import QueueKeys
from ..schedulers import (
    JobScheduler,
    Schedule,
    SchedulerSpec,
    SchedulerTemplate,
    build_spec,
    template_wire_options,
)
from . import scripts
from ._base import CommandOp, Plan, ScriptOp, check_code, hash_to_dict, now_ms, to_str


@dataclass(frozen=True, slots=True)
class Upserted:
    """The first iteration an upsert created: its id and its job hash as written."""

    job_id: str
    hash: dict[str, str]


def _score(value: Any) -> str | None:
    if value is None:
        return None
    return str(int(float(to_str(value))))


def upsert_job_scheduler(
    keys: QueueKeys,
    spec: SchedulerSpec,
    template: SchedulerTemplate,
    defaults: JobOptions,
    now: int,
) -> ScriptOp[Upserted] | None:
    """The addJobScheduler call for ``spec``; None when a cron scheduler has no next run
    (BullMQ then writes nothing either)."""
    sid = spec.scheduler_id
    options = defaults.merged(template.options)
    template_opts = template_wire_options(options)
    name = template.name or sid
    data_json = dumps(template.data, "template data")
    next_arg = ""
    iteration: dict[str, Any] = {**template_opts}
    iteration["repeat"] = {**spec.repeat_options(), "count": 1}
    iteration["repeatJobKey"] = sid
    scheduler: dict[str, Any] = {"name": name, **spec.repeat_options()}
    if spec.pattern is not None:
        if spec.immediately:
            next_ms: int | None = now
        else:
            next_ms = _cron.next_cron_ms(
                spec.pattern, now, spec.tz, start_ms=spec.start_ms, end_ms=spec.end_ms
            )
        if next_ms is None:
            return None
        next_arg = str(next_ms)
        iteration["prevMillis"] = next_ms
        scheduler["offset"] = 0
    opts_json = dumps(template_opts, "template options") if template_opts else ""

    def parse(reply: Any) -> Upserted:
        check_code(reply, job_id=sid, command="upsert_job_scheduler")
        job_id, delay = to_str(reply[0]), int(reply[1])
        opts = {**iteration, "jobId": job_id, "delay": delay, "timestamp": now}
        if "prevMillis" in opts:
            opts["prevMillis"] = int(job_id.rsplit(":", 1)[1])
        h = {
            fields.NAME: name,
            fields.DATA: data_json,
            fields.OPTS: dumps(opts),
            fields.TIMESTAMP: str(now),
            fields.DELAY: str(delay),
            fields.PRIORITY: str(opts.get("priority", 0)),
            fields.REPEAT_JOB_KEY: sid,
        }
        return Upserted(job_id, h)

    return ScriptOp(
        scripts.get("addJobScheduler"),
        keys.script_keys["addJobScheduler"],
        [
            sid,
            next_arg,
            dumps(scheduler),
            data_json,
            opts_json,
            dumps(iteration),
            now,
        ],
        parse,
    )


def prepare_upsert(
    keys: QueueKeys,
    defaults: JobOptions,
    scheduler_id: str,
    template: SchedulerTemplate | Mapping[str, Any] | None,
    schedule: Schedule,
) -> ScriptOp[Upserted] | None:
    """Check an upsert's arguments and build its call (None: nothing to write, see
    :func:`upsert_job_scheduler`). Raises :class:`~echomq.InvalidOptionError` first."""
    now = now_ms()
    spec = build_spec(scheduler_id, schedule, now)
    return upsert_job_scheduler(keys, spec, SchedulerTemplate.coerce(template), defaults, now)


def remove_job_scheduler(keys: QueueKeys, scheduler_id: str) -> ScriptOp[bool]:
    """Delete a scheduler and its delayed next iteration; True when it existed."""
    return ScriptOp(
        scripts.get("removeJobScheduler"),
        keys.script_keys["removeJobScheduler"],
        [scheduler_id],
        lambda reply: int(reply) == 0,
    )


def get_job_scheduler(keys: QueueKeys, scheduler_id: str) -> CommandOp[JobScheduler | None]:
    """Read one scheduler; None when its id is not in ``repeat``."""

    def parse(replies: list[Any]) -> JobScheduler | None:
        h, score = replies
        if score is None:
            return None
        return JobScheduler.from_hash(scheduler_id, hash_to_dict(h or {}), _score(score))

    return CommandOp(
        [("HGETALL", keys.scheduler(scheduler_id)), ("ZSCORE", keys.repeat, scheduler_id)],
        parse,
    )


def get_job_schedulers_count(keys: QueueKeys) -> CommandOp[int]:
    """How many schedulers (and legacy repeatable jobs) the queue has."""
    return CommandOp([("ZCARD", keys.repeat)], lambda replies: int(replies[0]))


def _pairs(reply: Sequence[Any]) -> list[tuple[str, str | None]]:
    if reply and isinstance(reply[0], (list, tuple)):
        return [(to_str(m), _score(s)) for m, s in reply]
    it = iter(reply)
    return [(to_str(m), _score(s)) for m, s in zip(it, it)]


def get_job_schedulers_plan(
    keys: QueueKeys, start: int, end: int, asc: bool
) -> Plan[list[JobScheduler]]:
    """Schedulers by next run time (latest first unless ``asc``), ``start``..``end`` inclusive."""
    command = "ZRANGE" if asc else "ZREVRANGE"
    ranged = yield CommandOp([(command, keys.repeat, start, end, "WITHSCORES")], lambda r: r[0])
    members = _pairs(ranged)
    if not members:
        return []
    hashes = yield CommandOp(
        [("HGETALL", keys.scheduler(member)) for member, _ in members], lambda r: r
    )
    return [
        JobScheduler.from_hash(member, hash_to_dict(h or {}), score)
        for (member, score), h in zip(members, hashes)
    ]
