"""Flows: validating and adding whole trees of jobs, and reading a tree back.

See docs/protocol/scripts.md#script-addFlow and docs/protocol/flows-dedup-schedulers.md#flows.
A tree is checked whole before anything is written (names, options, ids, depth, cycles), then
every tree of a call goes out in one addFlow script call, which checks what only Redis knows
(a parent that must exist, a custom id owned by another parent) before its first write.
"""

from __future__ import annotations

import collections
import dataclasses
import uuid
from collections.abc import Sequence
from typing import Any

from .._flow_job import FlowJob
from .._keys import queue_keys
from ..errors import (
    InvalidOptionError,
    ParentCannotBeReplacedError,
    ParentNotFoundError,
    ScriptError,
    ValidationError,
)
from ..options import UNSET, Parent
from ..protocol import codes
from ..protocol.keys import QueueKeys
from . import scripts
from ._base import CommandOp, Plan, ScriptOp, flat_to_dict, hash_to_dict, now_ms, to_str
from .add import AddOutcome, PreparedJob, prepare_job, validate_job_id

#: The deepest flow accepted (levels below the root).
MAX_FLOW_DEPTH = 1000


@dataclasses.dataclass(frozen=True, slots=True)
class FlowNode:
    """One validated node of a flow, ready to be written."""

    keys: QueueKeys
    job_id: str
    job: PreparedJob
    #: positions (in the call's node list) of this node's children
    children: list[int]


def _where(node: FlowJob, path: str) -> str:
    return f"flow node {path} ({node.name!r} in queue {node.queue_name!r})"


def prepare_flows(trees: Sequence[FlowJob], default_prefix: str) -> list[FlowNode]:
    """Validate and encode every node of ``trees``: parents before their children, each tree
    level by level. The first node of each tree is its root; raises before anything is
    written."""
    if isinstance(trees, FlowJob) or not all(isinstance(t, FlowJob) for t in trees):
        raise ValidationError("flows must be a list of FlowJob")
    now = now_ms()
    nodes: list[FlowNode] = []
    seen_objects: set[int] = set()
    seen_keys: dict[str, str] = {}
    external: list[tuple[str, str]] = []  # (parent key, path) of roots attached to a job
    for tree_index, root in enumerate(trees):
        root_path = f"[{tree_index}]" if len(trees) > 1 else "root"
        # (node, path, depth, prefix, parent position)
        level: collections.deque[tuple[FlowJob, str, int, str, int | None]] = collections.deque(
            [(root, root_path, 0, root.prefix or default_prefix, None)]
        )
        while level:
            node, path, depth, prefix, parent_at = level.popleft()
            if id(node) in seen_objects:
                raise ValidationError(
                    f"{_where(node, path)} appears twice in the flow (a node can have one "
                    "parent; build a new FlowJob for each place)"
                )
            seen_objects.add(id(node))
            if depth > MAX_FLOW_DEPTH:
                raise ValidationError(
                    f"the flow is deeper than {MAX_FLOW_DEPTH} levels at {_where(node, path)}"
                )
            keys = queue_keys(node.queue_name, prefix)
            options = node.options
            if options.deduplication is not UNSET and (node.children or parent_at is not None):
                raise InvalidOptionError(
                    f"{_where(node, path)}: deduplication is allowed only on a flow's root "
                    "without children (as in BullMQ); nothing was written"
                )
            if parent_at is None:
                if options.parent is not UNSET:
                    external.append((options.parent.key, path))
            else:
                if options.parent is not UNSET:
                    raise ValidationError(
                        f"{_where(node, path)} sets parent=: only a flow's root may (its "
                        "parent in the flow is the node above it)"
                    )
                parent = nodes[parent_at]
                options = dataclasses.replace(
                    options, parent=Parent(parent.job_id, parent.keys.qualified)
                )
            if options.job_id is not UNSET:
                validate_job_id(options.job_id)
                job_id = options.job_id
            else:
                job_id = str(uuid.uuid4())
            key = keys.job(job_id)
            if key in seen_keys:
                raise ValidationError(
                    f"{_where(node, path)} has job_id {job_id!r}, already used by flow node "
                    f"{seen_keys[key]} of the same queue; ids must be unique in a flow"
                )
            seen_keys[key] = path
            try:
                prepared = prepare_job(node.name, node.data, options, now)
            except ValidationError as exc:
                raise type(exc)(f"{_where(node, path)}: {exc}") from None
            position = len(nodes)
            nodes.append(FlowNode(keys, job_id, prepared, []))
            if parent_at is not None:
                nodes[parent_at].children.append(position)
            for index, child in enumerate(node.children):
                child_prefix = child.prefix or prefix
                level.append(
                    (child, f"{path}.children[{index}]", depth + 1, child_prefix, position)
                )
    for parent_key, path in external:
        if parent_key in seen_keys:
            raise ValidationError(
                f"the parent= of flow node {path} is flow node {seen_keys[parent_key]} of the "
                "same flow: a flow cannot be its own parent"
            )
    return nodes


def flow_queues(nodes: Sequence[FlowNode]) -> list[QueueKeys]:
    """The distinct queues of the nodes, in first-seen order."""
    return list({node.keys.base: node.keys for node in nodes}.values())


def add_flow(nodes: Sequence[FlowNode]) -> ScriptOp[list[AddOutcome]]:
    """The addFlow call writing ``nodes`` (from :func:`prepare_flows`); parses to their
    outcomes (a root with ``deduplication`` may be deduplicated: it then names the owner)."""
    args: list[scripts.Arg] = []
    for node in nodes:
        job = node.job
        args += [
            node.keys.qualified,
            node.job_id,
            *job.placement_args(),
            job.parent_key,
            job.parent_json,
            "1" if node.children else "0",
            job.dedup_json,
            job.group,
        ]

    def parse(reply: Any) -> list[AddOutcome]:
        if isinstance(reply, list) and reply and isinstance(reply[0], int):
            raise _refused(nodes, int(reply[0]), int(reply[1]) - 1)
        return [
            AddOutcome(to_str(i[0]), True) if isinstance(i, list) else AddOutcome(to_str(i))
            for i in reply
        ]

    return ScriptOp(scripts.get("addFlow"), nodes[0].keys.script_keys["addFlow"], args, parse)


def _refused(nodes: Sequence[FlowNode], code: int, at: int) -> ScriptError:
    node = nodes[at]
    where = f"flow node {node.job.name!r} (id {node.job_id}, queue {node.keys.name!r})"
    error: type[ScriptError] = ScriptError
    message = f"addFlow refused {where} with code {code}"
    if code == codes.PARENT_JOB_NOT_EXIST:
        error = ParentNotFoundError
        message = (
            f"the parent job {node.job.parent_key} of {where} does not exist; "
            "nothing of the flow was written"
        )
    elif code == codes.PARENT_JOB_CANNOT_BE_REPLACED:
        error = ParentCannotBeReplacedError
        message = (
            f"{where}: job {node.job_id} already exists as the child of another parent; "
            "nothing of the flow was written (choose another job_id)"
        )
    return error(message, code=code, job_id=node.job_id, command="add_flow")


# -- reading a tree ---------------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class RawNode:
    """A node read back: its queue, id, job hash and the children read below it."""

    keys: QueueKeys
    job_id: str
    hash: dict[str, str]
    children: list[RawNode]


def split_child_key(key: str) -> tuple[QueueKeys, str] | None:
    """The queue and id of a full child key ``P:Q:<id>`` (the prefix may hold colons, the
    queue name and the id may not); None for a key that is not of that shape."""
    rest, _, job_id = key.rpartition(":")
    prefix, _, name = rest.rpartition(":")
    if not prefix or not name or not job_id:
        return None
    try:
        return queue_keys(name, prefix), job_id
    except ValidationError:
        return None


def _page_commands(job_key: str, count: int) -> list[tuple[Any, ...]]:
    return [
        ("HGETALL", job_key),
        ("HSCAN", f"{job_key}:processed", 0, "COUNT", count),
        ("SSCAN", f"{job_key}:dependencies", 0, "COUNT", count),
        ("ZRANGE", f"{job_key}:unsuccessful", 0, count - 1),
        ("HSCAN", f"{job_key}:failed", 0, "COUNT", count),
    ]


def _scan_keys(reply: Any, pairs: bool) -> list[str]:
    items = reply[1] if isinstance(reply, (list, tuple)) else []
    if isinstance(items, dict):  # RESP3 / decoded map
        return [to_str(k) for k in items]
    keys = [to_str(i) for i in items]
    return keys[::2] if pairs else keys


def _hash(reply: Any) -> dict[str, str]:
    if not reply:
        return {}
    return hash_to_dict(reply) if isinstance(reply, dict) else flat_to_dict(reply)


def get_flow_plan(
    keys: QueueKeys, job_id: str, depth: int, max_children: int
) -> Plan[RawNode | None]:
    """Read job ``job_id`` and the children recorded on each job (up to ``max_children`` of
    each kind: processed, pending, failed, ignored), ``depth`` levels in all counting the job
    itself (as BullMQ's getFlow: 1 is the job alone), one round trip per level."""
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise ValidationError(f"depth must be an int >= 1 (1: the job alone), got {depth!r}")
    if isinstance(max_children, bool) or not isinstance(max_children, int) or max_children < 1:
        raise ValidationError(f"max_children must be an int >= 1, got {max_children!r}")
    root = RawNode(keys, job_id, {}, [])
    level = [root]
    for remaining in range(depth - 1, -1, -1):
        commands = [c for n in level for c in _page_commands(n.keys.job(n.job_id), max_children)]
        replies: list[Any] = yield CommandOp(commands, lambda r: r)
        below: list[RawNode] = []
        for i, node in enumerate(level):
            h, processed, pending, failed, ignored = replies[5 * i : 5 * i + 5]
            node.hash = _hash(h)
            if not node.hash or remaining == 0:
                continue
            found = (
                _scan_keys(processed, True)
                + _scan_keys(pending, False)
                + [to_str(k) for k in failed or []]
                + _scan_keys(ignored, True)
            )
            for child_key in found:
                parsed = split_child_key(child_key)
                if parsed is not None:
                    child = RawNode(parsed[0], parsed[1], {}, [])
                    node.children.append(child)
                    below.append(child)
        if not below:
            break
        level = below
    _prune(root)
    return root if root.hash else None


def _prune(node: RawNode) -> None:
    """Drop children whose hash was not found (removed since they were recorded)."""
    node.children = [c for c in node.children if c.hash]
    for child in node.children:
        _prune(child)
