"""The one rule for Redis errors, and the one backoff: used by producers, workers, events
readers and the dashboard.

:func:`classify` sorts a failed call into one of three kinds:

* **refused** (:attr:`Outage.REFUSED`): Redis answered but did not run the call, because of a
  state that passes: ``BUSY`` (another client's script runs), ``LOADING`` (a restart reads its
  data), ``OOM`` under ``noeviction``, ``TRYAGAIN`` / ``CLUSTERDOWN`` / ``MASTERDOWN`` (a
  failover), ``READONLY`` (a demoted primary), ``MISCONF`` (persistence failing). The same
  call can be sent again later, and nothing was written.
* **reply lost** (:attr:`Outage.REPLY_LOST`): the connection broke, timed out or carried a
  garbled reply, or could not be opened. A call already written ran entirely or not at all (a
  script is atomic), and the caller cannot tell which.
* **final** (``None``): anything else, e.g. a script error proper. Sending the same call
  again would fail the same way.

Background loops (worker, events reader) wait out the first two with :class:`RetryBackoff`;
a producer raises them at once as :class:`~echomq.RedisRefusedError` (nothing was added) or
:class:`~echomq.RedisUnavailableError` (the job may have been added).
"""

from __future__ import annotations

import asyncio
import enum
import logging
from typing import Any

from redis.exceptions import (
    BusyLoadingError,
    ClusterDownError,
    InvalidResponse,
    OutOfMemoryError,
    ReadOnlyError,
    RedisError,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

logger = logging.getLogger("echomq.worker")

#: Errors a background loop survives by logging and trying again later: the server went
#: away, restarted, killed a connection, or a script failed.
TRANSIENT = (RedisError, OSError, asyncio.TimeoutError)

#: Error replies (first word) of server states that pass.
_REFUSED_CODES = ("BUSY", "LOADING", "OOM", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "MISCONF")
_REFUSED_CLASSES = (BusyLoadingError, OutOfMemoryError, TryAgainError, ClusterDownError)
_LOST = (RedisConnectionError, RedisTimeoutError, InvalidResponse, OSError, asyncio.TimeoutError)


class Outage(enum.Enum):
    """How a call failed, when the failure is the server's state and not the call."""

    REFUSED = "refused"
    REPLY_LOST = "reply lost"


def classify(exc: BaseException) -> Outage | None:
    """The kind of outage ``exc`` reports, or None when it is final (not an outage)."""
    if isinstance(exc, _REFUSED_CLASSES):  # LOADING is a ConnectionError: test it first
        return Outage.REFUSED
    if isinstance(exc, _LOST):
        return Outage.REPLY_LOST
    if isinstance(exc, ReadOnlyError):
        return Outage.REFUSED
    if isinstance(exc, ResponseError) and str(exc).startswith(_REFUSED_CODES):
        return Outage.REFUSED
    return None


#: The reply word of the refusals redis-py turns into classes of their own (it strips it).
_REFUSED_REPLIES: tuple[tuple[type[BaseException], str], ...] = (
    (BusyLoadingError, "LOADING"),
    (OutOfMemoryError, "OOM"),
    (TryAgainError, "TRYAGAIN"),
    (ClusterDownError, "CLUSTERDOWN"),
    (ReadOnlyError, "READONLY"),
)


def refused_reply(exc: BaseException) -> str:
    """The first word of a refusal's error reply (``"OOM"``, ``"BUSY"``...)."""
    for cls, word in _REFUSED_REPLIES:
        if isinstance(exc, cls):
            text = str(exc)
            return "MASTERDOWN" if text.startswith("MASTERDOWN") else word
    return str(exc).split(" ", 1)[0]


#: The longest pause between two tries while Redis is refusing or unreachable: a worker takes
#: jobs, records outcomes and resubscribes within this long of Redis answering again (after a
#: restart, a Sentinel or a Cluster failover). Failed tries cost a refused connect each.
OUTAGE_RETRY_CAP = 0.25


class RetryBackoff:
    """Exponential backoff between retries of a failing Redis call, reset on success."""

    def __init__(self, first: float = 0.05, cap: float = 5.0) -> None:
        self._first = first
        self._cap = cap
        self._next = first

    @property
    def next_delay(self) -> float:
        """Seconds the next :meth:`sleep` will wait."""
        return self._next

    def reset(self) -> None:
        """Forget past failures."""
        self._next = self._first

    @classmethod
    def for_outages(cls) -> RetryBackoff:
        """The backoff of calls waiting out an outage: from 20 ms, at most
        :data:`OUTAGE_RETRY_CAP` apart."""
        return cls(first=0.02, cap=OUTAGE_RETRY_CAP)

    def advance(self) -> float:
        """The delay to wait now; the next one doubles, up to the cap."""
        delay, self._next = self._next, min(self._next * 2, self._cap)
        return delay

    async def sleep(self) -> None:
        """Wait the current delay, then double it up to the cap."""
        await asyncio.sleep(self.advance())


async def stop_tasks(tasks: list[asyncio.Task[Any]], timeout: float = 5.0) -> None:
    """Cancel ``tasks`` and wait for them, cancelling again until they end.

    A cancellation can be absorbed by a client library mid-command (the task then carries on),
    so one ``cancel()`` is not enough to be sure a loop stops.
    """
    deadline = asyncio.get_running_loop().time() + timeout
    pending = [t for t in tasks if not t.done()]
    while pending:
        for task in pending:
            task.cancel()
        left = deadline - asyncio.get_running_loop().time()
        if left <= 0:
            logger.error("%d worker task(s) did not stop in time", len(pending))
            return
        _, still = await asyncio.wait(pending, timeout=min(0.1, left))
        pending = list(still)
