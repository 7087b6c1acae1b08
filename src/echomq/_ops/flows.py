"""Flow operations on one job: reading its children, parking it until they finish, and
unlinking or removing them (docs/protocol/flows-dedup-schedulers.md#flow-keys,
docs/protocol/scripts.md#script-moveToWaitingChildren and the three scripts after it).

A parent's children are recorded under four keys of its own, whose suffixes and API names
cross (BullMQ's naming, kept on the wire and in the API):

====================  ======  ===================================================  ============
key                   type    holds                                                API name
====================  ======  ===================================================  ============
``<job>:dependencies``  SET   pending children (full job keys)                      unprocessed
``<job>:processed``     HASH  completed child -> its return value (JSON text)       processed
``<job>:failed``        HASH  child whose failure was ignored (idof/cpof) -> reason ignored
``<job>:unsuccessful``  ZSET  child whose failure fails the job (fpof), by time     failed
====================  ======  ===================================================  ============

Reads are plain commands in one round trip; counts and every change are one script.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .._keys import queue_keys
from ..errors import ParentNotFoundError, ValidationError
from ..protocol import codes, fields
from ..protocol.keys import QueueKeys
from . import scripts
from ._base import CommandOp, Plan, ScriptOp, check_code, flat_to_dict, hash_to_dict, to_str
from .flow_tree import split_child_key

#: The four parts of a job's children, in the order results list them.
DEPENDENCY_PARTS: tuple[str, ...] = ("processed", "unprocessed", "failed", "ignored")


@dataclass(frozen=True, slots=True)
class DependencyPage:
    """Where to read one part of :meth:`Job.get_dependencies <echomq.Job.get_dependencies>`.

    Attributes:
        cursor: 0 for the first page, then the ``next_*_cursor`` of the previous result.
        count: about how many entries to read. For ``processed``, ``unprocessed`` and
            ``ignored`` it is a Redis SCAN hint: a small hash or set (Redis 7.2+: small
            encodings) comes back whole whatever ``count`` says. For ``failed`` it is exact.
    """

    cursor: int = 0
    count: int = 20

    def __post_init__(self) -> None:
        for name, value, low in (("cursor", self.cursor, 0), ("count", self.count, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValidationError(
                    f"DependencyPage.{name} must be an int >= {low}, got {value!r}"
                )


@dataclass(frozen=True, slots=True)
class Dependencies:
    """A job's children, by part (see :meth:`Job.get_dependencies <echomq.Job.get_dependencies>`).

    A part that was not asked for is None, and so is its cursor. A next cursor of 0 means the
    part was read to its end; any other value reads the next page when passed back in a
    :class:`DependencyPage`.

    Attributes:
        processed: completed children: full child key -> decoded return value.
        unprocessed: full keys of the children still pending.
        failed: full keys of the children whose failure fails this job (``fpof``), oldest first.
        ignored: children whose failure was ignored (``idof``, ``cpof``): key -> failed reason.
        next_processed_cursor: cursor of the next ``processed`` page (0: done).
        next_unprocessed_cursor: cursor of the next ``unprocessed`` page (0: done).
        next_failed_cursor: cursor of the next ``failed`` page (0: done).
        next_ignored_cursor: cursor of the next ``ignored`` page (0: done).
    """

    processed: dict[str, Any] | None = None
    unprocessed: list[str] | None = None
    failed: list[str] | None = None
    ignored: dict[str, str] | None = None
    next_processed_cursor: int | None = None
    next_unprocessed_cursor: int | None = None
    next_failed_cursor: int | None = None
    next_ignored_cursor: int | None = None


@dataclass(frozen=True, slots=True)
class DependencyCounts:
    """How many children a job has in each part; None for a part that was not counted.

    Attributes:
        processed: completed children.
        unprocessed: pending children.
        failed: children whose failure fails the job (``fpof``).
        ignored: children whose failure was ignored (``idof``, ``cpof``).
    """

    processed: int | None = None
    unprocessed: int | None = None
    failed: int | None = None
    ignored: int | None = None


J = TypeVar("J")


@dataclass(frozen=True, slots=True)
class ChildrenPage(Generic[J]):
    """A page of a parent's completed or pending children, as :meth:`Queue.get_dependencies
    <echomq.Queue.get_dependencies>` reads it (BullMQ's ``{items, jobs, total}``).

    Attributes:
        items: the full keys of the children on this page (``"<prefix>:<queue>:<id>"``),
            sorted.
        values: for ``"processed"``, each child key of the page -> its decoded return value;
            empty for ``"pending"``.
        jobs: the children of the page that still exist, as jobs, in ``items`` order (a
            child removed since, such as by ``remove_on_complete``, has no job).
        total: how many children the parent has in that part, all pages together.
    """

    items: list[str]
    values: dict[str, Any]
    jobs: list[J]
    total: int


#: What Queue.get_dependencies reads: the page's keys, values, (child queue, id, hash), total.
RawChildrenPage = tuple[list[str], dict[str, Any], list[tuple[QueueKeys, str, dict[str, str]]], int]


def children_page_plan(
    keys: QueueKeys, parent_id: str, kind: str, start: int, end: int
) -> Plan[RawChildrenPage]:
    """A page of a parent's ``"processed"`` (completed, with return values) or ``"pending"``
    children, sorted by key, ``start`` to ``end`` inclusive (negative counts from the end),
    with the hashes of the children that still exist: two round trips."""
    if kind not in ("processed", "pending"):
        raise ValidationError(f'type must be "processed" or "pending", got {kind!r}')
    for name, value in (("start", start), ("end", end)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValidationError(f"{name} must be an int, got {value!r}")
    if not isinstance(parent_id, str) or not parent_id:
        raise ValidationError(f"parent_id must be a non-empty str, got {parent_id!r}")
    if kind == "processed":
        read: tuple[Any, ...] = ("HGETALL", keys.processed(parent_id))
    else:
        read = ("SMEMBERS", keys.dependencies(parent_id))

    def plan() -> Plan[RawChildrenPage]:
        replies = yield CommandOp([read], lambda r: r[0])
        if kind == "processed":
            values = _decode_values(replies)
            all_keys = sorted(values)
        else:
            values = {}
            all_keys = sorted(to_str(k) for k in replies or ())
        total = len(all_keys)
        stop = total + end + 1 if end < 0 else end + 1
        first = total + start if start < 0 else start
        page = all_keys[max(first, 0) : max(stop, 0)]
        values = {k: values[k] for k in page} if values else {}
        children = [(k, split_child_key(k)) for k in page]
        found = [(k, where) for k, where in children if where is not None]
        if not found:
            return page, values, [], total
        hashes = yield CommandOp([("HGETALL", k) for k, _ in found], lambda r: r)
        jobs = [(where[0], where[1], _decode_hash(h)) for (_, where), h in zip(found, hashes) if h]
        return page, values, jobs, total

    return plan()


def _decode_hash(raw: Any) -> dict[str, str]:
    if not raw:
        return {}
    return hash_to_dict(raw) if isinstance(raw, Mapping) else flat_to_dict(raw)


def _decode_values(raw: Any) -> dict[str, Any]:
    """A ``:processed`` hash with each return value decoded (raw text if it is not JSON)."""
    return {key: fields.loads_or(text, text) for key, text in _decode_hash(raw).items()}


def _scan_reply(reply: Any) -> tuple[int, Any]:
    """An HSCAN/SSCAN reply as (next cursor, data), with or without redis-py's callback."""
    cursor, data = reply
    return int(to_str(cursor)), data


def get_children_values(keys: QueueKeys, job_id: str) -> CommandOp[dict[str, Any]]:
    """The return values of a job's completed children, keyed by full child key."""
    return CommandOp(
        [("HGETALL", keys.processed(job_id))], lambda replies: _decode_values(replies[0])
    )


def get_ignored_children_failures(keys: QueueKeys, job_id: str) -> CommandOp[dict[str, str]]:
    """The failed reasons of the children whose failure was ignored, keyed by full child key."""
    return CommandOp(
        [("HGETALL", keys.ignored_failures(job_id))], lambda replies: _decode_hash(replies[0])
    )


Part = DependencyPage | bool | None


def _page(name: str, value: Part) -> DependencyPage | None:
    if value is None or value is False:
        return None
    if value is True:
        return DependencyPage()
    if isinstance(value, DependencyPage):
        return value
    raise ValidationError(f"{name} must be True, False, None or a DependencyPage, got {value!r}")


def get_dependencies(
    keys: QueueKeys, job_id: str, parts: tuple[Part, Part, Part, Part]
) -> CommandOp[Dependencies]:
    """A job's children: all four parts whole when no part is given, else a page of each part
    given as True (first page of 20) or as a :class:`DependencyPage`; ``parts`` come in
    :data:`DEPENDENCY_PARTS` order."""
    given = dict(zip(DEPENDENCY_PARTS, parts))
    if all(value is None for value in given.values()):
        return CommandOp(
            [
                ("HGETALL", keys.processed(job_id)),
                ("SMEMBERS", keys.dependencies(job_id)),
                ("ZRANGE", keys.unsuccessful(job_id), 0, -1),
                ("HGETALL", keys.ignored_failures(job_id)),
            ],
            lambda replies: Dependencies(
                processed=_decode_values(replies[0]),
                unprocessed=sorted(to_str(k) for k in replies[1] or ()),
                failed=[to_str(k) for k in replies[2] or ()],
                ignored=_decode_hash(replies[3]),
                next_processed_cursor=0,
                next_unprocessed_cursor=0,
                next_failed_cursor=0,
                next_ignored_cursor=0,
            ),
        )
    pages = {name: page for name, value in given.items() if (page := _page(name, value))}
    if not pages:
        raise ValidationError("get_dependencies needs at least one part (or none, for all)")
    commands: list[tuple[Any, ...]] = []
    for name, page in pages.items():
        if name == "processed":
            commands.append(("HSCAN", keys.processed(job_id), page.cursor, "COUNT", page.count))
        elif name == "unprocessed":
            key = keys.dependencies(job_id)
            commands.append(("SSCAN", key, page.cursor, "COUNT", page.count))
        elif name == "failed":
            # one entry more than the page tells whether another page follows
            end = page.cursor + page.count
            commands.append(("ZRANGE", keys.unsuccessful(job_id), page.cursor, end))
        else:
            key = keys.ignored_failures(job_id)
            commands.append(("HSCAN", key, page.cursor, "COUNT", page.count))

    def parse(replies: list[Any]) -> Dependencies:
        out: dict[str, Any] = {}
        for (name, page), reply in zip(pages.items(), replies):
            if name == "failed":
                members = [to_str(k) for k in reply or ()]
                more = len(members) > page.count
                out["failed"] = members[: page.count]
                out["next_failed_cursor"] = page.cursor + page.count if more else 0
                continue
            cursor, data = _scan_reply(reply)
            if name == "unprocessed":
                out[name] = [to_str(k) for k in data or ()]
            else:
                out[name] = _decode_values(data) if name == "processed" else _decode_hash(data)
            out[f"next_{name}_cursor"] = cursor
        return Dependencies(**out)

    return CommandOp(commands, parse)


def get_dependency_counts(
    keys: QueueKeys, job_id: str, asked: tuple[bool, bool, bool, bool]
) -> ScriptOp[DependencyCounts]:
    """How many children a job has in each part asked for (``asked`` comes in
    :data:`DEPENDENCY_PARTS` order), read at one moment."""
    parts = [name for name, on in zip(DEPENDENCY_PARTS, asked) if on]
    if not parts:
        raise ValidationError("get_dependencies_count needs at least one part to count")
    return ScriptOp(
        scripts.get("getDependencyCounts"),
        keys.script_keys["getDependencyCounts"],
        [job_id, *parts],
        lambda reply: DependencyCounts(**{p: int(n) for p, n in zip(parts, reply)}),
    )


def child_key(child: Mapping[str, str]) -> str:
    """The full job key of ``{"id": <child id>, "queue": "<prefix>:<queue name>"}``."""
    usage = "child must be a mapping {'id': <job id>, 'queue': '<prefix>:<queue name>'}"
    if not isinstance(child, Mapping) or not {"id", "queue"} <= child.keys():
        raise ValidationError(f"{usage}, got {child!r}")
    child_id, qualified = child["id"], child["queue"]
    prefix, _, name = str(qualified).rpartition(":")
    if not isinstance(child_id, str) or not child_id or not prefix:
        raise ValidationError(f"{usage}, got {child!r}")
    return queue_keys(name, prefix).job(child_id)


def move_to_waiting_children(
    keys: QueueKeys, job_id: str, token: str, child: str, now: int
) -> ScriptOp[bool]:
    """Park an active job in ``waiting-children``; True when moved, False when nothing is
    pending (``child``: the full key of the one child to wait for, or ``""``)."""

    def parse(reply: Any) -> bool:
        check_code(reply, job_id=job_id, command="move_to_waiting_children", state="active")
        return int(reply) == 0

    return ScriptOp(
        scripts.get("moveToWaitingChildren"),
        keys.script_keys["moveToWaitingChildren"],
        [job_id, token, child, now],
        parse,
    )


#: removeChildDependency's reply for a child without a ``parentKey``.
_NOT_A_CHILD = 2


def remove_child_dependency(keys: QueueKeys, job_id: str) -> ScriptOp[bool]:
    """Unlink a pending child from its parent; True when removed, False when it was no
    longer pending."""

    def parse(reply: Any) -> bool:
        command = "remove_child_dependency"
        if reply == _NOT_A_CHILD:
            raise ParentNotFoundError(
                f"job {job_id} is not linked to a parent ({command})",
                code=codes.PARENT_JOB_NOT_EXIST,
                job_id=job_id,
                command=command,
            )
        check_code(reply, job_id=job_id, command=command)
        return int(reply) == 0

    return ScriptOp(
        scripts.get("removeChildDependency"),
        keys.script_keys["removeChildDependency"],
        [job_id],
        parse,
    )


def remove_unprocessed_children(keys: QueueKeys, job_id: str) -> ScriptOp[int]:
    """Delete a job's pending children (recursively, skipping locked and failed ones); the
    reply is how many job hashes were deleted."""
    return ScriptOp(
        scripts.get("removeUnprocessedChildren"),
        keys.script_keys["removeUnprocessedChildren"],
        [job_id],
        lambda reply: int(reply),
    )
