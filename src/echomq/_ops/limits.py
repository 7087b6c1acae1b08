"""Global concurrency, global and manual rate limits, and the reads around them
(docs/protocol/keys.md#meta, docs/protocol/markers-locks-stalled.md).

A global limit is a field of the queue's ``meta`` hash that every worker, echomq or BullMQ,
reads when it fetches: ``concurrency`` (the queue is *maxed* while ``LLEN active`` reaches it),
``max`` and ``duration`` (at most ``max`` jobs per ``duration`` milliseconds). The manual rate
limit is the ``limiter`` key itself, set to Number.MAX_SAFE_INTEGER with a TTL. These are plain
commands, written with exactly the fields and values BullMQ's ``Queue`` writes, so each side reads
what the other set. Nothing here runs a script: each write is a single HSET, HDEL, SET or DEL,
and each read a pipeline of plain reads.

Every builder validates its arguments first, so a refused call writes nothing. Durations are
seconds (or timedelta) here and milliseconds on the wire.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from ..errors import InvalidOptionError
from ..options import MAX_PRIORITY, Duration, to_seconds
from ..protocol.codes import MANUAL_RATE_LIMIT
from ..protocol.keys import QueueKeys
from ._base import CommandOp, flat_to_dict, hash_to_dict, to_str

# Fields of the meta hash (docs/protocol/keys.md#meta).
CONCURRENCY: Final = "concurrency"
RATE_MAX: Final = "max"
RATE_DURATION: Final = "duration"
PAUSED: Final = "paused"
MAX_LEN_EVENTS: Final = "opts.maxLenEvents"
VERSION: Final = "version"

#: Width of one priority band in the ``prioritized`` scores (priority * 2^32 + counter).
_BAND: Final = 1 << 32


@dataclass(frozen=True, slots=True)
class RateLimit:
    """A global rate limit as stored in the queue's meta hash (BullMQ's ``{max, duration}``).

    Attributes:
        max: jobs the queue's workers may take, together, per window.
        duration: the window in seconds (milliseconds on the wire).
    """

    max: int
    duration: float


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueMeta:
    """The queue's meta hash, decoded (BullMQ's ``Queue.getMeta``).

    Attributes:
        paused: the queue is globally paused.
        concurrency: the global concurrency, or None when not set.
        rate_limit_max: ``max`` of the global rate limit, or None when not set.
        rate_limit_duration: its window in seconds, or None when not set.
        max_len_events: the approximate length the events stream is trimmed to, or None when
            nothing has written it yet (scripts then use 10000).
        version: the library that last created a BullMQ ``Queue`` object for this queue
            (``"bullmq:6.7.0"``); echomq writes none, so None when only echomq used the queue.
    """

    paused: bool = False
    concurrency: int | None = None
    rate_limit_max: int | None = None
    rate_limit_duration: float | None = None
    max_len_events: int | None = None
    version: str | None = None

    @property
    def rate_limit(self) -> RateLimit | None:
        """The global rate limit when both of its fields are set, else None."""
        if self.rate_limit_max is None or self.rate_limit_duration is None:
            return None
        return RateLimit(self.rate_limit_max, self.rate_limit_duration)


# -- validation and decoding ---------------------------------------------------------------


def _positive_int(value: object, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidOptionError(f"{field} must be an int >= 1, got {value!r}")
    if value < 1:
        raise InvalidOptionError(f"{field} must be an int >= 1, got {value}")
    return value


def _positive_ms(value: Duration, field: str) -> int:
    """A positive duration in whole milliseconds; a sub-millisecond one counts as 1 ms."""
    seconds = to_seconds(value, field, allow_negative=True)
    if seconds <= 0:
        raise InvalidOptionError(
            f"{field} must be a positive duration (seconds or timedelta), got {value!r}"
        )
    return max(round(seconds * 1000), 1)


def _int_or_none(raw: Any) -> int | None:
    """A stored integer; None when absent, empty or not an integer."""
    if raw is None:
        return None
    text = to_str(raw)
    try:
        return int(text)
    except ValueError:
        return None


def _seconds_or_none(raw: Any) -> float | None:
    ms = _int_or_none(raw)
    return None if ms is None else ms / 1000


# -- global concurrency --------------------------------------------------------------------


def set_global_concurrency(keys: QueueKeys, concurrency: int) -> CommandOp[None]:
    """HSET meta ``concurrency``: at most that many jobs active at once, across all workers.

    The base marker is written with it (docs/protocol/differences.md#freed-slot-marker): a raised
    limit frees slots, and jobs added while the queue was maxed wrote no marker to wake idle
    workers. A fetch that finds the queue still maxed takes nothing.
    """
    n = _positive_int(concurrency, "global concurrency")
    commands = [("HSET", keys.meta, CONCURRENCY, n), _wake(keys)]
    return CommandOp(commands, lambda replies: None)


def get_global_concurrency(keys: QueueKeys) -> CommandOp[int | None]:
    """The global concurrency, or None when none is set."""
    return CommandOp([("HGET", keys.meta, CONCURRENCY)], lambda replies: _int_or_none(replies[0]))


def remove_global_concurrency(keys: QueueKeys) -> CommandOp[bool]:
    """HDEL meta ``concurrency`` and wake idle workers (as :func:`set_global_concurrency`);
    True when one was set."""
    commands = [("HDEL", keys.meta, CONCURRENCY), _wake(keys)]
    return CommandOp(commands, lambda replies: int(replies[0]) > 0)


def _wake(keys: QueueKeys) -> tuple[str, ...]:
    """The base marker: idle workers of the queue try a fetch."""
    return ("ZADD", keys.marker, "0", "0")


# -- global rate limit ---------------------------------------------------------------------


def set_global_rate_limit(keys: QueueKeys, max_jobs: int, duration: Duration) -> CommandOp[None]:
    """HSET meta ``max`` and ``duration`` (ms): at most ``max_jobs`` jobs per window."""
    n = _positive_int(max_jobs, "rate limit max")
    ms = _positive_ms(duration, "rate limit duration")
    return CommandOp([("HSET", keys.meta, RATE_MAX, n, RATE_DURATION, ms)], lambda replies: None)


def get_global_rate_limit(keys: QueueKeys) -> CommandOp[RateLimit | None]:
    """The global rate limit when both ``max`` and ``duration`` are set, else None."""

    def parse(replies: list[Any]) -> RateLimit | None:
        max_jobs, duration = replies[0]
        n, seconds = _int_or_none(max_jobs), _seconds_or_none(duration)
        if not max_jobs or not duration or n is None or seconds is None:
            return None
        return RateLimit(n, seconds)

    return CommandOp([("HMGET", keys.meta, RATE_MAX, RATE_DURATION)], parse)


def remove_global_rate_limit(keys: QueueKeys) -> CommandOp[bool]:
    """HDEL meta ``max`` and ``duration``; True when either was set."""
    return CommandOp(
        [("HDEL", keys.meta, RATE_MAX, RATE_DURATION)], lambda replies: int(replies[0]) > 0
    )


# -- the limiter key -----------------------------------------------------------------------


def rate_limit(keys: QueueKeys, duration: Duration) -> CommandOp[None]:
    """SET limiter to Number.MAX_SAFE_INTEGER with PX ``duration``: the manual rate limit."""
    ms = _positive_ms(duration, "rate limit duration")
    return CommandOp([("SET", keys.limiter, MANUAL_RATE_LIMIT, "PX", ms)], lambda replies: None)


def remove_rate_limit_key(keys: QueueKeys) -> CommandOp[bool]:
    """DEL limiter (the rate-limit counter or a manual rate limit); True when it existed."""
    return CommandOp([("DEL", keys.limiter)], lambda replies: int(replies[0]) > 0)


def get_rate_limit_ttl(keys: QueueKeys, max_jobs: int | None = None) -> CommandOp[float]:
    """Seconds until the queue's rate limit lifts; 0.0 when it is not rate limited.

    With ``max_jobs`` (else the global ``max``) the queue is limited while the limiter's count
    has reached it, as a fetch decides; with neither, any TTL the limiter key has counts (a
    manual rate limit). BullMQ's ``getRateLimitTtl`` answers milliseconds, and in the last case
    the raw PTTL (-2 for no key, -1 for no TTL) where this answers 0.0.
    """
    wanted = None if max_jobs is None else _positive_int(max_jobs, "max_jobs")

    def parse(replies: list[Any]) -> float:
        count, pttl, meta_max = replies
        limit = wanted if wanted is not None else _int_or_none(meta_max)
        ttl = int(pttl)
        if limit is not None and limit > (_int_or_none(count) or 0):
            return 0.0
        return max(ttl, 0) / 1000

    return CommandOp(
        [("GET", keys.limiter), ("PTTL", keys.limiter), ("HGET", keys.meta, RATE_MAX)], parse
    )


def is_maxed(keys: QueueKeys) -> CommandOp[bool]:
    """Whether a global concurrency is set and the active jobs, grouped ones included
    (docs/protocol/groups.md#groups-rules), have reached it."""

    def parse(replies: list[Any]) -> bool:
        concurrency = _int_or_none(replies[0])
        return concurrency is not None and int(replies[1]) + int(replies[2]) >= concurrency

    return CommandOp(
        [
            ("HGET", keys.meta, CONCURRENCY),
            ("LLEN", keys.active),
            ("LLEN", keys.groups_active),
        ],
        parse,
    )


# -- other reads ---------------------------------------------------------------------------


def get_counts_per_priority(
    keys: QueueKeys, priorities: Iterable[int]
) -> CommandOp[dict[int, int]]:
    """How many jobs wait at each priority: 0 counts ``wait``, others their band of
    ``prioritized``. Each priority appears once, in the order first given."""
    if isinstance(priorities, (str, bytes)):
        raise InvalidOptionError(f"priorities must be ints, got {priorities!r}")
    unique: list[int] = []
    for p in priorities:
        if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p <= MAX_PRIORITY:
            raise InvalidOptionError(
                f"each priority must be an int between 0 and {MAX_PRIORITY}, got {p!r}"
            )
        if p not in unique:
            unique.append(p)
    commands: list[tuple[Any, ...]] = [
        ("LLEN", keys.wait)
        if p == 0
        else ("ZCOUNT", keys.prioritized, p * _BAND, (p + 1) * _BAND - 1)
        for p in unique
    ]
    return CommandOp(commands, lambda replies: {p: int(n or 0) for p, n in zip(unique, replies)})


def get_meta(keys: QueueKeys) -> CommandOp[QueueMeta]:
    """The queue's meta hash as a :class:`QueueMeta` (HGETALL)."""

    def parse(replies: list[Any]) -> QueueMeta:
        raw = replies[0]
        meta = hash_to_dict(raw) if isinstance(raw, dict) else flat_to_dict(raw or [])
        return QueueMeta(
            paused=meta.get(PAUSED) == "1",
            concurrency=_int_or_none(meta.get(CONCURRENCY)),
            rate_limit_max=_int_or_none(meta.get(RATE_MAX)),
            rate_limit_duration=_seconds_or_none(meta.get(RATE_DURATION)),
            max_len_events=_int_or_none(meta.get(MAX_LEN_EVENTS)),
            version=meta.get(VERSION),
        )

    return CommandOp([("HGETALL", keys.meta)], parse)
