"""Adding jobs: validation, encoding, and the add script call.

See docs/protocol/scripts.md#script-addJob (and #step-dedup for the ``deduplication`` option:
a deduplicated add stores nothing and answers with the id of the job that owns the window).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._json import dumps
from .._keys import queue_keys
from ..errors import (
    InvalidJobIdError,
    ParentCannotBeReplacedError,
    ParentNotFoundError,
    PayloadError,
    ValidationError,
)
from ..options import (
    EMPTY_OPTIONS,
    OPTION_NAMES,
    UNSET,
    JobOptions,
    coerce_options,
    moment_to_ms,
    to_ms,
)
from ..protocol import codes
from ..protocol.keys import RESERVED_SUFFIXES, QueueKeys
from . import scripts
from ._base import MappedOp, ScriptOp, TransactionOp, check_code, now_ms, to_str

#: One item of ``add_bulk``: ``(name, data)`` or ``(name, data, options)``.
BulkItem = tuple[str, Any] | tuple[str, Any, JobOptions | Mapping[str, Any]]


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
    #: the parent's job key and the child's ``parent`` JSON ("" without a parent)
    parent_key: str = ""
    parent_json: str = ""
    #: the ``de`` option's JSON ("" without deduplication)
    dedup_json: str = ""

    @property
    def group(self) -> str:
        """The job's group, or "" (the add scripts' group argument)."""
        group = self.options.group
        return group if isinstance(group, str) else ""

    def placement_args(self) -> list[scripts.Arg]:
        """What both add scripts store and place the job by, in their ARGV order (addJob's
        ARGV[2..8], addFlow's ARGV[3..9]): name, timestamp, data, opts, delay, priority and
        the lifo flag."""
        lifo = "1" if self.options.lifo is True else "0"
        return [
            self.name,
            self.timestamp_ms,
            self.data_json,
            self.opts_json,
            self.delay_ms,
            self.priority,
            lifo,
        ]


@dataclass(frozen=True, slots=True)
class AddOutcome:
    """What the add script answered for one job: its id, and whether the add was
    deduplicated (then ``job_id`` is the id of the job that owns the window, and nothing
    was stored)."""

    job_id: str
    deduplicated: bool = False


_EMPTY_OPTS_JSON = dumps(EMPTY_OPTIONS.to_wire())


def _opts_json(options: JobOptions) -> str:
    """The stored ``opts`` text (precomputed for the common no-options case).

    Not cached by value: options that compare equal may still be stored differently
    (``remove_on_fail=False`` keeps every job, ``0`` keeps none, yet ``False == 0``).
    """
    if options is EMPTY_OPTIONS:
        return _EMPTY_OPTS_JSON
    return dumps(options.to_wire(), "job options")


def prepare_job(name: str, data: Any, options: JobOptions, now: int | None = None) -> PreparedJob:
    """Validate one job and encode it; raises before anything is written."""
    if not isinstance(name, str):
        raise PayloadError(f"job name must be a str, got {type(name).__name__}")
    if options.job_id is not UNSET:
        validate_job_id(options.job_id)
    if data is UNSET:  # no data given: `{}`, as Node stores for undefined data
        data = {}
    data_json = dumps(data, "job data")
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
    opts_json = _opts_json(options)
    parent_key = parent_json = ""
    if options.parent is not UNSET:
        parent = options.parent
        queue_keys(parent.queue_name, parent.prefix)  # a parent queue that cannot exist
        parent_key = parent.key
        parent_json = parent_field(parent.id, parent.queue, options.failure_policy)
    dedup_json = ""
    if options.deduplication is not UNSET:
        dedup_json = dumps(options.to_wire()[OPTION_NAMES["deduplication"]])
    return PreparedJob(
        name,
        data,
        data_json,
        options,
        opts_json,
        timestamp,
        delay,
        priority,
        parent_key,
        parent_json,
        dedup_json,
    )


def parent_field(parent_id: str, queue_key: str, policy: str | None) -> str:
    """A child's ``parent`` field: the parent's id and qualified queue name, plus the flag of
    its failure policy (``fpof``, ``cpof``, ``idof``, ``rdof``) when it has one."""
    ref: dict[str, Any] = {"id": parent_id, "queueKey": queue_key}
    if policy is not None:
        ref[policy] = True
    return dumps(ref)


def add_job(
    keys: QueueKeys, job: PreparedJob, parent: tuple[QueueKeys, str] | None = None
) -> MappedOp[AddOutcome, str]:
    """The add script call for a prepared job; the reply parses to the job id (of the job that
    owns the deduplication window, for a deduplicated add). See :func:`add_job_outcome`."""
    return MappedOp(add_job_outcome(keys, job, parent), lambda outcome: outcome.job_id)


def add_job_outcome(
    keys: QueueKeys, job: PreparedJob, parent: tuple[QueueKeys, str] | None = None
) -> ScriptOp[AddOutcome]:
    """The add script call for a prepared job; the reply parses to an :class:`AddOutcome`.

    Args:
        keys: the job's queue.
        job: the validated job.
        parent: ``(parent queue, parent id)`` for a child of a flow: the parent must exist;
            the child is stored with ``parentKey``/``parent`` and joins its dependencies.
    """
    custom = job.options.job_id if job.options.job_id is not UNSET else ""
    args = _job_args(job, parent)
    parent_key = str(args[8])

    def parse(reply: Any) -> AddOutcome:
        if reply == codes.PARENT_JOB_NOT_EXIST:
            raise ParentNotFoundError(
                f"the parent job {parent_key} does not exist, so the child was not added; "
                "add the parent first (or use a FlowProducer to add both at once)",
                code=reply,
                job_id=custom or None,
                command="add",
            )
        if reply == codes.PARENT_JOB_CANNOT_BE_REPLACED:
            raise ParentCannotBeReplacedError(
                f"job {custom} already exists as the child of another parent, so it cannot be "
                f"added under {parent_key}; nothing was written",
                code=reply,
                job_id=custom,
                command="add",
            )
        return _outcome(reply, custom or None, "add")

    return ScriptOp(scripts.get("addJob"), keys.script_keys["addJob"], args, parse)


def _job_args(job: PreparedJob, parent: tuple[QueueKeys, str] | None = None) -> list[scripts.Arg]:
    """The 12 ARGV values of one job for the addJob script."""
    parent_key, parent_json = job.parent_key, job.parent_json
    if parent is not None:
        parent_keys, parent_id = parent
        parent_key = parent_keys.job(parent_id)
        parent_json = parent_field(parent_id, parent_keys.qualified, job.options.failure_policy)
    custom = job.options.job_id if job.options.job_id is not UNSET else ""
    return [custom, *job.placement_args(), parent_key, parent_json, job.dedup_json, job.group]


def prepare_bulk(
    items: Iterable[BulkItem], defaults: JobOptions = EMPTY_OPTIONS
) -> list[PreparedJob]:
    """Validate and encode every item of a bulk add; raises before anything is written."""
    now = now_ms()
    prepared = []
    for index, item in enumerate(items):
        if not isinstance(item, tuple) or len(item) not in (2, 3):
            raise ValidationError(
                f"add_bulk item {index} must be (name, data) or (name, data, options), got {item!r}"
            )
        options = defaults.merged(coerce_options(item[2])) if len(item) == 3 else defaults
        prepared.append(prepare_job(item[0], item[1], options, now))
    return prepared


#: Jobs per addJob call in a bulk add: the calls share one MULTI/EXEC, and each one's
#: reply and argument list stay small.
BULK_CHUNK = 100


def add_jobs(
    keys: QueueKeys, jobs: Sequence[PreparedJob]
) -> MappedOp[list[list[AddOutcome]], list[AddOutcome]]:
    """Prepared jobs added in one MULTI/EXEC (a few jobs per script call); parses to their
    outcomes, in order."""
    calls = []
    for start in range(0, len(jobs), BULK_CHUNK):
        chunk = jobs[start : start + BULK_CHUNK]
        args = [arg for job in chunk for arg in _job_args(job)]
        calls.append(ScriptOp(scripts.get("addJob"), keys.script_keys["addJob"], args, _parse_ids))
    return MappedOp(TransactionOp(calls), lambda replies: [i for ids in replies for i in ids])


def _parse_ids(reply: Any) -> list[AddOutcome]:
    replies = reply if isinstance(reply, list) else [reply]
    return [_outcome(r, None, "add_bulk") for r in replies]


def _outcome(reply: Any, custom: str | None, command: str) -> AddOutcome:
    """One job's reply: its id, a code, or ``[owner id]`` for a deduplicated add (a call of
    one job wraps that once more)."""
    if isinstance(reply, list):
        inner = reply[0]
        return AddOutcome(to_str(inner[0] if isinstance(inner, list) else inner), True)
    return AddOutcome(to_str(check_code(reply, job_id=custom, command=command)))
