"""``echomq queues [--prefix P]``: the queues under a prefix, with their job counts.

Queues are found with ``SCAN`` (never ``KEYS``, which blocks the server) over
``<prefix>:*``: a queue is a name that has one of the keys every queue that ever held a job or
a job scheduler has (``meta``, ``id``, ``events``, ``repeat``). Keys of jobs never end that way.
Each queue found is then counted through ``Queue.get_job_counts``, over one connection.
"""

from __future__ import annotations

import argparse
import asyncio
import re

import redis.asyncio

from ..queue import Queue, client_from_url
from ._connect import resolve
from ._errors import EXIT_OK
from ._format import dumps, table

#: Key suffixes that name a queue (``<prefix>:<queue>:<suffix>``).
_QUEUE_SUFFIXES = ("meta", "id", "events", "repeat")
_COLUMNS = ("waiting", "prioritized", "delayed", "active", "completed", "failed")
_GLOB_SPECIAL = re.compile(r"([*?\[\]\\])")


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


def glob_escape(text: str) -> str:
    """``text`` as a literal in a Redis ``MATCH`` pattern."""
    return _GLOB_SPECIAL.sub(r"\\\1", text)


async def find_queues(client: redis.asyncio.Redis, prefix: str) -> list[str]:
    """The names of the queues under ``prefix``, sorted, found with ``SCAN``."""
    head = f"{prefix}:"
    names: set[str] = set()
    async for raw in client.scan_iter(match=glob_escape(head) + "*", count=1000):
        key = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
        rest, sep, suffix = key[len(head) :].rpartition(":")
        if sep and rest and ":" not in rest and suffix in _QUEUE_SUFFIXES:
            names.add(rest)
    return sorted(names)


def run(args: argparse.Namespace) -> int:
    """The ``queues`` subcommand."""
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
        await client.aclose()
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
