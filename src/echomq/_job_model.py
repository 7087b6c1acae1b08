"""The job model: a slotted dataclass decoded from the job hash, and the job's states.

:class:`JobData` carries the fields of one job as read at one moment; the async ``Job``
(``_job``) and the generated sync one (``sync/_job``) add the binding their methods use.
:mod:`echomq.job` re-exports the public names of both modules.
"""

from __future__ import annotations

import dataclasses
import enum
import json
from datetime import datetime, timezone
from typing import Any

from typing_extensions import Self

from . import _ops as ops
from .options import OPTION_NAMES, UNSET, JobOptions
from .protocol import fields
from .protocol.keys import QueueKeys


class JobState(str, enum.Enum):
    """Where a job is. ``UNKNOWN`` means in no state set (removed, or never existed)."""

    WAITING = "waiting"
    PRIORITIZED = "prioritized"
    DELAYED = "delayed"
    ACTIVE = "active"
    COMPLETED = "completed"
    FAILED = "failed"
    WAITING_CHILDREN = "waiting-children"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value


def ms_to_datetime(ms: int | None) -> datetime | None:
    """Epoch milliseconds as an aware UTC datetime (None stays None)."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def _int(value: str | None, default: int = 0) -> int:
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        try:
            return int(float(value))
        except ValueError:
            return default


def _opt_int(value: str | None) -> int | None:
    return None if value is None or value == "" else _int(value)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


#: Decodes ``data`` and ``opts``: strict JSON, so NaN / Infinity (which JavaScript's parser
#: rejects) count as invalid. As fast as ``json.loads``: the hook runs only on those words.
_decode_strict = json.JSONDecoder(parse_constant=_no_constant).decode

#: Fields every add writes (BullMQ's, echomq's, and the smallest foreign producers BullMQ
#: workers accept). A hash without them is no job a worker can run: typically one left
#: behind by a stray write to a removed job. ``opts`` is not required: BullMQ reads a
#: missing one as ``{}`` and processes the job.
_REQUIRED_FIELDS = (fields.NAME, fields.DATA, fields.TIMESTAMP)

#: The stored option holding a job's group (``opts.emqGroup``), read when a hash has no ``gid``.
_GROUP_OPTION = OPTION_NAMES["group"]

_JSON_TYPES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean"}


def _lenient(text: str) -> Any:
    """What getters show for unreadable JSON: Python's reading if it has one, else ``{}``."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return {}


def _decode_field(text: str | None, name: str, problems: list[str]) -> tuple[Any, bool]:
    """A JSON field of the job hash (``{}`` when absent), and whether it is valid JSON; when
    it is not, the problem is added to ``problems`` and the lenient reading returned."""
    if text is None:
        return {}, False
    try:
        return _decode_strict(text), True
    except (ValueError, RecursionError) as exc:
        problems.append(f"job {name} is not valid JSON: {exc}")
        return _lenient(text), False


def _read_payload(h: dict[str, str]) -> tuple[Any, dict[str, Any], str | None]:
    """The job's data, its opts, and why a worker must not run it (None when it may).

    Each field is decoded once; the values returned for an unfit job are the lenient ones
    getters show.
    """
    problems: list[str] = []
    if fields.DATA not in h or fields.NAME not in h or fields.TIMESTAMP not in h:
        missing = ", ".join(f for f in _REQUIRED_FIELDS if f not in h)
        problems.append(f"job hash is missing required field(s): {missing}")
    data, _ = _decode_field(h.get(fields.DATA), "data", problems)
    opts, valid = _decode_field(h.get(fields.OPTS), "opts", problems)
    if valid and not isinstance(opts, dict):
        kind = "null" if opts is None else _JSON_TYPES[type(opts)]
        problems.append(f"job opts is not a JSON object: got {kind}")
    wire = opts if isinstance(opts, dict) else {}
    return data, wire, "; ".join(problems) if problems else None


@dataclasses.dataclass(frozen=True, slots=True)
class ParentRef:
    """The parent of a child job: its id and qualified queue name (``prefix:name``)."""

    id: str
    queue_key: str


@dataclasses.dataclass(slots=True, eq=False)
class JobData:
    """The fields of a job. Times are aware UTC datetimes; durations are seconds."""

    id: str
    name: str
    data: Any
    queue_name: str
    timestamp: datetime
    delay: float = 0.0
    priority: int = 0
    attempts_made: int = 0
    attempts_started: int = 0
    stalled_counter: int = 0
    processed_on: datetime | None = None
    finished_on: datetime | None = None
    processed_by: str | None = None
    return_value: Any = None
    failed_reason: str | None = None
    stacktrace: list[str] = dataclasses.field(default_factory=list)
    progress: Any = 0
    parent: ParentRef | None = None
    parent_key: str | None = None
    repeat_job_key: str | None = None
    deduplication_id: str | None = None
    #: The job's group (the ``group`` option; docs/groups.md), or None when it has none.
    group: str | None = None
    deferred_failure: str | None = None
    wire_options: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)
    #: True on the job an ``add`` returned when the add was deduplicated: nothing was added,
    #: and this is the job that owns the deduplication window (docs/dedup.md).
    deduplicated: bool = dataclasses.field(default=False, compare=False)
    #: Why a worker must not run this job (unreadable ``data`` / ``opts``, or required fields
    #: missing), or None. Getters ignore it and read such a job leniently.
    _corruption: str | None = dataclasses.field(default=None, init=False, repr=False)

    @property
    def options(self) -> JobOptions:
        """The job's options, decoded from its stored ``opts``."""
        return JobOptions.from_wire(self.wire_options)

    @property
    def attempts(self) -> int:
        """The total number of tries allowed (``opts.attempts``; 0 and 1 mean one try)."""
        value = self.wire_options.get("attempts", 0)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    def _keep_logs(self) -> int | None:
        """How many log lines the job keeps (its ``kl`` option; 0 or unset keeps all)."""
        kl = self.wire_options.get("kl")
        return kl if isinstance(kl, int) and not isinstance(kl, bool) and kl > 0 else None

    def _retry_op(
        self, keys: QueueKeys, state: str, attempts_made: bool, attempts_started: bool
    ) -> ops.ScriptOp[None]:
        """The script call of ``retry`` (shared by the async and sync Job)."""
        return ops.reprocess_job(
            keys,
            self.id,
            str(state),
            lifo=self.wire_options.get("lifo") is True,
            reset_attempts_made=attempts_made,
            reset_attempts_started=attempts_started,
        )

    def _reset_for_retry(self, attempts_made: bool, attempts_started: bool) -> None:
        """The local fields after a retry (Redis was updated the same way)."""
        self.finished_on = self.processed_on = None
        self.failed_reason = self.return_value = None
        if attempts_made:
            self.attempts_made = 0
        if attempts_started:
            self.attempts_started = 0

    @classmethod
    def _prepared(cls, job_id: str, p: ops.PreparedJob, queue_name: str) -> Self:
        """A job of this class for ``p``, just added as ``job_id`` (not bound to a connection)."""
        parent = p.options.parent
        dedup = p.options.deduplication
        return cls(
            parent=None if parent is UNSET else ParentRef(parent.id, parent.queue),
            parent_key=p.parent_key or None,
            id=job_id,
            name=p.name,
            data=p.data,
            queue_name=queue_name,
            timestamp=ms_to_datetime(p.timestamp_ms) or _EPOCH,
            delay=p.delay_ms / 1000,
            priority=p.priority,
            deduplication_id=None if dedup is UNSET else dedup.id,
            group=None if p.options.group is UNSET else p.options.group,
            wire_options=fields.loads(p.opts_json),
        )

    @classmethod
    def _decoded(cls, job_id: str, h: dict[str, str], queue_name: str) -> Self:
        """A job of this class with the fields of hash ``h`` (not bound to a connection)."""
        job = cls(id=job_id, name="", data=None, queue_name=queue_name, timestamp=_EPOCH)
        job._fill_from_hash(h)
        return job

    def _fill_from_hash(self, h: dict[str, str]) -> None:
        """Overwrite the fields with those of a job hash (HGETALL as str dict).

        Decoding is lenient, as Node's: a missing or unreadable field gets its default.
        Fields absent from the hash (most of them, for a job just taken) cost one lookup.
        What makes the job unfit to run is noted in ``_corruption`` on the way (``data`` and
        ``opts`` are decoded once, here), for the worker to fail it instead of running it.
        """
        get = h.get
        loads = fields.loads_or
        self.data, self.wire_options, self._corruption = _read_payload(h)
        self.name = get(fields.NAME, "")
        self.timestamp = ms_to_datetime(_int(get(fields.TIMESTAMP))) or self.timestamp
        self.delay = _int(get(fields.DELAY)) / 1000
        self.priority = _int(get(fields.PRIORITY))
        atm = get(fields.ATTEMPTS_MADE)
        if atm is None:
            atm = get(fields.LEGACY_ATTEMPTS_MADE)
        self.attempts_made = _int(atm)
        self.attempts_started = _int(get(fields.ATTEMPTS_STARTED))
        self.stalled_counter = _int(get(fields.STALLED_COUNTER))
        self.processed_on = ms_to_datetime(_opt_int(get(fields.PROCESSED_ON)))
        finished = get(fields.FINISHED_ON)
        self.finished_on = None if finished is None else ms_to_datetime(_opt_int(finished))
        self.processed_by = get(fields.PROCESSED_BY)
        rv = get(fields.RETURN_VALUE)
        self.return_value = None if rv is None else loads(rv, None)
        self.failed_reason = get(fields.FAILED_REASON)
        st = get(fields.STACKTRACE)
        stack = [] if st is None else loads(st, [])
        self.stacktrace = [str(s) for s in stack] if isinstance(stack, list) else []
        progress = get(fields.PROGRESS)
        self.progress = 0 if progress is None else loads(progress, 0)
        parent = get(fields.PARENT)
        ref = None if parent is None else loads(parent, None)
        if isinstance(ref, dict) and "id" in ref:
            self.parent = ParentRef(str(ref["id"]), str(ref.get("queueKey", "")))
        else:
            self.parent = None
        self.parent_key = get(fields.PARENT_KEY)
        self.repeat_job_key = get(fields.REPEAT_JOB_KEY)
        self.deduplication_id = get(fields.DEDUP_ID)
        group = get(fields.GROUP)
        if group is None:  # a hash without `gid`: the group its producer asked for, if any
            wire_group = self.wire_options.get(_GROUP_OPTION)
            group = wire_group if isinstance(wire_group, str) and wire_group else None
        self.group = group
        self.deferred_failure = h.get(fields.DEFERRED_FAILURE)


_EPOCH = datetime.fromtimestamp(0, tz=timezone.utc)
