"""``@echomq.task``: the decorator making a :class:`~echomq.Task` of a function, typed so that
``mypy --strict`` keeps the function's parameters and result type (see ``_task``)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Protocol, overload

from typing_extensions import Unpack

from ..options import JobOptions, JobOptionsDict
from ..protocol.keys import DEFAULT_PREFIX
from ._task import DEFAULT_QUEUE, P, R, Task

__all__ = ["task"]


class _Decorator(Protocol):
    @overload
    def __call__(
        self, func: Callable[P, Coroutine[Any, Any, R]], /
    ) -> Task[P, R, Coroutine[Any, Any, R]]: ...
    @overload
    def __call__(self, func: Callable[P, R], /) -> Task[P, R, R]: ...


@overload
def task(func: Callable[P, Coroutine[Any, Any, R]], /) -> Task[P, R, Coroutine[Any, Any, R]]: ...
@overload
def task(func: Callable[P, R], /) -> Task[P, R, R]: ...
@overload
def task(
    *,
    queue: str = DEFAULT_QUEUE,
    name: str | None = None,
    prefix: str = DEFAULT_PREFIX,
    connection: Any = None,
    **options: Unpack[JobOptionsDict],
) -> _Decorator: ...
def task(
    func: Callable[..., Any] | None = None,
    /,
    *,
    queue: str = DEFAULT_QUEUE,
    name: str | None = None,
    prefix: str = DEFAULT_PREFIX,
    connection: Any = None,
    **options: Any,
) -> Any:
    """Make a function a task: ``@echomq.task`` or ``@echomq.task(queue=..., <job options>)``.

    Args:
        func: the function (sync or async); given when used without parentheses.
        queue: the queue its jobs go to (``"default"`` unless given).
        name: the job name (the function's ``__name__`` unless given); a worker finds the
            task by it, and another producer (BullMQ for Node) enqueues it by it.
        prefix: the key prefix.
        connection: a connection for this task; None (default): the connection rule, see
            :func:`echomq.set_default_connection`.
        **options: job options of every job of the task (see :class:`~echomq.JobOptions`).

    Returns:
        A :class:`Task`, or a decorator making one.

    Raises:
        ValidationError: an option, the name or the queue is invalid (when decorating).
        TypeError: the function has ``*args`` (a job's data is an object of named arguments).
    """
    job_options = JobOptions.build(options)

    def make(fn: Callable[..., Any]) -> Task[Any, Any, Any]:
        return Task(
            fn, name=name, queue=queue, prefix=prefix, options=job_options, connection=connection
        )

    return make if func is None else make(func)
