"""The ``echomq`` command: ``worker``, ``queue``, ``scheduler`` and ``demo``, a thin layer over
the public API.

This package is the only code in echomq that configures logging, installs signal handlers or
prints. Every subcommand finds Redis the same way (``--url``, ``$ECHOMQ_REDIS_URL``, else the
embedded server; see :mod:`echomq.cli._connect`).

Exit codes: 0 success; 1 an operation failed (Redis unreachable, job not found, refused);
2 a usage or setup problem (bad arguments, processor that cannot be loaded, no Redis server to
run); 130 interrupted; 128 + N when a second signal N stopped a worker at once.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import redis.exceptions

from .. import __version__
from ..errors import EchoMQError, ValidationError
from . import _demo, _queue, _scheduler, _worker
from ._connect import connection_options
from ._errors import EXIT_FAILURE, EXIT_USAGE, CliError

__all__ = ["build_parser", "main"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``echomq`` command."""
    parser = argparse.ArgumentParser(
        prog="echomq",
        description="EchoMQ: a Redis job queue, wire-compatible with BullMQ.",
    )
    parser.add_argument("--version", action="version", version=f"echomq {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    parents = [connection_options()]
    _worker.add_parser(subparsers, parents)
    _queue.add_parser(subparsers, parents)
    _scheduler.add_parser(subparsers, parents)
    _demo.add_parser(subparsers, parents)
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
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, --version and usage errors
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
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
