"""``@echomq.task``: a function that is also a job type.

A :class:`Task` wraps a sync or async function. Calling it calls the function; ``aenqueue`` /
``enqueue`` add a job named after the task to its queue, whose data is the arguments bound by
parameter name (``_signature``); ``aresult`` / ``result`` wait for that job and return its value
as the function's return annotation says. ``using(...)`` gives a copy with other options. A task
holds no connection of its own unless ``using(connection=...)`` gave one (``_connection``).

The sync entry points use :mod:`echomq.sync` (plain blocking redis-py); nothing here starts or
looks up an event loop for them.
"""

from __future__ import annotations

import copy as _copy
import dataclasses
import inspect
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from typing_extensions import ParamSpec, Unpack

from .. import sync as sync_api
from .._job import Job
from .._keys import queue_keys
from ..errors import InvalidOptionError, JobFailedError, JobNotFoundError
from ..events import QueueEvents
from ..job import JobState
from ..options import UNSET, Duration, JobOptions, JobOptionsDict, to_seconds
from ..protocol import codes
from ..protocol.keys import DEFAULT_PREFIX
from ..queue import add
from ._connection import resolve
from ._signature import TaskSignature

P = ParamSpec("P")
R = TypeVar("R")
C = TypeVar("C")

#: The queue of a task that names none (Django's default queue name too).
DEFAULT_QUEUE = "default"
_MAX_POLL = 0.5  # seconds between two looks of the sync ``result``


class Task(Generic[P, R, C]):
    """A function registered as a job type: call it, or enqueue it.

    Type parameters: ``P`` the function's parameters, ``R`` the value a job's result is read
    back as (the awaited return type for an async function), ``C`` what a plain call returns.
    Made by :func:`task`, which takes the same arguments.

    Args:
        func: the function, sync or async (no ``*args`` parameter).
        name: the job name; the function's ``__name__`` when None.
        queue: the queue of its jobs.
        prefix: the key prefix.
        options: the job options of its jobs.
        connection: its connection; None: the connection rule, see
            :func:`echomq.set_default_connection`.

    Raises:
        ValidationError: a bad name, queue or prefix.
        TypeError: the function has ``*args``.

    Attributes:
        func: the decorated function.
        name: the job name (the function's ``__name__`` unless ``name=`` was given).
        queue: the queue its jobs go to.
        prefix: the key prefix.
        options: the job options of its jobs (a :class:`~echomq.JobOptions`).
        is_async: whether ``func`` is an ``async def``.
    """

    def __init__(
        self,
        func: Callable[P, C],
        *,
        name: str | None = None,
        queue: str = DEFAULT_QUEUE,
        prefix: str = DEFAULT_PREFIX,
        options: JobOptions | None = None,
        connection: Any = None,
    ) -> None:
        self.func = func
        self.name = name if name is not None else str(getattr(func, "__name__", ""))
        if not isinstance(self.name, str) or not self.name:
            raise InvalidOptionError(f"a task name must be a non-empty str, got {self.name!r}")
        queue_keys(queue, prefix)  # refuses a bad queue name or prefix now
        self.queue = queue
        self.prefix = prefix
        self.options = options if options is not None else JobOptions()
        self.is_async = inspect.iscoroutinefunction(func)
        self._connection = connection
        self._signature = TaskSignature(func, self.name)
        self.__doc__ = func.__doc__
        self.__module__ = str(getattr(func, "__module__", None) or __name__)
        self.__wrapped__ = func

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> C:
        """Call the function itself, here and now (no job)."""
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Task {self.name!r} queue={self.queue!r}>"

    def using(
        self,
        *,
        queue: str | None = None,
        prefix: str | None = None,
        connection: Any = None,
        **options: Unpack[JobOptionsDict],
    ) -> Task[P, R, C]:
        """A copy of this task with other settings; this one is unchanged.

        Args:
            queue: another queue.
            prefix: another key prefix.
            connection: a URL, or a ``redis.asyncio.Redis`` / ``redis.Redis`` client.
            **options: job options overriding the task's (``delay=60``, ``priority=3``,
                ``job_id="..."``...; see :class:`~echomq.JobOptions`).

        Raises:
            ValidationError: an unknown or invalid option, or a bad queue name.
        """
        copy = _copy.copy(self)  # shares the signature and its type adapters
        copy.queue = self.queue if queue is None else queue
        copy.prefix = self.prefix if prefix is None else prefix
        queue_keys(copy.queue, copy.prefix)
        copy.options = self.options.merged(JobOptions.build(options))
        copy._connection = self._connection if connection is None else connection
        return copy

    def bind(self, *args: P.args, **kwargs: P.kwargs) -> dict[str, Any]:
        """The data object a job of this call would hold (validated; nothing is written).

        Raises:
            ValidationError: an argument is missing, unknown, invalid or not JSON; the
                message names it.
        """
        return self._signature.bind(args, kwargs)

    # -- producing -------------------------------------------------------------------------

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> Job:
        """Add a job that runs this task with these arguments.

        Returns:
            The added :class:`~echomq.Job` (name: the task's name, data: the bound arguments).

        Raises:
            ValidationError: an argument or option is invalid; nothing was written.
            ConnectionNotOpenError: no connection was given, and the connection rule found
                none.
            RedisUnavailableError: Redis could not be reached.
        """
        data = self._signature.bind(args, kwargs)
        conn = resolve(self._connection, is_async=True)
        return await add(
            self.queue, self.name, data, connection=conn, prefix=self.prefix, **self._options()
        )

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> sync_api.Job:
        """The blocking :meth:`aenqueue` (through :mod:`echomq.sync`; no event loop)."""
        data = self._signature.bind(args, kwargs)
        conn = resolve(self._connection, is_async=False)
        return sync_api.add(
            self.queue, self.name, data, connection=conn, prefix=self.prefix, **self._options()
        )

    def _options(self) -> dict[str, Any]:
        return {
            f.name: getattr(self.options, f.name)
            for f in dataclasses.fields(JobOptions)
            if getattr(self.options, f.name) is not UNSET
        }

    # -- results ---------------------------------------------------------------------------

    async def aresult(self, job: Job | sync_api.Job | str, *, timeout: Duration | None = None) -> R:
        """Wait until ``job`` finishes; its return value, typed as the function returns it.

        Args:
            job: a job of this task (or its id, in this task's queue).
            timeout: seconds (or a timedelta) to wait at most; None waits without limit.

        Raises:
            JobFailedError: the job failed (``reason`` is its failed reason).
            JobNotFoundError: the job does not exist.
            TimeoutError: ``timeout`` passed first.
            ValidationError: with pydantic, the value does not fit the return annotation.
        """
        job_id, queue = self._locate(job)
        conn = resolve(self._connection, is_async=True)
        async with QueueEvents(queue, connection=conn, prefix=self.prefix) as events:
            raw = await events.wait_for_job(job_id, timeout)
        return self.result_from_json(raw)

    def result(self, job: Job | sync_api.Job | str, *, timeout: Duration | None = None) -> R:
        """The blocking :meth:`aresult`: looks at the job's state until it finishes (every
        few milliseconds at first, then every half second)."""
        job_id, queue = self._locate(job)
        seconds = None if timeout is None else to_seconds(timeout, "timeout")
        deadline = None if seconds is None else time.monotonic() + seconds
        conn = resolve(self._connection, is_async=False)
        client = sync_api.client_from_url(conn) if isinstance(conn, str) else conn
        try:
            pause = 0.01
            while True:
                state = sync_api.get_state(queue, job_id, connection=client, prefix=self.prefix)
                if state in (JobState.COMPLETED, JobState.FAILED):
                    break
                if state is JobState.UNKNOWN:
                    raise JobNotFoundError(
                        f"job {job_id} does not exist in queue {queue!r}",
                        code=codes.JOB_NOT_EXIST,
                        job_id=job_id,
                        command="result",
                    )
                if deadline is not None and time.monotonic() + pause > deadline:
                    raise TimeoutError(f"job {job_id} did not finish within {seconds:g} s")
                time.sleep(pause)
                pause = min(pause * 2, _MAX_POLL)
            found = sync_api.get_job(queue, job_id, connection=client, prefix=self.prefix)
        finally:
            if client is not conn:
                client.close()
        if found is None:
            raise JobNotFoundError(
                f"job {job_id} was removed",
                code=codes.JOB_NOT_EXIST,
                job_id=job_id,
                command="result",
            )
        if state is JobState.FAILED:
            raise JobFailedError(job_id, found.failed_reason or "")
        return self.result_from_json(found.return_value)

    def result_from_json(self, raw: Any) -> R:
        """A stored return value read back as the function's return annotation says."""
        value: R = self._signature.result_from_json(raw)
        return value

    def _locate(self, job: Job | sync_api.Job | str) -> tuple[str, str]:
        if isinstance(job, str):
            return job, self.queue
        return job.id, job.queue_name

    # -- running (the worker's side) --------------------------------------------------------

    async def arun_job(self, job: Any) -> Any:
        """Run the task for ``job`` (its data read back into arguments); the JSON result.

        Raises:
            UnrecoverableError: the job's data does not fit the signature (the reason names
                the argument): it fails without retries.
        """
        args, kwargs = self._signature.call_arguments(job.data)
        value = self.func(*args, **kwargs)
        if inspect.isawaitable(value):
            value = await value
        return self._signature.result_to_json(value)

    def run_job(self, job: Any) -> Any:
        """The blocking :meth:`arun_job`, for a sync function (run in the worker's threads)."""
        args, kwargs = self._signature.call_arguments(job.data)
        return self._signature.result_to_json(self.func(*args, **kwargs))
