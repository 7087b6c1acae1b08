"""The processor that runs Django tasks inside an echomq :class:`~echomq.Worker`.

``manage.py echomq_worker`` hands :func:`run_task` to the ``echomq worker`` runner; use it
directly to run Django tasks in a Worker of your own (Django must be set up first)::

    Worker("default", run_task, connection=url)

Each job names its task by module path and carries ``{"args": [...], "kwargs": {...}}``. An
``async def`` task runs on the worker's event loop; a plain function runs in the loop's default
thread pool (so at most ``min(32, CPUs + 4)`` of them at once), with Django's stale database
connections closed before and after, as Django does around a request.
The return value must be JSON (Django's own ``normalize_json``); otherwise the job fails with
Django's ``TypeError``, as with Django's immediate backend. Django's ``task_started`` and
``task_finished`` signals are sent around each run.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from datetime import datetime, timezone
from inspect import iscoroutinefunction
from typing import Any

from django.db import close_old_connections
from django.tasks.base import TaskContext, TaskResultStatus
from django.tasks.signals import task_finished, task_started
from django.utils.json import normalize_json

from ...errors import UnrecoverableError, ValidationError
from ...job import Job
from ._results import build_result, load_task, result_id

__all__ = ["run_task"]


async def run_task(job: Job) -> Any:
    """Run the Django task a job names, with the job's arguments; return its JSON result.

    Raises:
        UnrecoverableError: the job does not name a task, or its data is not
            ``{"args": list, "kwargs": dict}`` (retrying cannot help).
        Exception: whatever the task raised (the job fails, or is retried if it has attempts
            left).
    """
    try:
        task = load_task(job.name)
    except ValidationError as exc:
        raise UnrecoverableError(str(exc)) from exc
    args, kwargs = _arguments(job.data)
    result = build_result(
        task,
        rid=result_id(job.queue_name, job.id),
        args=args,
        kwargs=kwargs,
        backend=task.backend,
        status=TaskResultStatus.RUNNING,
    )
    started = datetime.now(timezone.utc)
    _set(result, "enqueued_at", job.timestamp)
    _set(result, "started_at", started)
    _set(result, "last_attempted_at", started)
    _set(result, "worker_ids", [job.processed_by or "echomq"] * max(1, job.attempts_started))
    sender = type(task.get_backend())
    task_started.send(sender=sender, task_result=result)
    call_args = [TaskContext(task_result=result), *args] if task.takes_context else args
    try:
        if iscoroutinefunction(task.func):
            value = await task.func(*call_args, **kwargs)
        else:
            value = await _in_thread(task.func, call_args, kwargs)
        value = normalize_json(value)
    except Exception:
        _set(result, "finished_at", datetime.now(timezone.utc))
        _set(result, "status", TaskResultStatus.FAILED)
        task_finished.send(sender=sender, task_result=result)
        raise
    _set(result, "finished_at", datetime.now(timezone.utc))
    _set(result, "status", TaskResultStatus.SUCCESSFUL)
    _set(result, "_return_value", value)
    task_finished.send(sender=sender, task_result=result)
    return value


def _arguments(data: Any) -> tuple[list[Any], dict[str, Any]]:
    if isinstance(data, dict):
        args, kwargs = data.get("args", []), data.get("kwargs", {})
        if isinstance(args, list) and isinstance(kwargs, dict):
            return args, kwargs
    raise UnrecoverableError(
        f'a Django task job carries {{"args": [...], "kwargs": {{...}}}}, got {data!r}'
    )


async def _in_thread(func: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]) -> Any:
    context = contextvars.copy_context()
    call = functools.partial(context.run, _call_with_fresh_connections, func, args, kwargs)
    return await asyncio.get_running_loop().run_in_executor(None, call)


def _call_with_fresh_connections(
    func: Callable[..., Any], args: list[Any], kwargs: dict[str, Any]
) -> Any:
    close_old_connections()
    try:
        return func(*args, **kwargs)
    finally:
        close_old_connections()


def _set(result: Any, name: str, value: Any) -> None:
    object.__setattr__(result, name, value)
