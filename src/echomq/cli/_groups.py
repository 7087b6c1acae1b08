"""``echomq queue NAME groups``: a queue's groups, most waiting jobs first (docs/groups.md).

One line per group that has waiting or active jobs: its id, waiting and active jobs, and
whether it is paused or held back by a limit, under a line giving the default group limits.
The indexes are checked by the parser before anything is started.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..queue import Queue, RateLimit
from ._errors import EXIT_OK
from ._format import dumps, table


def add_parser(
    actions: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    """Register the ``groups`` action (``parents`` carry the connection options and --json)."""
    p = actions.add_parser(
        "groups",
        parents=parents,
        help="list the groups, most waiting jobs first",
        description="List the queue's groups that have waiting or active jobs, most waiting "
        "jobs first: waiting and active jobs, paused, limited (at its concurrency or its rate "
        "window full).",
    )
    p.add_argument("--start", type=int, default=0, help="first index (default 0)")
    p.add_argument("--end", type=int, default=49, help="last index, -1 for all (default 49)")
    p.set_defaults(action_fn=run)


def _rate_text(limit: RateLimit | None) -> str:
    return "none" if limit is None else f"{limit.max} per {limit.duration:g}s"


def _state(paused: bool, limited: bool) -> str:
    return ", ".join(word for word, on in (("paused", paused), ("limited", limited)) if on)


async def run(q: Queue, args: argparse.Namespace) -> int:
    """Print the groups of ``[start, end]`` and the default group limits."""
    groups = await q.get_groups(args.start, args.end)
    concurrency = await q.get_group_concurrency()
    rate = await q.get_group_rate_limit()
    if args.json:
        shown: dict[str, Any] = {
            "queue": q.name,
            "concurrency": concurrency,
            "rate_limit": rate,
            "groups": groups,
        }
        print(dumps(shown))
        return EXIT_OK
    conc = "none" if concurrency is None else str(concurrency)
    print(
        f"queue {q.name}: default group concurrency {conc}, default group rate limit "
        f"{_rate_text(rate)}"
    )
    if not groups:
        print(f"no groups with waiting or active jobs at [{args.start}, {args.end}]")
        return EXIT_OK
    rows = [(g.id, g.waiting, g.active, _state(g.paused, g.limited)) for g in groups]
    print(table(("GROUP", "WAITING", "ACTIVE", "STATE"), rows))
    if args.end >= 0 and len(groups) == args.end - args.start + 1:
        print(f"(groups {args.start} to {args.end} by waiting jobs; see --start/--end)")
    return EXIT_OK
