"""The one rule for Redis errors (``echomq._redis.retry.classify``), and what a producer does by it.

A producer makes one attempt: a call Redis refused for a state that passes (BUSY, OOM, ...)
raises ``RedisRefusedError`` and added nothing; a lost connection or a timeout raises its
parent ``RedisUnavailableError`` (the job may have been added); a script error is raised as
it is. Workers and events readers wait the first two out (tests/test_worker_outages.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
import redis
import redis.exceptions as rx
from redis.asyncio import Redis

import echomq
import echomq.sync
from echomq import RedisRefusedError, RedisUnavailableError
from echomq._keys import queue_keys
from echomq._redis.retry import Outage, classify, refused_reply
from echomq.embedded import RedisServer
from helpers import busy_for


@pytest.mark.parametrize(
    ("error", "kind", "reply"),
    [
        (rx.BusyLoadingError("Redis is loading the dataset in memory"), Outage.REFUSED, "LOADING"),
        (
            rx.OutOfMemoryError("command not allowed when used memory > 'maxmemory'."),
            Outage.REFUSED,
            "OOM",
        ),
        (rx.ResponseError("BUSY Redis is busy running a script."), Outage.REFUSED, "BUSY"),
        (
            rx.TryAgainError("Multiple keys request during rehashing of slot"),
            Outage.REFUSED,
            "TRYAGAIN",
        ),
        (rx.ClusterDownError("The cluster is down"), Outage.REFUSED, "CLUSTERDOWN"),
        (rx.MasterDownError("MASTERDOWN Link with MASTER is down"), Outage.REFUSED, "MASTERDOWN"),
        (
            rx.ReadOnlyError("You can't write against a read only replica."),
            Outage.REFUSED,
            "READONLY",
        ),
        (rx.ResponseError("MISCONF Errors writing to the AOF file"), Outage.REFUSED, "MISCONF"),
        (rx.ConnectionError("Connection closed by server."), Outage.REPLY_LOST, None),
        (rx.TimeoutError("Timeout reading from socket"), Outage.REPLY_LOST, None),
        (rx.InvalidResponse("Protocol Error: b'x'"), Outage.REPLY_LOST, None),
        (ConnectionResetError(104, "reset"), Outage.REPLY_LOST, None),
        (asyncio.TimeoutError(), Outage.REPLY_LOST, None),
        (
            rx.ResponseError("ERR user_script:1: Script attempted to access a non local key"),
            None,
            None,
        ),
        (rx.NoScriptError("No matching script."), None, None),
        (rx.DataError("Invalid input of type: 'dict'."), None, None),
    ],
)
def test_one_classification(error: BaseException, kind: Outage | None, reply: str | None) -> None:
    assert classify(error) is kind
    if reply is not None:
        assert refused_reply(error) == reply


@pytest.fixture
def spare(fresh_server: Callable[..., RedisServer]) -> RedisServer:
    """A private server whose memory limit and scripts the test may play with: BUSY replies
    after 50 ms of a running script (lua-time-limit, Redis 6.2 and 7.x alike)."""
    return fresh_server(
        appendonly=False, extra_args=["--lua-time-limit", "50", "--maxmemory-policy", "noeviction"]
    )


async def test_a_producer_out_of_memory_gets_refused_and_adds_nothing(
    spare: RedisServer, queue_name: str
) -> None:
    keys = queue_keys(queue_name)
    r = Redis.from_url(spare.url)
    try:
        await echomq.add(queue_name, "warm-up", {}, connection=r)  # scripts loaded
        used = int((await r.info("memory"))["used_memory"])
        await r.config_set("maxmemory", str(used // 2))
        try:
            with pytest.raises(RedisRefusedError) as raised:
                await echomq.add(queue_name, "refused", {}, connection=r)
            with pytest.raises(RedisRefusedError):
                await echomq.add_bulk(queue_name, [("a", {}), ("b", {})], connection=r)
            sync = redis.Redis.from_url(spare.url)
            try:
                with pytest.raises(RedisRefusedError):
                    echomq.sync.add(queue_name, "refused", {}, connection=sync)
            finally:
                sync.close()
        finally:
            await r.config_set("maxmemory", "0")
        error = raised.value
        assert isinstance(error, RedisUnavailableError)  # handlers of the parent still work
        assert error.reply == "OOM" and "nothing was added" in str(error)
        assert await r.llen(keys.wait) == 1  # the warm-up only
        assert await r.get(keys.id) == b"1"
        job = await echomq.add(queue_name, "after", {}, connection=r)
        assert job.id == "2"
    finally:
        await r.aclose()


async def test_a_producer_meeting_a_busy_script_gets_refused(
    spare: RedisServer, queue_name: str
) -> None:
    r = Redis.from_url(spare.url)
    try:
        await echomq.add(queue_name, "warm-up", {}, connection=r)

        thread = busy_for(spare.url, 1.0)
        await asyncio.sleep(0.3)  # the script has run past lua-time-limit: others get BUSY
        with pytest.raises(RedisRefusedError) as raised:
            await echomq.add(queue_name, "refused", {}, connection=r)
        assert raised.value.reply == "BUSY"
        thread.join(timeout=10)
        assert await r.llen(queue_keys(queue_name).wait) == 1
    finally:
        await r.aclose()
