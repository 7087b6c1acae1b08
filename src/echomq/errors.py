"""The exceptions echomq raises, and the table that maps script return codes to them.

Tree::

    EchoMQError
    ├── ValidationError (also ValueError)        bad input, refused before anything is written
    │   ├── InvalidQueueNameError
    │   ├── InvalidJobIdError
    │   ├── InvalidOptionError
    │   └── PayloadError                          not JSON-serialisable, or over size_limit
    ├── ConnectionNotOpenError                    no connection given or found, or it was closed
    ├── RedisUnavailableError                     Redis not reached in time (also redis's
    │   │                                         ConnectionError)
    │   └── RedisRefusedError                     Redis refused the call for now (BUSY, LOADING,
    │                                             OOM...): nothing was added
    ├── ReplicationError                          an add landed on the primary, but fewer
    │                                             replicas than ``wait_replicas`` confirmed it
    ├── ScriptError                               a script refused a state change (has .code)
    │   ├── JobNotFoundError          (-1)
    │   ├── LockError
    │   │   ├── LockMissingError      (-2)
    │   │   └── LockMismatchError     (-6)
    │   ├── JobNotInStateError        (-3)
    │   ├── PendingChildrenError      (-4)
    │   ├── ParentNotFoundError       (-5)
    │   ├── ParentCannotBeReplacedError (-7)
    │   ├── JobBelongsToSchedulerError (-8)
    │   ├── FailedChildrenError       (-9)
    │   ├── SchedulerIterationExistsError (-10)
    │   └── SchedulerSlotsBusyError   (-11)
    ├── QueueNotPausedError                       obliterate on a running queue
    ├── ActiveJobsError                           obliterate with active jobs and no force
    ├── JobLockedError                            remove() of a job a worker holds
    ├── JobFailedError                            wait_until_finished() on a job that failed
    ├── EmbeddedRedisError                        no redis-server binary could be started
    ├── JobTimeoutError (also TimeoutError)       an attempt ran past its ``timeout``
    ├── ProcessorCrashedError                     the pool child running the job died
    ├── BatchResultError                          a batch processor returned no list, or one
    │                                             of the wrong length
    └── ProcessorSignal                           raised *by processors* to steer the worker
        ├── UnrecoverableError                    fail now, no retry
        ├── DelayedError                          job was moved to delayed by the processor
        ├── WaitingChildrenError                  job was moved to waiting-children
        ├── RateLimitError                        put the job back and pause fetching
        └── JobCancelledError                     the job was cancelled (``cancel_job``)

``ProcessorSignal`` subclasses are not failures of echomq: a processor raises them on purpose.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

import redis.exceptions

from .protocol import codes

if TYPE_CHECKING:  # only for annotations: the job model imports this module
    from ._job_model import JobData


class EchoMQError(Exception):
    """Root of every exception raised by echomq."""


class ValidationError(EchoMQError, ValueError):
    """Input was refused before anything was written to Redis."""


class InvalidQueueNameError(ValidationError):
    """The queue name (or prefix) cannot be used."""


class InvalidJobIdError(ValidationError):
    """A custom job id cannot be used."""


class InvalidOptionError(ValidationError):
    """A job or worker option has a value outside what is allowed."""


class PayloadError(ValidationError):
    """Job data is not JSON-serialisable or is larger than ``size_limit``."""


class ConnectionNotOpenError(EchoMQError):
    """No connection: none was given and the connection rule found none (no default, no
    ``ECHOMQ_REDIS_URL``, no running embedded Redis), or the one an object was bound to has
    been closed."""


class RedisUnavailableError(EchoMQError, redis.exceptions.ConnectionError):
    """Redis could not be reached, or did not answer, in time for a producer call.

    Raised when a connection echomq opened from a URL cannot be opened (refused, unknown host,
    or TCP plus the handshake not done within ``connect_timeout``), and by ``add`` /
    ``add_bulk`` on any client when redis-py reports a connection error or a timeout. It is
    also a ``redis.exceptions.ConnectionError``, so handlers written for redis-py keep working.
    A timeout or a dropped connection after the command was sent leaves the outcome unknown:
    the job may have been added.

    Attributes:
        address: where Redis was expected: the URL with its password masked, or
            ``host:port`` (or the unix socket path) of a client you passed.
    """

    def __init__(self, message: str, *, address: str = "") -> None:
        super().__init__(message)
        self.address = address

    def __repr__(self) -> str:  # redis-py's own repr shows only the class name
        return f"{type(self).__name__}({str(self)!r})"


class RedisRefusedError(RedisUnavailableError):
    """Redis answered a producer call but refused to run it, for a state that passes.

    ``BUSY`` (another client's script runs), ``LOADING`` (a restart reads its data), ``OOM``
    (out of memory under ``noeviction``), ``TRYAGAIN`` / ``CLUSTERDOWN`` / ``MASTERDOWN`` (a
    failover), ``READONLY`` (a demoted primary) or ``MISCONF`` (persistence failing). Unlike
    its parent's other cases, nothing was added: the same call may be sent again later.

    Attributes:
        address: as for :class:`RedisUnavailableError`.
        reply: the first word of Redis's error reply, e.g. ``"OOM"``.
    """

    def __init__(self, message: str, *, address: str = "", reply: str = "") -> None:
        super().__init__(message, address=address)
        self.reply = reply


class ReplicationError(EchoMQError):
    """An add was written on the primary, but fewer replicas than ``wait_replicas``
    acknowledged it within ``wait_timeout`` (Redis ``WAIT``).

    The jobs exist: they are on the primary and will run. They are at risk only if the
    primary fails before a replica has them (a failover then loses them). Check the replicas
    (``INFO replication``); retrying the add would add the jobs again, unless they have a
    custom ``job_id``.

    Attributes:
        job: the job that was added (an ``echomq.Job``, or an ``echomq.sync.Job`` from the
            sync API); for ``add_bulk`` the first of ``jobs``; for ``FlowProducer.add`` the
            root job of the flow.
        jobs: every job the call added, in the order of the call (for a flow: each node's
            job in the order the tree was given, parents before their children).
        result: what the call would have returned: the job (``add``), the list of jobs
            (``add_bulk``), the flow's root ``JobNode`` (``FlowProducer.add``) or the list
            of roots (``FlowProducer.add_bulk``).
        wait_replicas: how many replicas were asked for.
        acknowledged: how many acknowledged in time (0 when ``WAIT`` itself failed).
    """

    def __init__(
        self,
        message: str,
        *,
        jobs: list[JobData],
        result: object,
        wait_replicas: int,
        acknowledged: int,
    ) -> None:
        super().__init__(message)
        self.job = jobs[0]
        self.jobs = jobs
        self.result = result
        self.wait_replicas = wait_replicas
        self.acknowledged = acknowledged


class ScriptError(EchoMQError):
    """A protocol script refused a state change.

    Attributes:
        code: the script's negative return code.
        job_id: the job concerned, when known.
        command: the operation that was refused.
    """

    def __init__(self, message: str, *, code: int, job_id: str | None, command: str) -> None:
        super().__init__(message)
        self.code = code
        self.job_id = job_id
        self.command = command


class JobNotFoundError(ScriptError):
    """The job's hash does not exist (it was removed, or never existed)."""


class LockError(ScriptError):
    """The job's lock is not held by the caller."""


class LockMissingError(LockError):
    """The job's lock expired; the stalled checker will recover the job."""


class LockMismatchError(LockError):
    """Another worker holds the job's lock."""


class JobNotInStateError(ScriptError):
    """The job is not in the state the operation needs."""


class PendingChildrenError(ScriptError):
    """The job still has children that have not finished."""


class ParentNotFoundError(ScriptError):
    """The parent named for a child job does not exist (or, for ``remove_child_dependency``,
    the job has no parent)."""


class ParentCannotBeReplacedError(ScriptError):
    """A job with that custom id exists and belongs to another live parent."""


class JobBelongsToSchedulerError(ScriptError):
    """The job is the current iteration of a job scheduler; remove the scheduler instead."""


class FailedChildrenError(ScriptError):
    """The job has children that failed."""


class SchedulerIterationExistsError(ScriptError):
    """A job with the id of a cron scheduler's next iteration exists already."""


class SchedulerSlotsBusyError(ScriptError):
    """An every-scheduler found jobs in its next 32 iteration slots."""


class QueueNotPausedError(EchoMQError):
    """obliterate() needs the queue to be paused first."""


class ActiveJobsError(EchoMQError):
    """obliterate() found active jobs; pass ``force=True`` to remove them anyway."""


class JobLockedError(EchoMQError):
    """The job (or one of its children) is locked by a worker and was not removed."""


class JobFailedError(EchoMQError):
    """The job ended in the failed state.

    Attributes:
        job_id: the job.
        reason: its ``failedReason``.
    """

    def __init__(self, job_id: str, reason: str) -> None:
        super().__init__(f"job {job_id} failed: {reason}")
        self.job_id = job_id
        self.reason = reason


class EmbeddedRedisError(EchoMQError):
    """No embedded redis-server could be found or started."""


class JobTimeoutError(EchoMQError, TimeoutError):
    """An attempt ran longer than its ``timeout`` and was stopped; it fails (and is retried
    per ``attempts``) with the reason "timed out after N s".

    Attributes:
        timeout: the timeout in seconds.
    """

    def __init__(self, timeout: float) -> None:
        super().__init__(f"timed out after {timeout:g} s")
        self.timeout = timeout


class ProcessorCrashedError(EchoMQError):
    """The pool child process running the job exited (a crash, ``os._exit``, a kill or the
    OOM killer) before it answered; the job fails with this reason and is retried per
    ``attempts``, and the child is replaced.

    Attributes:
        exitcode: the child's exit code; a negative number ``-N`` means signal ``N``.
    """

    def __init__(self, message: str, exitcode: int | None = None) -> None:
        super().__init__(message)
        self.exitcode = exitcode


class BatchResultError(EchoMQError):
    """A batch processor (``Worker(..., batch=Batch(...))``) returned something other than a
    list with one result per job: every job of the batch fails with this reason, retried per
    ``attempts``."""


class ProcessorSignal(EchoMQError):
    """Base of the exceptions a processor raises on purpose to steer the worker.

    Raised without a message, a signal carries its class's :attr:`default_message` (BullMQ's).
    """

    #: The message of a signal raised without one.
    default_message: ClassVar[str] = ""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(self.default_message if message is None else message)


class UnrecoverableError(ProcessorSignal):
    """Fail the job now, whatever attempts are left."""

    default_message = codes.UNRECOVERABLE_MESSAGE


class DelayedError(ProcessorSignal):
    """The processor moved its job to delayed (``job.move_to_delayed``); the worker moves on."""

    default_message = codes.DELAYED_MESSAGE


class WaitingChildrenError(ProcessorSignal):
    """The processor moved its job to waiting-children; the worker moves on."""

    default_message = codes.WAITING_CHILDREN_MESSAGE


class RateLimitError(ProcessorSignal):
    """Put the job back at the front of the queue and stop fetching until the limit expires."""

    default_message = codes.RATE_LIMIT_MESSAGE


class JobCancelledError(ProcessorSignal):
    """The job was cancelled (``Worker.cancel_job``, ``Queue.cancel_job``, or the worker closing).

    A sync processor raises it with ``job.raise_if_cancelled()``; an async one sees
    ``asyncio.CancelledError`` instead. A cancelled job fails with this error (no retry), or
    goes back to ``wait`` when the cancel asked for ``requeue``.

    Attributes:
        job_id: the job.
        reason: why it was cancelled.
    """

    def __init__(self, reason: str = "cancelled", *, job_id: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.job_id = job_id


_CODE_TO_ERROR: dict[int, tuple[type[ScriptError], str]] = {
    codes.JOB_NOT_EXIST: (JobNotFoundError, "job {job} does not exist"),
    codes.JOB_LOCK_NOT_EXIST: (
        LockMissingError,
        "lock for job {job} is missing (it expired; the job will be recovered as stalled)",
    ),
    codes.JOB_NOT_IN_STATE: (JobNotInStateError, "job {job} is not in the {state} state"),
    codes.JOB_PENDING_CHILDREN: (
        PendingChildrenError,
        "job {job} has pending children; it cannot be completed yet",
    ),
    codes.PARENT_JOB_NOT_EXIST: (ParentNotFoundError, "parent of job {job} does not exist"),
    codes.JOB_LOCK_MISMATCH: (LockMismatchError, "lock for job {job} is held by another worker"),
    codes.PARENT_JOB_CANNOT_BE_REPLACED: (
        ParentCannotBeReplacedError,
        "job {job} already exists with another parent",
    ),
    codes.JOB_BELONGS_TO_JOB_SCHEDULER: (
        JobBelongsToSchedulerError,
        "job {job} belongs to a job scheduler; remove the scheduler instead",
    ),
    codes.JOB_HAS_FAILED_CHILDREN: (FailedChildrenError, "job {job} has failed children"),
    codes.SCHEDULER_JOB_ID_COLLISION: (
        SchedulerIterationExistsError,
        "job scheduler {job}: a job with the id of its next iteration exists already",
    ),
    codes.SCHEDULER_JOB_SLOTS_BUSY: (
        SchedulerSlotsBusyError,
        "the next iteration slots of job scheduler {job} are all taken by jobs",
    ),
}


def error_for_code(code: int, *, job_id: str | None, command: str, state: str = "") -> ScriptError:
    """Build the exception for a script's negative reply ``code``.

    Args:
        code: the negative integer the script returned.
        job_id: the job concerned, if any.
        command: the operation, named in the message.
        state: for ``-3``, the state the job was expected in.
    """
    cls, template = _CODE_TO_ERROR.get(code, (ScriptError, "script returned code {code}"))
    message = template.format(job=job_id, state=state or "expected", code=code)
    return cls(f"{message} ({command})", code=code, job_id=job_id, command=command)
