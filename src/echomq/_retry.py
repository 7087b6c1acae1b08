"""Retrying Redis calls of background loops (worker, events reader): log, back off, try again."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ReadOnlyError, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

logger = logging.getLogger("echomq.worker")
T = TypeVar("T")

#: Errors a worker loop survives by logging and trying again later: the server went away,
#: restarted, killed a connection, or a script failed.
TRANSIENT = (RedisError, OSError, asyncio.TimeoutError)

#: Errors worth retrying the *same* call for: the connection, not the data, is at fault.
#: A script error (ResponseError) would fail again the same way, so it is not retried
#: blindly (a failover's READONLY reply is the exception).
RETRYABLE = (RedisConnectionError, RedisTimeoutError, ReadOnlyError, OSError, asyncio.TimeoutError)


def is_retryable(exc: BaseException) -> bool:
    """Whether repeating the same call may succeed."""
    return isinstance(exc, RETRYABLE) or not isinstance(exc, ResponseError)


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

    async def sleep(self) -> None:
        """Wait the current delay, then double it up to the cap."""
        delay, self._next = self._next, min(self._next * 2, self._cap)
        await asyncio.sleep(delay)


async def retrying(
    what: str,
    call: Callable[[], Awaitable[T]],
    is_stopping: Callable[[], bool],
    backoff: RetryBackoff | None = None,
) -> T | None:
    """Run ``call`` until it succeeds; None if the worker began stopping meanwhile.

    Connection trouble is retried with backoff; a script error (ResponseError) propagates,
    since repeating the same call would fail the same way.
    """
    backoff = backoff or RetryBackoff()
    while True:
        try:
            result = await call()
        except TRANSIENT as exc:
            if not is_retryable(exc):
                raise
            if is_stopping():
                return None
            logger.warning("%s failed (%s: %s); retrying", what, type(exc).__name__, exc)
            await backoff.sleep()
            continue
        backoff.reset()
        return result


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
