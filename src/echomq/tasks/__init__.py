"""Typed tasks: ``@echomq.task`` turns a function into a job type (docs/tasks.md).

- ``_signature``: binding call arguments into a job's data object and back, the JSON and
  (with pydantic) type checks of both sides, and the typed reading of results;
- ``_task``: :class:`Task`: enqueueing (async and sync), waiting for results, ``using(...)``
  copies; ``_decorator``: the :func:`task` decorator and its typing;
- ``_connection``: a task's connection: its own, else the library's connection rule
  (:func:`set_default_connection`, ``ECHOMQ_REDIS_URL``, a running embedded Redis);
- ``_dispatch``: the worker's side: the processor dispatching jobs to tasks by name, and the
  tasks of a module grouped by queue.

Invariant: a job of a task is an ordinary job (its name, one JSON object of named arguments),
so BullMQ producers and workers for Node read and write it like any other.
"""

from .._redis.default import set_default_connection
from ._decorator import task
from ._dispatch import dispatcher, select_queue, tasks_by_queue, tasks_of
from ._task import DEFAULT_QUEUE, Task

__all__ = [
    "DEFAULT_QUEUE",
    "Task",
    "dispatcher",
    "select_queue",
    "set_default_connection",
    "task",
    "tasks_by_queue",
    "tasks_of",
]
