"""``echomq worker myapp.tasks``: every task of a module, one worker per queue, in one process.

A PROCESSOR without ``:`` names a module: its attributes that are tasks (``@echomq.task``) are
run, grouped by queue (``--queue`` keeps one). The workers share the process and its signal
handling: :class:`WorkerGroup` runs and closes them together, as one worker.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import InvalidOptionError
from ..tasks import Task, tasks_by_queue
from ..worker import Worker
from ._errors import EXIT_USAGE, CliError


def load_tasks(
    module_name: str, queue: str | None, importer: Callable[[str], Any]
) -> dict[str, list[Task[Any, Any, Any]]]:
    """The tasks of module ``module_name`` by queue (only ``queue``'s when given).

    Raises:
        CliError: the module cannot be imported, defines no task, or none on ``queue``
            (exit code 2).
    """
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    module = importer(module_name)
    try:
        grouped = tasks_by_queue(module)
    except InvalidOptionError as exc:
        raise CliError(f"cannot load the tasks of {module_name!r}: {exc}", EXIT_USAGE) from None
    if not grouped:
        raise CliError(
            f"module {module_name!r} ({module.__file__}) defines no task (a function decorated "
            "with @echomq.task): PROCESSOR must be given as 'module:function' (e.g. "
            "'tasks:process'), or name a module of tasks",
            EXIT_USAGE,
        )
    if queue is None:
        return grouped
    if queue not in grouped:
        raise CliError(
            f"module {module_name!r} has no task on queue {queue!r}; its queues: "
            f"{', '.join(sorted(grouped))}",
            EXIT_USAGE,
        )
    return {queue: grouped[queue]}


class WorkerGroup:
    """Several workers run and closed together (the one ``serve`` of the CLI drives)."""

    def __init__(self, workers: Sequence[Worker]) -> None:
        self.workers = list(workers)

    async def run(self) -> None:
        """Run every worker until all of them are closed; if one fails, close the others."""
        tasks = [asyncio.ensure_future(worker.run()) for worker in self.workers]
        try:
            await asyncio.gather(*tasks)
        except BaseException:
            await asyncio.gather(*(w.close(force=True) for w in self.workers))
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    async def close(self, force: bool = False) -> None:
        """Close every worker (see :meth:`echomq.Worker.close`)."""
        await asyncio.gather(*(worker.close(force=force) for worker in self.workers))

    @property
    def abandoned_job_ids(self) -> list[str]:
        """The jobs whose sync threads were left running, over every worker."""
        return [job_id for worker in self.workers for job_id in worker.abandoned_job_ids]
