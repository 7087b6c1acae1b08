"""Starting: a worker is started once it has connected.

Without ``connect_timeout`` a worker that cannot reach Redis waits for it
(:func:`connect_when_reachable`): one WARNING names the address when it starts waiting, again
every :data:`UNREACHABLE_WARN_EVERY` seconds while it waits, and it tries every second at most,
so it starts within a second of Redis answering. Its other loops (the stalled check, the
control channel) begin once it is connected, so they add no warnings of their own meanwhile.

Fail fast: a worker given ``connect_timeout`` checks that Redis answers before it starts, and
raises a clear error instead of waiting. The check is about configuration (a wrong URL, host,
port or password), which no retry fixes; once started, a worker rides out outages (its loops
log, back off and retry).

Checks of process isolation and timeouts (:func:`check_pool_options`, :func:`warn_at_start_up`)
run before any job is taken: what cannot work is refused, what cannot be enforced is said.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from redis.exceptions import AuthenticationError, AuthorizationError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .._redis.connection import AsyncConn
from .._redis.retry import TRANSIENT, RetryBackoff
from ..errors import InvalidOptionError, RedisUnavailableError
from ..options import WorkerOptions
from ._import_path import processor_path

logger = logging.getLogger("echomq.worker")

#: Seconds between two warnings of a worker waiting for Redis at start-up.
UNREACHABLE_WARN_EVERY = 30.0
#: The longest pause between two connect attempts at start-up.
CONNECT_RETRY_CAP = 1.0


async def connect_when_reachable(
    connect: Callable[[], Awaitable[object]],
    address: str,
    queue: str,
    stopping: Callable[[], bool],
) -> bool:
    """Call ``connect()`` until it succeeds (True), or until ``stopping()`` (False).

    Warns when the first attempt fails, naming ``address``, then every
    :data:`UNREACHABLE_WARN_EVERY` seconds; attempts are at most :data:`CONNECT_RETRY_CAP`
    apart. Every Redis error counts (refused credentials may be fixed meanwhile; the warning
    says which error it was).
    """
    backoff = RetryBackoff(first=0.05, cap=CONNECT_RETRY_CAP)
    warned_at: float | None = None
    attempts = 0
    while not stopping():
        try:
            await connect()
        except TRANSIENT as exc:  # refused credentials too: they may be fixed meanwhile
            attempts += 1
            logger.debug(
                "queue=%s connecting to Redis at %s failed (attempt %d): %s",
                queue,
                address,
                attempts,
                exc,
            )
            now = time.monotonic()
            if warned_at is None or now - warned_at >= UNREACHABLE_WARN_EVERY:
                warned_at = now
                logger.warning(
                    "queue=%s cannot reach Redis at %s (%s: %s); the worker starts once it "
                    "answers (trying every second at most; this warning every %g s)",
                    queue,
                    address,
                    type(exc).__name__,
                    exc,
                    UNREACHABLE_WARN_EVERY,
                )
            await backoff.sleep()
            continue
        return True
    return False


async def check_reachable(conn: AsyncConn, budget: float, queue: str) -> None:
    """PING Redis within ``budget`` seconds.

    Raises:
        RedisUnavailableError: no answer in time, the connection was refused, the host is
            unknown, or the server refused the credentials (the message says which).
    """
    where = conn.address
    try:
        await asyncio.wait_for(conn.client.ping(), budget)
    except asyncio.TimeoutError:
        raise RedisUnavailableError(
            f"worker for queue {queue!r} cannot start: Redis at {where} did not answer within "
            f"connect_timeout={budget:g} s",
            address=where,
        ) from None
    except (AuthenticationError, AuthorizationError) as exc:
        raise RedisUnavailableError(
            f"worker for queue {queue!r} cannot start: Redis at {where} refused the "
            f"credentials ({exc}); check the user name and password in the URL",
            address=where,
        ) from exc
    except RedisUnavailableError as exc:
        raise RedisUnavailableError(
            f"worker for queue {queue!r} cannot start: {exc}", address=where
        ) from exc
    except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
        raise RedisUnavailableError(
            f"worker for queue {queue!r} cannot start: cannot reach Redis at {where} ({exc}); "
            "check the host, port and TLS settings of the URL",
            address=where,
        ) from exc
    except ResponseError as exc:  # e.g. NOAUTH: a password is needed
        raise RedisUnavailableError(
            f"worker for queue {queue!r} cannot start: Redis at {where} refused PING ({exc}); "
            "check the password in the URL",
            address=where,
        ) from exc


# -- checks of process isolation and timeouts, before any job is taken -----------------------


def is_async_processor(processor: Any) -> bool:
    """Whether ``processor`` is ``async def`` (or a callable whose ``__call__`` is)."""
    return inspect.iscoroutinefunction(processor) or inspect.iscoroutinefunction(
        getattr(processor, "__call__", None)  # noqa: B004
    )


def check_pool_options(processor: Any, options: WorkerOptions) -> str | None:
    """The import path of a processor to run in ``options.processes`` children, or None for
    no pool.

    Raises:
        InvalidOptionError: ``processes`` is set for an async processor, or the processor
            cannot be imported by path in a child.
    """
    if options.processes == 0:
        if options.max_tasks_per_child is not None:
            raise InvalidOptionError("max_tasks_per_child needs processes >= 1")
        return None
    if is_async_processor(processor):
        raise InvalidOptionError(
            f"processes={options.processes} runs sync processors (def) in child processes; "
            f"{getattr(processor, '__qualname__', processor)!r} is async and runs on the event "
            "loop: drop processes, or make the processor a plain def"
        )
    return processor_path(processor)


def warn_at_start_up(processor: Any, options: WorkerOptions, queue: str) -> None:
    """Say at start-up that a sync processor in threads cannot be stopped at its timeout, and
    that a pool larger than ``concurrency`` leaves children idle."""
    if options.processes > options.concurrency:
        logger.warning(
            "queue=%s processes=%d but concurrency=%d: only %d child process(es) will ever be "
            "busy; give concurrency >= processes (Worker(processes=N) alone sets both)",
            queue,
            options.processes,
            options.concurrency,
            options.concurrency,
            extra={"queue": queue, "status": "pool-underused"},
        )
    if options.job_timeout is None or options.processes or is_async_processor(processor):
        return
    logger.warning(
        "queue=%s job_timeout is set but the processor is a sync def running in threads "
        "(processes=0), which cannot be stopped: at the deadline the job fails and its slot "
        "is freed, but the thread keeps running; use processes=N to have it killed",
        queue,
        extra={"queue": queue, "status": "timeout-unenforceable"},
    )
