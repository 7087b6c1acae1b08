"""``echomq queues [--prefix P]``: the queues under a prefix, with their job counts.

Queues are found with ``SCAN`` (never ``KEYS``), as :mod:`echomq._discovery` says.
Each queue found is then counted through ``Queue.get_job_counts``, over one connection.
"""

from __future__ import annotations

import argparse
import asyncio

from .._discovery import find_queues
from .._redis import topology
from ..queue import Queue, client_from_url
from ._connect import check_names, resolve
from ._errors import EXIT_OK
from ._format import dumps, table

_COLUMNS = ("waiting", "prioritized", "delayed", "active", "completed", "failed")


def add_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    """Register the ``queues`` subcommand."""
    parser = subparsers.add_parser(
        "queues",
        parents=parents,
        help="list the queues under a prefix with their counts",
        description="List the queues under --prefix (found with SCAN) with their job counts.",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """The ``queues`` subcommand."""
    check_names([], args.prefix)
    url = resolve(args.url, args.durability).url
    return asyncio.run(_list(url, args))


async def _list(url: str, args: argparse.Namespace) -> int:
    client = client_from_url(url)
    try:
        found = []
        for name in await find_queues(client, args.prefix):
            async with Queue(name, connection=client, prefix=args.prefix) as q:
                found.append((name, await q.get_job_counts(), await q.is_paused()))
    finally:
        await topology.aclose(client)
    if args.json:
        print(dumps([{"queue": n, "paused": p, "counts": c} for n, c, p in found]))
        return EXIT_OK
    if not found:
        print(f"no queues under prefix {args.prefix!r}")
        return EXIT_OK
    rows = [
        (name + (" (paused)" if paused else ""), *(counts[c] for c in _COLUMNS))
        for name, counts, paused in found
    ]
    print(table(("QUEUE", *(c.upper() for c in _COLUMNS)), rows))
    return EXIT_OK
