"""The ``echomq`` command: ``worker``, ``queue``, ``queues``, ``workers``, ``metrics``,
``dashboard``, ``add``, ``scheduler``, ``demo`` and ``server``, a thin layer over the public API.

This package is the only code in echomq that configures logging, installs signal handlers or
prints. Every subcommand finds Redis the same way (``--url``, ``$ECHOMQ_REDIS_URL``, else the
embedded server; see :mod:`echomq.cli._connect`).

Modules: one per subcommand, ``_worker``, ``_queue`` (with ``_flow`` for its flow output and
``_limits`` for its ``limits`` action), ``_queues``, ``_workers`` (also the worker columns
``queue NAME workers`` prints), ``_metrics``, ``_dashboard``, ``_add``,
``_scheduler``, ``_demo`` and ``_server``; and the shared parts, ``_connect`` (which Redis, the
connection options), ``_actions`` (the ``NAME ACTION`` commands, ``queue`` and ``scheduler``),
``_errors`` (``CliError`` and the exit codes), ``_format`` (tables, times, JSON for output),
``_logs`` (logging setup) and ``__main__`` (``python -m echomq.cli``).

Exit codes: 0 success; 1 an operation failed (Redis unreachable, job not found, refused);
2 a usage or setup problem (bad arguments, processor that cannot be loaded, no Redis server to
run); 130 interrupted; 128 + N when a second signal N stopped a worker at once; 141
(128 + SIGPIPE) when the reader of the output went away (``echomq ... | head``), without a
traceback.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import redis.exceptions

from .. import __version__
from ..errors import EchoMQError, ValidationError
from . import (
    _add,
    _dashboard,
    _demo,
    _metrics,
    _queue,
    _queues,
    _scheduler,
    _server,
    _worker,
    _workers,
)
from ._connect import connection_options, fill_defaults
from ._errors import EXIT_BROKEN_PIPE, EXIT_FAILURE, EXIT_USAGE, CliError

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``echomq`` command."""
    parents = [connection_options()]
    parser = argparse.ArgumentParser(
        prog="echomq",
        description="EchoMQ: a Redis job queue, wire-compatible with BullMQ.",
        parents=parents,  # --url and friends also before the subcommand
    )
    parser.add_argument("--version", action="version", version=f"echomq {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    _worker.add_parser(subparsers, parents)
    _queue.add_parser(subparsers, parents)
    _queues.add_parser(subparsers, parents)
    _workers.add_parser(subparsers, parents)
    _metrics.add_parser(subparsers, parents)
    _dashboard.add_parser(subparsers, parents)
    _add.add_parser(subparsers, parents)
    _scheduler.add_parser(subparsers, parents)
    _demo.add_parser(subparsers, parents)
    _server.add_parser(subparsers, parents)
    return parser


def _error(message: object) -> None:
    print(f"echomq: error: {message}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``echomq`` command.

    Args:
        argv: the arguments, without the program name; default ``sys.argv[1:]``.

    Returns:
        The process exit code (see the module docstring).
    """
    try:
        code = _main(argv)
        sys.stdout.flush()  # a closed pipe shows here for short output
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    return code


def _silence_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real file descriptor (captured output)
        pass


def _main(argv: Sequence[str] | None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    fill_defaults(args)
    try:
        code: int = args.handler(args)
    except CliError as exc:
        _error(exc)
        return exc.code
    except ValidationError as exc:
        _error(exc)
        return EXIT_USAGE
    except EchoMQError as exc:
        _error(exc)
        return EXIT_FAILURE
    except redis.exceptions.ConnectionError as exc:
        _error(f"cannot reach Redis: {exc}")
        return EXIT_FAILURE
    except redis.exceptions.RedisError as exc:
        _error(f"Redis replied with an error: {exc}")
        return EXIT_FAILURE
    except KeyboardInterrupt:
        _error("interrupted")
        return 130
    return code
