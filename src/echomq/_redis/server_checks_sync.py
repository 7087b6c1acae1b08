# Generated from src/echomq/_redis/server_checks.py by scripts/unasync.py: do not edit.
# Edit the source, then run `python scripts/unasync.py` (scripts/check fails while this
# file is stale).
"""Reading the server for the checks of ``server_reports``: its clock and its eviction policy.

When: producers (a ``Queue``, ``echomq.add`` / ``add_bulk`` and their sync twins) after their
first call that succeeds (:func:`check_on_first_use_sync`); workers at start, and the clock again
with every stalled check (:class:`ServerWatch`). Written once, for asyncio;
``_redis/server_checks_sync.py`` is its generated blocking twin (``scripts/unasync.py``).
A check never raises into the caller's call.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import redis
import redis.cluster

from . import variants
from .connection_sync import SyncConn
from .server_reports import (
    Clock,
    ClockReading,
    claim,
    claim_policy,
    could_not_run,
    is_checked,
    parse_policy,
    parse_time,
    report_clock,
    report_policy,
)
from .wire import Channel

logger = logging.getLogger("echomq.server")

_TIME = ("TIME",)
_POLICY = ("CONFIG", "GET", "maxmemory-policy")


# Commands without a key: a Cluster client must be told which nodes to ask (the clock of
# one, the policies of all primaries); other clients take the raw path of the worker's calls.


def _ask(
    client: redis.Redis, channel: Channel | None, command: tuple[str, ...], every: bool
) -> Any:
    if isinstance(client, redis.cluster.RedisCluster):
        target = client.PRIMARIES if every else client.get_default_node()
        return client.execute_command(*command, target_nodes=target)
    return variants.call_sync(client, channel, command)


def read_clock(
    client: redis.Redis, channel: Channel | None = None, now: Clock = time.time
) -> ClockReading:
    """Compare ``now`` with the server's ``TIME`` (one round trip)."""
    sent = now()
    reply = _ask(client, channel, _TIME, every=False)
    return ClockReading.of(sent, parse_time(reply), now())


def read_policy(
    client: redis.Redis, channel: Channel | None = None, address: str | None = None
) -> str | None:
    """The server's ``maxmemory-policy``, or None when CONFIG is refused or renamed (said once
    at INFO when ``address`` is given)."""
    try:
        reply = _ask(client, channel, _POLICY, every=True)
    except redis.exceptions.ResponseError as exc:  # unknown command, NOPERM: managed Redis
        could_not_run("CONFIG GET", address, exc)
        return None
    return parse_policy(reply)


def _clock(conn: SyncConn, address: str, now: Clock) -> None:
    """Read and report the clock, or say once that ``TIME`` is refused."""
    try:
        reading = read_clock(conn.client, conn.channel, now)
    except redis.exceptions.ResponseError as exc:
        could_not_run("TIME", address, exc)
        return
    report_clock(address, reading, time.monotonic())


def check_producer(conn: SyncConn, now: Clock = time.time) -> None:
    """A producer's checks of its server, if nothing in this process ran them yet (the
    ``first_use`` hook of a producer's :class:`SyncConn`); never raises."""
    address = conn.server
    if not claim(address):
        return
    try:
        _clock(conn, address, now)
        if claim_policy(address):
            report_policy(address, read_policy(conn.client, conn.channel, address))
    except Exception as exc:  # a diagnostic must never fail the caller's call
        logger.debug("checks of Redis at %s skipped (%s: %s)", address, type(exc).__name__, exc)


def check_on_first_use_sync(conn: SyncConn) -> None:
    """Have a producer's ``conn`` check its server after its first call that succeeds, unless
    something in this process has checked that server already (then this is one lookup)."""
    if not is_checked(conn.server):
        conn.first_use = check_producer
