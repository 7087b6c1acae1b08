"""The commands that act on one queue NAME through an ACTION: ``echomq queue NAME ...`` and
``echomq scheduler NAME ...``.

Each action is an ``async`` function of the opened :class:`~echomq.Queue` and the arguments
(``action_fn``), with an optional offline check of its arguments (``check_fn``). The queue name,
the prefix and that check run before the URL is resolved, so a refused argument exits 2 with
nothing written and no embedded server started.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable

from ..queue import Queue
from ._connect import check_names

Action = Callable[[Queue, argparse.Namespace], Awaitable[int]]
#: An action's offline check of its arguments: raises (ValidationError, CliError) to refuse.
Check = Callable[[argparse.Namespace], None]


def add_queue_command(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
    name: str,
    *,
    help_text: str,
    description: str,
    handler: Callable[[argparse.Namespace], int],
) -> tuple[argparse._SubParsersAction[argparse.ArgumentParser], argparse.ArgumentParser]:
    """Register the subcommand ``name`` on the queue NAME, run by ``handler``.

    Returns:
        Where its actions are added, and the parser of ``--json`` to add to the parents of
        the actions that print JSON.
    """
    parser = subparsers.add_parser(name, parents=parents, help=help_text, description=description)
    parser.add_argument("queue", metavar="NAME", help="the queue name")
    parser.set_defaults(handler=handler)
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    json_flag = argparse.ArgumentParser(add_help=False)
    json_flag.add_argument("--json", action="store_true", help="print JSON")
    return actions, json_flag


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse a bad queue name or prefix, then whatever the action's own check refuses."""
    check_names([args.queue], args.prefix)
    check: Check | None = getattr(args, "check_fn", None)
    if check is not None:
        check(args)


def run_action(args: argparse.Namespace, url: str) -> int:
    """Run the chosen action on the queue, opened on ``url`` and closed afterwards."""
    action: Action = args.action_fn

    async def go() -> int:
        async with Queue(args.queue, connection=url, prefix=args.prefix) as q:
            return await action(q, args)

    return asyncio.run(go())
