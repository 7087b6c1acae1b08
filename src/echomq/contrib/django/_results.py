"""How Django's task model maps onto echomq jobs, both ways. No I/O here.

- Result ids are ``"<echomq queue>:<job id>"``: queue names never contain ``:``, so the id
  says where the job lives and ``get_result`` needs one read.
- Priorities: Django's ``-100..100`` (higher runs first) become echomq's ``1..201`` (lower runs
  first), so every Django job is prioritized and the order holds across Django's range.
- States: waiting, prioritized, delayed and waiting-children are ``READY`` (Django's "enqueued,
  or ready to be executed again", which covers a retry waiting for its backoff); active is
  ``RUNNING``; completed ``SUCCESSFUL``; failed ``FAILED``.
- Errors: one :class:`~django.tasks.base.TaskError` per stack trace echomq kept, its exception
  class path read from the trace's last line.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta
from typing import Any

from django.tasks.base import (
    TASK_MAX_PRIORITY,
    Task,
    TaskError,
    TaskResult,
    TaskResultStatus,
)
from django.tasks.exceptions import TaskResultDoesNotExist
from django.utils.module_loading import import_string

from ...errors import ValidationError
from ...job import JobData, JobState

#: Stack traces are formatted by the worker; a failure without one gets this class path.
UNKNOWN_FAILURE = "echomq.errors.EchoMQError"

_MAX_PRIORITY: int = TASK_MAX_PRIORITY

_STATUS = {
    JobState.WAITING: TaskResultStatus.READY,
    JobState.PRIORITIZED: TaskResultStatus.READY,
    JobState.DELAYED: TaskResultStatus.READY,
    JobState.WAITING_CHILDREN: TaskResultStatus.READY,
    JobState.ACTIVE: TaskResultStatus.RUNNING,
    JobState.COMPLETED: TaskResultStatus.SUCCESSFUL,
    JobState.FAILED: TaskResultStatus.FAILED,
}


def result_id(queue: str, job_id: str) -> str:
    """The Django result id of job ``job_id`` in echomq queue ``queue``."""
    return f"{queue}:{job_id}"


def split_result_id(value: object) -> tuple[str, str]:
    """``(queue, job id)`` of a result id.

    Raises:
        TaskResultDoesNotExist: ``value`` is not an id this backend made.
    """
    queue, sep, job_id = str(value).partition(":")
    if not sep or not queue or not job_id:
        raise TaskResultDoesNotExist(value)
    return queue, job_id


def to_echomq_priority(priority: int) -> int:
    """Django's priority (``-100..100``, higher first) as echomq's (``1..201``, lower first)."""
    return _MAX_PRIORITY + 1 - int(priority)


def from_echomq_priority(priority: int) -> int:
    """The inverse of :func:`to_echomq_priority` (``0``, no priority, stays Django's default)."""
    return _MAX_PRIORITY + 1 - priority if priority else 0


def status_of(state: JobState) -> Any:
    """The ``TaskResultStatus`` of an echomq state.

    Raises:
        TaskResultDoesNotExist: the job is gone (``unknown``) or in a state Django has no
            name for.
    """
    try:
        return _STATUS[state]
    except KeyError:
        raise TaskResultDoesNotExist(f"job is {state.value}") from None


def load_task(module_path: str) -> Any:
    """The ``Task`` a job's name points to.

    Raises:
        ValidationError: the name does not import, or is not a ``django.tasks`` Task.
    """
    try:
        task = import_string(module_path)
    except ImportError as exc:
        raise ValidationError(f"job name {module_path!r} does not import a task: {exc}") from exc
    if not isinstance(task, Task):
        raise ValidationError(
            f"job name {module_path!r} is a {type(task).__name__}, not a django.tasks Task"
        )
    return task


def exception_class_path(traceback: str) -> str:
    """The dotted class of the exception a formatted traceback ends with."""
    lines = [line for line in traceback.strip().splitlines() if line and not line[0].isspace()]
    if not lines:
        return UNKNOWN_FAILURE
    head = lines[-1].split(":", 1)[0].strip()
    if not head or " " in head:
        return UNKNOWN_FAILURE
    return head if "." in head else f"builtins.{head}"


def errors_of(job: JobData) -> list[Any]:
    """One ``TaskError`` per stack trace of the job (or its failed reason alone)."""
    errors = [
        TaskError(exception_class_path=exception_class_path(trace), traceback=trace + "\n")
        for trace in job.stacktrace
    ]
    if not errors and job.failed_reason:
        errors.append(TaskError(exception_class_path=UNKNOWN_FAILURE, traceback=job.failed_reason))
    return errors


def run_after_of(job: JobData) -> datetime | None:
    """When a delayed job was asked to run, or None."""
    return job.timestamp + timedelta(seconds=job.delay) if job.delay else None


def task_of(job: JobData, *, backend: str, queue_name: str) -> Any:
    """The Task of a job, with the priority, queue and backend it was enqueued with."""
    task = load_task(job.name)
    changes: dict[str, Any] = {
        "priority": from_echomq_priority(job.priority),
        "queue_name": queue_name,
        "backend": backend,
    }
    run_after = run_after_of(job)
    if run_after is not None:
        changes["run_after"] = run_after
    # dataclasses.replace, like Task.using, so the backend validates the task again.
    return dataclasses.replace(task, **changes)


def build_result(
    task: Any, *, rid: str, args: Any, kwargs: Any, backend: str, status: Any = None
) -> Any:
    """A new ``TaskResult``; Django checks ``args`` and ``kwargs`` are JSON here.

    Raises:
        TypeError: an argument is not JSON (Django's own "Unsupported type" error).
        ValueError: bytes that are not UTF-8 (Django's "Unsupported value").
    """
    return TaskResult(
        task=task,
        id=rid,
        status=status or TaskResultStatus.READY,
        enqueued_at=None,
        started_at=None,
        last_attempted_at=None,
        finished_at=None,
        args=args,
        kwargs=kwargs,
        backend=backend,
        errors=[],
        worker_ids=[],
    )


def result_of(job: JobData, state: JobState, *, backend: str, queue_name: str) -> Any:
    """The ``TaskResult`` of a job read from Redis.

    Raises:
        TaskResultDoesNotExist: the job is gone, or is not a Django task.
    """
    status = status_of(state)
    data = job.data if isinstance(job.data, dict) else {}
    try:
        task = task_of(job, backend=backend, queue_name=queue_name)
    except ValidationError as exc:
        raise TaskResultDoesNotExist(str(exc)) from exc
    result = build_result(
        task,
        rid=result_id(job.queue_name, job.id),
        args=data.get("args", []),
        kwargs=data.get("kwargs", {}),
        backend=backend,
        status=status,
    )
    started = max(job.attempts_started, job.attempts_made)
    # A worker stamps processedOn with the time it sent its fetch, which may be a few ms
    # before the producer's timestamp of a job that call took; no task starts before it was
    # enqueued, so Django sees the later of the two.
    began = max(job.processed_on, job.timestamp) if job.processed_on else None
    _set(result, "enqueued_at", job.timestamp)
    _set(result, "started_at", began)
    _set(result, "last_attempted_at", began)
    _set(result, "finished_at", job.finished_on)
    _set(result, "errors", errors_of(job))
    _set(result, "worker_ids", [job.processed_by or "echomq"] * started)
    if status == TaskResultStatus.SUCCESSFUL:
        _set(result, "_return_value", job.return_value)
    return result


def _set(result: Any, name: str, value: Any) -> None:
    # TaskResult is a frozen dataclass; Django's own backends fill it in this way.
    object.__setattr__(result, name, value)
