"""Waiting out transient server states, so that a finished job's outcome is never dropped.

A worker call can fail in two ways that say nothing about the job (the one classification of
Redis errors is :func:`echomq._redis.retry.classify`): Redis **refused** it for now (BUSY, LOADING,
OOM, a failover...), and the same call can simply be sent again later; or its **reply was
lost** (the connection broke or timed out after the call was written): the call ran entirely
or not at all (a script is atomic), and we cannot tell which. Only a call made safe to resend
may be sent again (finishAndFetch's resend mode; see its script header).

Anything else (a script error proper) is not an outage and is raised to the caller.
:func:`call_through_outages` retries with backoff for as long as its ``give_up`` callback
allows; meanwhile the lock renewer keeps the locks of the jobs concerned alive, so waiting
costs no duplicate.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from .._redis.retry import Outage, RetryBackoff, classify

logger = logging.getLogger("echomq.worker")
T = TypeVar("T")

#: Seconds between two warnings about the same outage.
_WARN_EVERY = 5.0

__all__ = ["OutageLog", "call_through_outages"]


class OutageLog:
    """Warns when an outage starts, at most every few seconds while it lasts, and once more
    when it ends."""

    __slots__ = ("_first", "_last", "count", "last_error", "lost", "meanwhile", "resent", "what")

    def __init__(self, what: str, meanwhile: str = "retrying while the locks are kept") -> None:
        self.what = what
        self.meanwhile = meanwhile  # what the caller does until it goes through
        self._first = 0.0
        self._last = 0.0
        self.count = 0
        self.last_error: BaseException | None = None
        self.resent = False  # a try was made in resend mode
        self.lost = False  # some try's reply was lost: the call may have run

    def failed(self, exc: BaseException, kind: Outage) -> None:
        """Record one failed try."""
        now = time.monotonic()
        if self.count == 0:
            self._first = now
        self.count += 1
        self.last_error = exc
        self.lost = self.lost or kind is Outage.REPLY_LOST
        if now - self._last >= _WARN_EVERY:
            self._last = now
            logger.warning(
                "%s: Redis %s the call (%s: %s); %s",
                self.what,
                "did not answer" if kind is Outage.REPLY_LOST else "refused",
                type(exc).__name__,
                exc,
                self.meanwhile,
            )

    def recovered(self) -> None:
        """The call went through after failing."""
        if self.count:
            logger.warning(
                "%s: went through after %d failed tr%s over %.1fs",
                self.what,
                self.count,
                "y" if self.count == 1 else "ies",
                time.monotonic() - self._first,
            )


async def call_through_outages(
    what: str,
    attempt: Callable[[bool], Awaitable[T]],
    give_up: Callable[[], bool],
    *,
    log: OutageLog | None = None,
) -> T | None:
    """Run ``attempt(resend)`` until it returns; None if ``give_up()`` said so first.

    ``resend`` is False for the first try and stays False while every failure was a refusal;
    it is True once a reply was lost, for every later try. A ``log`` that already recorded a
    failure (the caller's own first try) continues from it.

    Raises:
        Exception: whatever ``attempt`` raised that is not an outage (a script error).
    """
    log = log or OutageLog(what)
    backoff = RetryBackoff.for_outages()
    resend = log.last_error is not None and classify(log.last_error) is Outage.REPLY_LOST
    while True:
        try:
            log.resent = log.resent or resend
            result = await attempt(resend)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            kind = classify(exc)
            if kind is None:
                raise
            resend = resend or kind is Outage.REPLY_LOST
            log.failed(exc, kind)
            if give_up():
                return None
            await backoff.sleep()
            continue
        log.recovered()
        return result
