"""The flow parts of ``echomq queue NAME ...``: the ``flow ID`` action, and the parent and
children lines of ``job ID``.

Everything is read through the public API: :meth:`FlowProducer.get_flow
<echomq.FlowProducer.get_flow>` for the tree, :meth:`Job.get_state <echomq.Job.get_state>` for
each node's state and :meth:`Job.get_dependencies_count <echomq.Job.get_dependencies_count>` for
the children counts. A tree is a snapshot taken one level at a time, not at one instant: a
child may finish between two reads.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..flows import FlowProducer, JobNode
from ..job import Job
from ..queue import Queue
from ._errors import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, CliError
from ._format import dumps

#: The children counts of a job, under the names the CLI prints (``pending`` is the API's
#: ``unprocessed``; ``failed`` are the children whose failure fails the job, ``ignored`` those
#: whose failure was ignored).
COUNT_NAMES = ("processed", "pending", "failed", "ignored")


def add_parser(
    actions: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    """Register the ``flow`` action of ``echomq queue NAME``."""
    p = actions.add_parser(
        "flow",
        parents=parents,
        help="show a job and its children as a tree",
        description="Show job ID of queue NAME and the children recorded on it, level by level: "
        "one line per job with its name, id, queue and state, children indented under their "
        "parent.",
    )
    p.add_argument("job_id", metavar="ID", help="the job at the top of the tree (any job)")
    p.add_argument(
        "--depth", type=int, default=10, metavar="N", help="levels of children to read (default 10)"
    )
    p.add_argument(
        "--max-children",
        type=int,
        default=20,
        metavar="N",
        help="children of each kind (processed, pending, failed, ignored) read per job "
        "(default 20; small sets come whole)",
    )
    p.set_defaults(action_fn=flow, check_fn=check)


def check(args: argparse.Namespace) -> None:
    """Refuse a bad ``--depth`` or ``--max-children`` before anything is started."""
    if args.depth < 0:
        raise CliError("--depth must be 0 or more", EXIT_USAGE)
    if args.max_children < 1:
        raise CliError("--max-children must be at least 1", EXIT_USAGE)


async def children_counts(job: Job) -> dict[str, int]:
    """How many children job has recorded: processed, pending, failed and ignored."""
    counts = await job.get_dependencies_count()
    values = (counts.processed, counts.unprocessed, counts.failed, counts.ignored)
    return {name: value or 0 for name, value in zip(COUNT_NAMES, values)}


def children_text(counts: dict[str, int]) -> str:
    """``"2 processed, 1 pending, 0 failed, 0 ignored"``, or ``"none"``."""
    if not any(counts.values()):
        return "none"
    return ", ".join(f"{counts[name]} {name}" for name in COUNT_NAMES)


def parent_text(job: Job) -> str | None:
    """The full key of job's parent (``prefix:queue:id``), or None."""
    if job.parent_key:
        return job.parent_key
    if job.parent is not None:
        return f"{job.parent.queue_key}:{job.parent.id}"
    return None


async def flow(q: Queue, args: argparse.Namespace) -> int:
    """The ``flow`` action: print the tree under job ``ID`` (``check`` has passed)."""
    async with FlowProducer(connection=args.resolved_url, prefix=q.prefix) as producer:
        root = await producer.get_flow(
            # --depth counts levels of children; get_flow's depth counts the job too
            args.job_id,
            q.name,
            depth=args.depth + 1,
            max_children=args.max_children,
        )
        if root is None:
            raise CliError(f"no job {args.job_id!r} in queue {q.name!r}", EXIT_FAILURE)
        tree = await _describe(root, 0, args)
    if args.json:
        print(dumps(tree))
        return EXIT_OK
    for line in _lines(tree, tree["prefix"], 0):
        print(line)
    return EXIT_OK


async def _describe(node: JobNode, level: int, args: argparse.Namespace) -> dict[str, Any]:
    """A JSON-ready dict of node: its job's fields, state, children counts and the children
    read (sorted by creation time, then name and id)."""
    job = node.job
    counts = await children_counts(job)
    children = sorted(node.children, key=lambda n: (n.job.timestamp, n.job.name, n.job.id))
    hidden = max(sum(counts.values()) - len(children), 0)
    if not hidden:
        reason = None
    elif level == args.depth:
        reason = "depth"  # children below the last level read are counted, not read
    elif any(count > args.max_children for count in counts.values()):
        reason = "max_children"
    else:
        reason = "removed"  # recorded on the parent, but their job no longer exists
    return {
        "id": job.id,
        "name": job.name,
        "queue": job.queue_name,
        "prefix": job.queue_qualified_name[: -len(job.queue_name) - 1],
        "state": str((await job.get_state()).value),
        "children_counts": counts,
        "hidden_children": hidden,
        "hidden_reason": reason,
        "children": [await _describe(child, level + 1, args) for child in children],
    }


_HIDDEN = {
    "depth": "{n} more children below (raise --depth)",
    "max_children": "{n} more children not shown (raise --max-children)",
    "removed": "{n} recorded children no longer exist (removed)",
}


def _lines(node: dict[str, Any], prefix: str, level: int) -> list[str]:
    """One line per job, children indented two spaces under their parent. A queue under
    another prefix than the top job's is shown as ``prefix:name``."""
    indent = "  " * level
    queue = node["queue"] if node["prefix"] == prefix else f"{node['prefix']}:{node['queue']}"
    lines = [f"{indent}{node['name']}  id={node['id']}  queue={queue}  state={node['state']}"]
    for child in node["children"]:
        lines.extend(_lines(child, prefix, level + 1))
    if node["hidden_reason"]:
        note = _HIDDEN[node["hidden_reason"]].format(n=node["hidden_children"])
        lines.append(f"{indent}  ... {note}")
    return lines
