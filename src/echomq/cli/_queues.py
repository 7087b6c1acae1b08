"""``echomq queues [--prefix P]``: the queues under a prefix, with their job counts.

Queues are found with ``SCAN`` (never ``KEYS``), as :mod:`echomq._discovery` says.
Each queue found is then counted through ``Queue.get_job_counts``, over one connection. A queue
whose keys Redis refuses to count (a key of the wrong type) is listed with ``?`` counts, and the
error, naming the queue, goes to stderr: the other queues are still listed, and the exit code is
0 (the listing was made).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from typing import Any

from redis.exceptions import ResponseError

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
        found: list[tuple[str, dict[str, int] | None, bool, str | None]] = []
        for name in await find_queues(client, args.prefix):
            async with Queue(name, connection=client, prefix=args.prefix) as q:
                try:
                    found.append((name, await q.get_job_counts(), await q.is_paused(), None))
                except ResponseError as exc:  # e.g. WRONGTYPE: one broken key, not the rest
                    found.append((name, None, False, str(exc)))
    finally:
        await topology.aclose(client)
    for name, _, _, error in found:
        if error is not None:
            print(f"echomq: queue {name!r} cannot be read: {error}", file=sys.stderr)
    if args.json:
        listed: list[dict[str, Any]] = [
            {"queue": n, "paused": p, "counts": c}
            if error is None
            else {"queue": n, "error": error}
            for n, c, p, error in found
        ]
        print(dumps(listed))
        return EXIT_OK
    if not found:
        print(f"no queues under prefix {args.prefix!r}")
        return EXIT_OK
    rows = [
        (
            name + (" (paused)" if paused else ""),
            *(("?",) * len(_COLUMNS) if counts is None else (counts[c] for c in _COLUMNS)),
        )
        for name, counts, paused, _ in found
    ]
    print(table(("QUEUE", *(c.upper() for c in _COLUMNS)), rows))
    return EXIT_OK
