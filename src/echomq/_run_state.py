"""What a worker shares with a job it is running: a cancel request and where progress goes.

A worker gives each job it runs one :class:`RunState` (``job._run``; sync processors get the
same object on their :class:`echomq.sync.Job`). A cancel request sets it from the worker's event
loop, and a sync processor's thread reads it (``job.cancelled``, ``job.raise_if_cancelled()``):
a plain attribute, written once. Progress a processor records is passed to the worker's
``progress`` hooks on the worker's loop, whichever thread recorded it. Callbacks
registered with :meth:`RunState.add_cancel_callback` (an executor that must stop something of
its own, such as a child process) run on the worker's loop when the job is cancelled.
``run_blocking``, when the worker sets it, runs a blocking function for the job the way the
worker runs a sync processor (in its own threads, which it tracks, given the job's blocking
twin): an async processor that hands part of its work to sync code (the task dispatcher of a
queue whose tasks mix ``def`` and ``async def``) uses it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any


class RunState:
    """The run of one job by a worker (internal; read through the job's properties)."""

    __slots__ = (
        "_callbacks",
        "_cancelled",
        "_loop",
        "_on_progress",
        "by_close",
        "done",
        "in_processor",
        "reason",
        "requeue",
        "run_blocking",
    )

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        on_progress: Callable[[Any], None] | None = None,
    ) -> None:
        self._loop = loop
        self._on_progress = on_progress
        self._cancelled = False
        self._callbacks: list[Callable[[], None]] = []
        self.reason: str = ""
        self.requeue = False
        #: the cancel came from the worker closing, not from a cancel request
        self.by_close = False
        #: the processor is running now / has ended
        self.in_processor = False
        self.done = False
        #: run ``fn(blocking job)`` in the worker's threads (see the module docstring)
        self.run_blocking: Callable[[Callable[[Any], Any], Any], Awaitable[Any]] | None = None

    @property
    def cancelled(self) -> bool:
        """Whether the job was asked to stop."""
        return self._cancelled

    def cancel(self, reason: str, *, requeue: bool = False, by_close: bool = False) -> bool:
        """Ask the job to stop (on the worker's loop); False if it was asked already."""
        if self._cancelled:
            return False
        self.reason = reason
        self.requeue = requeue
        self.by_close = by_close
        self._cancelled = True
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()
        return True

    def add_cancel_callback(self, callback: Callable[[], None]) -> None:
        """Call ``callback()`` (on the worker's loop) when the job is cancelled; at once if it
        already was."""
        if self._cancelled:
            callback()
        else:
            self._callbacks.append(callback)

    def progress(self, value: Any) -> None:
        """Pass recorded progress to the worker's hooks, on the worker's loop."""
        hook = self._on_progress
        if hook is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is self._loop:
            hook(value)
        elif not self._loop.is_closed():
            self._loop.call_soon_threadsafe(hook, value)
