"""``echomq worker module:processor``: run a Worker in this process until a signal stops it.

``echomq worker module`` (no ``:``) runs the module's tasks instead, one worker per queue
(``_tasks``), under the same signal handling and exit codes.

Signals: the first SIGTERM or SIGINT starts a graceful ``Worker.close()`` (stop fetching, let
running jobs finish within ``--close-grace``); a second one cuts the grace period short: running
jobs are cancelled and handed back to ``wait`` at once. A third exits the process at once; jobs
still running then stay active in Redis and the stalled check of any worker recovers them once
their locks expire. Exit code 0 after a graceful stop, 128 + signal number after an immediate
one, 1 if a graceful stop has not completed ``close_grace`` + 15 seconds after the signal, and
3 when the worker closed but a sync processor's thread was still running (its job was handed
back to wait; Python would otherwise wait for the thread before exiting).

Signal handlers are installed first, before the processor is imported or a server started: a
signal during start-up makes the worker exit (code 0) before it takes any job. With
``--fail-fast``, a Redis that cannot be reached at start-up ends the command with code 1 and
the reason, instead of being retried for ever.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import logging
import os
import signal
import sys
from collections.abc import Callable
from typing import Any, cast

from .._redis.fail_fast import connect_budget
from ..options import Batch, Limiter, WorkerOptions, to_seconds
from ..tasks import Task
from ..worker import Processor, Worker
from ._connect import URL_ENV, Target, check_names, missing_queues, redact, resolve
from ._errors import EXIT_ABANDONED, EXIT_FAILURE, EXIT_OK, EXIT_USAGE, CliError
from ._logs import FORMATS, LEVELS, configure_logging, flush_logging
from ._tasks import WorkerGroup, load_tasks

logger = logging.getLogger("echomq.cli")

_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: Seconds past the close grace after which a stop that has not completed counts as stuck.
_STOP_MARGIN = 15.0
#: Seconds ``--fail-fast`` gives Redis to answer at start-up (``--connect-timeout`` changes it).
_FAIL_FAST_TIMEOUT = 5.0
#: Per-minute metrics data points the CLI's workers keep (``--metrics-data-points``): two weeks
#: of minutes, the duration BullMQ's metrics guide recommends (``MetricsTime.ONE_WEEK * 2``).
METRICS_DATA_POINTS = 2 * 7 * 24 * 60


def add_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: list[argparse.ArgumentParser],
) -> None:
    """Register the ``worker`` subcommand."""
    parser = subparsers.add_parser(
        "worker",
        parents=parents,
        help="process the jobs of a queue",
        description="Process the jobs of QUEUE with PROCESSOR until SIGTERM or SIGINT. The first "
        "signal lets running jobs finish (up to --close-grace); a second one exits at once.",
    )
    parser.add_argument(
        "processor",
        metavar="PROCESSOR",
        help="module:function to call with each job, e.g. myapp.tasks:process, or a module "
        "whose tasks (@echomq.task) to run, one worker per queue, e.g. myapp.tasks "
        "(the current directory is importable)",
    )
    parser.add_argument(
        "--queue",
        "-q",
        help="the queue to process (required with module:function; with a module of tasks, "
        "run only the tasks of this queue)",
    )
    parser.add_argument(
        "--concurrency", "-c", type=int, help="jobs at once (default 1, or --processes)"
    )
    parser.add_argument(
        "--processes",
        "-p",
        type=int,
        default=0,
        metavar="N",
        help="run a sync (def) processor in N child processes (default 0: in threads)",
    )
    parser.add_argument(
        "--max-tasks-per-child",
        type=int,
        metavar="N",
        help="replace a child process after N jobs (with --processes)",
    )
    parser.add_argument(
        "--job-timeout",
        type=float,
        metavar="S",
        help="fail a job running longer than S seconds (unless the job has its own timeout)",
    )
    parser.add_argument("--name", help="worker name (shown in jobs and CLIENT LIST)")
    parser.add_argument("--lock-duration", type=float, metavar="S", help="job lock seconds")
    parser.add_argument(
        "--stalled-interval", type=float, metavar="S", help="seconds between stalled checks"
    )
    parser.add_argument(
        "--max-stalled-count", type=int, metavar="N", help="stalls before a job fails"
    )
    parser.add_argument(
        "--drain-delay", type=float, metavar="S", help="seconds an idle worker blocks per wait"
    )
    parser.add_argument(
        "--close-grace",
        type=float,
        metavar="S",
        help="seconds running jobs get to finish after the first signal (default 30)",
    )
    parser.add_argument(
        "--heartbeat-interval",
        type=float,
        metavar="S",
        help="seconds between worker registry heartbeats (default 5; 0: no registry entry)",
    )
    parser.add_argument("--limit-max", type=int, metavar="N", help="rate limit: jobs per window")
    parser.add_argument(
        "--batch-size",
        type=int,
        metavar="N",
        help="call PROCESSOR with lists of up to N jobs; it returns a list of results "
        "(concurrency defaults to N)",
    )
    parser.add_argument(
        "--batch-wait",
        type=float,
        metavar="S",
        help="with --batch-size: seconds a batch waits after its first job to fill (default 0)",
    )
    parser.add_argument(
        "--limit-duration", type=float, metavar="S", help="rate limit: window in seconds"
    )
    add_metrics_flags(parser)
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=LEVELS,
        default="INFO",
        help="log level (default INFO: one line per job transition)",
    )
    parser.add_argument(
        "--uvloop", action="store_true", help="run on uvloop (pip install 'echomq[uvloop]')"
    )
    parser.add_argument(
        "--log-format",
        choices=FORMATS,
        default="text",
        help="text (default) or json: one JSON object per line",
    )
    parser.add_argument(
        "--fail-fast",
        action="store_true",
        help="exit (code 1) if Redis cannot be reached at start-up instead of retrying",
    )
    parser.add_argument(
        "--connect-timeout",
        type=float,
        metavar="S",
        help=f"with --fail-fast: seconds to reach Redis (default {_FAIL_FAST_TIMEOUT:g})",
    )
    parser.set_defaults(handler=run)


def add_metrics_flags(parser: argparse.ArgumentParser) -> None:
    """``--no-metrics`` and ``--metrics-data-points``, shared by ``worker`` and ``demo``."""
    parser.add_argument(
        "--metrics-data-points",
        type=int,
        default=METRICS_DATA_POINTS,
        metavar="N",
        help="keep per-minute completed/failed counts for N minutes, in BullMQ's metrics "
        f"layout, for the dashboard's chart and Queue.get_metrics (default {METRICS_DATA_POINTS}"
        ": two weeks)",
    )
    parser.add_argument(
        "--no-metrics",
        dest="metrics",
        action="store_false",
        help="record no per-minute metrics",
    )


def metrics_data_points(args: argparse.Namespace) -> int | None:
    """``metrics_max_data_points`` from ``--no-metrics`` / ``--metrics-data-points``.

    Raises:
        CliError: ``--metrics-data-points`` is below 1 (exit code 2).
    """
    if not args.metrics:
        return None
    if args.metrics_data_points < 1:
        raise CliError("--metrics-data-points must be at least 1", EXIT_USAGE)
    return int(args.metrics_data_points)


def import_processor(spec: str) -> Processor:
    """Import ``module:attribute`` (the attribute may be dotted) and check it is callable.

    The current directory is put first on ``sys.path``, as other worker CLIs do, so a
    ``tasks.py`` next to where the command runs is importable.

    Raises:
        CliError: the spec is malformed, the module or attribute is missing, importing the
            module raised, or the attribute is not callable (exit code 2).
    """
    module_name, sep, attr_path = spec.partition(":")
    if not sep or not module_name or not attr_path:
        raise CliError(
            f"processor must be given as 'module:function' (e.g. 'tasks:process'), got {spec!r}",
            EXIT_USAGE,
        )
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    module = _import_module(module_name)
    target: Any = module
    for part in attr_path.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            public = sorted(
                name
                for name, value in vars(module).items()
                if callable(value) and not name.startswith("_")
            )
            hint = f"; it defines: {', '.join(public)}" if public else ""
            raise CliError(
                f"cannot load processor {spec!r}: module {module_name!r} "
                f"({module.__file__}) has no attribute {attr_path!r}{hint}",
                EXIT_USAGE,
            ) from None
    if not callable(target):
        raise CliError(
            f"cannot load processor {spec!r}: it is a value of type {type(target).__name__!r}, "
            "not a callable "
            "(give a function that takes a job)",
            EXIT_USAGE,
        )
    return cast(Processor, target)


def _import_module(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            raise CliError(
                f"cannot load processor: no module named {exc.name!r} (searched the current "
                f"directory {os.getcwd()} and sys.path; set PYTHONPATH or cd to your project)",
                EXIT_USAGE,
            ) from None
        raise CliError(
            f"cannot load processor: importing {name!r} failed: {exc}", EXIT_USAGE
        ) from exc
    except Exception as exc:
        raise CliError(
            f"cannot load processor: importing {name!r} raised {type(exc).__name__}: {exc}",
            EXIT_USAGE,
        ) from exc


def worker_options(args: argparse.Namespace) -> WorkerOptions:
    """Build WorkerOptions from the flags that were given (the rest keep their defaults).

    Raises:
        CliError: only one of ``--limit-max`` / ``--limit-duration`` was given, or
            ``--batch-wait`` without ``--batch-size``, or ``--concurrency`` below it.
        ValidationError: an option value is out of range.
    """
    processes = args.processes
    concurrency = args.concurrency if args.concurrency is not None else max(processes, 1)
    given: dict[str, Any] = {
        "concurrency": concurrency,
        "processes": processes,
        "metrics_max_data_points": metrics_data_points(args),
    }
    for name in (
        "max_tasks_per_child",
        "job_timeout",
        "name",
        "lock_duration",
        "stalled_interval",
        "max_stalled_count",
        "drain_delay",
        "close_grace",
    ):
        value = getattr(args, name)
        if value is not None:
            given[name] = value
    if args.heartbeat_interval is not None:
        given["heartbeat_interval"] = args.heartbeat_interval or None
    if (args.limit_max is None) != (args.limit_duration is None):
        raise CliError("--limit-max and --limit-duration go together; give both", EXIT_USAGE)
    if args.limit_max is not None:
        given["limiter"] = Limiter(max=args.limit_max, duration=args.limit_duration)
    if args.batch_size is None and args.batch_wait is not None:
        raise CliError("--batch-wait needs --batch-size", EXIT_USAGE)
    if args.batch_size is not None:
        batch = Batch(size=args.batch_size, wait=args.batch_wait or 0.0)
        if args.concurrency is None:
            given["concurrency"] = batch.size
        elif args.concurrency < batch.size:
            raise CliError(
                f"--concurrency ({args.concurrency}) must be at least --batch-size "
                f"({batch.size}) so that a batch can fill",
                EXIT_USAGE,
            )
        given["batch"] = batch
    return WorkerOptions(**given)


def run(args: argparse.Namespace) -> int:
    """The ``worker`` subcommand."""
    early = _EarlySignals()
    early.install()  # before anything slow: importing the processor, starting a server
    try:
        return _run(args, early)
    finally:
        early.restore()


def _run(args: argparse.Namespace, early: _EarlySignals) -> int:
    # Everything that can be refused is refused before a server is started or Redis reached.
    if args.queue is not None:
        check_names([args.queue], args.prefix)
    elif ":" in args.processor:
        raise CliError("--queue is required with PROCESSOR module:function", EXIT_USAGE)
    if ":" not in args.processor:  # a module of tasks: one worker per queue
        return _run_tasks(args, early, load_tasks(args.processor, args.queue, _import_module))
    processor = import_processor(args.processor)
    options = worker_options(args)
    connect_timeout = _connect_timeout(args)
    runner = _event_loop_runner(args.uvloop)
    configure_logging(args.log_level, args.log_format)
    target = resolve(args.url, args.durability)
    _note_missing_queues(target, [args.queue], args.prefix)
    url = target.url
    if early.received is not None:
        logger.info("received %s during start-up: exiting before taking any job", early.name)
        return EXIT_OK
    worker = Worker(
        args.queue,
        processor,
        connection=url,
        prefix=args.prefix,
        options=options,
        connect_timeout=connect_timeout,
    )
    metrics = options.metrics_max_data_points
    logger.info(
        "processing queue %s (prefix %s) with %s, concurrency %d, %s, on %s",
        args.queue,
        args.prefix,
        args.processor,
        options.concurrency,
        f"metrics kept {metrics} min" if metrics else "no metrics",
        redact(url),
    )
    stuck_after = to_seconds(options.close_grace, "close_grace") + _STOP_MARGIN
    runner(serve(worker, stuck_after=stuck_after, early=early))
    return _exit_code(worker.abandoned_job_ids, "processor")


def _note_missing_queues(target: Target, queues: list[str], prefix: str) -> None:
    """Say once, at INFO, which queues the embedded server does not hold yet.

    A worker started before any job of its queue was added is normal (its producer may start
    later), so this is no warning; but a worker that forgot ``--url`` waits on the embedded
    server for jobs added elsewhere, and this line is where its log says how to point it there.
    """
    missing = missing_queues(target, queues, prefix)
    if not missing:
        return
    if len(missing) == 1:
        said = f"queue {missing[0]!r} (prefix {prefix!r}) is not on the embedded Redis yet: "
        said += "waiting for its first job; if its producer uses another Redis"
    else:
        names = ", ".join(repr(q) for q in missing)
        said = f"queues {names} (prefix {prefix!r}) are not on the embedded Redis yet: "
        said += "waiting for their first jobs; if their producers use another Redis"
    logger.info("%s, pass --url or set %s", said, URL_ENV)


def _run_tasks(
    args: argparse.Namespace, early: _EarlySignals, tasks: dict[str, list[Task[Any, Any, Any]]]
) -> int:
    """The worker subcommand for a module of tasks: one worker per queue, served together."""
    options = worker_options(args)
    connect_timeout = _connect_timeout(args)
    runner = _event_loop_runner(args.uvloop)
    configure_logging(args.log_level, args.log_format)
    target = resolve(args.url, args.durability)
    _note_missing_queues(target, list(tasks), args.prefix)
    if early.received is not None:
        logger.info("received %s during start-up: exiting before taking any job", early.name)
        return EXIT_OK
    group = WorkerGroup(
        [
            Worker.for_tasks(
                queue_tasks,
                connection=target.url,
                prefix=args.prefix,
                options=options,
                connect_timeout=connect_timeout,
            )
            for queue_tasks in tasks.values()
        ]
    )
    for queue, queue_tasks in tasks.items():
        logger.info(
            "processing queue %s (prefix %s) with the tasks %s of %s, concurrency %d, on %s",
            queue,
            args.prefix,
            ", ".join(sorted(t.name for t in queue_tasks)),
            args.processor,
            options.concurrency,
            redact(target.url),
        )
    stuck_after = to_seconds(options.close_grace, "close_grace") + _STOP_MARGIN
    runner(serve(group, stuck_after=stuck_after, early=early))
    return _exit_code(group.abandoned_job_ids, "task")


def _exit_code(abandoned: list[str], what: str) -> int:
    """EXIT_OK, or (not returning) EXIT_ABANDONED when sync threads still run ``abandoned``:
    Python would wait for those threads before exiting, so exit now, as documented."""
    if abandoned:
        logger.error(
            "exiting with code %d without waiting for the sync %s thread(s) of job(s) %s, "
            "still running after the close grace; the job(s) went back to wait",
            EXIT_ABANDONED,
            what,
            ", ".join(abandoned),
        )
        flush_logging()
        os._exit(EXIT_ABANDONED)
    return EXIT_OK


def _connect_timeout(args: argparse.Namespace) -> float | None:
    """The start-up budget of ``--fail-fast`` / ``--connect-timeout``, or None without them.

    Raises:
        InvalidOptionError: ``--connect-timeout`` is not positive (exit code 2).
    """
    if args.connect_timeout is not None:
        return connect_budget(args.connect_timeout)
    return _FAIL_FAST_TIMEOUT if args.fail_fast else None


class _EarlySignals:
    """SIGTERM/SIGINT handlers for start-up, until the event loop installs its own: the first
    signal is remembered (the worker then exits before taking any job), a second one exits at
    once."""

    def __init__(self) -> None:
        self.received: int | None = None
        self._previous: dict[int, Any] = {}

    @property
    def name(self) -> str:
        return signal.Signals(self.received).name if self.received is not None else ""

    def install(self) -> None:
        for sig in _SIGNALS:
            try:
                self._previous[sig] = signal.signal(sig, self._on_signal)
            except ValueError:  # not the main thread: the caller keeps its handlers
                return

    def restore(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)

    def _on_signal(self, signum: int, frame: object) -> None:
        if self.received is not None:
            flush_logging()
            os._exit(128 + signum)
        self.received = signum


def _event_loop_runner(use_uvloop: bool) -> Callable[[Any], Any]:
    if not use_uvloop:
        return asyncio.run
    try:
        import uvloop
    except ImportError:
        raise CliError("--uvloop needs uvloop: pip install 'echomq[uvloop]'", EXIT_USAGE) from None
    return cast(Callable[[Any], Any], uvloop.run)


async def serve(
    worker: Worker | WorkerGroup, *, stuck_after: float, early: _EarlySignals | None = None
) -> None:
    """Run ``worker`` with SIGTERM/SIGINT handlers until a graceful close completes.

    Args:
        worker: a worker that has not run yet.
        stuck_after: seconds after the first signal at which a close that has not completed
            is reported and the process exits with code 1, so a stop never hangs forever.
        early: the start-up handlers; a signal they caught stops the worker before it runs.
    """
    loop = asyncio.get_running_loop()
    closing: list[asyncio.Task[None]] = []
    watchdog: list[asyncio.TimerHandle] = []

    def on_stuck() -> None:
        logger.error(
            "the worker did not stop within %.0fs of the signal; exiting now (jobs still "
            "active are recovered by the stalled check)",
            stuck_after,
        )
        flush_logging()
        os._exit(EXIT_FAILURE)

    def on_signal(sig: signal.Signals) -> None:
        if not closing:
            logger.info(
                "received %s: finishing running jobs, then exiting (send it again to hand "
                "them back to the queue now)",
                sig.name,
            )
            closing.append(loop.create_task(worker.close(), name="echomq-cli-close"))
            watchdog.append(loop.call_later(stuck_after, on_stuck))
            return
        if len(closing) == 1:
            logger.warning(
                "received %s again: cancelling running jobs and handing them back to the "
                "queue, then exiting (a third signal exits at once)",
                sig.name,
            )
            closing.append(loop.create_task(worker.close(force=True), name="echomq-cli-force"))
            return
        logger.warning(
            "received %s a third time: exiting now; running jobs stay active and the stalled "
            "check recovers them once their locks expire",
            sig.name,
        )
        flush_logging()
        os._exit(128 + int(sig))

    installed = []
    for sig in _SIGNALS:
        try:
            loop.add_signal_handler(sig, on_signal, sig)
        except (NotImplementedError, RuntimeError):  # no signal support (e.g. Windows)
            continue
        installed.append(sig)
    try:
        if early is not None and early.received is not None:
            logger.info("received %s during start-up: exiting before taking any job", early.name)
            await worker.close()
            return
        await worker.run()
        await asyncio.gather(*closing)
    finally:
        for handle in watchdog:
            handle.cancel()
        for sig in installed:
            loop.remove_signal_handler(sig)
