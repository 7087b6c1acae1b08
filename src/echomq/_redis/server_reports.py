"""Checks of the Redis server a process uses: its eviction policy, and its clock against ours.

Two settings outside echomq silently break a queue whose whole state lives in Redis:

- a ``maxmemory-policy`` other than ``noeviction`` lets Redis delete job hashes, locks and
  queue keys once it reaches ``maxmemory``, so jobs are lost;
- a client clock far from the server's shifts delays and job timestamps, which are computed
  from client clocks, against locks and the stalled check, which expire on the server's.

Both are reported as WARNING records of the ``echomq.server`` logger, never raised, and a
producer's call never fails because of a check. A check whose command the server refuses for
good (``CONFIG`` or ``TIME`` renamed away, or denied to the ACL user, as on managed Redis) says
so once per process and server at INFO, naming the command (``restricted``); a check cut short
otherwise (the server gone meanwhile) says nothing above DEBUG.

When: producers (a ``Queue``, ``echomq.add`` / ``add_bulk`` and their sync twins) after their
first call that succeeds; workers at start, and the clock again with every stalled check
(:class:`ServerWatch`). State is per process and per server address (``host:port`` or the
socket path), so the policy is reported once per process per server, a producer checks a server
only if nothing in the process has checked it yet, and a skew is reported again only when it
changes by more than a second or after an hour. Deciding that a server is already checked is one
dict lookup; the checks themselves are two commands (``TIME``, ``CONFIG GET``).

This module holds what the checks know and say (per process, per server); ``server_checks``
(and its generated sync twin) reads the server.

The clock is read with ``TIME``; the skew is the server's time minus the middle of the round
trip on the client clock, and a reading whose round trip took more than a second is dropped as
too imprecise.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import restricted

logger = logging.getLogger("echomq.server")

#: Clock skew (seconds) beyond which a warning is logged.
SKEW_TOLERANCE = 1.0
#: A reading is dropped when half its round trip, the error on the skew, exceeds this.
MAX_UNCERTAINTY = 0.5
#: An unchanged skew is reported again after this many seconds...
REWARN_AFTER = 3600.0
#: ...and a skew that moved by more than this many seconds at once.
REWARN_CHANGE = 1.0


Clock = Callable[[], float]


@dataclass(frozen=True, slots=True)
class ClockReading:
    """One comparison of the client clock with the server's.

    Attributes:
        skew: server time minus client time, in seconds (negative: the client is ahead).
        uncertainty: half the round trip, the most the skew can be off by.
    """

    skew: float
    uncertainty: float

    @classmethod
    def of(cls, sent: float, server: float, received: float) -> ClockReading:
        """The reading of a ``TIME`` sent at ``sent`` and answered at ``received`` (client
        clock, epoch seconds) with ``server`` (server clock, epoch seconds)."""
        return cls(server - (sent + received) / 2, (received - sent) / 2)


def parse_time(reply: Any) -> float:
    """A ``TIME`` reply (raw ``[seconds, microseconds]``, or redis-py's parsed tuple) as epoch
    seconds."""
    if isinstance(reply, Mapping):  # a Cluster client answering for several nodes
        reply = next(iter(reply.values()))
    seconds, micros = reply[0], reply[1]
    return int(seconds) + int(micros) / 1_000_000


def parse_policy(reply: Any) -> str | None:
    """The ``maxmemory-policy`` in a ``CONFIG GET`` reply (raw pairs, or redis-py's dict; a
    Cluster client's dict of them per node, where any evicting node counts), else None."""
    if isinstance(reply, Sequence) and not isinstance(reply, (str, bytes)):
        it = iter(reply)
        reply = dict(zip(it, it))
    if not isinstance(reply, Mapping) or not reply:
        return None
    for key, value in reply.items():
        if isinstance(value, Mapping):  # per node
            found = [parse_policy(v) for v in reply.values()]
            evicting = sorted(p for p in found if p is not None and p != "noeviction")
            return evicting[0] if evicting else parse_policy(value)
        name = key.decode() if isinstance(key, bytes) else str(key)
        if name == "maxmemory-policy":
            return value.decode() if isinstance(value, bytes) else str(value)
    return None


# -- per-process, per-server state -------------------------------------------------------------


class _Server:
    """What this process knows about one server: whether its policy was checked, and the last
    skew it reported."""

    __slots__ = ("policy_checked", "warned_at", "warned_skew")

    def __init__(self) -> None:
        self.policy_checked = False
        self.warned_skew: float | None = None
        self.warned_at = 0.0


_servers: dict[str, _Server] = {}
_lock = threading.Lock()  # the sync API may check from several threads at once


def is_checked(address: str) -> bool:
    """Whether something in this process has already checked the server at ``address``."""
    return address in _servers


def claim(address: str) -> bool:
    """Register ``address``; True for the first caller only, which runs the producer checks."""
    with _lock:
        if address in _servers:
            return False
        _servers[address] = _Server()
        return True


def claim_policy(address: str) -> bool:
    """True once per address: the caller checks the eviction policy."""
    with _lock:
        server = _servers.setdefault(address, _Server())
        if server.policy_checked:
            return False
        server.policy_checked = True
        return True


def forget_all() -> None:
    """Forget every server, and the refusals reported (for tests of the once-per-process
    behaviour)."""
    with _lock:
        _servers.clear()
    restricted.forget()


# -- reporting ---------------------------------------------------------------------------------


def report_policy(address: str, policy: str | None) -> None:
    """Warn unless ``policy`` is ``noeviction`` or unknown (None: it could not be read)."""
    if policy is None:
        logger.debug("could not read maxmemory-policy of Redis at %s; not checked", address)
        return
    if policy == "noeviction":
        return
    logger.warning(
        "Redis at %s has maxmemory-policy %s: once it reaches maxmemory it may evict job "
        "hashes and queue keys (wait lists, locks, markers), and jobs can be lost; set "
        "maxmemory-policy noeviction (in redis.conf, or CONFIG SET maxmemory-policy noeviction)",
        address,
        policy,
        extra={"redis": address, "maxmemory_policy": policy},
    )


def report_clock(address: str, reading: ClockReading, at: float) -> None:
    """Warn about a skew beyond :data:`SKEW_TOLERANCE`, unless the same skew was reported
    less than :data:`REWARN_AFTER` ago; say so when a reported skew is gone.

    Args:
        address: the server.
        reading: the clock reading.
        at: when the reading was taken, on a monotonic clock (to space repeated warnings
            even if the wall clock is stepped).
    """
    if reading.uncertainty > MAX_UNCERTAINTY:
        logger.debug(
            "clock of Redis at %s not compared: the round trip took %.3f s",
            address,
            2 * reading.uncertainty,
        )
        return
    with _lock:
        server = _servers.setdefault(address, _Server())
        skew, last = reading.skew, server.warned_skew
        if abs(skew) <= SKEW_TOLERANCE:
            server.warned_skew = None
            back = last is not None
        else:
            back = False
            repeat = last is not None and abs(skew - last) <= REWARN_CHANGE
            if repeat and at - server.warned_at < REWARN_AFTER:
                return
            server.warned_skew, server.warned_at = skew, at
    if back:
        logger.info(
            "clock of this host is back within %g s of Redis at %s (skew %+.3f s)",
            SKEW_TOLERANCE,
            address,
            -skew,
            extra={"redis": address, "clock_skew": -skew},
        )
        return
    if abs(skew) <= SKEW_TOLERANCE:
        return
    logger.warning(
        "clock of this host is %.1f s %s the clock of Redis at %s: job delays and timestamps "
        "are computed from client clocks while locks expire on the server's, so delayed jobs "
        "run early or late; keep every host's clock synchronised (NTP)",
        abs(skew),
        "behind" if skew > 0 else "ahead of",
        address,
        extra={"redis": address, "clock_skew": -skew},
    )


def could_not_run(command: str, address: str | None, exc: Exception) -> None:
    """Say once at INFO that the server refused a check's command (any error reply counts:
    the check could not run); nothing without an address."""
    if address is not None:
        restricted.report(command, address, exc, any_error_reply=True)
