"""``echomq demo``: add a batch of jobs, process them in this process, report throughput.

It needs nothing configured: without ``--url`` or ``$ECHOMQ_REDIS_URL`` it uses the embedded
server. The demo queue is obliterated first (with force), so every run starts empty, and it is
left in place afterwards so ``echomq queue NAME ...`` can inspect it. ``--fresh`` also compacts
the embedded server's AOF (``BGREWRITEAOF``) once the old demo jobs are gone, so repeated demos
do not grow its files. Its worker records per-minute metrics (``--no-metrics``: not), so the
dashboard's chart shows the run. Every 50th job fails its first attempt on purpose (it has
``attempts=2``) to show a retry.

stderr holds the progress and nothing else on a normal run: on a terminal one bar redrawn in
place (jobs done, rate, attempts retried, jobs failed), elsewhere one line at the end saying the
same; the summary goes to stdout. The worker's line for each failed attempt (WARNING on
``echomq.worker``, ``status`` ``retry``, ``retry-delayed`` or ``failed``) is left out, since the
bar and the summary count them; ``--verbose`` shows them. Any other log record is shown, on a
line of its own (the bar's line is ended first).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shlex
import sys
import time
from dataclasses import dataclass
from typing import Any, TextIO

import redis.exceptions

from ..job import Job
from ..queue import BulkItem, Queue, client_from_url
from ..worker import Worker
from ._connect import Target, check_names, resolve
from ._errors import EXIT_FAILURE, EXIT_OK, EXIT_USAGE, CliError
from ._format import table
from ._logs import configure_logging
from ._worker import add_metrics_flags, metrics_data_points

DEFAULT_QUEUE = "echomq-demo"
FLAKY_EVERY = 50
_ADD_CHUNK = 1000
_STUCK_AFTER = 30.0
_BAR_WIDTH = 20
_POLL = 0.02
_REWRITE_TIMEOUT = 30.0
#: The worker's log records for a failed attempt (docs/workers.md, "Log events").
_ATTEMPT_FAILED = frozenset({"retry", "retry-delayed", "failed"})


def add_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    """Register the ``demo`` subcommand."""
    parser = subparsers.add_parser(
        "demo",
        parents=parents,
        help="add and process a batch of demo jobs, then report throughput",
        description="Add a batch of jobs, process them with an in-process worker and report "
        f"throughput. Every {FLAKY_EVERY}th job fails its first attempt on purpose and succeeds "
        "on its retry. Works with no Redis configured (uses the embedded one).",
    )
    parser.add_argument("--jobs", "-n", type=int, default=2000, help="jobs to add (default 2000)")
    parser.add_argument(
        "--concurrency", "-c", type=int, default=50, help="jobs at once (default 50)"
    )
    parser.add_argument(
        "--queue", "-q", default=DEFAULT_QUEUE, help=f"queue name (default {DEFAULT_QUEUE})"
    )
    parser.add_argument(
        "--job-ms",
        type=float,
        default=0.0,
        metavar="MS",
        help="simulated I/O wait per job in milliseconds (default 0)",
    )
    add_metrics_flags(parser)
    parser.add_argument(
        "--verbose",
        "-v",
        action="store_true",
        help="also log each failed attempt (the worker's WARNING lines) on stderr; by default "
        "the progress bar and the summary count them",
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="start from an empty demo queue and, on the embedded Redis, compact its AOF so "
        "earlier demos take no disk space",
    )
    parser.set_defaults(handler=run)


@dataclass
class _Report:
    added_in: float = 0.0
    processed_in: float = 0.0
    first_failures: int = 0
    counts: dict[str, int] | None = None


class _Progress:
    """The one line of progress on stderr: redrawn in place on a terminal, else not drawn."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.terminal = out.isatty()
        self._width = 0  # of the line drawn last; 0 when no line is open

    def draw(self, text: str) -> None:
        """Redraw the line (on a terminal only), blanking what a longer one left."""
        if not self.terminal:
            return
        self.out.write("\r" + text + " " * max(0, self._width - len(text)))
        self.out.flush()
        self._width = max(len(text), 1)

    def end_line(self) -> None:
        """End the line drawn, if any, so whatever is written next starts a line of its own."""
        if self._width:
            self._width = 0
            self.out.write("\n")
            self.out.flush()


class _LogFilter(logging.Filter):
    """On the CLI's log handler: leaves out the worker's records of failed attempts unless
    ``verbose``, and ends the progress line before any record that is shown."""

    def __init__(self, progress: _Progress, verbose: bool) -> None:
        super().__init__()
        self.progress, self.verbose = progress, verbose

    def filter(self, record: logging.LogRecord) -> bool:
        status = getattr(record, "status", None) if record.name == "echomq.worker" else None
        if not self.verbose and status in _ATTEMPT_FAILED:
            return False
        self.progress.end_line()
        return True


def run(args: argparse.Namespace) -> int:
    """The ``demo`` subcommand."""
    if args.jobs < 1:
        raise CliError("--jobs must be at least 1", EXIT_USAGE)
    if args.concurrency < 1:
        raise CliError("--concurrency must be at least 1", EXIT_USAGE)
    if args.job_ms < 0:
        raise CliError("--job-ms must not be negative", EXIT_USAGE)
    metrics_data_points(args)  # refused before anything runs
    check_names([args.queue], args.prefix)
    configure_logging("WARNING")  # one INFO line per job would drown the progress bar
    progress = _Progress(sys.stderr)
    log_filter = _LogFilter(progress, args.verbose)
    for handler in logging.getLogger().handlers:
        handler.addFilter(log_filter)
    target = resolve(args.url, args.durability)
    try:
        report = asyncio.run(_demo(target, args, progress))
    finally:
        progress.end_line()  # an error or an interrupt is reported on a line of its own
    _print_report(args, report, explicit_url=bool(args.url))
    counts = report.counts or {}
    return EXIT_OK if counts.get("completed") == args.jobs else EXIT_FAILURE


def _items(total: int) -> list[BulkItem]:
    items: list[BulkItem] = []
    for n in range(1, total + 1):
        if n % FLAKY_EVERY == 0:
            items.append(("demo", {"n": n, "flaky": True}, {"attempts": 2}))
        else:
            items.append(("demo", {"n": n}))
    return items


async def _compact(url: str, out: TextIO) -> None:
    """Rewrite the server's AOF (``BGREWRITEAOF``) and wait until the rewrite is done."""
    client = client_from_url(url, decode_responses=True)
    try:
        await client.bgrewriteaof()
        deadline = time.monotonic() + _REWRITE_TIMEOUT
        while True:
            info = await client.info("persistence")
            if not int(info.get("aof_rewrite_in_progress", 0)) and not int(
                info.get("aof_rewrite_scheduled", 0)
            ):
                break
            if time.monotonic() > deadline:
                print("note: the AOF rewrite is still running in the background", file=out)
                return
            await asyncio.sleep(0.05)
    except redis.exceptions.ResponseError as exc:
        print(f"note: could not compact the AOF: {exc}", file=out)
        return
    finally:
        await client.aclose()
    print("compacted the embedded Redis's AOF", file=out)


async def _demo(target: Target, args: argparse.Namespace, progress: _Progress) -> _Report:
    url = target.url
    out = progress.out
    report = _Report()
    pause = args.job_ms / 1000

    async def process(job: Job) -> Any:
        if job.data.get("flaky") and job.attempts_made == 0:
            report.first_failures += 1
            raise RuntimeError("demo: failing the first attempt on purpose")
        if pause:
            await asyncio.sleep(pause)
        n = job.data["n"]
        return {"n": n, "square": n * n}

    async with Queue(args.queue, connection=url, prefix=args.prefix) as q:
        await q.obliterate(force=True)
        if args.fresh:
            print(f"queue {args.queue} is empty (--fresh)", file=out)
            if target.embedded:
                await _compact(url, out)
        items = _items(args.jobs)
        progress.draw(f"adding {args.jobs} jobs to queue {args.queue}...")
        started = time.monotonic()
        for i in range(0, len(items), _ADD_CHUNK):
            await q.add_bulk(items[i : i + _ADD_CHUNK])
        report.added_in = time.monotonic() - started
        worker = Worker(
            args.queue,
            process,
            connection=url,
            prefix=args.prefix,
            concurrency=args.concurrency,
            drain_delay=1.0,
            metrics_max_data_points=metrics_data_points(args),
        )
        started = time.monotonic()
        task = asyncio.create_task(worker.run(), name="echomq-demo-worker")
        try:
            await _watch(q, args.jobs, started, task, progress, report)
            report.processed_in = time.monotonic() - started
        finally:
            await worker.close()
            await task
        report.counts = await q.get_job_counts()
    return report


async def _watch(
    q: Queue,
    total: int,
    started: float,
    worker: asyncio.Task[None],
    progress: _Progress,
    report: _Report,
) -> None:
    """Redraw the progress bar until every job is completed or failed.

    Counts are polled often so the measured time is close to the real one; on a terminal the
    bar is redrawn at most every 0.1s. Elsewhere (a pipe, a log file, CI) nothing is drawn
    until the end, when one plain line says the same.
    """
    redraw_every = 0.1
    last_done, last_change, last_draw = -1, time.monotonic(), 0.0
    while True:
        counts = await q.get_job_counts("completed", "failed")
        done = counts["completed"] + counts["failed"]
        now = time.monotonic()
        if done != last_done:
            last_done, last_change = done, now
        shown = _Counts(done, total, now - started, report.first_failures, counts["failed"])
        finished, stuck = done >= total, now - last_change > _STUCK_AFTER
        if finished or now - last_draw >= redraw_every:
            last_draw = now
            progress.draw(shown.bar())
        if finished or stuck or worker.done():
            progress.end_line()
            if not progress.terminal:
                print(shown.line(), file=progress.out)
            if finished:
                return
            if worker.done():
                worker.result()  # re-raises what stopped it
                raise CliError("the demo worker stopped before the jobs were done")
            raise CliError(
                f"no demo job finished in {_STUCK_AFTER:.0f}s ({done} of {total} done); "
                f"is queue {q.name} paused or is another worker taking its jobs?"
            )
        await asyncio.sleep(_POLL)


@dataclass(frozen=True)
class _Counts:
    """What the progress shows: jobs done of the total, the rate, retried attempts, failures."""

    done: int
    total: int
    elapsed: float
    retried: int
    failed: int

    @property
    def rate(self) -> float:
        return self.done / self.elapsed if self.elapsed > 0 else 0.0

    def bar(self) -> str:
        share = self.done / self.total
        filled = int(_BAR_WIDTH * share)
        return (
            f"[{'#' * filled}{'.' * (_BAR_WIDTH - filled)}] {self.done}/{self.total} "
            f"{share:4.0%}  {self.rate:,.0f} jobs/s  {self.retried} retried  {self.failed} failed"
        )

    def line(self) -> str:
        return (
            f"done {self.done}/{self.total} {self.done / self.total:4.0%} in "
            f"{self.elapsed:.2f}s, {self.rate:,.0f} jobs/s; {self.retried} retried, "
            f"{self.failed} failed"
        )


def _print_report(args: argparse.Namespace, report: _Report, *, explicit_url: bool) -> None:
    counts = report.counts or {}
    completed, failed = counts.get("completed", 0), counts.get("failed", 0)
    rate = args.jobs / report.processed_in if report.processed_in > 0 else 0.0
    print(f"added {args.jobs} jobs to queue {args.queue} in {report.added_in:.2f}s")
    print(
        f"processed {args.jobs} jobs in {report.processed_in:.2f}s: {rate:,.0f} jobs/s "
        f"(concurrency {args.concurrency})"
    )
    print()
    print(table(("STATE", "JOBS"), list(counts.items())))
    print()
    flaky = args.jobs // FLAKY_EVERY
    print(f"{completed} completed, {failed} failed, {report.first_failures} retried")
    print(
        f"every {FLAKY_EVERY}th job ({flaky} of {args.jobs}) fails its first attempt on purpose "
        f"and has attempts=2: {report.first_failures} jobs failed once and were retried"
    )
    if failed and not args.verbose:
        print(f"{failed} jobs failed for good: run the demo with --verbose to see why")
    command = ["echomq", "queue", args.queue, "counts"]
    if explicit_url:
        command += ["--url", args.url]
    if args.prefix != "bull":
        command += ["--prefix", args.prefix]
    print(f"inspect the demo queue: {shlex.join(command)}")
