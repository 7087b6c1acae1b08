"""Worker hooks: callbacks registered with ``worker.on(event, callback)``, called in order.

Each event has its own signature (see the overloads of :meth:`Hooks.on` and the table in
docs/workers.md#worker-hooks). Callbacks run on the worker's event loop, in the order they were
registered, right where the worker reaches that point; a callback that returns an awaitable has
it run as a task of its own (the worker keeps a reference until it ends) and does not delay
the worker. An exception raised by a callback, or by the awaitable it returned, is logged with
its traceback and never reaches the worker: a hook can observe the worker, not break it.
Callbacks should be quick: a slow synchronous one delays the worker like any blocking code.
:class:`HooksMixin` gives ``Worker`` its typed ``on`` / ``off``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import typing
from collections.abc import Awaitable, Callable
from typing import Any, Literal, overload

from ..job import Job

logger = logging.getLogger("echomq.worker")

#: The events a worker reports to its hooks.
HookEvent = Literal[
    "ready",
    "active",
    "progress",
    "completed",
    "failed",
    "stalled",
    "drained",
    "error",
    "lock_renewal_failed",
    "paused",
    "resumed",
    "closing",
    "closed",
]

EVENTS: tuple[str, ...] = typing.get_args(HookEvent)

#: ``active``: ``fn(job)`` once its processor is about to run.
JobHook = Callable[[Job], "None | Awaitable[None]"]
#: ``progress``: ``fn(job, progress)`` after the processor recorded progress.
ProgressHook = Callable[[Job, Any], "None | Awaitable[None]"]
#: ``completed``: ``fn(job, return_value)`` once the completion is recorded.
CompletedHook = Callable[[Job, Any], "None | Awaitable[None]"]
#: ``failed``: ``fn(job, error)`` once a failed attempt is recorded (retried or final; see
#: ``job.attempts_made``), ``error`` being what the processor raised.
FailedHook = Callable[[Job, BaseException], "None | Awaitable[None]"]
#: ``stalled``: ``fn(job_id)`` for each job this worker's stalled check moved back to wait.
IdHook = Callable[[str], "None | Awaitable[None]"]
#: ``lock_renewal_failed``: ``fn(job_ids)``, the jobs whose lock a renewal found lost.
IdsHook = Callable[[list[str]], "None | Awaitable[None]"]
#: ``error``: ``fn(error)`` for an error of the worker itself (not of a processor).
ErrorHook = Callable[[BaseException], "None | Awaitable[None]"]
#: ``ready``, ``drained``, ``paused``, ``resumed``, ``closing``, ``closed``: ``fn()``.
PlainHook = Callable[[], "None | Awaitable[None]"]


class Hooks:
    """The callbacks of one worker, by event, in registration order."""

    __slots__ = ("_by_event", "_tasks")

    def __init__(self) -> None:
        self._by_event: dict[str, list[Callable[..., Any]]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    def on(self, event: str, callback: Callable[..., Any]) -> Callable[..., Any]:
        """Call ``callback`` at each ``event``, after those registered before; returns it.

        Raises:
            ValueError: ``event`` is not one of :data:`EVENTS`.
            TypeError: ``callback`` is not callable.
        """
        if event not in EVENTS:
            raise ValueError(f"unknown worker event {event!r}; expected one of {', '.join(EVENTS)}")
        if not callable(callback):
            raise TypeError(f"a hook for {event!r} must be callable, got {callback!r}")
        self._by_event.setdefault(event, []).append(callback)
        return callback

    def off(self, event: str, callback: Callable[..., Any]) -> bool:
        """Stop calling ``callback`` at ``event``; False if it was not registered."""
        callbacks = self._by_event.get(event, [])
        if callback in callbacks:
            callbacks.remove(callback)
            return True
        return False

    def has(self, event: str) -> bool:
        """Whether any callback listens to ``event`` (lets callers skip building arguments)."""
        return bool(self._by_event.get(event))

    def emit(self, event: str, *args: Any) -> None:
        """Call every callback of ``event`` with ``args``, in order, never raising."""
        callbacks = self._by_event.get(event)
        if not callbacks:
            return
        for callback in list(callbacks):
            try:
                result = callback(*args)
            except Exception:
                logger.exception("worker hook %r for %r raised; ignored", _name(callback), event)
                continue
            if inspect.isawaitable(result):
                self._spawn(event, callback, result)

    def _spawn(self, event: str, callback: Callable[..., Any], awaitable: Awaitable[Any]) -> None:
        async def run() -> None:
            try:
                await awaitable
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("worker hook %r for %r raised; ignored", _name(callback), event)

        try:
            task = asyncio.get_running_loop().create_task(run())
        except RuntimeError:  # no loop (closed): nothing can await it
            if inspect.iscoroutine(awaitable):
                awaitable.close()
            return
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for the awaitables hooks returned."""
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=timeout)


def _name(callback: Callable[..., Any]) -> str:
    return getattr(callback, "__qualname__", None) or repr(callback)


class HooksMixin:
    """``Worker.on`` / ``Worker.off``: typed registration of the worker's hooks."""

    _hooks: Hooks

    @overload
    def on(self, event: Literal["active"], callback: JobHook) -> JobHook: ...
    @overload
    def on(self, event: Literal["progress"], callback: ProgressHook) -> ProgressHook: ...
    @overload
    def on(self, event: Literal["completed"], callback: CompletedHook) -> CompletedHook: ...
    @overload
    def on(self, event: Literal["failed"], callback: FailedHook) -> FailedHook: ...
    @overload
    def on(self, event: Literal["stalled"], callback: IdHook) -> IdHook: ...
    @overload
    def on(self, event: Literal["lock_renewal_failed"], callback: IdsHook) -> IdsHook: ...
    @overload
    def on(self, event: Literal["error"], callback: ErrorHook) -> ErrorHook: ...
    @overload
    def on(
        self,
        event: Literal["ready", "drained", "paused", "resumed", "closing", "closed"],
        callback: PlainHook,
    ) -> PlainHook: ...
    def on(self, event: str, callback: Callable[..., Any]) -> Callable[..., Any]:
        """Call ``callback`` at each ``event`` of this worker, after the callbacks registered
        before it; returns ``callback``.

        Events and their callbacks: ``ready()`` (the running worker connected and starts
        fetching), ``active(job)`` (its processor is about to run),
        ``progress(job, progress)``, ``completed(job, return_value)`` and
        ``failed(job, error)`` (once recorded; ``failed`` for every failed attempt, retried
        or final, and for cancelled jobs), ``stalled(job_id)`` (this worker's stalled check
        moved a job back), ``lock_renewal_failed(job_ids)``, ``drained()`` (the queue has no
        job ready), ``error(exc)`` (the worker's own errors, not a processor's),
        ``paused()`` (:meth:`pause` took effect, after the running jobs finished unless
        ``wait_for_active=False``), ``resumed()`` (:meth:`resume` of a paused worker),
        ``closing()`` and ``closed()``. A callback runs on the worker's loop and should be
        quick; one returning an awaitable has it run as a task. Its exceptions are logged,
        never raised into the worker.

        Raises:
            ValueError: ``event`` is unknown. TypeError: ``callback`` is not callable.
        """
        return self._hooks.on(event, callback)

    def off(self, event: HookEvent, callback: Callable[..., Any]) -> bool:
        """Stop calling ``callback`` at ``event``; False if it was not registered."""
        return self._hooks.off(event, callback)
