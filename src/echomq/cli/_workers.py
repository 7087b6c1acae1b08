"""``echomq workers [--prefix P] [--json]``: every worker of the Redis, across the queues under
a prefix; and the worker columns ``echomq queue NAME workers`` shares.

Queues are found as ``echomq queues`` finds them (:func:`echomq._discovery.find_queues`, with
``SCAN``); each queue's workers are then read with ``get_workers``, the call ``echomq queue NAME
workers`` makes (the queue's worker registry, then the ``CLIENT LIST`` connections no entry
accounts for: BullMQ workers for Node), at most :data:`READS` queues at once over one
connection. Both commands print a worker with :func:`worker_row` under :data:`HEADERS`; this one
puts the queue first. A queue whose workers Redis refuses to read (a key of the wrong type) is
named on stderr and the others are listed as usual, exit code 0, as ``echomq queues`` does.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import datetime, timezone
from typing import Any

from redis.exceptions import ResponseError

from .._discovery import find_queues
from .._redis import topology
from ..queue import WorkerInfo, client_from_url, get_workers
from ._connect import check_names, resolve
from ._errors import EXIT_OK
from ._format import dumps, table

#: The columns of one worker, in both listings.
HEADERS = ("ID", "NAME", "KIND", "HOST", "PID", "CONCURRENCY", "HEARTBEAT", "JOBS")
#: Queues whose workers are read at once.
READS = 8


def add_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    """Register the ``workers`` subcommand."""
    parser = subparsers.add_parser(
        "workers",
        parents=parents,
        help="list the workers of every queue under a prefix",
        description=(
            "List the workers of every queue under --prefix (queues found with SCAN, as "
            "`echomq queues` finds them): echomq workers from each queue's registry, BullMQ "
            "workers for Node from CLIENT LIST."
        ),
    )
    parser.add_argument("--json", action="store_true", help="print a JSON array")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """The ``workers`` subcommand."""
    check_names([], args.prefix)
    url = resolve(args.url, args.durability).url
    return asyncio.run(_list(url, args))


def age(moment: datetime | None, now: datetime) -> str:
    """How long ago ``moment`` was (``3s ago``, ``2m05s ago``), or ``-``."""
    if moment is None:
        return "-"
    seconds = max(0, int((now - moment).total_seconds()))
    if seconds < 60:
        return f"{seconds}s ago"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s ago"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m ago"


def worker_row(info: WorkerInfo, now: datetime) -> tuple[Any, ...]:
    """One worker under :data:`HEADERS`: host or address, the age of its last heartbeat, and
    the jobs it held then (``-`` none, ``?`` not known: a worker known only by its
    connection)."""
    jobs = info.get("jobs")
    return (
        info.get("id", ""),
        info.get("worker_name") or "",
        info.get("kind", ""),
        info.get("host") or info.get("addr", ""),
        info.get("pid"),
        info.get("concurrency"),
        age(info.get("heartbeat_at"), now),
        "?" if jobs is None else ", ".join(jobs) or "-",
    )


async def _list(url: str, args: argparse.Namespace) -> int:
    client = client_from_url(url)
    gate = asyncio.Semaphore(READS)

    async def read(name: str) -> list[WorkerInfo] | str:
        async with gate:
            try:
                return await get_workers(name, connection=client, prefix=args.prefix)
            except ResponseError as exc:  # e.g. WRONGTYPE: one broken key, not the rest
                return str(exc)

    try:
        names = await find_queues(client, args.prefix)
        read_back = await asyncio.gather(*(read(name) for name in names))
    finally:
        await topology.aclose(client)
    found: list[tuple[str, WorkerInfo]] = []
    for name, workers in zip(names, read_back):
        if isinstance(workers, str):
            print(
                f"echomq: the workers of queue {name!r} cannot be read: {workers}", file=sys.stderr
            )
        else:
            found.extend((name, info) for info in workers)
    if args.json:
        print(dumps([{"queue": name, **info} for name, info in found]))
        return EXIT_OK
    if not found:
        queues = f"{len(names)} queue{'s' if len(names) != 1 else ''}"
        print(f"no workers on the queues under prefix {args.prefix!r} ({queues})")
        return EXIT_OK
    now = datetime.now(timezone.utc)
    print(table(("QUEUE", *HEADERS), [(name, *worker_row(info, now)) for name, info in found]))
    return EXIT_OK
