"""``echomq add QUEUE NAME [--data JSON] [options]``: add one job from the shell.

The queue name, the prefix and the payload are parsed and the options are checked before
anything is started or written: a bad name, bad JSON or a bad option exits with code 2 and
leaves Redis untouched (and the embedded server not started). The job id is printed on
stdout, alone on its line, so ``id=$(echomq add ...)`` works. Without ``--data`` the payload is
``{}``, as ``echomq.add`` defaults it.

``--wait-replicas N`` waits after the add until N replicas have it (Redis ``WAIT``, up to
``--wait-timeout`` seconds); when fewer acknowledge, the id is still printed (the job exists on
the primary) and the command exits 1 saying so.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from .._ops import prepare_job
from .._ops.replicated import ReplicaWait
from ..errors import ReplicationError
from ..options import JobOptions
from ..queue import add
from ._connect import check_names, resolve
from ._errors import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, CliError


def add_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    """Register the ``add`` subcommand."""
    parser = subparsers.add_parser(
        "add",
        parents=parents,
        help="add a job to a queue",
        description="Add the job NAME with the JSON payload --data (default {}) to QUEUE and "
        "print its id.",
    )
    parser.add_argument("queue", metavar="QUEUE", help="the queue name")
    parser.add_argument("name", metavar="NAME", help="the job name, given to the processor")
    parser.add_argument(
        "--data",
        default="{}",
        metavar="JSON",
        help='the payload as JSON, e.g. \'{"to": "ada"}\' (default {})',
    )
    parser.add_argument("--delay", type=float, metavar="S", help="run no sooner than S seconds")
    parser.add_argument("--priority", type=int, metavar="N", help="priority (1 is the highest)")
    parser.add_argument("--attempts", type=int, metavar="N", help="attempts before it fails")
    parser.add_argument("--job-id", metavar="ID", help="a custom job id")
    parser.add_argument(
        "--group", metavar="ID", help="the job's group, e.g. a tenant id (docs/groups.md)"
    )
    parser.add_argument(
        "--wait-replicas",
        type=int,
        default=0,
        metavar="N",
        help="after the add, wait until N replicas have it (Redis WAIT); exit 1 if fewer do",
    )
    parser.add_argument(
        "--wait-timeout",
        type=float,
        default=1.0,
        metavar="S",
        help="seconds to wait for those replicas (default 1)",
    )
    parser.set_defaults(handler=run)


def parse_data(text: str) -> Any:
    """The payload of ``--data``.

    Raises:
        CliError: ``text`` is not JSON (exit code 2).
    """
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(
            f"--data is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno}); "
            'nothing was added. Quote it for the shell, e.g. --data \'{"to": "ada"}\'',
            EXIT_USAGE,
        ) from None


def job_options(args: argparse.Namespace) -> dict[str, Any]:
    """The job options that were given, as keyword arguments of ``echomq.add``."""
    options: dict[str, Any] = {}
    for name in ("delay", "priority", "attempts", "job_id", "group"):
        value = getattr(args, name)
        if value is not None:
            options[name] = value
    return options


def run(args: argparse.Namespace) -> int:
    """The ``add`` subcommand."""
    check_names([args.queue], args.prefix)
    data = parse_data(args.data)
    options = job_options(args)
    # The checks echomq.add makes before it writes (id, options, payload), made here before a
    # server is started: a ValidationError exits 2.
    prepare_job(args.name, data, JobOptions.build(options))
    wait = ReplicaWait.build(args.wait_replicas, args.wait_timeout)
    url = resolve(args.url, args.durability).url
    call = add(
        args.queue,
        args.name,
        data,
        connection=url,
        prefix=args.prefix,
        wait_replicas=wait.replicas,
        wait_timeout=wait.timeout,
        **options,
    )
    try:
        job = asyncio.run(call)
    except ReplicationError as exc:
        print(exc.job.id)  # it was added: a script must know its id
        raise CliError(str(exc), EXIT_FAILURE) from None
    print(job.id)
    return EXIT_OK
