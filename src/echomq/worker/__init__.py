"""The Worker: options and lifecycle; fetching, executing, locks and stalled checks live apart.

A worker pulls jobs off a queue's keys with one atomic script call at a time, runs up to
``concurrency`` processors at once, and records each outcome. Outcomes that arrive while a
call is in flight are recorded together in the next call, which also takes the next jobs, so a
busy worker needs about one script call per batch of jobs instead of two per job. Idle, it
blocks on the marker key. Constructing a Worker does nothing; ``run()`` or ``async with``
starts it, ``close()`` stops it in two phases (stop fetching, wait a grace period, cancel).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from redis.exceptions import ResponseError
from typing_extensions import Unpack

from .._connection import AsyncConn, AsyncConnection, check_cluster_keys
from .._retry import TRANSIENT, Backoff, retrying, stop_tasks
from ..errors import ScriptError, error_for_code
from ..job import Job
from ..ops import now_ms
from ..ops import worker as wops
from ..options import WorkerOptions, WorkerOptionsDict, to_ms, to_seconds
from ..protocol import codes
from ..protocol.keys import DEFAULT_PREFIX, queue_keys
from ._backoff import BackoffStrategy
from ._execute import JobRunner, Outcome, Processor, log_outcome
from ._fetch import MarkerWaiter
from ._locks import LockRenewer
from ._schedulers import SchedulerContinuer
from ._stalled import StalledChecker

__all__ = ["BackoffStrategy", "Processor", "Worker"]

logger = logging.getLogger("echomq.worker")

#: Node's maximumRateLimitDelay: never sleep longer than this for a rate limit.
MAX_RATE_LIMIT_DELAY = 30.0


@dataclass(slots=True)
class _Finished:
    job: Job
    token: str
    outcome: Outcome
    started: float


class Worker:
    """Processes jobs of one queue.

    Args:
        queue: the queue name.
        processor: ``async def f(job)`` or ``def f(job)`` (run in a thread pool); its return
            value, which must be JSON-serialisable, becomes the job's return value.
        connection: a ``redis.asyncio.Redis`` you own, or a URL (opened and closed by the worker).
            The worker opens one more connection of its own for blocking.
        prefix: the key prefix.
        concurrency: how many jobs run at once.
        backoff_strategy: handles custom ``backoff`` types; see :data:`BackoffStrategy`.
        options: a :class:`~echomq.WorkerOptions`; or give its fields as keywords.
    """

    def __init__(
        self,
        queue: str,
        processor: Processor,
        *,
        connection: AsyncConnection,
        prefix: str = DEFAULT_PREFIX,
        concurrency: int | None = None,
        backoff_strategy: BackoffStrategy | None = None,
        options: WorkerOptions | None = None,
        **kwargs: Unpack[WorkerOptionsDict],
    ) -> None:
        self._keys = queue_keys(queue, prefix)
        base = options or WorkerOptions()
        changes: dict[str, Any] = dict(kwargs)
        if concurrency is not None:
            changes["concurrency"] = concurrency
        self.options = WorkerOptions(**{**_fields_of(base), **changes})
        if not callable(processor):
            raise TypeError("processor must be callable")
        self._processor = processor
        self._backoff_strategy = backoff_strategy
        self._conn = AsyncConn(connection, pipelined=True)
        self._schedulers = SchedulerContinuer(self._keys, self._conn)
        check_cluster_keys(connection, self._keys)
        self.id = str(uuid.uuid4())
        self._token_counter = 0
        self._running: dict[str, asyncio.Task[None]] = {}  # token -> processor task
        self._held: dict[str, str] = {}  # token -> job id, for every job we hold in `active`
        self._pending: list[_Finished] = []
        self._reserved = 0
        self._state = "new"
        self._paused = False
        self._rate_limit_until = 0.0
        self._empty_hint = False
        self._next_delayed = 0
        self._wake: asyncio.Event | None = None
        self._flush: asyncio.Event | None = None
        self._flush_lock: asyncio.Lock | None = None
        self._tasks: list[asyncio.Task[Any]] = []
        self._waiter: MarkerWaiter | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._stopped: asyncio.Event | None = None

    # -- public lifecycle ----------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The queue this worker processes."""
        return self._keys.name

    @property
    def is_running(self) -> bool:
        """True between the start of ``run()`` and the end of ``close()``."""
        return self._state == "running"

    @property
    def is_paused(self) -> bool:
        """True while this worker alone is paused."""
        return self._paused

    async def run(self) -> None:
        """Process jobs until :meth:`close` is called (from another task or a signal handler)."""
        if self._state != "new":
            raise RuntimeError("a Worker runs once; create a new one")
        self._state = "running"
        self._wake = asyncio.Event()
        self._flush = asyncio.Event()
        self._flush_lock = asyncio.Lock()
        self._stopped = asyncio.Event()
        opts = self.options
        self._executor = ThreadPoolExecutor(
            max_workers=opts.concurrency, thread_name_prefix=f"echomq-{self.name}"
        )
        self._runner = JobRunner(
            self._processor, opts, self._backoff_strategy, self._executor, self._rate_limited
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
        )
        checker = StalledChecker(
            self._keys,
            self._conn,
            to_seconds(opts.stalled_interval, "stalled_interval"),
            opts.max_stalled_count,
        )
        fetch_task = asyncio.create_task(self._fetch_loop(), name=f"echomq-fetch-{self.name}")
        self._tasks = [
            fetch_task,
            asyncio.create_task(self._finish_loop(), name=f"echomq-finish-{self.name}"),
            asyncio.create_task(renewer.run(self._is_running), name=f"echomq-locks-{self.name}"),
            asyncio.create_task(checker.run(self._is_running), name=f"echomq-stalled-{self.name}"),
        ]
        logger.info("worker %s started on queue %s", self.id, self.name)
        try:
            await self._stopped.wait()
        finally:
            if self._state == "running":  # run() itself was cancelled
                await self.close()

    async def close(self, *, force: bool = False) -> None:
        """Stop fetching, let running jobs finish (up to ``close_grace``), then cancel the rest.

        Jobs cancelled here stay active in Redis and are recovered by the stalled check once
        their locks expire.

        Args:
            force: cancel running jobs at once instead of waiting for them.
        """
        if self._state != "running":
            if self._state == "new":
                self._state = "closed"
                await self._conn.aclose()
            return
        self._state = "closing"
        assert self._wake is not None and self._flush is not None and self._stopped is not None
        if not self._tasks:  # run() failed before it started its loops
            await self._conn.aclose()
            self._state = "closed"
            self._stopped.set()
            return
        fetch_task, finish_task, *others = self._tasks
        # The loops also watch the state, in case a cancellation is absorbed mid-command.
        self._wake.set()
        await stop_tasks([fetch_task])
        running = list(self._running.values())
        if running and not force:
            grace = to_seconds(self.options.close_grace, "close_grace")
            await asyncio.wait(running, timeout=grace)
        await stop_tasks(list(self._running.values()))
        self._flush.set()  # record what finished; the finisher returns once nothing is pending
        await asyncio.wait([finish_task], timeout=10.0)
        await stop_tasks([finish_task, *others])
        if self._waiter is not None:
            await self._waiter.aclose()
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
        await self._conn.aclose()
        self._state = "closed"
        self._stopped.set()
        logger.info("worker %s on queue %s closed", self.id, self.name)

    async def pause(self, *, wait_for_active: bool = True) -> None:
        """Stop taking new jobs in this worker only (nothing is written to Redis)."""
        self._paused = True
        if wait_for_active and self._running:
            await asyncio.gather(*self._running.values(), return_exceptions=True)

    def resume(self) -> None:
        """Take jobs again after :meth:`pause`."""
        self._paused = False
        if self._wake is not None:
            self._wake.set()

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
        while self._state == "new":
            await asyncio.sleep(0)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
        await asyncio.gather(self._run_task, return_exceptions=True)

    # -- internals -------------------------------------------------------------------------------

    def _stopping(self) -> bool:
        return self._state != "running"

    def _is_running(self) -> bool:
        return self._state == "running"

    def _free_slots(self, *, for_finisher: bool = False) -> int:
        """Slots a fetch may fill now.

        Slots of jobs whose outcome waits to be recorded belong to the finisher, which takes
        the next jobs in the same call; the fetch loop only fills the others.
        """
        if self._paused or self._state != "running":
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

    async def _call(self, items: list[list[Any]], fetch: int) -> wops.FinishReply | None:
        """One finishAndFetch call, retried through connection trouble."""
        self._reserved += fetch
        start = self._token_counter
        self._token_counter += fetch
        try:
            op = wops.finish_and_fetch(
                self._keys, items, fetch, start, self._fetch_params, now_ms()
            )
            return await retrying("finishAndFetch", lambda: self._conn.run(op), self._stopping)
        finally:
            self._reserved -= fetch

    def _dispatch(self, reply: wops.FinishReply, *, keep_one: bool = False) -> Job | None:
        """Start the jobs a call took, each in its own task; with ``keep_one`` the first is
        returned instead, for the calling job task to run next (saving a task switch)."""
        kept: Job | None = None
        for fetched in reply.jobs:
            job = Job.from_hash(fetched.id, fetched.hash, self._keys, self._conn)
            job._token = fetched.token
            self._held[fetched.token] = fetched.id
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

    async def _fetch_loop(self) -> None:
        assert self._wake is not None and self._waiter is not None
        waiter, backoff = self._waiter, Backoff()
        # Connect the blocking connection now, so `get_workers` lists this worker at once.
        await retrying("connect", waiter.connect, self._stopping)
        while self._state == "running":
            try:
                wait = self._rate_limit_until - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                    continue
                if self._free_slots() <= 0:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                if self._empty_hint:
                    self._empty_hint = False
                    await waiter.wait(self._next_delayed)
                    continue
                free = self._free_slots()
                reply = await self._call([], free)
                if reply is None:
                    return
                self._dispatch(reply)
                self._empty_hint = not reply.jobs and reply.rate_limit_ttl_ms == 0
                backoff.reset()
            except asyncio.CancelledError:
                raise
            except TRANSIENT as exc:
                logger.warning("fetching failed (%s: %s); retrying", type(exc).__name__, exc)
                await backoff.sleep()
            except Exception as exc:  # the loop must never die silently
                logger.exception("fetch loop error (%s); retrying", exc)
                await backoff.sleep()

    async def _execute(self, job: Job | None) -> None:
        """Run a job; then, when it was the only one running and no finish call is in flight,
        record its outcome and take the next job in this same task (one script call and no
        task switch per job); otherwise the finisher records it with the next batch."""
        assert self._flush is not None and self._flush_lock is not None
        while job is not None:
            token = job._token or ""
            started = time.monotonic()
            try:
                if job.repeat_job_key:  # an iteration of a job scheduler: make the next one first
                    await self._schedulers.on_taken(job)
                outcome = await self._runner.run(job, token)
            except asyncio.CancelledError:
                self._running.pop(token, None)
                raise
            except Exception as exc:  # a bug of ours; leave the job to the stalled check
                logger.exception("job %s: unexpected worker error: %s", job.id, exc)
                self._running.pop(token, None)
                return
            self._running.pop(token, None)
            if outcome.item is None:
                self._held.pop(token, None)
                log_outcome(self.name, job, outcome, started)
                self._wake_fetcher()
                return
            self._pending.append(_Finished(job, token, outcome, started))
            if self._running or self._flush_lock.locked() or self._state != "running":
                # other jobs are running (their outcomes will share the next call), or a call
                # is in flight: the finisher records the batch
                self._flush.set()
                return
            async with self._flush_lock:
                job = await self._flush_pending(keep_one=True)

    async def _flush_pending(self, *, keep_one: bool = False) -> Job | None:
        """Record every pending outcome (the lock is held); returns a job kept for the caller."""
        kept: Job | None = None
        while self._pending:
            try:
                job = await self._flush_once(keep_one=keep_one and kept is None)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # never die silently
                logger.exception("finish loop error (%s)", exc)
                await asyncio.sleep(0.1)
                continue
            kept = kept or job
        return kept

    def _wake_fetcher(self) -> None:
        if self._wake is not None:
            self._wake.set()

    async def _finish_loop(self) -> None:
        assert self._flush is not None and self._flush_lock is not None
        while True:
            await self._flush.wait()
            self._flush.clear()
            async with self._flush_lock:
                await self._flush_pending()
            if self._state != "running" and not self._running:
                return

    async def _flush_once(self, *, keep_one: bool = False) -> Job | None:
        batch, self._pending = self._pending, []
        if not self.options.batch_finish and len(batch) > 1:
            batch, self._pending = batch[:1], batch[1:] + self._pending
        fetch = max(self._free_slots(for_finisher=True), 0)
        items = [f.outcome.item for f in batch if f.outcome.item is not None]
        try:
            reply = await self._call(items, fetch)
        except ResponseError as exc:
            await self._record_one_by_one(batch, exc)
            self._wake_fetcher()
            return None
        if reply is None:  # stopping while Redis is unreachable: the stalled check recovers
            return None
        for finished, code in zip(batch, reply.codes):
            self._record(finished, code)
        kept = self._dispatch(reply, keep_one=keep_one)
        if len(reply.jobs) < fetch or any(code < 0 for code in reply.codes):
            # the queue ran dry (or a slot was not refilled): the fetch loop takes over
            self._empty_hint = reply.rate_limit_ttl_ms == 0
            self._wake_fetcher()
        return kept

    def _record(self, finished: _Finished, code: int, *, after_error: bool = False) -> None:
        self._held.pop(finished.token, None)
        if code >= 0:
            log_outcome(self.name, finished.job, finished.outcome, finished.started)
        elif after_error and code in (codes.JOB_LOCK_NOT_EXIST, codes.JOB_NOT_IN_STATE):
            # The failed call wrote this outcome before erroring (scripts are not rolled back).
            logger.info(
                "queue=%s job=%s outcome %s was recorded before a script error",
                self.name,
                finished.job.id,
                finished.outcome.status,
            )
        else:
            self._report_refused(finished, code)

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

    def _report_refused(self, finished: _Finished, code: int) -> None:
        error: ScriptError = error_for_code(
            code,
            job_id=finished.job.id,
            command=f"finish ({finished.outcome.status})",
            state="active",
        )
        logger.warning(
            "queue=%s job=%s outcome %s not recorded: %s",
            self.name,
            finished.job.id,
            finished.outcome.status,
            error,
        )

    async def _rate_limited(self, job: Job, token: str) -> None:
        op = wops.move_job_from_active_to_wait(self._keys, job.id, token)
        ttl = await self._conn.run(op)
        self._held.pop(token, None)
        if ttl < 0:
            raise error_for_code(ttl, job_id=job.id, command="rate limit", state="active")
        if ttl > 0:
            self._rate_limit_until = time.monotonic() + min(ttl / 1000, MAX_RATE_LIMIT_DELAY)


def _fields_of(options: WorkerOptions) -> dict[str, Any]:
    return {name: getattr(options, name) for name in WorkerOptions.__dataclass_fields__}
