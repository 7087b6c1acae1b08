"""``echomq queue NAME ...``: inspect and manage one queue through the public ``Queue`` API.

Each action opens a ``Queue`` on the resolved URL, does one thing and closes it (``flow`` also
opens a ``FlowProducer``: see :mod:`echomq.cli._flow`). Destructive actions say what they did;
``obliterate`` asks for confirmation unless ``--yes``.

The queue name, the prefix and an action's own arguments (its ``check_fn``) are checked before
the URL is resolved: a refused argument exits 2 without starting the embedded server.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from datetime import datetime, timezone
from typing import Any

from .. import _ops as ops
from .._keys import queue_keys
from ..errors import ActiveJobsError
from ..job import Job
from ..options import UNSET, JobOptions
from ..queue import Queue
from . import _flow, _groups, _limits
from . import _workers as _workers_cli
from ._actions import add_queue_command, check_arguments, run_action
from ._connect import resolve, warn_if_no_queue
from ._errors import EXIT_FAILURE, EXIT_OK, CliError
from ._format import dumps, table, when

STATES = (
    "waiting",
    "prioritized",
    "delayed",
    "active",
    "completed",
    "failed",
    "waiting-children",
    "paused",
)
CLEAN_STATES = ("completed", "failed", "waiting", "active", "paused", "prioritized", "delayed")


def add_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    """Register the ``queue`` subcommand and its actions."""
    actions, json_flag = add_queue_command(
        subparsers,
        parents,
        "queue",
        help_text="inspect or manage a queue",
        description="Inspect or manage the queue NAME.",
        handler=run,
    )
    with_json = [*parents, json_flag]

    p = actions.add_parser("counts", parents=with_json, help="jobs per state")
    p.set_defaults(action_fn=_counts)

    p = actions.add_parser("jobs", parents=with_json, help="list the jobs of one state")
    p.add_argument("state", choices=STATES, help="the state")
    p.add_argument("--start", type=int, default=0, help="first index (default 0)")
    p.add_argument("--end", type=int, default=49, help="last index, -1 for all (default 49)")
    p.set_defaults(action_fn=_jobs)

    p = actions.add_parser("job", parents=with_json, help="show one job")
    p.add_argument("job_id", metavar="ID", help="the job id")
    p.set_defaults(action_fn=_job)

    p = actions.add_parser("workers", parents=with_json, help="list the workers and their jobs")
    p.set_defaults(action_fn=_workers)

    _flow.add_parser(actions, with_json)
    _limits.add_parser(actions, with_json)
    _groups.add_parser(actions, with_json)

    p = actions.add_parser("pause", parents=parents, help="stop workers taking jobs")
    p.set_defaults(action_fn=_pause)

    p = actions.add_parser("resume", parents=parents, help="let workers take jobs again")
    p.set_defaults(action_fn=_resume)

    p = actions.add_parser("retry-failed", parents=parents, help="move failed jobs back to wait")
    p.add_argument(
        "--count", type=int, default=1000, help="jobs moved per script call (default 1000)"
    )
    p.set_defaults(action_fn=_retry_failed, check_fn=_check_retry_failed)

    p = actions.add_parser("clean", parents=parents, help="delete old jobs of one state")
    p.add_argument("state", choices=CLEAN_STATES, help="the state")
    p.add_argument(
        "--grace", type=float, required=True, metavar="S", help="keep jobs newer than S seconds"
    )
    p.add_argument("--limit", type=int, default=0, help="delete at most N jobs (0: no limit)")
    p.set_defaults(action_fn=_clean, check_fn=_check_clean)

    p = actions.add_parser("obliterate", parents=parents, help="delete the whole queue")
    p.add_argument("--force", action="store_true", help="also delete active jobs")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    p.set_defaults(action_fn=_obliterate)


def run(args: argparse.Namespace) -> int:
    """The ``queue`` subcommand: check the arguments, resolve the URL, run the chosen action."""
    check_arguments(args)
    target = resolve(args.url, args.durability)
    warn_if_no_queue(target, args.queue, args.prefix)
    args.resolved_url = target.url  # for actions that open more than the Queue (flow)
    return run_action(args, target.url)


async def _counts(q: Queue, args: argparse.Namespace) -> int:
    counts = await q.get_job_counts()
    paused = await q.is_paused()
    schedulers = await q.get_job_schedulers_count()
    if args.json:
        print(
            dumps({"queue": q.name, "paused": paused, "counts": counts, "schedulers": schedulers})
        )
        return EXIT_OK
    rows = [(state, n) for state, n in counts.items()]
    rows.append(("total", sum(counts.values())))
    print(f"queue {q.name}{' (paused)' if paused else ''}")
    print(table(("STATE", "JOBS"), rows))
    print(f"job schedulers: {schedulers}")
    return EXIT_OK


def _allowed(job: Job) -> int:
    """How many tries the job has: its ``attempts`` option, where 0 (or none) means one."""
    return max(job.attempts, 1)


def _attempts(job: Job) -> str:
    return f"{job.attempts_made}/{_allowed(job)}"


def _given_options(job: Job) -> JobOptions:
    """The job's options as its producer gave them.

    Every producer (echomq and BullMQ alike) stores ``attempts: 0`` when none was given; shown
    as such it would contradict the tries the job really has (0 means one try, as 1 does), so
    it is left out: the ``attempts`` line says how many tries the job has.
    """
    options = job.options
    if options.attempts == 0:
        options = dataclasses.replace(options, attempts=UNSET)
    return options


async def _jobs(q: Queue, args: argparse.Namespace) -> int:
    jobs = await q.get_jobs(
        args.state, args.start, args.end, asc=args.state not in ("completed", "failed")
    )
    if args.json:
        print(dumps([_job_summary(job) for job in jobs]))
        return EXIT_OK
    total = sum((await q.get_job_counts(args.state)).values())
    if not jobs:
        print(f"no {args.state} jobs in queue {q.name} at [{args.start}, {args.end}] of {total}")
        return EXIT_OK
    rows = [
        (
            job.id,
            job.name,
            when(job.timestamp),
            when(job.processed_on),
            when(job.finished_on),
            _attempts(job),
            _short(job.failed_reason or ""),
        )
        for job in jobs
    ]
    headers = ("ID", "NAME", "CREATED", "STARTED", "FINISHED", "ATTEMPTS", "LAST ERROR")
    print(table(headers, rows))
    if len(jobs) < total:
        print(f"({len(jobs)} of {total} {args.state} jobs; see --start/--end)")
    return EXIT_OK


async def _workers(q: Queue, args: argparse.Namespace) -> int:
    workers = await q.get_workers()
    if args.json:
        print(dumps(workers))
        return EXIT_OK
    if not workers:
        print(f"no workers on queue {q.name}")
        return EXIT_OK
    now = datetime.now(timezone.utc)
    print(table(_workers_cli.HEADERS, [_workers_cli.worker_row(w, now) for w in workers]))
    return EXIT_OK


def _short(text: str, width: int = 60) -> str:
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= width else line[: width - 1] + "…"


def _job_summary(job: Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "name": job.name,
        "timestamp": job.timestamp,
        "processed_on": job.processed_on,
        "finished_on": job.finished_on,
        "attempts_made": job.attempts_made,
        "attempts": _allowed(job),
        "failed_reason": job.failed_reason,
    }


async def _job(q: Queue, args: argparse.Namespace) -> int:
    job = await q.get_job(args.job_id)
    if job is None:
        raise CliError(f"no job {args.job_id!r} in queue {q.name!r}", EXIT_FAILURE)
    state = await q.get_state(job.id)
    logs, log_count = await q.get_job_logs(job.id)
    children = await _flow.children_counts(job)
    detail = {
        **_job_summary(job),
        "state": state,
        "data": job.data,
        "options": _given_options(job),
        "priority": job.priority,
        "delay": job.delay,
        "progress": job.progress,
        "attempts_started": job.attempts_started,
        "processed_by": job.processed_by,
        "return_value": job.return_value,
        "stacktrace": job.stacktrace,
        "parent": job.parent,
        "parent_key": _flow.parent_text(job),
        "children": children,
        "logs": logs,
        "log_count": log_count,
    }
    if args.json:
        print(dumps(detail))
        return EXIT_OK
    print(f"job {job.id} ({job.name}) in queue {q.name}: {state}")
    rows = [
        ("created", when(job.timestamp)),
        ("started", when(job.processed_on)),
        ("finished", when(job.finished_on)),
        ("attempts", f"{job.attempts_made} made of {_allowed(job)} allowed"),
        ("priority", job.priority),
        ("progress", dumps(job.progress, indent=None)),
        ("data", dumps(job.data, indent=None)),
        ("options", dumps(_given_options(job), indent=None)),
    ]
    rows.append(("parent", _flow.parent_text(job) or "none"))
    rows.append(("children", _flow.children_text(children)))
    if state == "completed":
        rows.append(("return value", dumps(job.return_value, indent=None)))
    if job.failed_reason:
        rows.append(("failed reason", job.failed_reason))
    width = max(len(label) for label, _ in rows)
    for label, value in rows:
        print(f"{label.ljust(width)}  {value}")
    if job.stacktrace:
        print("stacktrace (latest last):")
        for trace in job.stacktrace:
            print("  " + trace.replace("\n", "\n  "))
    print(f"logs ({log_count}):" if log_count else "logs: none")
    for line in logs:
        print(f"  {line}")
    return EXIT_OK


async def _pause(q: Queue, args: argparse.Namespace) -> int:
    await q.pause()
    print(f"queue {q.name} paused: workers take no new jobs until `echomq queue {q.name} resume`")
    return EXIT_OK


async def _resume(q: Queue, args: argparse.Namespace) -> int:
    await q.resume()
    print(f"queue {q.name} resumed")
    return EXIT_OK


def _check_retry_failed(args: argparse.Namespace) -> None:
    # Building the call checks its arguments, with no I/O: the same check retry_jobs makes.
    ops.retry_jobs_plan(queue_keys(args.queue, args.prefix), "failed", args.count)


def _check_clean(args: argparse.Namespace) -> None:
    ops.clean_plan(queue_keys(args.queue, args.prefix), args.grace, args.limit, args.state)


async def _retry_failed(q: Queue, args: argparse.Namespace) -> int:
    before = (await q.get_job_counts("failed"))["failed"]
    await q.retry_jobs("failed", count=args.count)
    after = (await q.get_job_counts("failed"))["failed"]
    print(f"moved {max(before - after, 0)} failed jobs of queue {q.name} back to waiting")
    return EXIT_OK


async def _clean(q: Queue, args: argparse.Namespace) -> int:
    removed = await q.clean(args.grace, args.limit, args.state)
    print(
        f"deleted {len(removed)} {args.state} jobs older than {args.grace:g}s from queue {q.name}"
    )
    return EXIT_OK


def _confirm(question: str) -> bool:
    if not sys.stdin or not sys.stdin.isatty():
        return False
    try:
        answer = input(f"{question} [y/N] ")
    except EOFError:
        return False
    return answer.strip().lower() in ("y", "yes")


async def _obliterate(q: Queue, args: argparse.Namespace) -> int:
    if not args.yes:
        counts = await q.get_job_counts()
        question = (
            f"Delete queue {q.name!r} (prefix {q.prefix!r}) and all its "
            f"{sum(counts.values())} jobs?"
        )
        if not _confirm(question):
            raise CliError(
                f"not obliterating queue {q.name!r}: not confirmed (pass --yes to skip the "
                "question)",
                EXIT_FAILURE,
            )
    try:
        await q.obliterate(force=args.force)
    except ActiveJobsError as exc:
        raise CliError(
            f"{exc} (pass --force to delete active jobs too; their workers will fail to "
            "finish them)",
            EXIT_FAILURE,
        ) from exc
    print(f"queue {q.name} obliterated")
    return EXIT_OK
