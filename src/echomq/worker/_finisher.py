"""The finisher: records the outcomes of a running worker's jobs, in batches, through outages.

An outcome that arrives while a finish call is in flight waits in :attr:`Finisher.pending` and
goes out with the next call, which also takes the next jobs; two such calls are in flight at
once (:data:`FINISH_CALLS_IN_FLIGHT`), each with a share of ``concurrency``, so the worker runs
one call's jobs while Redis records the other's. When a job's outcome is the only one and no
call is in flight, the job's own task records it and runs the job the call took
(:meth:`Finisher.finish`): one script call and no task switch per job on a quiet worker.
Replies are read here: each outcome's code is logged and reported to the hooks, a parent whose
completion is refused fails instead (as on Node), and a batch that meets a script error is
recorded again one outcome at a time.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from redis.exceptions import ResponseError

from .._redis.retry import stop_tasks
from ..errors import PendingChildrenError, ScriptError, UnrecoverableError, error_for_code
from ..job import Job
from ..protocol import codes
from ._execute import Outcome, Status, log_outcome
from ._outages import OutageLog

if TYPE_CHECKING:
    from ._session import Session

logger = logging.getLogger("echomq.worker")

#: Finish calls a worker keeps in flight at once, each with its share of the outcomes: while
#: Redis runs one, the worker runs the jobs another returned.
FINISH_CALLS_IN_FLIGHT = 2

#: Codes refusing a parent's completion, which then fails (Node does the same).
_CHILDREN_CODES = (codes.JOB_PENDING_CHILDREN, codes.JOB_HAS_FAILED_CHILDREN)


@dataclass(slots=True)
class Finished:
    """A job whose processor ended, and what to record."""

    job: Job
    token: str
    outcome: Outcome
    started: float


class Finisher:
    """Records the outcomes of one run of a worker (see the module's docstring)."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._name = session.keys.name
        self.pending: list[Finished] = []
        # The batches of outcomes in finish calls in flight (at most FINISH_CALLS_IN_FLIGHT),
        # by id of the batch list.
        self._recording: dict[int, list[Finished]] = {}
        self.in_flight = 0  # finish calls in flight (from the finisher's loop or a job task)
        #: a job task recording outcomes itself (close() does not cancel it)
        self.owner: asyncio.Task[None] | None = None
        self._kick = asyncio.Event()

    def kick(self) -> None:
        """Wake the loop: outcomes may be pending, or the worker may be closing."""
        self._kick.set()

    def recording_tokens(self) -> set[str]:
        """Tokens of the outcomes in finish calls in flight (safe from the lock thread: the
        batches are copied first, and a batch is never changed once sent)."""
        return {f.token for batch in list(self._recording.values()) for f in batch}

    def tokens(self) -> set[str]:
        """Tokens of the outcomes pending or being recorded (their jobs are not handed back)."""
        return {f.token for f in self.pending} | self.recording_tokens()

    @functools.cached_property
    def batch_size(self) -> int:
        """The most outcomes one finish call records: a share of ``concurrency`` (see
        :meth:`run`), or one without ``batch_finish``."""
        options = self._session.options
        if not options.batch_finish:
            return 1
        return max(1, -(-options.concurrency // FINISH_CALLS_IN_FLIGHT))

    async def finish(self, finished: Finished) -> Job | None:
        """Queue an outcome. When it is the only one (no other job runs, no call is in flight)
        the calling job task records it and gets back a job the call took, to run next;
        otherwise the loop records it with the next batch and None is returned."""
        session = self._session
        self.pending.append(finished)
        if session.running or self.in_flight or not session.life.may_fetch():
            # other jobs are running (their outcomes will share the next call), or a call is
            # in flight: the loop records the batch
            self._kick.set()
            return None
        self.in_flight += 1
        self.owner = asyncio.current_task()
        try:
            kept: Job | None = None
            while self.pending:
                job = await self._flush_guarded(keep_one=kept is None)
                kept = kept or job
            return kept
        finally:
            self.owner = None
            self.in_flight -= 1
            if self.pending or not session.life.may_fetch():
                # more to record, or a closing loop waits for no call in flight
                self._kick.set()

    async def run(self) -> None:
        """Record pending outcomes, with up to :data:`FINISH_CALLS_IN_FLIGHT` calls at once,
        until the worker takes no more jobs and nothing runs, is pending or in flight.

        A call carries at most a share of ``concurrency`` outcomes, so that while Redis runs
        one batch the worker runs the jobs the other call returned: the worker and Redis work
        at the same time instead of taking turns.
        """
        session = self._session
        flights: set[asyncio.Task[None]] = set()
        try:
            while True:
                await self._kick.wait()
                self._kick.clear()
                while self.pending and self.in_flight < FINISH_CALLS_IN_FLIGHT:
                    self.in_flight += 1
                    flight = asyncio.create_task(self._flight(), name=f"echomq-finish-{self._name}")
                    flights.add(flight)
                    flight.add_done_callback(flights.discard)
                idle = not session.running and not self.pending and not self.in_flight
                if not session.life.may_fetch() and idle:
                    return
        finally:
            await stop_tasks(list(flights))

    async def _flight(self) -> None:
        """One finish call of the loop (the flight slot is taken by the caller)."""
        try:
            await self._flush_guarded()
        finally:
            self.in_flight -= 1
            self._kick.set()  # more may be pending, or the worker may be closing

    async def _flush_guarded(self, *, keep_one: bool = False) -> Job | None:
        """:meth:`_flush_once`, logging (and pausing after) an unexpected error: the finisher
        must never die silently."""
        try:
            return await self._flush_once(keep_one=keep_one)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.exception("finish loop error (%s)", exc)
            self._session.hooks.emit("error", exc)
            await asyncio.sleep(0.1)
            return None

    async def _flush_once(self, *, keep_one: bool = False) -> Job | None:
        session = self._session
        size = self.batch_size
        batch, self.pending = self.pending[:size], self.pending[size:]
        # The slots of outcomes still pending belong to the call that will record them.
        fetch = max(session.free_slots(for_finisher=True) - len(self.pending), 0)
        items = [f.outcome.item for f in batch if f.outcome.item is not None]
        outages: list[OutageLog] = []
        self._recording[id(batch)] = batch
        try:
            reply = await session.call(items, fetch, outages)
        except ResponseError as exc:
            await self._record_one_by_one(batch, exc)
            session.wake_fetcher()
            return None
        finally:
            del self._recording[id(batch)]
        log = outages[0] if outages else None
        if reply is None:  # closing, and Redis stayed unavailable past the deadline
            for finished in batch:
                self._give_up(
                    finished,
                    "may not be recorded: Redis stayed unavailable (%s) until the worker had to "
                    "close; the stalled check recovers the job",
                    log.last_error if log is not None else "",
                )
            return None
        for finished, code in zip(batch, reply.codes):
            self._record(finished, code, log)
        kept = session.dispatch(reply, keep_one=keep_one)
        if len(reply.jobs) < fetch or any(code < 0 for code in reply.codes):
            # the queue ran dry (or a slot was not refilled): the fetch loop takes over
            session.ran_dry(reply)
        return kept

    def emit_outcome(self, job: Job, outcome: Outcome) -> None:
        """The ``completed`` / ``failed`` hooks of a recorded outcome."""
        hooks = self._session.hooks
        if outcome.status is Status.COMPLETED:
            hooks.emit("completed", job, job.return_value)
        elif outcome.error is not None and outcome.status is not Status.REQUEUED:
            hooks.emit("failed", job, outcome.error)

    def _record(
        self,
        finished: Finished,
        code: int,
        log: OutageLog | None = None,
        *,
        after_error: bool = False,
    ) -> None:
        if code in _CHILDREN_CODES and finished.outcome.status is Status.COMPLETED:
            self._refuse_completion(finished, code)  # the job stays held: it is still locked
            return
        self._session.held.pop(finished.token, None)
        if code >= 0:
            log_outcome(self._name, finished.job, finished.outcome, finished.started)
            self.emit_outcome(finished.job, finished.outcome)
            if code == codes.RECORDED_BEFORE:
                logger.info(
                    "queue=%s job=%s outcome %s had been recorded by a call whose reply was lost",
                    self._name,
                    finished.job.id,
                    finished.outcome.status,
                )
        elif after_error and code in (codes.JOB_LOCK_NOT_EXIST, codes.JOB_NOT_IN_STATE):
            # The failed call wrote this outcome before erroring (scripts are not rolled back).
            logger.info(
                "queue=%s job=%s outcome %s was recorded before a script error",
                self._name,
                finished.job.id,
                finished.outcome.status,
            )
        else:
            self._report_refused(finished, code, log.last_error if log is not None else None)

    def _refuse_completion(self, finished: Finished, code: int) -> None:
        """A parent's completion was refused (-4: children still pending; -9: a child failed
        it): fail the attempt instead, with Node's message, through the normal failure path
        (retries for -4; none for -9). The lock is still held, so the same token records it."""
        session = self._session
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
                outcome = await session.runner.failure_outcome(job, token, error)
            finally:
                session.running.pop(token, None)
            self.pending.append(Finished(job, token, outcome, finished.started))
            self._kick.set()

        # Counted as running until queued, so a closing worker waits for it.
        session.running[token] = asyncio.get_running_loop().create_task(fail_instead())

    async def _record_one_by_one(self, batch: list[Finished], error: ResponseError) -> None:
        """A batch call failed with a script error: record each outcome on its own, so one
        poisoned job (left active, for the stalled check) does not hold back the others."""
        session = self._session
        logger.error("queue=%s finishing %d job(s) failed: %s", self._name, len(batch), error)
        for finished in batch:
            if finished.outcome.item is None:
                continue
            try:
                reply = await session.call([finished.outcome.item], 0)
            except ResponseError as exc:
                self._give_up(
                    finished, "not recorded (%s); the stalled check will recover the job", exc
                )
                continue
            if reply is not None:
                self._record(finished, reply.codes[0], after_error=True)
            else:
                session.held.pop(finished.token, None)

    def _give_up(self, finished: Finished, why: str, cause: object) -> None:
        """Stop holding a job whose outcome could not be recorded (the stalled check recovers
        it) and log an error: ``outcome <status>`` then ``why``, whose one ``%s`` is ``cause``."""
        self._session.held.pop(finished.token, None)
        logger.error(
            "queue=%s job=%s outcome %s " + why,
            self._name,
            finished.job.id,
            finished.outcome.status,
            cause,
        )

    def _report_refused(
        self, finished: Finished, code: int, cause: BaseException | None = None
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
            self._name,
            finished.job.id,
            finished.outcome.status,
            error,
            because,
        )
