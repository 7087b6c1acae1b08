"""``echomq queue NAME limits``: show, set or clear a queue's global concurrency and rate limit.

Arguments are checked by the parser and :func:`check` before anything is started or written, so
a bad ``--rate`` leaves the limits as they were. Changes go through the public ``Queue`` API,
then the resulting limits are shown.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from ..queue import Queue
from ._errors import EXIT_OK, EXIT_USAGE, CliError
from ._format import dumps


def add_parser(
    actions: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    """Register the ``limits`` action (``parents`` carry the connection options and --json)."""
    p = actions.add_parser(
        "limits",
        parents=parents,
        help="show or set the global concurrency and rate limit",
        description="Show the queue's global limits, which every worker (echomq or BullMQ) "
        "honours; with options, set or clear them first.",
    )
    p.add_argument(
        "--clear", action="store_true", help="remove the global concurrency and rate limit"
    )
    p.add_argument(
        "--concurrency",
        type=_positive_int,
        metavar="N",
        help="at most N jobs active at once across all workers",
    )
    p.add_argument(
        "--rate",
        type=_rate,
        metavar="MAX/SECONDS",
        help="at most MAX jobs started per SECONDS across all workers (e.g. 100/60)",
    )
    p.set_defaults(action_fn=run, check_fn=check)


def check(args: argparse.Namespace) -> None:
    """Refuse ``--clear`` together with a new limit, before anything is started or written."""
    if args.clear and (args.concurrency is not None or args.rate is not None):
        raise CliError("--clear cannot be combined with --concurrency or --rate", EXIT_USAGE)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def _rate(text: str) -> tuple[int, float]:
    max_text, sep, seconds_text = text.partition("/")
    try:
        max_jobs = int(max_text)
        seconds = float(seconds_text)
    except ValueError:
        max_jobs, seconds = 0, 0.0
    if not sep or max_jobs < 1 or not (math.isfinite(seconds) and seconds > 0):
        raise argparse.ArgumentTypeError(
            f"expected MAX/SECONDS with MAX an integer >= 1 and SECONDS > 0 (e.g. 100/60), "
            f"got {text!r}"
        )
    return max_jobs, seconds


async def run(q: Queue, args: argparse.Namespace) -> int:
    """Apply the requested changes (``check`` has passed), then print the queue's limits."""
    if args.clear:
        await q.remove_global_concurrency()
        await q.remove_global_rate_limit()
    if args.rate is not None:
        await q.set_global_rate_limit(*args.rate)
    if args.concurrency is not None:
        await q.set_global_concurrency(args.concurrency)
    shown = await _limits(q)
    if args.json:
        print(dumps(shown))
        return EXIT_OK
    print(_text(shown))
    return EXIT_OK


async def _limits(q: Queue) -> dict[str, Any]:
    meta = await q.get_meta()
    active = (await q.get_job_counts("active"))["active"]
    return {
        "queue": q.name,
        "paused": meta.paused,
        "concurrency": meta.concurrency,
        "active": active,
        "maxed": await q.is_maxed(),
        "rate_limit": meta.rate_limit,
        "rate_limit_ttl": await q.get_rate_limit_ttl(),
    }


def _text(shown: dict[str, Any]) -> str:
    concurrency = shown["concurrency"]
    if concurrency is None:
        conc = "none"
    else:
        conc = f"{concurrency} ({shown['active']} active{', maxed' if shown['maxed'] else ''})"
    limit = shown["rate_limit"]
    rate = "none" if limit is None else f"{limit.max} jobs per {limit.duration:g}s"
    ttl = shown["rate_limit_ttl"]
    rows = [
        ("global concurrency", conc),
        ("global rate limit", rate),
        ("rate limited", f"for {ttl:g}s more" if ttl > 0 else "no"),
    ]
    width = max(len(label) for label, _ in rows)
    header = f"queue {shown['queue']}{' (paused)' if shown['paused'] else ''}"
    return "\n".join([header, *(f"{label.ljust(width)}  {value}" for label, value in rows)])
