"""Reading the server for the checks of ``server_reports``: its clock and its eviction policy.

When: producers (a ``Queue``, ``echomq.add`` / ``add_bulk`` and their sync twins) after their
first call that succeeds (:func:`check_on_first_use`); workers at start, and the clock again
with every stalled check (:class:`ServerWatch`). Written once, for asyncio;
``_redis/server_checks_sync.py`` is its generated blocking twin (``scripts/unasync.py``).
A check never raises into the caller's call.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

from . import variants
from .connection import AsyncConn
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


async def _ask(
    client: redis.asyncio.Redis, channel: Channel | None, command: tuple[str, ...], every: bool
) -> Any:
    if isinstance(client, redis.asyncio.cluster.RedisCluster):
        target = client.PRIMARIES if every else client.get_default_node()
        return await client.execute_command(*command, target_nodes=target)
    return await variants.call(client, channel, command)


async def read_clock(
    client: redis.asyncio.Redis, channel: Channel | None = None, now: Clock = time.time
) -> ClockReading:
    """Compare ``now`` with the server's ``TIME`` (one round trip)."""
    sent = now()
    reply = await _ask(client, channel, _TIME, every=False)
    return ClockReading.of(sent, parse_time(reply), now())


async def read_policy(
    client: redis.asyncio.Redis, channel: Channel | None = None, address: str | None = None
) -> str | None:
    """The server's ``maxmemory-policy``, or None when CONFIG is refused or renamed (said once
    at INFO when ``address`` is given)."""
    try:
        reply = await _ask(client, channel, _POLICY, every=True)
    except redis.exceptions.ResponseError as exc:  # unknown command, NOPERM: managed Redis
        could_not_run("CONFIG GET", address, exc)
        return None
    return parse_policy(reply)


async def _clock(conn: AsyncConn, address: str, now: Clock) -> None:
    """Read and report the clock, or say once that ``TIME`` is refused."""
    try:
        reading = await read_clock(conn.client, conn.channel, now)
    except redis.exceptions.ResponseError as exc:
        could_not_run("TIME", address, exc)
        return
    report_clock(address, reading, time.monotonic())


async def check_producer(conn: AsyncConn, now: Clock = time.time) -> None:
    """A producer's checks of its server, if nothing in this process ran them yet (the
    ``first_use`` hook of a producer's :class:`AsyncConn`); never raises."""
    address = conn.server
    if not claim(address):
        return
    try:
        await _clock(conn, address, now)
        if claim_policy(address):
            report_policy(address, await read_policy(conn.client, conn.channel, address))
    except Exception as exc:  # a diagnostic must never fail the caller's call
        logger.debug("checks of Redis at %s skipped (%s: %s)", address, type(exc).__name__, exc)


def check_on_first_use(conn: AsyncConn) -> None:
    """Have a producer's ``conn`` check its server after its first call that succeeds, unless
    something in this process has checked that server already (then this is one lookup)."""
    if not is_checked(conn.server):
        conn.first_use = check_producer


# unasync: async-only
class ServerWatch:
    """A worker's checks: the eviction policy and the clock at the first :meth:`check`, the
    clock again at every later one (the worker calls it with each stalled check).

    Args:
        conn: the worker's connection.
        now: the client clock (epoch seconds); replaceable in tests.
    """

    def __init__(self, conn: AsyncConn, now: Clock = time.time) -> None:
        self._conn = conn
        self._now = now
        self._address: str | None = None

    async def check(self) -> None:
        """Run the checks due now; never raises (cancellation aside)."""
        conn = self._conn
        try:
            if self._address is None:
                self._address = conn.server
                if claim_policy(self._address):
                    policy = await read_policy(conn.client, conn.channel, self._address)
                    report_policy(self._address, policy)
            await _clock(conn, self._address, self._now)
        except Exception as exc:  # never stop the worker's stalled check
            logger.debug("server checks skipped (%s: %s)", type(exc).__name__, exc)


# unasync: end
