"""Retry delays: the built-in fixed and exponential strategies and custom ones
(docs/protocol/worker-rules.md#retries).

Everything here is client-side, as in Node: no script decides retries. Delays are in ms on the
way to the protocol; custom strategies speak seconds like the rest of the API.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypeAlias

from .._ops.worker import builtin_delay_ms
from ..errors import InvalidOptionError
from ..job import Job
from ..options import backoff_from_wire

#: ``strategy(attempts_made, backoff_type, error, job)`` returns seconds (or a timedelta) to
#: wait, 0/None to retry at once, or -1 to stop retrying and fail the job.
BackoffStrategy: TypeAlias = Callable[
    [int, str, BaseException, Job],
    "float | timedelta | None | Awaitable[float | timedelta | None]",
]

NO_RETRY = -1

__all__ = ["NO_RETRY", "BackoffStrategy", "builtin_delay_ms", "retry_delay_ms"]


async def retry_delay_ms(
    job: Job,
    error: BaseException,
    attempts_made: int,
    custom: BackoffStrategy | None,
) -> int:
    """How long to wait before the next try: ms > 0, 0 for now, or ``NO_RETRY``."""
    backoff = backoff_from_wire(job.wire_options.get("backoff"))
    if backoff is None:
        return 0
    builtin = builtin_delay_ms(backoff.type, attempts_made, backoff.delay_ms, backoff.jitter)
    if builtin is not None:
        return builtin
    if custom is None:
        raise InvalidOptionError(
            f"unknown backoff strategy {backoff.type!r} for job {job.id}; pass "
            "backoff_strategy= to the Worker to handle custom types"
        )
    result: Any = custom(attempts_made, backoff.type, error, job)
    if isinstance(result, Awaitable):
        result = await result
    if result is None:
        return 0
    if isinstance(result, timedelta):
        return round(result.total_seconds() * 1000)
    if result == NO_RETRY:
        return NO_RETRY
    return max(round(float(result) * 1000), 0)
