"""``echomq scheduler NAME list|add|remove``: the job schedulers of one queue.

A thin layer over ``Queue.get_job_schedulers`` / ``upsert_job_scheduler`` /
``remove_job_scheduler``. The queue name, the prefix and a definition given to ``add`` (cron
expression, time zone, interval, limit, ``--data``) are checked with the API's own checks before
the URL is resolved: a refused one exits with code 2, nothing written and no embedded server
started.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from .._cron import FORMS as CRON_FORMS
from ..errors import InvalidOptionError
from ..queue import Queue
from ..schedulers import JobScheduler, Schedule, SchedulerTemplate, build_spec
from ._actions import add_queue_command, check_arguments, run_action
from ._connect import resolve_url
from ._errors import EXIT_FAILURE, EXIT_OK
from ._format import dumps, table, when


def add_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    """Register the ``scheduler`` subcommand and its actions."""
    actions, json_flag = add_queue_command(
        subparsers,
        parents,
        "scheduler",
        help_text="list, add or remove the job schedulers of a queue",
        description="List, add (or replace) and remove the job schedulers of the queue NAME.",
        handler=run,
    )

    p = actions.add_parser("list", parents=[*parents, json_flag], help="list the schedulers")
    p.set_defaults(action_fn=_list)

    p = actions.add_parser(
        "add", parents=[*parents, json_flag], help="add a scheduler, or replace one"
    )
    p.add_argument("scheduler_id", metavar="ID", help="the scheduler id")
    kind = p.add_mutually_exclusive_group(required=True)
    kind.add_argument("--every", type=float, metavar="SECONDS", help="run every SECONDS")
    kind.add_argument(
        "--cron",
        metavar="EXPR",
        help=f"a cron pattern: {CRON_FORMS}",
    )
    p.add_argument("--tz", help="IANA time zone of the cron expression (e.g. Europe/Madrid)")
    p.add_argument("--limit", type=int, help="at most N iterations")
    p.add_argument("--name", help="job name of each iteration (default: the id)")
    p.add_argument("--data", help="JSON payload of each iteration (default {})")
    p.set_defaults(action_fn=_add, check_fn=_check_add)

    p = actions.add_parser("remove", parents=parents, help="remove a scheduler")
    p.add_argument("scheduler_id", metavar="ID", help="the scheduler id")
    p.set_defaults(action_fn=_remove)


def run(args: argparse.Namespace) -> int:
    """The ``scheduler`` subcommand: check the arguments, resolve the URL, run the action."""
    check_arguments(args)
    return run_action(args, resolve_url(args.url, args.durability))


def _summary(s: JobScheduler) -> dict[str, Any]:
    return {
        "id": s.id,
        "name": s.name,
        "every": s.every,
        "pattern": s.pattern,
        "tz": s.tz,
        "next_run": s.next_run,
        "iteration_count": s.iteration_count,
        "limit": s.limit,
        "start_date": s.start_date,
        "end_date": s.end_date,
        "data": s.template.data,
        "legacy": s.legacy,
    }


def _schedule(s: JobScheduler) -> str:
    if s.every is not None:
        return f"every {s.every:g}s"
    if s.pattern is not None:
        return f"cron {s.pattern}" + (f" ({s.tz})" if s.tz else "")
    return "-"


async def _list(q: Queue, args: argparse.Namespace) -> int:
    schedulers = await q.get_job_schedulers(asc=True)
    if args.json:
        print(dumps([_summary(s) for s in schedulers]))
        return EXIT_OK
    if not schedulers:
        print(f"no job schedulers in queue {q.name}")
        return EXIT_OK
    rows = [
        (
            s.id + (" (legacy)" if s.legacy else ""),
            s.name,
            _schedule(s),
            when(s.next_run),
            "-" if s.iteration_count is None else s.iteration_count,
            "-" if s.limit is None else s.limit,
        )
        for s in schedulers
    ]
    print(table(("ID", "NAME", "SCHEDULE", "NEXT RUN", "RUNS", "LIMIT"), rows))
    return EXIT_OK


def _template(args: argparse.Namespace) -> dict[str, Any]:
    template: dict[str, Any] = {}
    if args.name:
        template["name"] = args.name
    if args.data is not None:
        try:
            template["data"] = json.loads(args.data)
        except ValueError as exc:
            raise InvalidOptionError(f"--data must be JSON: {exc}") from None
    return template


def _given_schedule(args: argparse.Namespace) -> Schedule:
    return Schedule(every=args.every, pattern=args.cron, tz=args.tz, limit=args.limit)


def _check_add(args: argparse.Namespace) -> None:
    """The checks ``upsert_job_scheduler`` makes before it writes, made before anything starts."""
    # now_ms only checks an end date, which the CLI does not take
    build_spec(args.scheduler_id, _given_schedule(args), now_ms=0)
    SchedulerTemplate.coerce(_template(args))


async def _add(q: Queue, args: argparse.Namespace) -> int:
    schedule = _given_schedule(args)
    job = await q.upsert_job_scheduler(
        args.scheduler_id,
        template=_template(args),
        every=schedule.every,
        pattern=schedule.pattern,
        tz=schedule.tz,
        limit=schedule.limit,
    )
    scheduler = await q.get_job_scheduler(args.scheduler_id)
    if args.json:
        print(
            dumps(
                {
                    "scheduler": None if scheduler is None else _summary(scheduler),
                    "job_id": None if job is None else job.id,
                }
            )
        )
        return EXIT_OK
    if job is None or scheduler is None:
        print(f"scheduler {args.scheduler_id} has no run to schedule; nothing written")
        return EXIT_OK
    print(
        f"scheduler {scheduler.id} on queue {q.name}: {_schedule(scheduler)}, "
        f"next run {when(scheduler.next_run)} (job {job.id})"
    )
    return EXIT_OK


async def _remove(q: Queue, args: argparse.Namespace) -> int:
    if await q.remove_job_scheduler(args.scheduler_id):
        print(f"removed scheduler {args.scheduler_id} from queue {q.name}")
        return EXIT_OK
    print(f"no scheduler {args.scheduler_id} in queue {q.name}")
    return EXIT_FAILURE
