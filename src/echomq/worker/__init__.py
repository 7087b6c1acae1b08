"""The Worker: options and lifecycle; fetching, executing, locks and stalled checks live apart.

A worker pulls jobs off a queue's keys with one atomic script call at a time, runs up to
``concurrency`` processors at once, and records each outcome. Outcomes that arrive while a
call is in flight are recorded together in the next call, which also takes the next jobs, so a
busy worker needs about one script call per batch of jobs instead of two per job; two such calls
are in flight at once, each with half the slots, so the worker runs one half's jobs while Redis
records the other's. Idle, it
blocks on the marker key. Constructing a Worker does nothing; ``run()`` or ``async with``
starts it, ``close()`` stops it in two phases (stop fetching, wait a grace period, cancel and
hand back); ``_lifecycle`` holds the states and what each allows. Outcomes that meet a busy,
full or unreachable Redis are held and retried while their locks are renewed (``_outages``).
Hooks (``_hooks``), cancellation and its control channel (``_cancel``), manual processing
(``_manual``), the event-loop watchdog (``_watchdog``), the start-up check of ``connect_timeout``
(``_startup``) and the threads that outlive ``close()`` (``_threads``) live in their own modules.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from redis.exceptions import ResponseError
from typing_extensions import Unpack

from .._connection import AsyncConn, AsyncConnection, check_cluster_keys
from .._fail_fast import connect_budget
from .._retry import TRANSIENT, Outage, RetryBackoff, classify, stop_tasks
from .._run_state import RunState
from ..errors import PendingChildrenError, ScriptError, UnrecoverableError, error_for_code
from ..job import Job
from ..ops import now_ms
from ..ops import worker as wops
from ..options import Duration, WorkerOptions, WorkerOptionsDict, to_ms, to_seconds
from ..protocol import codes
from ..protocol.keys import DEFAULT_PREFIX, queue_keys
from ..telemetry import Telemetry
from ._backoff import BackoffStrategy
from ._cancel import CLOSING_REASON, CancelMixin, ControlListener
from ._execute import REQUEUE, JobRunner, Outcome, Processor, log_outcome
from ._fetch import MarkerWaiter
from ._hooks import EVENTS, HookEvent, Hooks, HooksMixin
from ._lifecycle import Lifecycle, WorkerState
from ._locks import LockRenewer
from ._manual import ManualFetcher, ManualMixin
from ._metrics import install as install_metrics
from ._outages import OutageLog, call_through_outages
from ._pool import ProcessPool
from ._pooling import check_pool_options, warn_at_start_up
from ._schedulers import SchedulerContinuer
from ._stalled import StalledChecker
from ._startup import check_reachable, connect_when_reachable
from ._threads import ThreadTracker
from ._watchdog import LoopWatchdog

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
T = TypeVar("T")

#: Node's maximumRateLimitDelay: never sleep longer than this for a rate limit.
MAX_RATE_LIMIT_DELAY = 30.0
#: Seconds ``close()`` keeps trying, after the grace period, to record outcomes and hand jobs
#: back through a busy or unreachable Redis (the CLI's own stop deadline is 15 s later).
FINISH_DEADLINE = 10.0
#: Finish calls a worker keeps in flight at once, each with its share of the outcomes: while
#: Redis runs one, the worker runs the jobs another returned.
FINISH_CALLS_IN_FLIGHT = 2


@dataclass(slots=True)
class _Finished:
    job: Job
    token: str
    outcome: Outcome
    started: float


class Worker(HooksMixin, CancelMixin, ManualMixin):
    """Processes jobs of one queue.

    Args:
        queue: the queue name.
        processor: ``async def f(job)`` or ``def f(job)`` (run in a thread pool, or with
            ``processes=N`` in N child processes that import it by ``module:function``); its
            return value, which must be JSON-serialisable, becomes the job's return value. None for
            a worker that is never run, only used to take jobs by hand (:meth:`get_next_job`).
        connection: a ``redis.asyncio.Redis`` you own, or a URL (opened and closed by the worker).
            The worker opens one more connection of its own for blocking.
        prefix: the key prefix.
        concurrency: how many jobs run at once (default: 1, or ``processes`` when that keyword
            is given).
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
        connection: AsyncConnection,
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
        self.options = WorkerOptions(**{**_fields_of(base), **changes})
        if processor is not None and not callable(processor):
            raise TypeError("processor must be callable (or None, to take jobs by hand)")
        self._processor_path = (
            None if processor is None else check_pool_options(processor, self.options)
        )
        self._pool: ProcessPool | None = None
        self._processor = processor
        self._backoff_strategy = backoff_strategy
        self._telemetry = Telemetry.coerce(telemetry)
        self._connect_timeout = None if connect_timeout is None else connect_budget(connect_timeout)
        self._conn = AsyncConn(connection, pipelined=True, connect_timeout=self._connect_timeout)
        self._schedulers = SchedulerContinuer(self._keys, self._conn, self._give_up)
        check_cluster_keys(connection, self._keys)
        self.id = str(uuid.uuid4())
        self._life = Lifecycle()
        self._token_counter = 0
        self._running: dict[str, asyncio.Task[None]] = {}  # token -> task running its processor
        self._held: dict[str, str] = {}  # token -> job id, for every job we hold in `active`
        self._pending: list[_Finished] = []
        self._reserved = 0
        self._paused = False
        self._rate_limit_until = 0.0
        self._empty_hint = False
        self._next_delayed = 0
        self._fetch_idle = False  # the fetch loop waits (no call in flight): safe to cancel
        self._flush_owner: asyncio.Task[Any] | None = None  # a job task recording outcomes
        self._close_deadline: float | None = None
        self._handing_back: dict[str, asyncio.Task[None]] = {}  # token -> hand-back task
        # The batches of outcomes in finish calls in flight (at most FINISH_CALLS_IN_FLIGHT),
        # by id of the batch list.
        self._recording: dict[int, list[_Finished]] = {}
        self._in_flight = 0  # finish calls in flight (from the finisher or a job task)
        self._wake: asyncio.Event | None = None
        self._flush: asyncio.Event | None = None
        self._cut_grace: asyncio.Event | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._waiter: MarkerWaiter | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._stopped: asyncio.Event | None = None
        self._hooks = Hooks()
        if metrics_registry is not None:  # Prometheus metrics, updated by hooks
            install_metrics(self._hooks, queue, metrics_registry)
        self._runs: dict[str, RunState] = {}  # token -> the run of a job being processed
        self._threads = ThreadTracker()
        self._side_tasks: list[asyncio.Task[Any]] = []  # control channel, loop watchdog
        self._manual: ManualFetcher | None = None
        self._drained = False
        self._async_processor = False
        self._control: ControlListener | None = None
        self._watchdog: LoopWatchdog | None = None

    # -- public lifecycle ----------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The queue this worker processes."""
        return self._keys.name

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
        return self._paused

    async def run(self) -> None:
        """Process jobs until :meth:`close` is called (from another task or a signal handler).

        Raises:
            RedisUnavailableError: with ``connect_timeout``, Redis could not be reached (or
                refused the credentials) at start-up; the worker is then closed.
            RuntimeError: the worker ran before, or has no processor.
        """
        if self._life.state is not WorkerState.NEW:
            raise RuntimeError("a Worker runs once; create a new one")
        if self._processor is None:
            raise RuntimeError(
                "this Worker has no processor: use it to take jobs by hand (get_next_job), "
                "or give it a processor to run()"
            )
        if self._connect_timeout is not None:
            await self._check_reachable(self._connect_timeout)
            if self._life.state is not WorkerState.NEW:  # closed meanwhile
                return
        self._life.move(WorkerState.RUNNING)
        self._wake = asyncio.Event()
        self._connected = asyncio.Event()
        self._flush = asyncio.Event()
        self._cut_grace = asyncio.Event()
        self._stopped = asyncio.Event()
        opts = self.options
        self._executor = ThreadPoolExecutor(
            max_workers=opts.concurrency, thread_name_prefix=f"echomq-{self.name}"
        )
        if self._processor_path is not None:  # processes=N: start the children first
            self._pool = ProcessPool(
                self._processor_path, opts.processes, opts.max_tasks_per_child, self.name
            )
            await self._pool.start()
        warn_at_start_up(self._processor, opts, self.name)
        processor = self._processor
        is_async = inspect.iscoroutinefunction(processor) or inspect.iscoroutinefunction(
            getattr(processor, "__call__", None)  # noqa: B004
        )
        self._async_processor = is_async
        if not is_async and self._pool is None:  # know which threads outlive close()
            processor = self._threads.wrap(processor)
        self._runner = JobRunner(
            processor,
            opts,
            self._backoff_strategy,
            self._executor,
            self._rate_limited,
            pool=self._pool,
            telemetry=self._telemetry,
            worker=(self.id, opts.name),
        )
        blocking = self._conn.new_client(
            client_name=self._keys.worker_client_name(opts.name), socket_timeout=None
        )
        self._waiter = MarkerWaiter(
            self._keys, blocking, to_seconds(opts.drain_delay, "drain_delay")
        )
        renewer = LockRenewer(
            self._keys,
            self._conn,
            lambda: dict(self._held),
            opts.lock_ms,
            opts.renew_interval,
            on_lost=lambda ids: self._hooks.emit("lock_renewal_failed", ids),
        )
        checker = StalledChecker(
            self._keys,
            self._conn,
            to_seconds(opts.stalled_interval, "stalled_interval"),
            opts.max_stalled_count,
            on_recovered=self._on_stalled,
        )
        life = self._life
        self._tasks = [
            asyncio.create_task(self._fetch_loop(), name=f"echomq-fetch-{self.name}"),
            asyncio.create_task(self._finish_loop(), name=f"echomq-finish-{self.name}"),
            asyncio.create_task(renewer.run(life.may_renew), name=f"echomq-locks-{self.name}"),
            asyncio.create_task(
                self._once_connected(lambda: checker.run(life.may_check_stalled)),
                name=f"echomq-stalled-{self.name}",
            ),
        ]
        self._start_side_tasks(processor)
        try:
            await self._stopped.wait()
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
        life = self._life
        if life.state is WorkerState.NEW:
            life.move(WorkerState.CLOSED)
            if self._manual is not None:
                await self._manual.aclose()
            await self._conn.aclose()
            return
        if life.state is not WorkerState.RUNNING:
            if self._stopped is None:  # closed before it ever ran
                return
            if force and self._cut_grace is not None:
                self._cut_grace.set()
            await self._stopped.wait()
            return
        assert self._stopped is not None and self._cut_grace is not None
        life.move(WorkerState.CLOSING)
        self._hooks.emit("closing")
        if force:
            self._cut_grace.set()
        if not self._tasks:  # run() failed before it started its loops
            await self._end()
            return
        fetch_task, finish_task, renew_task, stalled_task = self._tasks
        self._wake_fetcher()
        if self._fetch_idle:  # a call in flight is never cut: its jobs are handed back
            fetch_task.cancel()
        await stop_tasks([stalled_task])
        await self._wait_grace()
        loop = asyncio.get_running_loop()
        self._close_deadline = loop.time() + FINISH_DEADLINE
        for run in self._runs.values():  # sync processors see job.cancelled
            run.cancel(CLOSING_REASON, requeue=True, by_close=True)
        await stop_tasks([t for t in self._running.values() if t is not self._flush_owner])
        for token, task in list(self._running.items()):
            if task.done():  # cancelled before it ever ran
                self._running.pop(token, None)
        assert self._flush is not None
        self._flush.set()  # record what finished; the finisher returns once nothing is pending
        await asyncio.wait([finish_task], timeout=FINISH_DEADLINE + 1)
        await self._hand_back_held()
        await stop_tasks([fetch_task, finish_task, renew_task, *self._side_tasks])
        await self._end()
        logger.info("worker %s on queue %s closed", self.id, self.name)
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
        """Stop taking new jobs in this worker only (nothing is written to Redis)."""
        self._paused = True
        if wait_for_active and self._running:
            await asyncio.gather(*self._running.values(), return_exceptions=True)

    def resume(self) -> None:
        """Take jobs again after :meth:`pause`."""
        self._paused = False
        self._wake_fetcher()

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
        if task.done() and not task.cancelled() and task.exception() is not None:
            task.result()  # the start-up error (connect_timeout)
        return self

    # -- start-up --------------------------------------------------------------------------------

    async def _check_reachable(self, budget: float) -> None:
        try:
            await check_reachable(self._conn, budget, self.name)
        except BaseException:
            if self._life.state is WorkerState.NEW:
                self._life.move(WorkerState.CLOSED)
            await self._conn.aclose()
            raise

    def _start_side_tasks(self, processor: Callable[..., Any]) -> None:
        """The control channel listener and the event-loop watchdog."""
        self._control = control = ControlListener(self._keys, self._conn, self._on_control)
        lock_seconds = to_seconds(self.options.lock_duration, "lock_duration")
        name = getattr(processor, "__qualname__", None) or type(processor).__name__
        self._watchdog = LoopWatchdog(self.name, name, lock_seconds, self._running_async)
        self._side_tasks = [
            asyncio.create_task(
                self._once_connected(control.run), name=f"echomq-control-{self.name}"
            ),
            asyncio.create_task(self._watchdog.run(), name=f"echomq-watchdog-{self.name}"),
        ]

    def _running_async(self) -> list[str]:
        """Jobs whose processor runs on the event loop now (for the watchdog)."""
        if not self._runner_is_async():
            return []
        return sorted(self._held[t] for t, run in self._runs.items() if run.in_processor)

    def _runner_is_async(self) -> bool:
        return self._async_processor

    def _on_control(self, request: wops.CancelRequest) -> None:
        self._cancel(request.job_id, request.reason, request.requeue)

    def _on_stalled(self, job_ids: list[str]) -> None:
        for job_id in job_ids:
            self._hooks.emit("stalled", job_id)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
        await asyncio.gather(self._run_task, return_exceptions=True)

    # -- closing ---------------------------------------------------------------------------------

    async def _wait_grace(self) -> None:
        """Wait for running jobs until they end, the grace period ends, or it is cut short."""
        assert self._cut_grace is not None
        loop = asyncio.get_running_loop()
        deadline = loop.time() + to_seconds(self.options.close_grace, "close_grace")
        while self._running and not self._cut_grace.is_set():
            left = deadline - loop.time()
            if left <= 0:
                return
            cut = asyncio.ensure_future(self._cut_grace.wait())
            try:
                await asyncio.wait(
                    [*self._running.values(), cut],
                    timeout=left,
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                cut.cancel()

    async def _hand_back_held(self) -> None:
        """Hand back every job still held whose outcome is not waiting to be recorded."""
        recording = [f for batch in self._recording.values() for f in batch]
        pending = {f.token for f in (*self._pending, *recording)}
        for token, job_id in list(self._held.items()):
            if token not in pending:
                self._spawn_hand_back(job_id, token, "the worker closed before it finished")
        if self._handing_back:
            await asyncio.wait(list(self._handing_back.values()), timeout=FINISH_DEADLINE + 1)

    async def _end(self) -> None:
        if self._waiter is not None:
            await self._waiter.aclose()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        if self._pool is not None:
            await self._pool.close()
        await self._conn.aclose()
        self._life.move(WorkerState.CLOSED)
        assert self._stopped is not None
        self._stopped.set()

    def _give_up(self) -> bool:
        """Whether a call meeting an outage should stop retrying: only once ``close()`` has
        passed its deadline. A running worker keeps trying while its locks are renewed."""
        deadline = self._close_deadline
        return deadline is not None and asyncio.get_running_loop().time() > deadline

    def _spawn_hand_back(self, job_id: str, token: str, why: str) -> None:
        if token in self._handing_back:
            return
        self._handing_back[token] = asyncio.create_task(
            self._hand_back(job_id, token, why), name=f"echomq-hand-back-{job_id}"
        )

    async def _hand_back(self, job_id: str, token: str, why: str) -> None:
        """Put a held job back at the front of ``wait`` now (its lock stays renewed until
        then), rather than leave it to the stalled check."""
        try:
            code = await self._return_to_wait(job_id, token, "hand back")
        except Exception as exc:  # a script error: the stalled check recovers the job
            code = None
            logger.error("queue=%s job=%s could not be handed back: %s", self.name, job_id, exc)
        finally:
            self._handing_back.pop(token, None)
        if code is None:
            logger.warning(
                "queue=%s job=%s not handed back (Redis unavailable); the stalled check will "
                "recover it once its lock expires",
                self.name,
                job_id,
            )
        elif code >= 0:
            logger.info(
                "queue=%s job=%s handed back to wait: %s",
                self.name,
                job_id,
                why,
                extra={"queue": self.name, "job_id": job_id, "status": "handed-back"},
            )
        else:
            logger.warning(
                "queue=%s job=%s not handed back: %s",
                self.name,
                job_id,
                error_for_code(code, job_id=job_id, command="hand back", state="active"),
            )

    # -- internals -------------------------------------------------------------------------------

    def _free_slots(self, *, for_finisher: bool = False) -> int:
        """Slots a fetch may fill now.

        Slots of jobs whose outcome waits to be recorded belong to the finisher, which takes
        the next jobs in the same call; the fetch loop only fills the others.
        """
        if self._paused or not self._life.may_fetch():
            return 0
        if time.monotonic() < self._rate_limit_until:
            return 0
        free = self.options.concurrency - len(self._running) - self._reserved
        return free if for_finisher else free - len(self._pending)

    @functools.cached_property
    def _fetch_params(self) -> wops.FetchParams:
        """The worker's part of every fetch (its options do not change once built)."""
        opts = self.options
        limiter = opts.limiter
        return wops.FetchParams(
            token_prefix=f"{self.id}:",
            lock_ms=opts.lock_ms,
            limiter_max=limiter.max if limiter else None,
            limiter_duration_ms=to_ms(limiter.duration, "limiter.duration") if limiter else None,
            name=opts.name or "",
            metrics_max_points=opts.metrics_max_data_points,
        )

    async def _call(
        self, items: list[list[Any]], fetch: int, outages: list[OutageLog] | None = None
    ) -> wops.FinishReply | None:
        """One finishAndFetch call, carried through outages (None: gave up while closing).

        After a lost reply the call is resent in the script's resend mode, with the same items
        and tokens, so that nothing is recorded twice and the jobs the lost call took are
        returned again rather than left for the stalled check. When the call met an outage,
        its log is appended to ``outages`` (made only then: the common case allocates none).
        """
        self._reserved += fetch
        start = self._token_counter
        self._token_counter += fetch
        keys, params = self._keys, self._fetch_params
        try:
            try:  # the common case, without the retry machinery
                op = wops.finish_and_fetch(keys, items, fetch, start, params, now_ms())
                return await self._conn.run(op)
            except Exception as exc:
                kind = classify(exc)
                if kind is None:
                    raise
                what = f"queue={self.name} recording {len(items)} outcome(s)" if items else ""
                log = OutageLog(what or f"queue={self.name} fetching")
                if outages is not None:
                    outages.append(log)
                log.failed(exc, kind)
                first_resend = kind is Outage.REPLY_LOST

            def attempt(resend: bool) -> Awaitable[wops.FinishReply]:
                op = wops.finish_and_fetch(
                    keys, items, fetch, start, params, now_ms(), resend=resend or first_resend
                )
                return self._conn.run(op)

            def give_up() -> bool:
                # a plain fetch is dropped once fetching stops, unless its jobs must be found
                idle_fetch = not items and not log.lost and not self._life.may_fetch()
                return idle_fetch or self._give_up()

            if give_up():
                return None
            return await call_through_outages(log.what, attempt, give_up, log=log)
        finally:
            self._reserved -= fetch

    def _dispatch(self, reply: wops.FinishReply, *, keep_one: bool = False) -> Job | None:
        """Start the jobs a call took, each in its own task; with ``keep_one`` the first is
        returned instead, for the calling job task to run next (saving a task switch).

        Jobs a call returns once the worker is closing are handed back at once."""
        kept: Job | None = None
        for gone in reply.dangling:
            logger.warning(
                "queue=%s job=%s was in %s but its hash is missing; removed",
                self.name,
                gone.id,
                gone.structure,
                extra={
                    "queue": self.name,
                    "job_id": gone.id,
                    "status": "dangling",
                    "structure": gone.structure,
                },
            )
        closing = not self._life.may_fetch()
        for fetched in reply.jobs:
            self._held[fetched.token] = fetched.id
            if closing:
                self._spawn_hand_back(fetched.id, fetched.token, "taken while closing")
                continue
            job = Job.from_hash(fetched.id, fetched.hash, self._keys, self._conn)
            job._token = fetched.token
            if keep_one and kept is None:
                kept = job
                self._running[fetched.token] = asyncio.current_task()  # type: ignore[assignment]
                continue
            self._running[fetched.token] = asyncio.create_task(
                self._execute(job), name=f"echomq-job-{fetched.id}"
            )
        if reply.rate_limit_ttl_ms > 0:
            delay = min(reply.rate_limit_ttl_ms / 1000, MAX_RATE_LIMIT_DELAY)
            self._rate_limit_until = time.monotonic() + delay
        self._next_delayed = reply.next_delayed_ms
        return kept

    async def _idle(self, awaitable: Awaitable[T]) -> T:
        """Await something the fetch loop may be cancelled in (no call in flight)."""
        self._fetch_idle = True
        try:
            return await awaitable
        finally:
            self._fetch_idle = False

    async def _once_connected(self, loop: Callable[[], Awaitable[None]]) -> None:
        """Run ``loop()`` once the worker has connected (it has started)."""
        await self._connected.wait()
        await loop()

    async def _fetch_loop(self) -> None:
        assert self._wake is not None and self._waiter is not None
        waiter, backoff = self._waiter, RetryBackoff.for_outages()
        outage: OutageLog | None = None  # the current run of failed fetches, if any
        life = self._life
        # Connect the blocking connection now, so `get_workers` lists this worker at once;
        # the worker has started once it is connected (_startup).
        stopping = lambda: not life.may_fetch()  # noqa: E731
        address = self._conn.address
        if not await self._idle(
            connect_when_reachable(waiter.connect, address, self.name, stopping)
        ):
            return
        logger.info("worker %s started on queue %s (Redis at %s)", self.id, self.name, address)
        self._connected.set()
        while life.may_fetch():
            try:
                wait = self._rate_limit_until - time.monotonic()
                if wait > 0:  # a wake-up re-reads the limit, which may have changed
                    self._wake.clear()
                    await self._idle(_wait_for(self._wake, wait))
                    continue
                if self._free_slots() <= 0:
                    self._wake.clear()
                    await self._idle(self._wake.wait())
                    continue
                if self._empty_hint:
                    self._empty_hint = False
                    await self._idle(waiter.wait(self._next_delayed))
                    # A finish call that found the queue empty while we waited set the hint
                    # again, but the marker (or the timeout) that ended the wait is newer news:
                    # waiting again on that stale hint slept out drain_delay with a job ready.
                    self._empty_hint = False
                    continue
                reply = await self._call([], self._free_slots())
                if reply is None:
                    return
                self._dispatch(reply)
                self._empty_hint = not reply.jobs and reply.rate_limit_ttl_ms == 0
                if self._empty_hint != self._drained:  # report each drain once
                    self._drained = self._empty_hint
                    if self._drained:
                        self._hooks.emit("drained")
                backoff.reset()
                if outage is not None:
                    outage.recovered()
                    outage = None
            except asyncio.CancelledError:
                raise
            except TRANSIENT as exc:
                kind = classify(exc)
                if kind is None:
                    logger.warning("fetching failed (%s: %s); retrying", type(exc).__name__, exc)
                else:  # an outage: warned when it starts, every few seconds, and when it ends
                    outage = outage or OutageLog(f"queue={self.name} fetching", "retrying")
                    outage.failed(exc, kind)
                self._hooks.emit("error", exc)
                await self._idle(backoff.sleep())
            except Exception as exc:  # the loop must never die silently
                logger.exception("fetch loop error (%s); retrying", exc)
                self._hooks.emit("error", exc)
                await self._idle(backoff.sleep())

    async def _execute(self, job: Job | None) -> None:
        """Run a job; then, when it was the only one running and no finish call is in flight,
        record its outcome and take the next job in this same task (one script call and no
        task switch per job); otherwise the finisher records it with the next batch."""
        assert self._flush is not None
        task = asyncio.current_task()
        while job is not None:
            token = job._token or ""
            if not self._life.may_fetch():  # kept for this task while the worker began closing
                self._running.pop(token, None)
                self._spawn_hand_back(job.id, token, "taken while closing")
                self._flush.set()  # the finisher re-checks whether anything still runs
                return
            started = time.monotonic()
            self._runs[token] = job._run = self._new_run(job)
            try:
                if job.repeat_job_key:  # an iteration of a job scheduler: make the next one first
                    await self._schedulers.on_taken(job)
                self._hooks.emit("active", job)
                if self._watchdog is not None and self._runner_is_async():
                    self._watchdog.note(job.id)
                outcome = await self._runner.run(job, token)
                if outcome.status == REQUEUE:  # cancel_job(requeue=True)
                    await self._return_to_wait(job.id, token, "cancel")
            except asyncio.CancelledError:  # closing: close() hands the job back
                self._running.pop(token, None)
                self._runs.pop(token, None)
                self._flush.set()
                raise
            except Exception as exc:  # a bug of ours: hand the job back rather than hold it
                logger.exception("job %s: unexpected worker error: %s", job.id, exc)
                self._running.pop(token, None)
                self._runs.pop(token, None)
                self._hooks.emit("error", exc)
                self._spawn_hand_back(job.id, token, f"unexpected worker error: {exc}")
                return
            self._running.pop(token, None)
            self._runs.pop(token, None)
            if outcome.item is None:
                self._held.pop(token, None)
                log_outcome(self.name, job, outcome, started)
                self._emit_outcome(job, outcome)
                self._wake_fetcher()
                return
            self._pending.append(_Finished(job, token, outcome, started))
            if self._running or self._in_flight or not self._life.may_fetch():
                # other jobs are running (their outcomes will share the next call), or a call
                # is in flight: the finisher records the batch
                self._flush.set()
                return
            self._in_flight += 1
            self._flush_owner = task
            try:
                job = await self._flush_pending(keep_one=True)
            finally:
                self._flush_owner = None
                self._in_flight -= 1
                if self._pending or not self._life.may_fetch():
                    # more to record, or a closing finisher waits for no call in flight
                    self._flush.set()

    @functools.cached_property
    def _batch_size(self) -> int:
        """The most outcomes one finish call records: a share of ``concurrency`` (see
        :meth:`_finish_loop`), or one without ``batch_finish``."""
        if not self.options.batch_finish:
            return 1
        return max(1, -(-self.options.concurrency // FINISH_CALLS_IN_FLIGHT))

    def _new_run(self, job: Job) -> RunState:
        hooks = self._hooks
        on_progress = None
        if hooks.has("progress"):
            on_progress = functools.partial(hooks.emit, "progress", job)
        return RunState(asyncio.get_running_loop(), on_progress)

    def _emit_outcome(self, job: Job, outcome: Outcome) -> None:
        """The ``completed`` / ``failed`` hooks of a recorded outcome."""
        if outcome.status == "completed":
            self._hooks.emit("completed", job, job.return_value)
        elif outcome.error is not None and outcome.status != REQUEUE:
            self._hooks.emit("failed", job, outcome.error)

    async def _flush_pending(self, *, keep_one: bool = False) -> Job | None:
        """Record every pending outcome, call after call (a job task's own flush, its flight
        slot taken by the caller); returns a job kept for the caller."""
        kept: Job | None = None
        while self._pending:
            job = await self._flush_guarded(keep_one=keep_one and kept is None)
            kept = kept or job
        return kept

    async def _flush_guarded(self, *, keep_one: bool = False) -> Job | None:
        """:meth:`_flush_once`, logging (and pausing after) an unexpected error: the finisher
        must never die silently."""
        try:
            return await self._flush_once(keep_one=keep_one)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.exception("finish loop error (%s)", exc)
            self._hooks.emit("error", exc)
            await asyncio.sleep(0.1)
            return None

    def _wake_fetcher(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _finish_loop(self) -> None:
        """Record pending outcomes, with up to :data:`FINISH_CALLS_IN_FLIGHT` calls at once.

        A call carries at most a share of ``concurrency`` outcomes, so that while Redis runs
        one batch the worker runs the jobs the other call returned: the worker and Redis work
        at the same time instead of taking turns.
        """
        assert self._flush is not None
        flights: set[asyncio.Task[None]] = set()
        try:
            while True:
                await self._flush.wait()
                self._flush.clear()
                while self._pending and self._in_flight < FINISH_CALLS_IN_FLIGHT:
                    self._in_flight += 1
                    flight = asyncio.create_task(self._flight(), name=f"echomq-finish-{self.name}")
                    flights.add(flight)
                    flight.add_done_callback(flights.discard)
                idle = not self._running and not self._pending and not self._in_flight
                if not self._life.may_fetch() and idle:
                    return
        finally:
            await stop_tasks(list(flights))

    async def _flight(self) -> None:
        """One finish call of the finisher (the flight slot is taken by the caller)."""
        assert self._flush is not None
        try:
            await self._flush_guarded()
        finally:
            self._in_flight -= 1
            self._flush.set()  # more may be pending, or the worker may be closing

    async def _flush_once(self, *, keep_one: bool = False) -> Job | None:
        size = self._batch_size
        batch, self._pending = self._pending[:size], self._pending[size:]
        # The slots of outcomes still pending belong to the call that will record them.
        fetch = max(self._free_slots(for_finisher=True) - len(self._pending), 0)
        items = [f.outcome.item for f in batch if f.outcome.item is not None]
        outages: list[OutageLog] = []
        self._recording[id(batch)] = batch
        try:
            reply = await self._call(items, fetch, outages)
        except ResponseError as exc:
            await self._record_one_by_one(batch, exc)
            self._wake_fetcher()
            return None
        finally:
            del self._recording[id(batch)]
        log = outages[0] if outages else None
        if reply is None:  # closing, and Redis stayed unavailable past the deadline
            for finished in batch:
                self._held.pop(finished.token, None)
                logger.error(
                    "queue=%s job=%s outcome %s may not be recorded: Redis stayed unavailable "
                    "(%s) until the worker had to close; the stalled check recovers the job",
                    self.name,
                    finished.job.id,
                    finished.outcome.status,
                    log.last_error if log is not None else "",
                )
            return None
        for finished, code in zip(batch, reply.codes):
            self._record(finished, code, log)
        kept = self._dispatch(reply, keep_one=keep_one)
        if len(reply.jobs) < fetch or any(code < 0 for code in reply.codes):
            # the queue ran dry (or a slot was not refilled): the fetch loop takes over
            self._empty_hint = reply.rate_limit_ttl_ms == 0
            self._wake_fetcher()
        return kept

    def _record(
        self,
        finished: _Finished,
        code: int,
        log: OutageLog | None = None,
        *,
        after_error: bool = False,
    ) -> None:
        if code in _CHILDREN_CODES and finished.outcome.status == "completed":
            self._refuse_completion(finished, code)  # the job stays held: it is still locked
            return
        self._held.pop(finished.token, None)
        if code >= 0:
            log_outcome(self.name, finished.job, finished.outcome, finished.started)
            self._emit_outcome(finished.job, finished.outcome)
            if code == codes.RECORDED_BEFORE:
                logger.info(
                    "queue=%s job=%s outcome %s had been recorded by a call whose reply was lost",
                    self.name,
                    finished.job.id,
                    finished.outcome.status,
                )
        elif after_error and code in (codes.JOB_LOCK_NOT_EXIST, codes.JOB_NOT_IN_STATE):
            # The failed call wrote this outcome before erroring (scripts are not rolled back).
            logger.info(
                "queue=%s job=%s outcome %s was recorded before a script error",
                self.name,
                finished.job.id,
                finished.outcome.status,
            )
        else:
            cause = log.last_error if log is not None else None
            self._report_refused(finished, code, cause)

    def _refuse_completion(self, finished: _Finished, code: int) -> None:
        """A parent's completion was refused (-4: children still pending; -9: a child failed
        it): fail the attempt instead, with Node's message, through the normal failure path
        (retries for -4; none for -9). The lock is still held, so the same token records it."""
        job, token = finished.job, finished.token
        error: Exception
        if code == codes.JOB_HAS_FAILED_CHILDREN:
            error = UnrecoverableError(
                f"Cannot complete job {job.id} because it has at least one failed child. "
                "moveToFinished"
            )
        else:
            error = PendingChildrenError(
                f"Job {job.id} has pending dependencies. moveToFinished",
                code=code,
                job_id=job.id,
                command="moveToFinished",
            )

        async def fail_instead() -> None:
            try:
                outcome = await self._runner.failure_outcome(job, token, error)
            finally:
                self._running.pop(token, None)
            self._pending.append(_Finished(job, token, outcome, finished.started))
            assert self._flush is not None
            self._flush.set()

        # Counted as running until queued, so a closing worker waits for it.
        self._running[token] = asyncio.get_running_loop().create_task(fail_instead())

    async def _record_one_by_one(self, batch: list[_Finished], error: ResponseError) -> None:
        """A batch call failed with a script error: record each outcome on its own, so one
        poisoned job (left active, for the stalled check) does not hold back the others."""
        logger.error("queue=%s finishing %d job(s) failed: %s", self.name, len(batch), error)
        for finished in batch:
            if finished.outcome.item is None:
                continue
            try:
                reply = await self._call([finished.outcome.item], 0)
            except ResponseError as exc:
                self._held.pop(finished.token, None)
                logger.error(
                    "queue=%s job=%s outcome %s not recorded (%s); the stalled check will "
                    "recover the job",
                    self.name,
                    finished.job.id,
                    finished.outcome.status,
                    exc,
                )
                continue
            if reply is not None:
                self._record(finished, reply.codes[0], after_error=True)
            else:
                self._held.pop(finished.token, None)

    def _report_refused(
        self, finished: _Finished, code: int, cause: BaseException | None = None
    ) -> None:
        error: ScriptError = error_for_code(
            code,
            job_id=finished.job.id,
            command=f"finish ({finished.outcome.status})",
            state="active",
        )
        because = ""
        if cause is not None and code in (codes.JOB_LOCK_NOT_EXIST, codes.JOB_LOCK_MISMATCH):
            because = f" (the lock expired while Redis was unavailable: {cause})"
        logger.warning(
            "queue=%s job=%s outcome %s not recorded: %s%s",
            self.name,
            finished.job.id,
            finished.outcome.status,
            error,
            because,
        )

    async def _return_to_wait(self, job_id: str, token: str, what: str) -> int | None:
        """Move a held job from active back to the front of wait (moveJobFromActiveToWait),
        through outages; the job is no longer held afterwards, whatever happened.

        Returns the script's reply (the limiter TTL, or an error code), 0 when a resend found
        the lock gone because the lost send had already moved the job, or None when the
        worker gave up (closing, Redis unavailable past the deadline).
        """
        op = wops.move_job_from_active_to_wait(self._keys, job_id, token)
        log = OutageLog(f"queue={self.name} job={job_id} {what}")
        try:
            code = await call_through_outages(
                log.what, lambda _resend: self._conn.run(op), self._give_up, log=log
            )
        finally:
            self._held.pop(token, None)
        if code == codes.JOB_LOCK_NOT_EXIST and log.resent:
            return 0
        return code

    async def _rate_limited(self, job: Job, token: str) -> None:
        # Fetch nothing until the reply tells how long the limit lasts: the job goes back to
        # wait with a marker, which could wake this worker's own blocking fetch first, and a
        # worker without a limiter would otherwise take the job straight back.
        until = self._rate_limit_until
        provisional = self._rate_limit_until = time.monotonic() + MAX_RATE_LIMIT_DELAY
        try:
            ttl = await self._return_to_wait(job.id, token, "rate limit")
        finally:
            if self._rate_limit_until == provisional:  # no reply set a limit meanwhile
                self._rate_limit_until = until
            self._wake_fetcher()  # it may be sleeping out the provisional limit
        if ttl is None:
            return
        if ttl < 0:
            raise error_for_code(ttl, job_id=job.id, command="rate limit", state="active")
        if ttl > 0:
            self._rate_limit_until = time.monotonic() + min(ttl / 1000, MAX_RATE_LIMIT_DELAY)


#: Codes refusing a parent's completion, which then fails (Node does the same).
_CHILDREN_CODES = (codes.JOB_PENDING_CHILDREN, codes.JOB_HAS_FAILED_CHILDREN)


async def _wait_for(event: asyncio.Event, timeout: float) -> None:
    """Wait until ``event`` is set or ``timeout`` seconds have passed."""
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({waiter}, timeout=timeout)
    finally:
        waiter.cancel()


def _fields_of(options: WorkerOptions) -> dict[str, Any]:
    return {name: getattr(options, name) for name in WorkerOptions.__dataclass_fields__}
