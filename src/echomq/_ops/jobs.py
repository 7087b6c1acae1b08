"""Getters, pause/resume, and operations on one job (docs/protocol/scripts.md#getters and the
scripts it lists).

Reads are plain commands sent in one round trip; every state change is one script. Builders
validate their arguments, so a refused call never reaches Redis. State names are the strings
of :class:`~echomq.JobState`; this module returns them as ``str`` so that it never imports the
job model (which binds its methods to these builders).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._json import dumps
from ..errors import ValidationError
from ..options import MAX_PRIORITY, Duration, to_ms
from ..protocol import fields
from ..protocol.keys import QueueKeys
from . import scripts
from ._base import CommandOp, Plan, ScriptOp, check_code, flat_to_dict, hash_to_dict, now_ms, to_str

#: Every state a getter accepts. ``paused`` is the legacy v5 list, read only when asked for
#: by name (Node v6 does the same).
JOB_TYPES: tuple[str, ...] = (
    "active",
    "completed",
    "delayed",
    "failed",
    "paused",
    "prioritized",
    "waiting",
    "waiting-children",
)
#: The states counted by default, as Node v6's ``getJobCounts()``.
DEFAULT_COUNT_TYPES: tuple[str, ...] = (
    "active",
    "completed",
    "delayed",
    "failed",
    "prioritized",
    "waiting",
    "waiting-children",
)
#: The states of jobs not yet started, summed by ``count()``.
PENDING_TYPES: tuple[str, ...] = ("waiting", "paused", "delayed", "prioritized", "waiting-children")

_STATES = frozenset(
    {
        "completed",
        "failed",
        "delayed",
        "prioritized",
        "active",
        "waiting",
        "waiting-children",
        "unknown",
    }
)
_LISTS = frozenset({"active", "paused", "waiting"})
_FINISHED_FIELD = {"completed": fields.RETURN_VALUE, "failed": fields.FAILED_REASON}


def normalize_types(
    states: str | Iterable[str] | None, default: Sequence[str] = JOB_TYPES
) -> list[str]:
    """The state names asked for, validated and without repeats (``None``: ``default``).

    Raises:
        ValidationError: a name is not one of :data:`JOB_TYPES`.
    """
    if states is None:
        return list(default)
    wanted = [states] if isinstance(states, str) else list(states)
    out: list[str] = []
    for state in wanted:
        name = str(state)
        if name not in JOB_TYPES:
            raise ValidationError(f"unknown job state {state!r}; use one of {', '.join(JOB_TYPES)}")
        if name not in out:
            out.append(name)
    return out


def _segments(keys: QueueKeys, state: str) -> list[tuple[str, bool]]:
    """The structures holding ``state`` in listing order, each as ``(key, is a list)``.

    A state's grouped jobs follow its ungrouped ones (docs/protocol/groups.md#groups-getters):
    ``waiting`` is ``wait`` then ``groups:waiting``, ``active`` is ``active`` then
    ``groups:active``, ``delayed`` is ``delayed`` then ``groups:delayed``.
    """
    if state == "waiting":
        return [(keys.wait, True), (keys.groups_waiting, False)]
    if state == "active":
        return [(keys.active, True), (keys.groups_active, True)]
    if state == "delayed":
        return [(keys.delayed, False), (keys.groups_delayed, False)]
    return [(keys.state(state), state in _LISTS)]


def _check_range(start: int, end: int) -> None:
    for name, value in (("start", start), ("end", end)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValidationError(f"{name} must be an int index, got {value!r}")


def _decode_hash(raw: Any) -> dict[str, str] | None:
    if not raw:
        return None
    return hash_to_dict(raw) if isinstance(raw, Mapping) else flat_to_dict(raw)


# -- reads ---------------------------------------------------------------------------------


def _range_command(key: str, is_list: bool, start: int, end: int, asc: bool) -> tuple[Any, ...]:
    """The read of ``[start, end]`` of one structure (lists ascending: mirrored indexes, read
    from the tail; the reply is then reversed)."""
    if is_list and asc:
        low = 0 if end == -1 else -(end + 1)
        high = 0 if start == -1 else -(start + 1)
        return ("LRANGE", key, low, high)
    if is_list:
        return ("LRANGE", key, start, end)
    return ("ZRANGE" if asc else "ZREVRANGE", key, start, end)


def _redis_slice(items: list[str], start: int, end: int) -> list[str]:
    """``items[start..end]`` with the index rules of LRANGE (negative from the end, inclusive)."""
    n = len(items)
    low = max(0, n + start) if start < 0 else start
    high = min(n - 1, n + end if end < 0 else end)
    return items[low : high + 1] if low <= high else []


def _state_range(
    keys: QueueKeys, state: str, start: int, end: int, asc: bool
) -> tuple[list[tuple[Any, ...]], Callable[[list[Any]], list[str]]]:
    """The commands reading ``[start, end]`` of ``state`` and the parser of their replies.

    With two structures (a state and its grouped jobs) the slice runs across both, the
    ungrouped ones first: a page from ``start >= 0`` reads the first structure's size, its slice
    and the second one's head up to ``end`` (at most ``end + 1`` ids), and keeps the part of
    that head the page reaches; other negative indexes read both whole.
    """
    segments = _segments(keys, state)

    def ids_of(reply: Any, is_list: bool) -> list[str]:
        ids = [to_str(i) for i in reply or ()]
        if is_list and asc:
            ids.reverse()
        return ids

    if len(segments) == 1:
        key, is_list = segments[0]
        return [_range_command(key, is_list, start, end, asc)], lambda r: ids_of(r[0], is_list)
    (first, first_list), (second, second_list) = segments
    if start >= 0 and end >= -1:
        commands = [
            ("LLEN" if first_list else "ZCARD", first),
            _range_command(first, first_list, start, end, asc),
            _range_command(second, second_list, 0, end, asc),
        ]

        def parse_page(replies: list[Any]) -> list[str]:
            n = int(replies[0] or 0)
            head = ids_of(replies[2], second_list)
            stop = None if end == -1 else max(0, end - n + 1)
            return ids_of(replies[1], first_list) + head[max(0, start - n) : stop]

        return commands, parse_page

    def parse_whole(replies: list[Any]) -> list[str]:
        both = ids_of(replies[0], first_list) + ids_of(replies[1], second_list)
        return _redis_slice(both, start, end)

    return [
        _range_command(first, first_list, 0, -1, asc),
        _range_command(second, second_list, 0, -1, asc),
    ], parse_whole


def get_ranges(
    keys: QueueKeys, states: Sequence[str], start: int = 0, end: int = -1, asc: bool = False
) -> CommandOp[list[str]]:
    """The ids in ``states`` (in that order, each id once), each state sliced ``[start, end]``.

    ``asc=False`` lists newest first. Lists keep new jobs at the head, so ascending order reads
    the mirrored indexes from the tail and reverses them; sorted sets use ZRANGE (asc) or
    ZREVRANGE. ``waiting``, ``active`` and ``delayed`` list their grouped jobs after the
    ungrouped ones, the slice running across both (docs/protocol/groups.md#groups-getters).
    """
    _check_range(start, end)
    commands: list[tuple[Any, ...]] = []
    parts: list[tuple[int, int, Callable[[list[Any]], list[str]]]] = []
    for state in states:
        state_commands, parse_state = _state_range(keys, state, start, end, asc)
        parts.append((len(commands), len(state_commands), parse_state))
        commands.extend(state_commands)

    def parse(replies: list[Any]) -> list[str]:
        seen: dict[str, None] = {}
        for at, size, parse_state in parts:
            for job_id in parse_state(replies[at : at + size]):
                seen.setdefault(job_id, None)
        return list(seen)

    return CommandOp(commands, parse)


def get_job_hash(keys: QueueKeys, job_id: str) -> CommandOp[dict[str, str] | None]:
    """HGETALL of a job; None when it does not exist."""
    return CommandOp([("HGETALL", keys.job(job_id))], lambda replies: _decode_hash(replies[0]))


def get_job_hashes(
    keys: QueueKeys, job_ids: Sequence[str]
) -> CommandOp[list[dict[str, str] | None]]:
    """HGETALL of each job, in one pipeline; ``None`` where the hash no longer exists."""
    if not job_ids:
        raise ValidationError("get_job_hashes needs at least one job id")
    return CommandOp(
        [("HGETALL", keys.job(job_id)) for job_id in job_ids],
        lambda replies: [_decode_hash(raw) for raw in replies],
    )


def get_counts(keys: QueueKeys, states: Sequence[str]) -> CommandOp[dict[str, int]]:
    """How many jobs each state holds, its grouped jobs included (``waiting`` = ``LLEN wait`` +
    ``ZCARD groups:waiting``, and so ``active`` and ``delayed``;
    docs/protocol/groups.md#groups-getters).

    A pre-v5 ``0:`` delay marker at the tail of a list is not a job and is not counted, as in
    Node's getCounts.
    """
    if not states:
        raise ValidationError("get_counts needs at least one state")
    commands: list[tuple[Any, ...]] = []
    # per state: for each of its structures, whether it is a list whose tail is checked
    spans: list[tuple[str, list[bool]]] = []
    for state in states:
        checked: list[bool] = []
        for n, (key, is_list) in enumerate(_segments(keys, state)):
            commands.append(("LLEN" if is_list else "ZCARD", key))
            marker_check = is_list and n == 0  # the grouped structures never hold a marker
            if marker_check:
                commands.append(("LINDEX", key, -1))
            checked.append(marker_check)
        spans.append((state, checked))

    def parse(replies: list[Any]) -> dict[str, int]:
        counts: dict[str, int] = {}
        at = 0
        for state, checked in spans:
            total = 0
            for marker_check in checked:
                n = int(replies[at] or 0)
                if marker_check:
                    tail = replies[at + 1]
                    if tail is not None and to_str(tail).startswith("0:"):
                        n -= 1
                    at += 1
                total += n
                at += 1
            counts[state] = total
        return counts

    return CommandOp(commands, parse)


#: How often ``get_jobs`` widens a state's page to backfill ids whose hash vanished (Node: 5).
_MAX_BACKFILL = 5


def get_jobs_plan(
    keys: QueueKeys, states: Sequence[str], start: int = 0, end: int = -1, asc: bool = False
) -> Plan[list[tuple[str, dict[str, str]]]]:
    """The jobs in ``states`` as ``(id, hash)`` pairs, each state sliced ``[start, end]``.

    An id whose hash no longer exists is skipped, and the state's page is widened (up to
    five times) so a bounded page stays full, as Node's getJobs does.
    """
    _check_range(start, end)

    def page(state: str) -> Plan[list[tuple[str, dict[str, str]]]]:
        want = end - start + 1 if end >= 0 and start >= 0 else None
        extra = 0
        found: list[tuple[str, dict[str, str]]] = []
        for _ in range(_MAX_BACKFILL + 1):
            last = -1 if want is None else end + extra
            ids: list[str] = yield get_ranges(keys, [state], start, last, asc)
            if not ids:
                return []
            hashes: list[dict[str, str] | None] = yield get_job_hashes(keys, ids)
            found = [(i, h) for i, h in zip(ids, hashes) if h is not None]
            missing = len(ids) - len(found)
            if want is None or missing == 0 or len(ids) < want + extra:
                break
            extra += missing
        return found if want is None else found[:want]

    def plan() -> Plan[list[tuple[str, dict[str, str]]]]:
        ids: list[str] = yield get_ranges(keys, states, start, end, asc)
        if not ids:
            return []
        hashes: list[dict[str, str] | None] = yield get_job_hashes(keys, ids)
        if all(h is not None for h in hashes) or (end < 0 and start >= 0):
            return [(i, h) for i, h in zip(ids, hashes) if h is not None]
        out: list[tuple[str, dict[str, str]]] = []
        for state in states:
            out.extend((yield from page(state)))
        return out

    return plan()


def get_logs(
    keys: QueueKeys, job_id: str, start: int = 0, end: int = -1, asc: bool = True
) -> CommandOp[tuple[list[str], int]]:
    """A slice of a job's log lines (oldest first with ``asc``) and the total line count."""
    _check_range(start, end)
    key = keys.logs(job_id)
    if asc:
        lrange: tuple[Any, ...] = ("LRANGE", key, start, end)
    else:
        lrange = ("LRANGE", key, -(end + 1), -(start + 1))

    def parse(replies: list[Any]) -> tuple[list[str], int]:
        lines = [to_str(line) for line in replies[0] or ()]
        if not asc:
            lines.reverse()
        return lines, int(replies[1])

    return CommandOp([lrange, ("LLEN", key)], parse)


def _check_keep_logs(keep_logs: object, meaning: str) -> None:
    if keep_logs is not None and (
        isinstance(keep_logs, bool) or not isinstance(keep_logs, int) or keep_logs < 0
    ):
        raise ValidationError(
            f"keep_logs must be None or an int >= 0 ({meaning}), got {keep_logs!r}"
        )


def clear_logs(keys: QueueKeys, job_id: str, keep_logs: int | None = None) -> CommandOp[None]:
    """Delete a job's log lines, or keep only the newest ``keep_logs`` of them (BullMQ's
    ``Job.clearLogs``: ``LTRIM`` when ``keep_logs`` is set and above 0, else ``DEL``)."""
    _check_keep_logs(keep_logs, "None or 0 deletes every line")
    key = keys.logs(job_id)
    command: tuple[Any, ...] = ("LTRIM", key, -keep_logs, -1) if keep_logs else ("DEL", key)
    return CommandOp([command], lambda replies: None)


@dataclass(frozen=True, slots=True)
class MetricsMeta:
    """The running totals of a metrics hash (BullMQ's ``meta``).

    Attributes:
        count: jobs finished (completed or failed) since metrics were first collected.
        prev_ts: epoch ms of the last minute boundary the collector rolled over (internal).
        prev_count: ``count`` at that boundary (internal).
    """

    count: int
    prev_ts: int
    prev_count: int


@dataclass(frozen=True, slots=True)
class Metrics:
    """Per-minute finish counts written by workers with metrics enabled (BullMQ's layout).

    Attributes:
        meta: the running totals.
        data: jobs finished per minute, the most recent minute first (the requested slice).
        count: how many data points are stored in all.
    """

    meta: MetricsMeta
    data: list[int]
    count: int


#: The kinds of metrics workers collect.
METRIC_TYPES = ("completed", "failed")


def _int_or_zero(value: Any) -> int:
    """A stored number as int; 0 when missing or not a number (as Node's ``+x || 0``)."""
    if value is None:
        return 0
    try:
        return int(float(to_str(value)))
    except ValueError:
        return 0


def get_metrics(keys: QueueKeys, kind: str, start: int = 0, end: int = -1) -> CommandOp[Metrics]:
    """The ``completed`` or ``failed`` metrics of a queue: totals and a slice of the data."""
    if kind not in METRIC_TYPES:
        raise ValidationError(f"metrics type must be 'completed' or 'failed', got {kind!r}")
    _check_range(start, end)
    key = keys.metrics_completed if kind == "completed" else keys.metrics_failed
    data_key = key + ":data"

    def parse(replies: list[Any]) -> Metrics:
        meta, data, length = replies
        count, prev_ts, prev_count = (_int_or_zero(v) for v in meta)
        points = [_int_or_zero(point) for point in data or ()]
        return Metrics(MetricsMeta(count, prev_ts, prev_count), points, int(length))

    return CommandOp(
        [
            ("HMGET", key, "count", "prevTS", "prevCount"),
            ("LRANGE", data_key, start, end),
            ("LLEN", data_key),
        ],
        parse,
    )


def is_paused(keys: QueueKeys) -> CommandOp[bool]:
    """Whether the queue is globally paused (meta ``paused`` exists)."""
    return CommandOp([("HEXISTS", keys.meta, "paused")], lambda replies: bool(int(replies[0])))


def _parse_client_list(reply: Any) -> list[dict[str, str]]:
    if isinstance(reply, list):  # already parsed by a client-side callback
        return [{to_str(k): to_str(v) for k, v in entry.items()} for entry in reply]
    clients = []
    for line in to_str(reply).splitlines():
        if line.strip():
            pairs = (item.partition("=") for item in line.split(" ") if item)
            clients.append({k: v for k, _, v in pairs})
    return clients


def get_workers(keys: QueueKeys) -> CommandOp[list[dict[str, str]]]:
    """The connections named as this queue's workers, from CLIENT LIST
    (docs/protocol/worker-rules.md#client-names).

    Each entry is the CLIENT LIST fields of one connection, with ``name`` replaced by the queue
    name and the connection's own name kept as ``rawname`` (as Node's ``getWorkers``).
    """
    base = keys.worker_client_name()
    named = base + ":w:"

    def parse(replies: list[Any]) -> list[dict[str, str]]:
        workers = []
        for client in _parse_client_list(replies[0]):
            raw = client.get("name", "")
            if raw == base or raw.startswith(named):
                workers.append({**client, "name": keys.name, "rawname": raw})
        return workers

    # On a cluster, the workers' blocking connections are on the node of the queue's slot.
    return CommandOp([("CLIENT", "LIST")], parse, route=keys.marker)


def trim_events(keys: QueueKeys, max_len: int) -> CommandOp[int]:
    """XTRIM the events stream to about ``max_len`` entries; replies how many were deleted."""
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 0:
        raise ValidationError(f"max_len must be an int >= 0, got {max_len!r}")
    return CommandOp(
        [("XTRIM", keys.events, "MAXLEN", "~", max_len)], lambda replies: int(replies[0])
    )


def _event_value(name: str, value: object) -> str:
    """A custom event's field value as the stream stores it: text (numbers and booleans as
    JavaScript's ``String()`` writes them, as BullMQ's producer sends them)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and value == value and value not in (float("inf"), float("-inf")):
        return str(int(value)) if value.is_integer() else repr(value)
    raise ValidationError(
        f"event field {name!r} must be a str, int, finite float or bool, got"
        f" {type(value).__name__}; encode structured values yourself (json.dumps) and decode"
        " them where the event is read"
    )


def publish_event(
    keys: QueueKeys, event_name: str, args: Mapping[str, object], max_events: int
) -> CommandOp[str]:
    """XADD a custom event ``{event: event_name, **args}`` to the events stream, trimmed to
    about ``max_events`` entries (BullMQ's ``QueueEventsProducer.publishEvent``); replies the
    entry id."""
    if not isinstance(event_name, str) or not event_name:
        raise ValidationError(f"event_name must be a non-empty str, got {event_name!r}")
    if isinstance(max_events, bool) or not isinstance(max_events, int) or max_events < 1:
        raise ValidationError(f"max_events must be an int >= 1, got {max_events!r}")
    if not isinstance(args, Mapping):
        raise ValidationError(f"args must be a mapping of field -> value, got {args!r}")
    flat: list[str] = ["event", event_name]
    for field, value in args.items():
        if not isinstance(field, str) or not field:
            raise ValidationError(f"event field names must be non-empty str, got {field!r}")
        if field == "event":
            raise ValidationError(
                'event field "event" is reserved for the event name: pass the name as'
                " event_name and give this field another name"
            )
        flat += [field, _event_value(field, value)]
    command = ("XADD", keys.events, "MAXLEN", "~", max_events, "*", *flat)
    return CommandOp([command], lambda replies: to_str(replies[0]))


def get_state(keys: QueueKeys, job_id: str) -> ScriptOp[str]:
    """The state holding a job: a :class:`~echomq.JobState` value, ``unknown`` if none."""

    def parse(reply: Any) -> str:
        state = to_str(reply)
        if state not in _STATES:
            raise AssertionError(f"getState replied {state!r}")
        return state

    return ScriptOp(
        scripts.get("getState"),
        [
            keys.completed,
            keys.failed,
            keys.delayed,
            keys.prioritized,
            keys.active,
            keys.wait,
            keys.paused,
            keys.waiting_children,
        ],
        [job_id],
        parse,
    )


# -- queue state changes -------------------------------------------------------------------


def pause_queue(keys: QueueKeys, pause: bool, *, emit: bool = True) -> ScriptOp[int]:
    """Pause (or resume) the queue; the reply is how many legacy entries are left to move.

    A resume must be repeated with ``emit=False`` until the reply is 0.
    """
    return ScriptOp(
        scripts.get("pause"),
        [
            keys.wait,
            keys.paused,
            keys.meta,
            keys.prioritized,
            keys.events,
            keys.delayed,
            keys.marker,
        ],
        ["paused" if pause else "resumed", "1" if emit else "0"],
        lambda reply: int(reply),
    )


def resume_plan(keys: QueueKeys) -> Plan[None]:
    """Resume the queue, moving a legacy ``paused`` list to ``wait`` one batch per call.

    Only the first call emits ``resumed``.
    """

    def plan() -> Plan[None]:
        remaining: int = yield pause_queue(keys, False)
        while remaining > 0:
            remaining = yield pause_queue(keys, False, emit=False)

    return plan()


# -- one job -------------------------------------------------------------------------------


def _done(command: str, job_id: str, state: str = "") -> Callable[[Any], None]:
    def parse(reply: Any) -> None:
        check_code(reply, job_id=job_id, command=command, state=state)

    return parse


def update_data(keys: QueueKeys, job_id: str, data: Any) -> ScriptOp[None]:
    """Replace a job's payload (validated as JSON here)."""
    data_json = dumps(data, "job data")
    return ScriptOp(
        scripts.get("updateData"), [keys.job(job_id)], [data_json], _done("update_data", job_id)
    )


def update_progress(keys: QueueKeys, job_id: str, progress: Any) -> ScriptOp[None]:
    """Store a job's progress (a number or a JSON object) and emit a ``progress`` event."""
    is_number = isinstance(progress, (int, float)) and not isinstance(progress, bool)
    if not is_number and not isinstance(progress, Mapping):
        raise ValidationError(
            f"progress must be a number or a mapping (JSON object), got {type(progress).__name__}"
        )
    progress_json = dumps(progress, "progress")
    return ScriptOp(
        scripts.get("updateProgress"),
        [keys.job(job_id), keys.events, keys.meta],
        [job_id, progress_json],
        _done("update_progress", job_id),
    )


def add_log(keys: QueueKeys, job_id: str, line: str, keep_logs: int | None = None) -> ScriptOp[int]:
    """Append a log line, keeping the newest ``keep_logs`` lines when given (and > 0).

    The reply is the number of lines the log holds afterwards.
    """
    if not isinstance(line, str):
        raise ValidationError(f"a log line must be a str, got {type(line).__name__}")
    _check_keep_logs(keep_logs, "None or 0 keeps every line")
    keep = str(keep_logs) if keep_logs else ""
    return ScriptOp(
        scripts.get("addLog"),
        [keys.job(job_id), keys.logs(job_id)],
        [line, keep],
        lambda reply: int(check_code(reply, job_id=job_id, command="log")),
    )


def reprocess_job(
    keys: QueueKeys,
    job_id: str,
    state: str,
    *,
    lifo: bool = False,
    reset_attempts_made: bool = False,
    reset_attempts_started: bool = False,
    now: int | None = None,
) -> ScriptOp[None]:
    """Send a ``completed`` or ``failed`` job back to ``wait`` (or ``prioritized``; a grouped
    job to its group)."""
    if state not in _FINISHED_FIELD:
        raise ValidationError(f"retry state must be 'completed' or 'failed', got {state!r}")
    return ScriptOp(
        scripts.get("reprocessJob"),
        [
            keys.job(job_id),
            keys.events,
            keys.state(state),
            keys.wait,
            keys.meta,
            keys.active,
            keys.marker,
            keys.prioritized,
            keys.pc,
        ],
        [
            job_id,
            "RPUSH" if lifo else "LPUSH",
            _FINISHED_FIELD[state],
            state,
            "1" if reset_attempts_made else "0",
            "1" if reset_attempts_started else "0",
            now if now is not None else now_ms(),
        ],
        _done("retry", job_id, state),
    )


def promote_job(keys: QueueKeys, job_id: str, now: int | None = None) -> ScriptOp[None]:
    """Move a delayed job to ``wait`` (or ``prioritized``; a grouped job to its group) now."""
    return ScriptOp(
        scripts.get("promote"),
        [
            keys.job(job_id),
            keys.delayed,
            keys.wait,
            keys.meta,
            keys.prioritized,
            keys.active,
            keys.pc,
            keys.events,
            keys.marker,
        ],
        [job_id, now if now is not None else now_ms()],
        _done("promote", job_id, "delayed"),
    )


def change_priority(
    keys: QueueKeys, job_id: str, priority: int, *, lifo: bool = False
) -> ScriptOp[None]:
    """Set a job's priority; a waiting job moves between ``wait`` and ``prioritized``."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ValidationError(f"priority must be an int, got {priority!r}")
    if not 0 <= priority <= MAX_PRIORITY:
        raise ValidationError(f"priority must be between 0 and {MAX_PRIORITY}, got {priority}")
    return ScriptOp(
        scripts.get("changePriority"),
        [
            keys.job(job_id),
            keys.wait,
            keys.meta,
            keys.prioritized,
            keys.active,
            keys.pc,
            keys.marker,
        ],
        [job_id, priority, "1" if lifo else "0"],
        _done("change_priority", job_id),
    )


def change_delay(
    keys: QueueKeys, job_id: str, delay: Duration, now: int | None = None
) -> ScriptOp[None]:
    """Reschedule a delayed job to run ``delay`` (seconds or timedelta) from now."""
    delay_ms = to_ms(delay, "delay")
    return ScriptOp(
        scripts.get("changeDelay"),
        [keys.job(job_id), keys.delayed, keys.meta, keys.marker, keys.events],
        [job_id, delay_ms, now if now is not None else now_ms()],
        _done("change_delay", job_id, "delayed"),
    )
