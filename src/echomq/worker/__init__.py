"""The Worker: its options, its public methods, and the run it starts.

A worker pulls jobs off a queue's keys with one atomic script call at a time, runs up to
``concurrency`` processors at once, and records each outcome. Constructing a Worker does
nothing; ``run()`` or ``async with`` starts it, ``close()`` stops it in two phases (stop
fetching, wait a grace period, cancel and hand back). The package is split by job:

- ``_lifecycle``: the states, the moves between them, and what each state allows;
- ``_session``: one run (everything that exists only while running), the fetch loop and the
  jobs' tasks, and the two phases of ``close()``;
- ``_finisher``: recording outcomes in batched finish calls that also take the next jobs;
- ``_handback``: handing held jobs back to ``wait``;
- ``_execute``: running one job's processor and turning what it did into an outcome;
- ``_batches``: with ``batch=Batch(...)``, gathering jobs into one processor call;
- ``_fetch`` (the marker wait), ``_locks``, ``_stalled``, ``_outages`` (riding through a busy,
  full or unreachable Redis), ``_schedulers``, ``_hooks``, ``_cancel`` (and its control
  channel), ``_manual`` (taking jobs by hand), ``_pool`` (``processes=N``: the parent's pool;
  ``_pool_child`` the child's side and the wire; ``_import_path`` how a child finds the
  processor), ``_timeouts``, ``_watchdog``, ``_startup`` (waiting for Redis, start-up
  checks), ``_threads``, ``_metrics``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import logging
import uuid
from types import TracebackType
from typing import TYPE_CHECKING, Any

from typing_extensions import Unpack

from .._keys import queue_keys
from .._redis.connection import AsyncConn, AsyncConnection, resolve_connection
from .._redis.fail_fast import connect_budget
from .._redis.topology import check_cluster_keys
from ..errors import InvalidOptionError
from ..job import Job
from ..options import Duration, WorkerOptions, WorkerOptionsDict, to_ms
from ..protocol import codes
from ..protocol.keys import DEFAULT_PREFIX
from ..tasks._dispatch import TaskSource, dispatcher, select_queue
from ..telemetry import Telemetry
from ._backoff import BackoffStrategy
from ._execute import Processor
from ._hooks import EVENTS, HookEvent, Hooks, HooksMixin
from ._lifecycle import FINISH_DEADLINE, Lifecycle, WorkerState
from ._manual import ManualFetcher
from ._metrics import install as install_metrics
from ._pool import ProcessPool
from ._schedulers import SchedulerContinuer
from ._session import Session
from ._startup import check_pool_options, check_reachable, warn_at_start_up
from ._threads import ThreadTracker

if TYPE_CHECKING:  # the optional extra echomq[prometheus]
    from prometheus_client import CollectorRegistry

__all__ = [
    "EVENTS",
    "FINISH_DEADLINE",
    "BackoffStrategy",
    "HookEvent",
    "Processor",
    "Worker",
    "WorkerState",
]

logger = logging.getLogger("echomq.worker")


class Worker(HooksMixin):
    """Processes jobs of one queue.

    Args:
        queue: the queue name.
        processor: ``async def f(job)`` or ``def f(job)`` (run in a thread pool, or with
            ``processes=N`` in N child processes that import it by ``module:function``); its
            return value, which must be JSON-serialisable, becomes the job's return value. None for
            a worker that is never run, only used to take jobs by hand (:meth:`get_next_job`).
            With ``batch=Batch(...)`` it takes a list of jobs and returns a list of results
            (docs/workers.md, "Batches").
        connection: a ``redis.asyncio.Redis`` you own, or a URL (opened and closed by the worker).
            The worker opens one more connection of its own for blocking. None (default): the
            connection rule, see :func:`echomq.set_default_connection`.
        prefix: the key prefix.
        concurrency: how many jobs run at once (default: 1, or ``processes`` when that keyword
            is given, or ``batch.size``; with ``batch``, at least ``batch.size``).
        backoff_strategy: handles custom ``backoff`` types; see :data:`BackoffStrategy`.
        options: a :class:`~echomq.WorkerOptions`; or give its fields as keywords.
        connect_timeout: fail fast: ``run()`` first checks, within this many seconds, that
            Redis answers (and each connection the worker opens from a URL must connect
            within it), raising :class:`~echomq.RedisUnavailableError` instead of retrying
            for ever; once started, the worker rides out outages as usual. None (default):
            retry from the start.
        metrics_registry: a ``prometheus_client.CollectorRegistry``: the worker keeps its job
            duration, completed, failed, active and lock-renewal metrics there (needs
            ``echomq[prometheus]``; see docs/operations.md#prometheus). None (default): none.
        telemetry: an OpenTelemetry ``Tracer`` or ``TracerProvider``: each job runs inside a
            ``process <queue>`` CONSUMER span, a child of its producer's span when the job
            carries one (``pip install 'echomq[otel]'``; see docs/operations.md,
            "OpenTelemetry"). None (default): no telemetry.

    Hooks: ``worker.on(event, callback)`` (see :meth:`on`).
    """

    def __init__(
        self,
        queue: str,
        processor: Processor | None,
        *,
        connection: AsyncConnection | None = None,
        prefix: str = DEFAULT_PREFIX,
        concurrency: int | None = None,
        backoff_strategy: BackoffStrategy | None = None,
        options: WorkerOptions | None = None,
        connect_timeout: Duration | None = None,
        metrics_registry: CollectorRegistry | None = None,
        telemetry: Any = None,
        **kwargs: Unpack[WorkerOptionsDict],
    ) -> None:
        self._keys = queue_keys(queue, prefix)
        base = options or WorkerOptions()
        changes: dict[str, Any] = dict(kwargs)
        if concurrency is not None:
            changes["concurrency"] = concurrency
        elif (
            options is None
            and isinstance(changes.get("processes"), int)
            and changes["processes"] > 0
        ):
            changes["concurrency"] = changes["processes"]
        self.options = _batch_concurrency(
            WorkerOptions(**{**_fields_of(base), **changes}), explicit=concurrency is not None
        )
        if processor is not None and not callable(processor):
            raise TypeError("processor must be callable (or None, to take jobs by hand)")
        self._processor_path = (
            None if processor is None else check_pool_options(processor, self.options)
        )
        self._processor = processor
        self._backoff_strategy = backoff_strategy
        self._telemetry = Telemetry.coerce(telemetry)
        self._connect_timeout = None if connect_timeout is None else connect_budget(connect_timeout)
        connection = resolve_connection(connection)
        check_cluster_keys(connection, self._keys)
        self._conn = AsyncConn(connection, pipelined=True, connect_timeout=self._connect_timeout)
        self.id = str(uuid.uuid4())
        self._life = Lifecycle()
        self._schedulers = SchedulerContinuer(
            self._keys, self._conn, self._life.finish_deadline_passed
        )
        self._hooks = Hooks()
        if metrics_registry is not None:  # Prometheus metrics, updated by hooks
            install_metrics(self._hooks, queue, metrics_registry)
        self._threads = ThreadTracker()
        self._manual: ManualFetcher | None = None
        #: the current run: made by run() as the worker starts running, kept once closed
        self._session: Session | None = None

    @classmethod
    def for_tasks(
        cls,
        tasks: TaskSource,
        *,
        queue: str | None = None,
        connection: AsyncConnection | None = None,
        **kwargs: Any,
    ) -> Worker:
        """A worker running tasks (``@echomq.task``): each job runs the task its name names.

        A job whose name no task has fails at once, without retries, its reason listing the
        known names; a job whose data does not fit the task's signature fails the same way,
        naming the argument. One worker serves one queue: for tasks on several queues, build
        one per queue from :func:`echomq.tasks_by_queue`.

        Args:
            tasks: tasks, or a module (its tasks are found among its attributes).
            queue: the queue to serve (only its tasks are taken); None when all the tasks
                share one queue.
            connection: a ``redis.asyncio.Redis`` you own, or a URL; None: the connection
                rule, see :func:`echomq.set_default_connection` (as every task's default).
            **kwargs: the other arguments of :class:`Worker` (``prefix``, ``concurrency``,
                ``options``, worker options...). The prefix is the tasks' unless given.

        Raises:
            InvalidOptionError: no task, none of ``queue``, or several queues and no
                ``queue``.
            ConnectionNotOpenError: no connection given, and none found by the connection
                rule.
        """
        name, chosen = select_queue(tasks, queue)
        kwargs.setdefault("prefix", chosen[0].prefix)
        return cls(name, dispatcher(chosen), connection=connection, **kwargs)

    # -- public lifecycle ----------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The queue this worker processes."""
        return self._keys.name

    @property
    def concurrency(self) -> int:
        """How many jobs this worker runs at once.

        Settable at any time (BullMQ's ``worker.concurrency = n``): while running, a higher
        value fills the new slots at the next fetch (at once), a lower one lets the running
        jobs finish and fetches no more until fewer than the new value run. With
        ``processes``, the pool keeps its size: jobs beyond it wait for a free child.

        Raises:
            InvalidOptionError: the value is not an int >= 1, or is below ``batch.size``
                (nothing changes).
        """
        return self.options.concurrency

    @concurrency.setter
    def concurrency(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InvalidOptionError(f"concurrency must be an int >= 1, got {value!r}")
        _batch_concurrency(dataclasses.replace(self.options, concurrency=value), explicit=True)
        self.options = dataclasses.replace(self.options, concurrency=value)
        if self._session is not None:
            self._session.set_concurrency(self.options)

    @property
    def state(self) -> WorkerState:
        """Where the worker is in its life: new, running, closing or closed."""
        return self._life.state

    @property
    def is_running(self) -> bool:
        """True between the start of ``run()`` and the start of ``close()``."""
        return self._life.state is WorkerState.RUNNING

    @property
    def is_paused(self) -> bool:
        """True while this worker alone is paused."""
        return self._life.paused

    async def run(self) -> None:
        """Process jobs until :meth:`close` is called (from another task or a signal handler).

        Raises:
            RedisUnavailableError: with ``connect_timeout``, Redis could not be reached (or
                refused the credentials) at start-up; the worker is then closed.
            InvalidOptionError: with ``processes``, a child could not import the processor;
                the worker is then closed.
            RuntimeError: the worker ran before, or has no processor.
        """
        if self._life.state is not WorkerState.NEW:
            raise RuntimeError("a Worker runs once; create a new one")
        processor = self._processor
        if processor is None:
            raise RuntimeError(
                "this Worker has no processor: use it to take jobs by hand (get_next_job), "
                "or give it a processor to run()"
            )
        if self._connect_timeout is not None:
            await self._check_reachable(self._connect_timeout)
        opts = self.options
        pool: ProcessPool | None = None
        if self._processor_path is not None and self._life.state is WorkerState.NEW:
            # processes=N: start the children first
            pool = ProcessPool(
                self._processor_path, opts.processes, opts.max_tasks_per_child, self.name
            )
            try:
                await pool.start()
            except BaseException:
                await self.close()
                raise
        if self._life.state is not WorkerState.NEW:  # closed meanwhile
            if pool is not None:
                await pool.close()
            return
        warn_at_start_up(processor, opts, self.name)
        is_async = inspect.iscoroutinefunction(processor) or inspect.iscoroutinefunction(
            getattr(processor, "__call__", None)  # noqa: B004
        )
        self._life.move(WorkerState.RUNNING)
        self._session = session = Session(
            worker_id=self.id,
            keys=self._keys,
            conn=self._conn,
            options=opts,
            life=self._life,
            hooks=self._hooks,
            threads=self._threads,
            schedulers=self._schedulers,
            processor=processor,
            is_async=is_async,
            pool=pool,
            backoff_strategy=self._backoff_strategy,
            telemetry=self._telemetry,
        )
        try:
            await session.stopped.wait()
        finally:
            if self.is_running:  # run() itself was cancelled
                await self.close()

    async def close(self, *, force: bool = False) -> None:
        """Stop fetching, let running jobs finish (up to ``close_grace``), then cancel the rest.

        Locks of every job the worker holds are renewed until its outcome is recorded, so no
        other worker takes a job that is still running here. Jobs cancelled at the end of
        the grace period (or at once with ``force``) go back to the front of ``wait`` at once,
        their attempt not counted as made (as a rate-limited job), for any worker to take.
        Outcomes that meet a busy or unreachable Redis are retried for up to
        :data:`FINISH_DEADLINE` seconds after the grace period.

        Calling ``close()`` again while closing waits for the first call; with ``force`` it
        also cuts the grace period short.

        Args:
            force: cancel running jobs at once instead of waiting for them.
        """
        session = self._session
        if session is None:  # never ran
            if self._life.state is WorkerState.NEW:
                self._life.move(WorkerState.CLOSED)
                if self._manual is not None:
                    await self._manual.aclose()
                await self._conn.aclose()
            return
        if self._life.state is not WorkerState.RUNNING:  # a second call waits for the first
            await session.close(force=force)
            return
        await session.close(force=force)
        abandoned = self.abandoned_job_ids
        if abandoned:
            logger.warning(
                "queue=%s sync processor thread(s) of job(s) %s still running after close(); "
                "the jobs were handed back to wait and what the threads return is discarded",
                self.name,
                ", ".join(abandoned),
                extra={"queue": self.name, "job_ids": abandoned, "status": "abandoned"},
            )
        await self._hooks.drain(1.0)
        self._hooks.emit("closed")

    async def pause(self, *, wait_for_active: bool = True) -> None:
        """Stop taking new jobs in this worker only (nothing is written to Redis).

        With ``wait_for_active``, return once the running jobs have finished. The ``paused``
        hooks run then (at once without it); pausing a paused worker emits nothing again.
        """
        was_paused, self._life.paused = self._life.paused, True
        session = self._session
        if wait_for_active and session is not None and session.running:
            await asyncio.gather(*session.running.values(), return_exceptions=True)
        if not was_paused:
            self._hooks.emit("paused")

    def resume(self) -> None:
        """Take jobs again after :meth:`pause`; the ``resumed`` hooks run if it was paused."""
        if not self._life.paused:
            return
        self._life.paused = False
        if self._session is not None:
            self._session.wake_fetcher()
        self._hooks.emit("resumed")

    async def rate_limit(self, duration: float) -> None:
        """Stop this queue's workers from taking jobs for ``duration`` seconds.

        It sets the queue's rate-limit key, which every worker (Python or Node) that has a
        rate limit honours: one with its own ``limiter``, or any worker when a global rate
        limit (``max`` in the queue's meta, set from Node) exists. Raise
        :class:`~echomq.RateLimitError` from the processor afterwards to put the current job
        back without counting an attempt.
        """
        ms = to_ms(duration, "duration")
        await self._conn.client.set(self._keys.limiter, codes.MANUAL_RATE_LIMIT, px=max(ms, 1))

    async def __aenter__(self) -> Worker:
        task = asyncio.create_task(self.run(), name=f"echomq-worker-{self.name}")
        self._run_task = task
        await asyncio.sleep(0)
        while self._life.state is WorkerState.NEW and not task.done():
            await asyncio.wait({task}, timeout=0.005)  # a fail-fast check takes a while
        if self._life.state is not WorkerState.RUNNING:
            # start-up failed or was closed: the state leaves NEW before run() has finished
            # closing the connection, so wait for run() to end and raise what it raised
            await asyncio.wait({task})
        if task.done() and not task.cancelled() and task.exception() is not None:
            task.result()  # the start-up error (connect_timeout)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
        await asyncio.gather(self._run_task, return_exceptions=True)

    # -- cancelling ------------------------------------------------------------------------------

    async def cancel_job(
        self, job_id: str, reason: str | None = None, *, requeue: bool = False
    ) -> bool:
        """Cancel a job this worker is running.

        An async processor gets ``asyncio.CancelledError`` at its next ``await``; a sync one
        sees ``job.cancelled`` turn true (``job.raise_if_cancelled()`` raises), and the worker
        stops waiting for its thread at once. The job then fails with
        :class:`~echomq.JobCancelledError` and ``reason`` as its failed reason, without retry,
        or with ``requeue`` goes back to the front of ``wait`` (its attempt not counted).

        Args:
            job_id: the job.
            reason: its failed reason (default ``"cancelled"``).
            requeue: put the job back in wait instead of failing it.

        Returns:
            True if this worker was running the job's processor; False for a job it does not
            hold, or whose processor already returned (its outcome stands).
        """
        session = self._session
        return session is not None and session.cancel(job_id, reason, requeue)

    async def cancel_all_jobs(self, reason: str | None = None, *, requeue: bool = False) -> int:
        """Cancel every job this worker is running (see :meth:`cancel_job`).

        Returns:
            How many jobs were cancelled.
        """
        session = self._session
        if session is None:
            return 0
        return sum(session.cancel(job_id, reason, requeue) for job_id in session.runs_by_id())

    @property
    def abandoned_job_ids(self) -> list[str]:
        """Jobs whose sync processor is still running in its thread although the worker gave
        up on it (closed, or cancelled it): their jobs went back to wait (or failed) and what
        the threads return will be discarded. The process only exits once they end, unless it
        exits with ``os._exit`` (the CLI does, with exit code 3)."""
        running = set(self._threads.running())
        session = self._session
        if session is not None and self._life.may_fetch():
            running -= set(session.runs_by_id())
        return sorted(running)

    # -- manual processing -----------------------------------------------------------------------

    async def get_next_job(self, token: str, *, block: bool = True) -> Job | None:
        """Take the next job by hand, locked with ``token`` (for custom loops, as Node's
        ``getNextJob``); finish it with ``job.move_to_completed`` / ``move_to_failed`` /
        ``move_to_wait`` / ``move_to_delayed``, and keep its lock with ``job.extend_lock``.
        The worker cannot see how many jobs your loop holds, so it takes an isolated job (one
        that stalled past ``max_stalled_count``) like any other: running it alone is yours.

        Args:
            token: the lock token, unique per job taken (e.g. ``f"{uuid4()}"``).
            block: with no job ready, wait on the queue's marker up to ``drain_delay``.

        Returns:
            The job (now active), or None when none became ready.

        Raises:
            RuntimeError: the worker is running its own loops (``run()``).
        """
        if self._life.state is not WorkerState.NEW:
            raise RuntimeError("get_next_job is for workers that are not run(); close() ends it")
        return await self._manual_fetcher().next_job(token, block)

    def start_stalled_check_timer(self) -> None:
        """Run the stalled check every ``stalled_interval`` (for a worker used by hand; a
        running worker does it itself) until :meth:`close`."""
        if self._life.state is not WorkerState.NEW:
            raise RuntimeError("a running worker checks stalled jobs itself")
        self._manual_fetcher().start_stalled_checks()

    def _manual_fetcher(self) -> ManualFetcher:
        if self._manual is None:
            self._manual = ManualFetcher(self._keys, self._conn, self.options)
        return self._manual

    # -- internals -------------------------------------------------------------------------------

    async def _check_reachable(self, budget: float) -> None:
        try:
            await check_reachable(self._conn, budget, self.name)
        except BaseException:
            if self._life.state is WorkerState.NEW:
                self._life.move(WorkerState.CLOSED)
            await self._conn.aclose()
            raise


def _batch_concurrency(options: WorkerOptions, *, explicit: bool) -> WorkerOptions:
    """``options`` with a concurrency of at least ``batch.size`` (docs/workers.md, "Batches"):
    a lower one is raised to it, unless the caller gave it (``explicit``): then it is refused."""
    batch = options.batch
    if batch is None or options.concurrency >= batch.size:
        return options
    if explicit:
        raise InvalidOptionError(
            f"concurrency must be at least batch.size ({batch.size}) so that a batch can fill,"
            f" got {options.concurrency}"
        )
    return dataclasses.replace(options, concurrency=batch.size)


def _fields_of(options: WorkerOptions) -> dict[str, Any]:
    return {name: getattr(options, name) for name in WorkerOptions.__dataclass_fields__}
