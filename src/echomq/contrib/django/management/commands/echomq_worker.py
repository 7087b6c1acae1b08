"""``python manage.py echomq_worker``: ``echomq worker`` for the tasks of a Django backend.

The options are those of ``echomq worker`` (read from its own parser, so both stay the same),
and the runner is the CLI's: the same signals, logging and exit codes. What the command adds:
the processor is :func:`echomq.contrib.django.worker.run_task`, and ``--queue``, ``--url``
and ``--prefix`` default to the backend's settings (``--backend``, default ``"default"``).
``--queue`` takes a Django queue name (``"default"`` means the backend's ``OPTIONS["queue"]``).
"""

from __future__ import annotations

import argparse
import copy
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.tasks import DEFAULT_TASK_BACKEND_ALIAS, DEFAULT_TASK_QUEUE_NAME, task_backends

from echomq._redis.default import default_redis_url
from echomq.cli import build_parser, main
from echomq.contrib.django._backend import EchoMQBackend
from echomq.errors import ConnectionNotOpenError

PROCESSOR = "echomq.contrib.django.worker:run_task"
#: Options of ``echomq worker`` whose default the command takes from the backend instead.
_FROM_BACKEND = ("queue", "url", "prefix")


def worker_parser() -> argparse.ArgumentParser:
    """The parser of the ``echomq worker`` subcommand.

    Raises:
        LookupError: the ``echomq`` command has no ``worker`` subcommand.
    """
    for action in build_parser()._actions:
        if isinstance(action, argparse._SubParsersAction) and "worker" in action.choices:
            parser: argparse.ArgumentParser = action.choices["worker"]
            return parser
    raise LookupError("the echomq command has no worker subcommand")


def worker_options() -> list[argparse.Action]:
    """The optional arguments of ``echomq worker``, copied, with no backend-given defaults."""
    copied: list[argparse.Action] = []
    for action in worker_parser()._actions:
        if not action.option_strings or isinstance(action, argparse._HelpAction):
            continue  # the positional PROCESSOR is fixed; -h is Django's
        action = copy.copy(action)
        if action.dest in _FROM_BACKEND:
            action.required = False
            action.default = None
            action.help = f"{action.help} (default: from the backend's settings)"
        copied.append(action)
    return copied


class Command(BaseCommand):  # type: ignore[misc]  # Django ships no types
    """Run an echomq worker on one queue of a Django tasks backend."""

    help = "Run the tasks of an EchoMQBackend queue with an echomq worker (see `echomq worker`)."

    def add_arguments(self, parser: argparse.ArgumentParser) -> None:
        """Add ``--backend`` and every option of ``echomq worker``."""
        parser.add_argument(
            "--backend",
            default=DEFAULT_TASK_BACKEND_ALIAS,
            help="the alias of an EchoMQBackend in settings.TASKS (default: default)",
        )
        for action in worker_options():
            parser._add_action(action)

    def handle(self, *args: Any, **options: Any) -> None:
        """Build the ``echomq worker`` command line and run it in this process.

        Raises:
            CommandError: the backend is not an EchoMQBackend, no Redis URL was set nor found
                by echomq's connection rule, or the worker exited with an error (its exit code
                is kept).
        """
        alias = options["backend"]
        backend = task_backends[alias]
        if not isinstance(backend, EchoMQBackend):
            raise CommandError(
                f"TASKS[{alias!r}] is a {type(backend).__name__}, not an EchoMQBackend"
            )
        try:
            argv = worker_argv(backend, options)
        except ConnectionNotOpenError as exc:
            raise CommandError(str(exc)) from exc
        code = main(argv)
        if code:
            raise CommandError(f"echomq worker exited with code {code}", returncode=code)


def worker_argv(backend: EchoMQBackend, options: dict[str, Any]) -> list[str]:
    """The ``echomq worker`` arguments for these command options."""
    queue = options.get("queue") or DEFAULT_TASK_QUEUE_NAME
    argv = [
        "worker",
        PROCESSOR,
        "--queue",
        backend.echomq_queue_name(queue),
        "--url",
        options.get("url") or backend.url or default_redis_url(),
        "--prefix",
        options.get("prefix") or backend.prefix,
    ]
    for action in worker_options():
        value = options.get(action.dest)
        if action.dest in _FROM_BACKEND or value is None or value == action.default:
            continue
        flag = max(action.option_strings, key=len)
        if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
            argv.append(flag)  # a switch given: its value differs from its default
        else:
            argv += [flag, str(value)]
    return argv
