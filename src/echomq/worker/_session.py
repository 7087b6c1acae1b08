"""One run of a worker: what exists only between ``run()`` and the end of ``close()``.

A :class:`Session` is made by ``Worker.run()`` once the worker is running, and owns everything
that run needs: the blocking connection and its marker waiter, the thread pool, the job runner,
the tables of held and running jobs, the loops (fetching, the finisher, lock renewal, the
stalled check) and the side tasks (the control channel, the event-loop watchdog). It runs the
fetch loop and each job's task, and carries out the two phases of ``close()``: stop fetching and
wait a grace period, then cancel what still runs, record what finished and hand the rest back.
Recording outcomes is the :class:`~._finisher.Finisher`'s job, handing jobs back the
:class:`~._handback.HandBack`'s; the :class:`~._lifecycle.Lifecycle` says what each state allows.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis.asyncio

from .._ops import now_ms
from .._ops import worker as wops
from .._redis.connection import AsyncConn
from .._redis.retry import TRANSIENT, Outage, RetryBackoff, classify, stop_tasks
from .._redis.sentinel_watch import sentinel_pool
from .._run_state import RunState
from ..errors import error_for_code
from ..job import Job
from ..options import WorkerOptions, to_ms, to_seconds
from ..protocol.keys import QueueKeys
from ..telemetry import Telemetry
from ._backoff import BackoffStrategy
from ._batches import Batcher
from ._cancel import CLOSING_REASON, ControlListener, request_cancel
from ._execute import JobRunner, Status, log_outcome
from ._fetch import MarkerWaiter
from ._finisher import Finished, Finisher
from ._handback import HandBack
from ._hooks import Hooks
from ._lifecycle import FINISH_DEADLINE, Lifecycle, WorkerState
from ._locks import LockRenewer, run_in_thread
from ._outages import OutageLog, call_through_outages
from ._pool import ProcessPool
from ._registry import Heartbeat
from ._schedulers import SchedulerContinuer
from ._stalled import StalledChecker
from ._startup import connect_when_reachable
from ._threads import ProcessorThreads, ThreadTracker
from ._watchdog import LoopWatchdog

logger = logging.getLogger("echomq.worker")
T = TypeVar("T")


async def _skipped() -> None:
    """A worker task that an option turned off."""


class Session:
    """The running part of a worker (see the module's docstring).

    Made inside ``Worker.run()`` right after the move to RUNNING, with no await in between, so
    that a running worker always has one; it starts its tasks at once.
    """

    def __init__(
        self,
        *,
        worker_id: str,
        keys: QueueKeys,
        conn: AsyncConn,
        options: WorkerOptions,
        life: Lifecycle,
        hooks: Hooks,
        threads: ThreadTracker,
        schedulers: SchedulerContinuer,
        processor: Callable[..., Any],
        is_async: bool,
        pool: ProcessPool | None,
        backoff_strategy: BackoffStrategy | None,
        telemetry: Telemetry | None,
    ) -> None:
        self.keys = keys
        self.conn = conn
        self.options = options
        self.life = life
        self.hooks = hooks
        self.pool = pool
        self._id = worker_id
        self._name = keys.name
        self._threads = threads
        self._schedulers = schedulers
        self._is_async = is_async
        self.held: dict[str, str] = {}  # token -> job id, for every job we hold in `active`
        self.running: dict[str, asyncio.Task[None]] = {}  # token -> task running its processor
        self.runs: dict[str, RunState] = {}  # token -> the run of a job being processed
        self._token_counter = 0
        self._reserved = 0
        # Tokens of running isolated jobs (each runs alone, see wops.isolated), how many
        # fetching calls are in flight, and until when the worker makes room for an isolated
        # job a fetch set aside (it takes no more jobs until it holds none).
        self._isolated: set[str] = set()
        #: the fetching calls in flight: first token counter -> how many jobs each may take
        self._fetching: dict[int, int] = {}
        self._make_room_until = 0.0
        self._rate_limit_until = 0.0
        # Node's maximumRateLimitDelay: never sleep longer than this for a rate limit
        self._max_rate_limit_delay = to_seconds(
            options.maximum_rate_limit_delay, "maximum_rate_limit_delay"
        )
        self._empty_hint = False
        self._next_delayed = 0
        self._drained = False
        self._fetch_idle = False  # the fetch loop waits (no call in flight): safe to cancel
        self._wake = asyncio.Event()
        self._connected = asyncio.Event()
        self._cut_grace = asyncio.Event()
        self.stopped = asyncio.Event()
        self.hand_back = HandBack(keys, conn, self.held, life.finish_deadline_passed)
        self.finisher = Finisher(self)
        self._executor = ProcessorThreads(options.concurrency, f"echomq-{keys.name}")
        self._batcher: Batcher | None = None
        if options.batch is not None:  # the processor takes lists of jobs
            if not is_async:  # know which threads outlive close()
                processor = threads.wrap_batch(processor)
            job_timeout = options.job_timeout
            processor = self._batcher = Batcher(
                processor,
                options.batch,
                is_async=is_async,
                executor=self._executor,
                default_timeout=(
                    None if job_timeout is None else to_seconds(job_timeout, "job_timeout")
                ),
                queue=keys.name,
            )
        elif not is_async and pool is None:  # know which threads outlive close()
            processor = threads.wrap(processor)
        self.runner = JobRunner(
            processor,
            options,
            backoff_strategy,
            self._executor,
            pool=pool,
            telemetry=telemetry,
            worker=(worker_id, options.name),
        )
        blocking = conn.new_client(
            client_name=keys.worker_client_name(options.name), socket_timeout=None
        )
        self._waiter_delay = to_seconds(options.drain_delay, "drain_delay")
        self._waiter = MarkerWaiter(keys, blocking, self._waiter_delay)
        self.control = ControlListener(keys, conn, self._on_control)
        name = getattr(processor, "__qualname__", None) or type(processor).__name__
        lock_seconds = to_seconds(options.lock_duration, "lock_duration")
        self._watchdog = LoopWatchdog(keys.name, name, lock_seconds, self._running_async)
        self._start_tasks()

    def _start_tasks(self) -> None:
        opts, life, name = self.options, self.life, self._name
        renewer = LockRenewer(
            self.keys,
            self.conn,
            lambda: dict(self.held),
            opts.lock_ms,
            opts.renew_interval,
            on_lost=lambda ids: self.hooks.emit("lock_renewal_failed", ids),
            unread=self._unread_tokens,
            recording=self.finisher.recording_tokens,
        )
        checker = StalledChecker(
            self.keys,
            self.conn,
            to_seconds(opts.stalled_interval, "stalled_interval"),
            opts.max_stalled_count,
            on_recovered=self._on_stalled,
        )
        self._fetch_task = asyncio.create_task(self._fetch_loop(), name=f"echomq-fetch-{name}")
        self._finish_task = asyncio.create_task(self.finisher.run(), name=f"echomq-finish-{name}")
        # skip_lock_renewal / skip_stalled_check: the task ends at once (it is awaited on close)
        # Renewed from a thread: a processor that blocks this loop does not lose its locks.
        renewing = (
            _skipped()
            if opts.skip_lock_renewal
            else run_in_thread(
                renewer,
                life.may_renew,
                self._thread_client,
            )
        )
        self._renew_task = asyncio.create_task(renewing, name=f"echomq-locks-{name}")
        self._stalled_task = asyncio.create_task(
            _skipped()
            if opts.skip_stalled_check
            else self._once_connected(lambda: checker.run(life.may_check_stalled)),
            name=f"echomq-stalled-{name}",
        )
        self._side_tasks = [
            asyncio.create_task(
                self._once_connected(self.control.run), name=f"echomq-control-{name}"
            ),
            asyncio.create_task(self._watchdog.run(), name=f"echomq-watchdog-{name}"),
        ]
        #: the registry heartbeat (docs/workers.md, "Listing workers"); None when turned off
        self._heartbeat: Heartbeat | None = None
        if opts.heartbeat_interval is not None:
            self._heartbeat = beat = Heartbeat(
                self.keys,
                self.conn,
                self._id,
                opts.name,
                self.keys.worker_client_name(opts.name),
                to_seconds(opts.heartbeat_interval, "heartbeat_interval"),
                concurrency=lambda: self.options.concurrency,
                jobs=lambda: sorted(set(self.held.values())),
            )
            self._side_tasks.append(
                asyncio.create_task(
                    self._once_connected(lambda: beat.run(life.may_renew)),
                    name=f"echomq-heartbeat-{name}",
                )
            )

    def _unread_tokens(self) -> list[str]:
        """(Called from the lock thread.) While this loop is blocked, the tokens of the
        fetching calls in flight: the jobs they took are locked, but enter ``held`` only once
        the loop reads the reply, so until then they are renewed by token."""
        if not self._fetching or not self._watchdog.blocked():
            return []
        prefix = self._fetch_params.token_prefix
        calls = list(self._fetching.items())  # a copy: the loop changes the table
        return [f"{prefix}{start + i}" for start, count in calls for i in range(count)]

    def _thread_client(self) -> redis.asyncio.Redis:
        """The lock thread's own client. A Sentinel-managed client shares its Sentinels'
        connections with this loop, so it has none: its locks are renewed on this loop."""
        if sentinel_pool(self.conn.client) is not None:
            raise RuntimeError("a Sentinel-managed client shares its Sentinels with this loop")
        return self.conn.new_client(follow=False, client_name=None)

    # -- what the worker asks of its run -------------------------------------------------------

    def runs_by_id(self) -> dict[str, str]:
        """Job id -> token of every job whose processor this run started and still tracks."""
        return {self.held[token]: token for token in self.runs if token in self.held}

    def cancel(self, job_id: str, reason: str | None, requeue: bool) -> bool:
        """Cancel a job this worker runs; False if it holds no run of it (see
        ``Worker.cancel_job``)."""
        token = self.runs_by_id().get(job_id)
        if token is None:
            return False
        run = self.runs[token]
        done = request_cancel(run, self.running.get(token), reason or "cancelled", requeue=requeue)
        if done:
            logger.info(
                "queue=%s job=%s cancel requested: %s%s",
                self._name,
                job_id,
                run.reason,
                " (back to wait)" if requeue else "",
                extra={"queue": self._name, "job_id": job_id, "status": "cancel-requested"},
            )
        return done

    def set_concurrency(self, options: WorkerOptions) -> None:
        """Run with ``options`` (only ``concurrency`` differs) from now on: :meth:`free_slots`
        reads it, so more slots are filled by the next fetch, and fewer stop new fetches until
        enough running jobs finish (none is interrupted)."""
        self.options = options
        # Threads start on demand up to the pool's bound: raise it with the slots (a bound
        # above the slots does no harm: no more jobs than slots are ever submitted).
        self._executor.widen(options.concurrency)
        self.wake_fetcher()

    def wake_fetcher(self) -> None:
        """Make the fetch loop look again (a slot freed, a limit changed, resumed)."""
        self._wake.set()

    def give_up(self) -> bool:
        """Whether calls meeting an outage stop retrying (a closing worker past its deadline)."""
        return self.life.finish_deadline_passed()

    def _running_async(self) -> list[str]:
        """Jobs whose processor runs on the event loop now (for the watchdog)."""
        if not self._is_async:
            return []
        return sorted(self.held[t] for t, run in self.runs.items() if run.in_processor)

    def _on_control(self, request: wops.CancelRequest) -> None:
        self.cancel(request.job_id, request.reason, request.requeue)

    def _on_stalled(self, job_ids: list[str]) -> None:
        for job_id in job_ids:
            self.hooks.emit("stalled", job_id)

    # -- fetching --------------------------------------------------------------------------------

    def free_slots(self, *, for_finisher: bool = False) -> int:
        """Slots a fetch may fill now.

        Slots of jobs whose outcome waits to be recorded belong to the finisher, which takes
        the next jobs in the same call; the fetch loop only fills the others.
        """
        if not self.life.may_fetch_now():
            return 0
        now = time.monotonic()
        if now < self._rate_limit_until:
            return 0
        if self._isolated and self._isolated.intersection(self.running):
            return 0  # an isolated job runs alone
        if now < self._make_room_until and self.held:
            return 0  # until it holds none: then a fetch may take the isolated job set aside
        free = self.options.concurrency - len(self.running) - self._reserved
        return free if for_finisher else free - len(self.finisher.pending)

    def ran_dry(self, reply: wops.FinishReply) -> None:
        """A finish call took fewer jobs than it asked for: the fetch loop takes over."""
        self._empty_hint = reply.rate_limit_ttl_ms == 0 and not reply.set_aside
        self.wake_fetcher()

    @functools.cached_property
    def _fetch_params(self) -> wops.FetchParams:
        """The worker's part of every fetch (its options do not change once built)."""
        opts = self.options
        limiter = opts.limiter
        return wops.FetchParams(
            token_prefix=f"{self._id}:",
            lock_ms=opts.lock_ms,
            limiter_max=limiter.max if limiter else None,
            limiter_duration_ms=to_ms(limiter.duration, "limiter.duration") if limiter else None,
            name=opts.name or "",
            metrics_max_points=opts.metrics_max_data_points,
        )

    async def call(
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
        keys, params = self.keys, self._fetch_params
        busy = self._busy(len(items))
        if fetch:
            self._fetching[start] = fetch
        try:
            try:  # the common case, without the retry machinery
                op = wops.finish_and_fetch(keys, items, fetch, start, params, now_ms(), busy=busy)
                return await self.conn.run(op)
            except Exception as exc:
                kind = classify(exc)
                if kind is None:
                    raise
                what = f"queue={self._name} recording {len(items)} outcome(s)" if items else ""
                log = OutageLog(what or f"queue={self._name} fetching")
                if outages is not None:
                    outages.append(log)
                log.failed(exc, kind)
                first_resend = kind is Outage.REPLY_LOST

            def attempt(resend: bool) -> Awaitable[wops.FinishReply]:
                op = wops.finish_and_fetch(
                    keys,
                    items,
                    fetch,
                    start,
                    params,
                    now_ms(),
                    resend=resend or first_resend,
                    busy=busy,
                )
                return self.conn.run(op)

            def give_up() -> bool:
                # a plain fetch is dropped once fetching stops, unless its jobs must be found
                idle_fetch = not items and not log.lost and not self.life.may_fetch()
                return idle_fetch or self.give_up()

            if give_up():
                return None
            return await call_through_outages(log.what, attempt, give_up, log=log)
        finally:
            self._reserved -= fetch
            if fetch:
                del self._fetching[start]

    def _busy(self, finishing: int) -> bool:
        """Whether the worker holds jobs besides the ``finishing`` ones a call records, or has
        a fetching call in flight: that call then takes no isolated job, which runs alone."""
        self._isolated.intersection_update(self.held)
        return len(self.held) > finishing or bool(self._fetching)

    def dispatch(self, reply: wops.FinishReply, *, keep_one: bool = False) -> Job | None:
        """Start the jobs a call took, each in its own task; with ``keep_one`` the first is
        returned instead, for the calling job task to run next (saving a task switch).

        Jobs a call returns once the worker takes no more jobs (closing) are handed back."""
        kept: Job | None = None
        for gone in reply.dangling:
            logger.warning(
                "queue=%s job=%s was in %s but its hash is missing; removed",
                self._name,
                gone.id,
                gone.structure,
                extra={
                    "queue": self._name,
                    "job_id": gone.id,
                    "status": "dangling",
                    "structure": gone.structure,
                },
            )
        takes_jobs = self.life.may_fetch()
        for fetched in reply.jobs:
            self.held[fetched.token] = fetched.id
            if not takes_jobs:
                self.hand_back.spawn(fetched.id, fetched.token, "taken while closing")
                continue
            job = Job.from_hash(fetched.id, fetched.hash, self.keys, self.conn)
            job._token = fetched.token
            if wops.isolated(fetched):
                self._isolated.add(fetched.token)
                logger.warning(
                    "queue=%s job=%s runs alone: it stalled %s times, beside other jobs; if "
                    "it stalls once more it fails",
                    self._name,
                    fetched.id,
                    job.stalled_counter,
                    extra={"queue": self._name, "job_id": fetched.id, "status": "isolated"},
                )
            if keep_one and kept is None:
                kept = job
                self.running[fetched.token] = asyncio.current_task()  # type: ignore[assignment]
                continue
            self.running[fetched.token] = asyncio.create_task(
                self._execute(job), name=f"echomq-job-{fetched.id}"
            )
        if reply.set_aside:  # an isolated job waits for a worker that holds nothing else
            self._make_room_until = time.monotonic() + self._waiter_delay
        elif self._make_room_until and not self.held:
            self._make_room_until = 0.0
            self.wake_fetcher()  # the room is made: fetch now
        if reply.rate_limit_ttl_ms > 0:
            delay = min(reply.rate_limit_ttl_ms / 1000, self._max_rate_limit_delay)
            self._rate_limit_until = time.monotonic() + delay
        # A call that filled its count says nothing of the next due time (0): keep what an
        # earlier call that ran dry said, which a wait on the empty hint may still need.
        if reply.next_delayed_ms or not reply.jobs:
            self._next_delayed = reply.next_delayed_ms
            self._waiter.due_by(reply.next_delayed_ms)  # a wait under way ends then too
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
        waiter, backoff = self._waiter, RetryBackoff.for_outages()
        outage: OutageLog | None = None  # the current run of failed fetches, if any
        life = self.life
        # Connect the blocking connection now, so `get_workers` lists this worker at once;
        # the worker has started once it is connected (_startup).
        stopping = lambda: not life.may_fetch()  # noqa: E731
        address = self.conn.address
        if not await self._idle(
            connect_when_reachable(waiter.connect, address, self._name, stopping)
        ):
            return
        logger.info("worker %s started on queue %s (Redis at %s)", self._id, self._name, address)
        self._connected.set()
        self.hooks.emit("ready")
        while life.may_fetch():
            try:
                wait = self._rate_limit_until - time.monotonic()
                if wait > 0:  # a wake-up re-reads the limit, which may have changed
                    self._wake.clear()
                    await self._idle(_wait_for(self._wake, wait))
                    continue
                if self.free_slots() <= 0:
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
                reply = await self.call([], self.free_slots())
                if reply is None:
                    return
                self.dispatch(reply)
                if not reply.jobs and reply.set_aside:
                    # Only isolated jobs are ready and this worker is busy: the call put the
                    # marker back for other workers, so wait for the room to be made.
                    self._wake.clear()
                    await self._idle(_wait_for(self._wake, self._waiter_delay))
                    continue
                self._empty_hint = not reply.jobs and reply.rate_limit_ttl_ms == 0
                if self._empty_hint != self._drained:  # report each drain once
                    self._drained = self._empty_hint
                    if self._drained:
                        self.hooks.emit("drained")
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
                    outage = outage or OutageLog(f"queue={self._name} fetching", "retrying")
                    outage.failed(exc, kind)
                self.hooks.emit("error", exc)
                await self._idle(backoff.sleep())
            except Exception as exc:  # the loop must never die silently
                logger.exception("fetch loop error (%s); retrying", exc)
                self.hooks.emit("error", exc)
                await self._idle(backoff.sleep())

    # -- running jobs ----------------------------------------------------------------------------

    async def _execute(self, job: Job | None) -> None:
        """Run a job; then, when it was the only one running and no finish call is in flight,
        record its outcome and take the next job in this same task (one script call and no
        task switch per job); otherwise the finisher records it with the next batch."""
        finisher = self.finisher
        while job is not None:
            token = job._token or ""
            if not self.life.may_fetch():  # kept for this task while the worker began closing
                self.running.pop(token, None)
                self.hand_back.spawn(job.id, token, "taken while closing")
                finisher.kick()  # the finisher re-checks whether anything still runs
                return
            started = time.monotonic()
            self.runs[token] = job._run = self._new_run(job)
            try:
                if job.repeat_job_key:  # an iteration of a job scheduler: make the next one first
                    await self._schedulers.on_taken(job)
                self.hooks.emit("active", job)
                if self._is_async:
                    self._watchdog.note(job.id)
                outcome = await self.runner.run(job, token)
                if outcome.status is Status.REQUEUED:  # cancel_job(requeue=True)
                    await self.hand_back.return_to_wait(job.id, token, "cancel")
                elif outcome.status is Status.RATE_LIMITED:
                    await self.rate_limited(job, token)
            except asyncio.CancelledError:  # closing: close() hands the job back
                self.running.pop(token, None)
                self.runs.pop(token, None)
                finisher.kick()
                raise
            except Exception as exc:  # a bug of ours: hand the job back rather than hold it
                logger.exception("job %s: unexpected worker error: %s", job.id, exc)
                self.running.pop(token, None)
                self.runs.pop(token, None)
                self.hooks.emit("error", exc)
                self.hand_back.spawn(job.id, token, f"unexpected worker error: {exc}")
                return
            self.running.pop(token, None)
            self.runs.pop(token, None)
            if outcome.item is None:
                self.held.pop(token, None)
                log_outcome(self._name, job, outcome, started)
                finisher.emit_outcome(job, outcome)
                self.wake_fetcher()
                return
            job = await finisher.finish(Finished(job, token, outcome, started))

    def _new_run(self, job: Job) -> RunState:
        hooks = self.hooks
        on_progress = None
        if hooks.has("progress"):
            on_progress = functools.partial(hooks.emit, "progress", job)
        run = RunState(asyncio.get_running_loop(), on_progress)
        run.run_blocking = self._run_blocking
        return run

    async def _run_blocking(self, fn: Callable[[Any], Any], job: Job) -> Any:
        """``fn(job's blocking twin)`` in the worker's processor threads, tracked as a sync
        processor's call is (``RunState.run_blocking``)."""
        return await self.runner.in_thread(self._threads.wrap(fn), job)

    async def rate_limited(self, job: Job, token: str) -> None:
        """The processor raised RateLimitError: put the job back and hold off fetching for as
        long as the queue's limit lasts."""
        # Fetch nothing until the reply tells how long the limit lasts: the job goes back to
        # wait with a marker, which could wake this worker's own blocking fetch first, and a
        # worker without a limiter would otherwise take the job straight back.
        until = self._rate_limit_until
        provisional = self._rate_limit_until = time.monotonic() + self._max_rate_limit_delay
        try:
            ttl = await self.hand_back.return_to_wait(job.id, token, "rate limit")
        finally:
            if self._rate_limit_until == provisional:  # no reply set a limit meanwhile
                self._rate_limit_until = until
            self.wake_fetcher()  # it may be sleeping out the provisional limit
        if ttl is None:
            return
        if ttl < 0:
            raise error_for_code(ttl, job_id=job.id, command="rate limit", state="active")
        if ttl > 0:
            self._rate_limit_until = time.monotonic() + min(ttl / 1000, self._max_rate_limit_delay)

    # -- closing ---------------------------------------------------------------------------------

    async def close(self, *, force: bool) -> None:
        """``Worker.close()`` of a running worker (see there); a second call waits for the
        first, cutting the grace period short with ``force``."""
        life = self.life
        if life.state is not WorkerState.RUNNING:
            if force:
                self._cut_grace.set()
            await self.stopped.wait()
            return
        life.move(WorkerState.CLOSING)
        self.hooks.emit("closing")
        if force:
            self._cut_grace.set()
        self.wake_fetcher()
        if self._fetch_idle:  # a call in flight is never cut: its jobs are handed back
            self._fetch_task.cancel()
        await stop_tasks([self._stalled_task])
        await self._wait_grace()
        self.life.start_finish_deadline()
        for run in self.runs.values():  # sync processors see job.cancelled
            run.cancel(CLOSING_REASON, requeue=True, by_close=True)
        finisher = self.finisher
        await stop_tasks([t for t in self.running.values() if t is not finisher.owner])
        for token, task in list(self.running.items()):
            if task.done():  # cancelled before it ever ran
                self.running.pop(token, None)
        if self._batcher is not None:  # batch calls whose jobs are all gone
            await self._batcher.aclose()
        finisher.kick()  # record what finished; the finisher returns once nothing is pending
        await asyncio.wait([self._finish_task], timeout=FINISH_DEADLINE + 1)
        await self._hand_back_held()
        await stop_tasks([self._fetch_task, self._finish_task, self._renew_task, *self._side_tasks])
        if self._heartbeat is not None and self._connected.is_set():
            await self._heartbeat.remove()
        await self._waiter.aclose()
        self._executor.shutdown(wait=False, cancel_futures=True)
        if self.pool is not None:
            await self.pool.close()
        await self.conn.aclose()
        life.move(WorkerState.CLOSED)
        self.stopped.set()
        logger.info("worker %s on queue %s closed", self._id, self._name)

    async def _wait_grace(self) -> None:
        """Wait for running jobs until they end, the grace period ends, or it is cut short."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + to_seconds(self.options.close_grace, "close_grace")
        while self.running and not self._cut_grace.is_set():
            left = deadline - loop.time()
            if left <= 0:
                return
            cut = asyncio.ensure_future(self._cut_grace.wait())
            try:
                await asyncio.wait(
                    [*self.running.values(), cut],
                    timeout=left,
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                cut.cancel()

    async def _hand_back_held(self) -> None:
        """Hand back every job still held whose outcome is not waiting to be recorded."""
        recorded = self.finisher.tokens()
        for token, job_id in list(self.held.items()):
            if token not in recorded:
                self.hand_back.spawn(job_id, token, "the worker closed before it finished")
        await self.hand_back.wait()


async def _wait_for(event: asyncio.Event, timeout: float) -> None:
    """Wait until ``event`` is set or ``timeout`` seconds have passed."""
    waiter = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({waiter}, timeout=timeout)
    finally:
        waiter.cancel()
