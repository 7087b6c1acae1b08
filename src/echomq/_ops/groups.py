"""Groups: their settings, pausing, reading and removing a group's waiting jobs
(docs/protocol/groups.md#groups-admin).

Every setting is a field of ``B groups:state`` (``c`` / ``c:<gid>`` concurrency, ``r`` /
``r:<gid>`` rate limit ``"<max>:<window ms>"``, ``p:<gid>`` paused), written by the
``setGroupSetting`` script, which also brings back into the rotation the groups the change lets
run again: at once for one group's setting, and for a default made looser over every group with
waiting jobs, one bounded ZSCAN step per call, driven by a plan. Reads are plain commands, but
a group's delayed jobs, which share ``groups:delayed`` with every other group's, are counted by
the read-only ``countGroupDelayed`` script a page at a time.

Two counts read with a fixed number of plain commands, whatever the number of groups or jobs:
:func:`count_groups` (``ZCARD groups``, for the dashboard's groups tab and the Prometheus
export's ``echomq_groups``) and :func:`group_summary` (one group's waiting and active jobs and
its paused flag, for a group's page of the dashboard; unlike ``get_group_job_counts`` it leaves
out the group's delayed jobs, whose count reads every grouped delayed job of the queue).

The group keys are built here from ``keys.base`` (``P:Q:``), as the scripts build them from the
prefix key (``lua/includes/job_keys.lua``, ``group_keys``). Every builder validates its
arguments first, so a refused call writes nothing. Durations are seconds (or timedelta) here and
milliseconds on the wire.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..errors import ValidationError
from ..options import Duration, _is_group_id
from ..protocol.keys import QueueKeys
from . import scripts
from ._base import CommandOp, Plan, ScriptOp, now_ms, to_str
from .admin import BATCH
from .jobs import get_job_hashes
from .limits import RateLimit, _int_or_none, _positive_int, _positive_ms

#: Fields of ``groups:state``: the settings (for one group, ``<setting>:<gid>``) and the state.
CONCURRENCY: Final = "c"
RATE: Final = "r"
PAUSED: Final = "p"


def active_jobs(state: Any) -> int:
    """A group's active jobs from its ``groups:run:<gid>`` counter (twice their number, plus
    one while the group is in the rotation); 0 when absent."""
    return 0 if state is None else int(state) // 2


#: The groups one ``setGroupSetting`` call re-checks (its ZSCAN COUNT), and the jobs one
#: ``removeGroupJobs`` call removes or one ``countGroupDelayed`` call reads.
SCAN_COUNT = BATCH


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """One group of a queue, as :meth:`~echomq.Queue.get_groups` lists it.

    Attributes:
        id: the group id.
        waiting: its jobs waiting to run (grouped delayed jobs are not counted).
        active: its jobs being processed.
        paused: the group is paused (:meth:`~echomq.Queue.pause_group`).
        limited: a limit holds the group back now: its active jobs have reached its
            concurrency, or its current rate window is full.
    """

    id: str
    waiting: int
    active: int
    paused: bool
    limited: bool


# -- keys and validation ---------------------------------------------------------------------


def _index(keys: QueueKeys) -> str:
    return keys.base + "groups"


def _state(keys: QueueKeys) -> str:
    return keys.base + "groups:state"


def _limited(keys: QueueKeys) -> str:
    return keys.base + "groups:limited"


def _waiting_reads(keys: QueueKeys, gid: str) -> list[tuple[Any, ...]]:
    """The two reads whose sum is a group's waiting jobs: LLEN of its ``groups:wait:<gid>``
    (those without a priority), ZCARD of its ``groups:prioritized:<gid>`` (those with one)."""
    return [("LLEN", keys.group_wait(gid)), ("ZCARD", keys.group_prioritized(gid))]


def _window(keys: QueueKeys, group: str) -> str:
    return keys.base + "groups:limit:" + group


def check_group(group: object) -> str:
    """A group id as ``add(group=...)`` accepts it; raises InvalidOptionError otherwise."""
    return _is_group_id(group, "group")


def _optional_group(group: object) -> str:
    """``""`` for None (the default of every group), else a checked group id."""
    return "" if group is None else check_group(group)


def _field(setting: str, group: str) -> str:
    return setting if not group else f"{setting}:{group}"


def _check_range(start: object, end: object) -> None:
    for name, value in (("start", start), ("end", end)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValidationError(f"{name} must be an int index, got {value!r}")


# -- settings ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Step:
    cursor: str
    changed: bool


def _setting_call(
    keys: QueueKeys, setting: str, group: str, value: str, cursor: str = "0"
) -> ScriptOp[_Step]:
    def parse(reply: Any) -> _Step:
        return _Step(to_str(reply[0]), int(reply[1]) == 1)

    return ScriptOp(
        scripts.get("setGroupSetting"),
        keys.script_keys["setGroupSetting"],
        [setting, group, value, cursor, SCAN_COUNT, now_ms()],
        parse,
    )


def _setting_plan(keys: QueueKeys, setting: str, group: str, value: str) -> Plan[bool]:
    """Write one setting, then re-check every group over as many calls as the scan takes;
    returns whether the setting changed (for a removal: whether it was set)."""
    first = _setting_call(keys, setting, group, value)

    def plan() -> Plan[bool]:
        step: _Step = yield first
        changed = step.changed
        while step.cursor != "0":
            step = yield _setting_call(keys, "", "", "", step.cursor)
        return changed

    return plan()


def set_group_concurrency(
    keys: QueueKeys, concurrency: int, group: str | None = None
) -> Plan[None]:
    """Groups (or ``group``) run at most ``concurrency`` jobs at once, across all workers."""
    n = _positive_int(concurrency, "group concurrency")
    gid = _optional_group(group)
    return _discard(_setting_plan(keys, CONCURRENCY, gid, str(n)))


def get_group_concurrency(keys: QueueKeys, group: str | None = None) -> CommandOp[int | None]:
    """The default group concurrency, or ``group``'s own; None when not set."""
    field = _field(CONCURRENCY, _optional_group(group))
    return CommandOp([("HGET", _state(keys), field)], lambda replies: _int_or_none(replies[0]))


def remove_group_concurrency(keys: QueueKeys, group: str | None = None) -> Plan[bool]:
    """Remove the default group concurrency, or ``group``'s own; True when it was set."""
    return _setting_plan(keys, CONCURRENCY, _optional_group(group), "")


def set_group_rate_limit(
    keys: QueueKeys, max_jobs: int, duration: Duration, group: str | None = None
) -> Plan[None]:
    """Groups (or ``group``) start at most ``max_jobs`` jobs per ``duration``, all workers
    together; stored as ``"<max>:<window ms>"``."""
    n = _positive_int(max_jobs, "group rate limit max")
    ms = _positive_ms(duration, "group rate limit duration")
    gid = _optional_group(group)
    return _discard(_setting_plan(keys, RATE, gid, f"{n}:{ms}"))


def _rate_limit(raw: Any) -> RateLimit | None:
    if raw is None:
        return None
    max_text, _, ms_text = to_str(raw).partition(":")
    n, ms = _int_or_none(max_text), _int_or_none(ms_text)
    if n is None or ms is None:
        return None
    return RateLimit(n, ms / 1000)


def get_group_rate_limit(keys: QueueKeys, group: str | None = None) -> CommandOp[RateLimit | None]:
    """The default group rate limit, or ``group``'s own; None when not set."""
    field = _field(RATE, _optional_group(group))
    return CommandOp([("HGET", _state(keys), field)], lambda replies: _rate_limit(replies[0]))


def remove_group_rate_limit(keys: QueueKeys, group: str | None = None) -> Plan[bool]:
    """Remove the default group rate limit, or ``group``'s own; True when it was set."""
    return _setting_plan(keys, RATE, _optional_group(group), "")


def pause_group(keys: QueueKeys, group: str) -> Plan[bool]:
    """Pause ``group``: its jobs stay, workers take none until it is resumed; True when it was
    not paused."""
    return _setting_plan(keys, PAUSED, check_group(group), "1")


def resume_group(keys: QueueKeys, group: str) -> Plan[bool]:
    """Resume ``group``: it joins the rotation at once if it has waiting jobs and may run; True
    when it was paused."""
    return _setting_plan(keys, PAUSED, check_group(group), "")


def _discard(plan: Plan[bool]) -> Plan[None]:
    def wrapped() -> Plan[None]:
        yield from plan

    return wrapped()


# -- reads ---------------------------------------------------------------------------------


def _pairs(reply: Any) -> list[tuple[str, float]]:
    """A ``WITHSCORES`` reply (flat, or RESP3 pairs) as (member, score) pairs."""
    items = list(reply or ())
    if items and isinstance(items[0], (list, tuple)):
        return [(to_str(m), float(s)) for m, s in items]
    return [(to_str(m), float(s)) for m, s in zip(items[::2], items[1::2])]


def _float_or_none(raw: Any) -> float | None:
    if raw is None:
        return None
    try:
        return float(raw if isinstance(raw, (int, float)) else to_str(raw))
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class _Read:
    """What the second step of :func:`get_groups_plan` read of one group."""

    id: str
    waiting: int
    active: int
    paused: bool
    concurrency: int | None
    rate: RateLimit | None
    limited_until: float | None


def get_groups_plan(
    keys: QueueKeys, start: int = 0, end: int = -1, *, now: int | None = None
) -> Plan[list[GroupInfo]]:
    """The groups with waiting or active jobs, most waiting jobs first, sliced ``[start, end]``.

    ZREVRANGE of ``groups`` with scores; then in one round trip their fields of
    ``groups:state`` and their ``groups:limited`` scores; then, for the groups under a rate
    limit, in one more, the starts of their current window (ZCOUNT of ``groups:limit:<gid>``
    over the last window before ``now``, ms, default the client clock).
    """
    _check_range(start, end)
    at = now_ms() if now is None else now

    def read(ranked: list[tuple[str, float]]) -> CommandOp[list[_Read]]:
        ids = [gid for gid, _ in ranked]
        fields = [CONCURRENCY, RATE]
        for gid in ids:
            fields += [_field(name, gid) for name in (PAUSED, CONCURRENCY, RATE)]
        commands: list[tuple[Any, ...]] = [("HMGET", _state(keys), *fields)]
        commands += [("ZSCORE", _limited(keys), gid) for gid in ids]
        commands += [("GET", keys.group_run(gid)) for gid in ids]

        def parse(replies: list[Any]) -> list[_Read]:
            state = replies[0]
            default_c, default_r = state[0], state[1]
            out: list[_Read] = []
            for i, (gid, waiting) in enumerate(ranked):
                paused, own_c, own_r = state[2 + 3 * i : 5 + 3 * i]
                active = replies[1 + len(ids) + i]
                out.append(
                    _Read(
                        gid,
                        int(waiting),
                        active_jobs(active),
                        paused is not None,
                        _int_or_none(own_c if own_c is not None else default_c),
                        _rate_limit(own_r if own_r is not None else default_r),
                        _float_or_none(replies[1 + i]),
                    )
                )
            return out

        return CommandOp(commands, parse)

    def window_starts(rated: list[_Read]) -> CommandOp[list[int]]:
        commands: list[tuple[Any, ...]] = [
            ("ZCOUNT", _window(keys, r.id), f"({at - round(r.rate.duration * 1000)}", "+inf")
            for r in rated
            if r.rate is not None
        ]
        return CommandOp(commands, lambda replies: [int(n or 0) for n in replies])

    def plan() -> Plan[list[GroupInfo]]:
        ranked: list[tuple[str, float]] = yield CommandOp(
            [("ZREVRANGE", _index(keys), start, end, "WITHSCORES")],
            lambda replies: _pairs(replies[0]),
        )
        if not ranked:
            return []
        reads: list[_Read] = yield read(ranked)
        rated = [r for r in reads if r.rate is not None]
        starts: dict[str, int] = {}
        if rated:
            counts: list[int] = yield window_starts(rated)
            starts = {r.id: n for r, n in zip(rated, counts)}
        out: list[GroupInfo] = []
        for r in reads:
            limited = (
                (r.concurrency is not None and r.active >= r.concurrency)
                or (r.limited_until is not None and r.limited_until > at)
                or (r.rate is not None and starts.get(r.id, 0) >= r.rate.max)
            )
            out.append(GroupInfo(r.id, r.waiting, r.active, r.paused, limited))
        return out

    return plan()


def _delayed_page(keys: QueueKeys, group: str, cursor: str) -> ScriptOp[tuple[int, str]]:
    return ScriptOp(
        scripts.get("countGroupDelayed"),
        keys.script_keys["countGroupDelayed"],
        [group, cursor, SCAN_COUNT],
        lambda reply: (int(reply[0]), to_str(reply[1])),
    )


def get_group_job_counts_plan(keys: QueueKeys, group: str) -> Plan[dict[str, int]]:
    """How many jobs ``group`` has waiting, active and delayed.

    Waiting and active are read at once (LLEN of its ``groups:wait:<gid>``, ZCARD of its
    ``groups:prioritized:<gid>``, GET of its ``groups:run:<gid>``);
    delayed by paging through ``groups:delayed`` (countGroupDelayed), so the three are not one
    snapshot while jobs move.
    """
    gid = check_group(group)

    def plan() -> Plan[dict[str, int]]:
        waiting, active = yield CommandOp(
            [*_waiting_reads(keys, gid), ("GET", keys.group_run(gid))],
            lambda replies: (int(replies[0] or 0) + int(replies[1] or 0), active_jobs(replies[2])),
        )
        delayed = 0
        cursor = ""
        while True:
            count, cursor = yield _delayed_page(keys, gid, cursor)
            delayed += count
            if not cursor:
                break
        return {"waiting": waiting, "active": active, "delayed": delayed}

    return plan()


def get_group_jobs_plan(
    keys: QueueKeys, group: str, start: int = 0, end: int = -1
) -> Plan[list[tuple[str, dict[str, str]]]]:
    """``group``'s waiting jobs as ``(id, hash)`` pairs in the order they will run (by
    priority, then order), sliced ``[start, end]``; an id whose hash is gone is skipped."""
    gid = check_group(group)
    _check_range(start, end)

    def plan() -> Plan[list[tuple[str, dict[str, str]]]]:
        listed, prioritized = yield CommandOp(
            _waiting_reads(keys, gid), lambda replies: (int(replies[0] or 0), int(replies[1] or 0))
        )
        # indices as Redis reads them (negative ones from the end) over the LIST's jobs, which
        # run first, then the ZSET's: the slice may span both
        total = listed + prioritized
        first = max(0, start + total if start < 0 else start)
        last = min(total - 1, end + total if end < 0 else end)
        if first > last:
            return []
        reads: list[tuple[Any, ...]] = []
        if first < listed:
            reads.append(("LRANGE", keys.group_wait(gid), first, min(last, listed - 1)))
        if last >= listed:
            reads.append(
                ("ZRANGE", keys.group_prioritized(gid), max(0, first - listed), last - listed)
            )
        ids: list[str] = yield CommandOp(
            reads, lambda replies: [to_str(i) for reply in replies for i in reply or ()]
        )
        if not ids:
            return []
        hashes: Sequence[dict[str, str] | None] = yield get_job_hashes(keys, ids)
        return [(i, h) for i, h in zip(ids, hashes) if h is not None]

    return plan()


# -- removal -------------------------------------------------------------------------------


def remove_group_jobs_batch(
    keys: QueueKeys, group: str, budget: int = SCAN_COUNT
) -> ScriptOp[tuple[int, bool]]:
    """One removeGroupJobs call: (jobs removed, whether more may remain)."""
    gid = check_group(group)
    n = _positive_int(budget, "budget")
    return ScriptOp(
        scripts.get("removeGroupJobs"),
        keys.script_keys["removeGroupJobs"],
        [gid, n],
        lambda reply: (int(reply[0]), int(reply[1]) == 1),
    )


def remove_group_jobs_plan(keys: QueueKeys, group: str, budget: int = SCAN_COUNT) -> Plan[int]:
    """Remove ``group``'s waiting jobs (not its active or delayed ones), ``budget`` per call;
    returns how many were removed."""
    first = remove_group_jobs_batch(keys, group, budget)

    def plan() -> Plan[int]:
        removed, more = yield first
        total: int = removed
        while more:
            removed, more = yield remove_group_jobs_batch(keys, group, budget)
            total += removed
        return total

    return plan()


# -- counts with plain commands, a fixed number per call whatever the number of groups or jobs --


@dataclass(frozen=True, slots=True)
class GroupSummary:
    """One group's waiting and active jobs and whether it is paused.

    Attributes:
        id: the group id.
        waiting: its jobs waiting to run.
        active: its jobs being processed.
        paused: the group is paused (its flag stays while it has no jobs).
    """

    id: str
    waiting: int
    active: int
    paused: bool


def count_groups(keys: QueueKeys) -> CommandOp[int]:
    """How many groups have waiting or active jobs (one ``ZCARD``)."""
    return CommandOp([("ZCARD", keys.groups)], lambda replies: int(replies[0] or 0))


def group_summary(keys: QueueKeys, group: str) -> CommandOp[GroupSummary]:
    """``group``'s waiting and active jobs and paused flag, in one round trip.

    Raises:
        InvalidOptionError: ``group`` is not a group id ``add(group=...)`` accepts.
    """
    gid = check_group(group)

    def parse(replies: list[Any]) -> GroupSummary:
        listed, prioritized, active, paused = replies
        waiting = int(listed or 0) + int(prioritized or 0)
        return GroupSummary(gid, waiting, active_jobs(active), paused is not None)

    return CommandOp(
        [
            *_waiting_reads(keys, gid),
            ("GET", keys.group_run(gid)),
            ("HGET", keys.groups_state, f"{PAUSED}:{gid}"),
        ],
        parse,
    )
