"""Running tasks in a worker: the processor that dispatches a job to its task by the job's
name, and finding the tasks of a module (``echomq worker myapp.tasks``).

A worker processes one queue, so the tasks given to one dispatcher share a queue;
:func:`tasks_by_queue` splits a set of tasks (or a module's) by queue, for one worker each.

When every task of a queue is a plain ``def``, the processor is a plain callable: the worker
runs it in its thread pool as it runs any sync processor (timeouts and the close grace apply
alike). When one of them is ``async def``, the processor is a coroutine function and the sync
tasks among them run where the worker runs sync processors (``RunState.run_blocking``: its
threads, which it tracks, given an :class:`echomq.sync.Job`), with the job's context copied;
outside a worker, in the event loop's default executor.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import types
from collections.abc import Iterable, Mapping
from typing import Any, TypeAlias

from ..errors import InvalidOptionError, UnrecoverableError
from ._task import Task

#: What names a set of tasks: tasks, or a module whose attributes include tasks.
TaskSource: TypeAlias = types.ModuleType | Iterable[Task[Any, Any, Any]]


def tasks_of(source: TaskSource) -> list[Task[Any, Any, Any]]:
    """The tasks of a module (its attributes that are tasks, in definition order) or of an
    iterable of tasks.

    Raises:
        InvalidOptionError: an item that is not a task, or two tasks with one name and queue.
    """
    if isinstance(source, types.ModuleType):
        found = [value for value in vars(source).values() if isinstance(value, Task)]
    else:
        found = list(source)
        for item in found:
            if not isinstance(item, Task):
                raise InvalidOptionError(f"expected tasks (made with @echomq.task), got {item!r}")
    seen: dict[tuple[str, str], Task[Any, Any, Any]] = {}
    unique = []
    for item in found:
        key = (item.queue, item.name)
        if key in seen:
            if seen[key].func is item.func:
                continue  # the same task under two names (an alias): once
            raise InvalidOptionError(
                f"two tasks are named {item.name!r} in queue {item.queue!r}; give one name=..."
            )
        seen[key] = item
        unique.append(item)
    return unique


def tasks_by_queue(source: TaskSource) -> dict[str, list[Task[Any, Any, Any]]]:
    """The tasks of a module or an iterable, by queue name (one worker per queue).

    Raises:
        InvalidOptionError: an item that is not a task, or two tasks with one name and queue.
    """
    grouped: dict[str, list[Task[Any, Any, Any]]] = {}
    for item in tasks_of(source):
        grouped.setdefault(item.queue, []).append(item)
    return grouped


def select_queue(source: TaskSource, queue: str | None) -> tuple[str, list[Task[Any, Any, Any]]]:
    """The queue and tasks of one worker: ``queue``'s tasks, or all when they share a queue.

    Raises:
        InvalidOptionError: no task at all, none of ``queue``, or several queues and no
            ``queue`` (the message lists them and names :func:`tasks_by_queue`).
    """
    grouped = tasks_by_queue(source)
    if not grouped:
        raise InvalidOptionError("no tasks given (functions decorated with @echomq.task)")
    if queue is None:
        if len(grouped) > 1:
            raise InvalidOptionError(
                f"the tasks go to several queues ({', '.join(sorted(grouped))}): give queue=... "
                "or build one worker per queue with echomq.tasks_by_queue(...)"
            )
        queue = next(iter(grouped))
    if queue not in grouped:
        raise InvalidOptionError(
            f"no task goes to queue {queue!r}; the tasks' queues: {', '.join(sorted(grouped))}"
        )
    return queue, grouped[queue]


def dispatcher(tasks: Iterable[Task[Any, Any, Any]]) -> Any:
    """The processor running each job with the task its name names (sync or async, see the
    module's docstring)."""
    by_name = {item.name: item for item in tasks}
    if any(item.is_async for item in by_name.values()):
        return AsyncDispatcher(by_name)
    return SyncDispatcher(by_name)


class _Dispatcher:
    def __init__(self, tasks: Mapping[str, Task[Any, Any, Any]]) -> None:
        self.tasks = dict(tasks)

    def task_for(self, job: Any) -> Task[Any, Any, Any]:
        """The task of ``job``'s name.

        Raises:
            UnrecoverableError: no task has that name (the reason lists the known names).
        """
        found = self.tasks.get(job.name)
        if found is None:
            raise UnrecoverableError(
                f"no task named {job.name!r} in this worker; known tasks: "
                f"{', '.join(sorted(self.tasks))}"
            )
        return found

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {sorted(self.tasks)}>"


class SyncDispatcher(_Dispatcher):
    """The processor of a queue whose tasks are all plain ``def``: run in the worker's
    threads, given an :class:`echomq.sync.Job`."""

    def __call__(self, job: Any, /) -> Any:
        return self.task_for(job).run_job(job)


class AsyncDispatcher(_Dispatcher):
    """The processor of a queue with an ``async def`` task."""

    async def __call__(self, job: Any, /) -> Any:
        found = self.task_for(job)
        if found.is_async:
            return await found.arun_job(job)
        run_blocking = getattr(getattr(job, "_run", None), "run_blocking", None)
        if run_blocking is not None:  # a worker's: its threads, tracked
            return await run_blocking(found.run_job, job)
        ctx = contextvars.copy_context()
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, functools.partial(ctx.run, found.run_job, job))
