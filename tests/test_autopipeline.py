"""Automatic pipelining: calls made while others are in flight go out together.

On a Channel (a Queue's, a Worker's), calls made in one event-loop iteration while a round trip
is in flight are written together (2, 4, 8, then 16 per ``transport.write``, the rest at the
end of the iteration); a call made when nothing is in flight is written at once, by the call
itself. Module-level calls on a caller's client (``_batched``) do
the same on one connection of the client's pool. Either way each call keeps its own reply and
error, in order, and a lost connection fails the calls it carried.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError

import echomq
from echomq._redis import batched as _batched
from echomq._redis import wire as _wire
from echomq._redis.wire import Channel, open_channel


class CountingTransport:
    """The real transport, with its writes counted."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.writes += 1
        self.real.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


@pytest.fixture
def transports(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[CountingTransport]]:
    """Every transport a Channel opens during the test, its writes counted."""
    made: list[CountingTransport] = []
    original = _wire._Wire.connection_made

    def connection_made(self: _wire._Wire, transport: Any) -> None:
        original(self, transport)
        self.transport = CountingTransport(self.transport)  # type: ignore[assignment]
        made.append(self.transport)  # type: ignore[arg-type]

    monkeypatch.setattr(_wire._Wire, "connection_made", connection_made)
    yield made


@pytest_asyncio.fixture
async def channel(redis: AsyncRedis) -> AsyncIterator[Channel]:
    opened = open_channel(redis)
    assert opened is not None
    try:
        await opened.call(("PING",))  # connected and idle
        yield opened
    finally:
        await opened.aclose()


def writes(transports: list[CountingTransport]) -> int:
    (transport,) = transports
    return transport.writes


# -- on a Channel -------------------------------------------------------------------------------


async def test_concurrent_calls_go_out_in_few_writes_each_with_its_own_reply_in_order(
    transports: list[CountingTransport], channel: Channel, queue_name: str
) -> None:
    before = writes(transports)
    replies = await asyncio.gather(*(channel.call(("INCR", queue_name)) for _ in range(200)))
    assert replies == list(range(1, 201))
    # the first call finds nothing in flight and goes at once; the 199 made in the same
    # iteration while it is in flight go 2, 4, 8, then 16 at a time, the last 9 together
    assert writes(transports) - before == 1 + 3 + 11 + 1


async def test_two_calls_in_flight_go_out_together_at_the_end_of_the_iteration(
    transports: list[CountingTransport], channel: Channel
) -> None:
    first = channel.call(("ECHO", "first"))  # at once
    before = writes(transports)
    second = channel.call(("ECHO", "second"))  # collected: the first is in flight
    assert writes(transports) == before
    await asyncio.sleep(0)  # the end of this iteration
    assert writes(transports) == before + 1
    assert list(await asyncio.gather(first, second)) == [b"first", b"second"]


async def test_a_lone_call_is_written_by_the_call_itself(
    transports: list[CountingTransport], channel: Channel
) -> None:
    for i in range(20):
        before = writes(transports)
        call = asyncio.ensure_future(channel.call(("ECHO", f"m{i}")))
        await asyncio.sleep(0)  # one step of the call, not a full loop iteration after it
        assert writes(transports) == before + 1  # no wait for the end of the iteration
        assert await call == f"m{i}".encode()


async def test_an_error_reply_fails_only_its_own_call_in_a_batch(
    channel: Channel, queue_name: str
) -> None:
    await channel.call(("SET", f"{queue_name}:s", "v"))
    commands: list[tuple[Any, ...]] = [("ECHO", f"m{i}") for i in range(100)]
    commands[37] = ("HGET", f"{queue_name}:s", "f")  # WRONGTYPE
    commands[80] = ("EVALSHA", "0" * 40, 0)  # NOSCRIPT
    replies = await asyncio.gather(*(channel.call(c) for c in commands), return_exceptions=True)
    assert isinstance(replies[37], ResponseError) and "WRONGTYPE" in str(replies[37])
    assert type(replies[80]).__name__ == "NoScriptError"
    assert [r for i, r in enumerate(replies) if i not in (37, 80)] == [
        f"m{i}".encode() for i in range(100) if i not in (37, 80)
    ]


async def test_cancelled_calls_in_a_batch_do_not_shift_the_others_replies(
    channel: Channel,
) -> None:
    calls = [asyncio.ensure_future(channel.call(("ECHO", f"m{i}"))) for i in range(50)]
    await asyncio.sleep(0)  # all made (and written) in this iteration
    for i in range(0, 50, 3):
        calls[i].cancel()
    for i, call in enumerate(calls):
        if i % 3 == 0:
            with pytest.raises(asyncio.CancelledError):
                await call
        else:
            assert await call == f"m{i}".encode()
    assert await channel.call(("ECHO", "after")) == b"after"


async def test_a_lost_connection_fails_every_call_it_carried_and_the_next_call_reconnects(
    redis_url: str, redis: AsyncRedis, queue_name: str
) -> None:
    name = f"ap-{uuid.uuid4().hex[:8]}"
    client = AsyncRedis.from_url(redis_url, client_name=name)
    channel = open_channel(client)
    assert channel is not None
    try:
        await channel.call(("PING",))
        blocked = asyncio.ensure_future(channel.call(("BLPOP", f"{queue_name}:none", 10)))
        await asyncio.sleep(0)
        behind = [asyncio.ensure_future(channel.call(("ECHO", f"m{i}"))) for i in range(50)]
        for _ in range(200):  # the BLPOP reached the server, the echoes wait behind it
            (info,) = [c for c in await redis.client_list() if c.get("name") == name]
            if info["cmd"] == "blpop":
                break
            await asyncio.sleep(0.01)
        await redis.client_kill_filter(_id=info["id"])
        results = await asyncio.wait_for(
            asyncio.gather(blocked, *behind, return_exceptions=True), 5
        )
        assert all(isinstance(r, RedisConnectionError) for r in results)
        assert await channel.call(("ECHO", "again")) == b"again"
    finally:
        await channel.aclose()
        await client.aclose()


# -- through a Queue ----------------------------------------------------------------------------


async def test_a_queue_writes_concurrent_adds_together_and_a_refused_add_fails_alone(
    transports: list[CountingTransport], redis: AsyncRedis, queue_name: str
) -> None:
    async with echomq.Queue(queue_name, connection=redis) as queue:
        await queue.add("warm-up", {})
        await redis.rpush(f"bull:{queue_name}:de:taken", "not a string")  # WRONGTYPE for one add
        before = writes(transports)

        async def add(i: int) -> echomq.Job:
            if i == 42:
                return await queue.add("job", {"i": i}, deduplication={"id": "taken"})
            return await queue.add("job", {"i": i})

        results = await asyncio.gather(*(add(i) for i in range(100)), return_exceptions=True)
        assert writes(transports) - before <= 100 // 16 + 5  # not a write per add
        refused = results.pop(42)
        assert isinstance(refused, ResponseError) and "WRONGTYPE" in str(refused)
        assert all(isinstance(job, echomq.Job) for job in results)
        assert [job.data["i"] for job in results] == [i for i in range(100) if i != 42]  # type: ignore[union-attr]
        assert await queue.count() == 100  # the warm-up and the 99


async def test_concurrent_adds_after_a_script_flush_load_the_script_and_all_land(
    redis: AsyncRedis, queue_name: str
) -> None:
    async with echomq.Queue(queue_name, connection=redis) as queue:
        await queue.add("warm-up", {})
        await redis.script_flush()
        jobs = await asyncio.gather(*(queue.add("job", {"i": i}) for i in range(50)))
        assert [job.data["i"] for job in jobs] == list(range(50))
        modules = await asyncio.gather(
            *(echomq.add(queue_name, "m", {"i": i}, connection=redis) for i in range(50))
        )
        assert len({job.id for job in [*jobs, *modules]}) == 100


# -- module-level calls on the caller's client ------------------------------------------------


async def test_concurrent_module_level_adds_share_few_of_the_clients_connections(
    redis_url: str, redis: AsyncRedis, queue_name: str
) -> None:
    name = f"ap-{uuid.uuid4().hex[:8]}"
    # two connections at most: one by one, 200 concurrent adds would need 200
    client = AsyncRedis.from_url(redis_url, client_name=name, max_connections=2)
    try:
        jobs = await asyncio.gather(
            *(echomq.add(queue_name, "job", {"i": i}, connection=client) for i in range(200))
        )
        assert [job.data["i"] for job in jobs] == list(range(200))
        assert await echomq.count(queue_name, connection=client) == 200
        assert len([c for c in await redis.client_list() if c.get("name") == name]) <= 2
    finally:
        await client.aclose()


async def test_a_refused_module_level_add_fails_alone(redis: AsyncRedis, queue_name: str) -> None:
    await echomq.add(queue_name, "warm-up", {}, connection=redis)
    await redis.rpush(f"bull:{queue_name}:de:taken", "not a string")

    async def add(i: int) -> echomq.Job:
        options: dict[str, Any] = {"deduplication": {"id": "taken"}} if i == 42 else {}
        return await echomq.add(queue_name, "job", {"i": i}, connection=redis, **options)

    results = await asyncio.gather(*(add(i) for i in range(100)), return_exceptions=True)
    refused = results.pop(42)
    assert isinstance(refused, ResponseError) and "WRONGTYPE" in str(refused)
    assert [job.data["i"] for job in results] == [i for i in range(100) if i != 42]  # type: ignore[union-attr]
    assert await echomq.count(queue_name, connection=redis) == 100


async def test_batched_calls_get_their_own_replies_and_errors(
    redis: AsyncRedis, redis_decoded: AsyncRedis, queue_name: str
) -> None:
    await redis.set(f"{queue_name}:s", "v")
    for client in (redis, redis_decoded):
        commands: list[tuple[Any, ...]] = [("ECHO", f"m{i}") for i in range(100)]
        commands[10] = ("HGET", f"{queue_name}:s", "f")
        replies = await asyncio.gather(
            *(_batched.call(client, c) for c in commands), return_exceptions=True
        )
        assert isinstance(replies.pop(10), ResponseError)
        expected = [f"m{i}" for i in range(100) if i != 10]
        decoded = [r.decode() if isinstance(r, bytes) else r for r in replies]
        assert decoded == expected
        assert (type(replies[0]) is str) is (client is redis_decoded)  # the client's decoding


async def test_a_batch_sent_again_after_a_lost_connection_skips_the_calls_answered(
    redis_url: str, redis: AsyncRedis, queue_name: str
) -> None:
    name = f"ap-{uuid.uuid4().hex[:8]}"
    client = AsyncRedis.from_url(redis_url, client_name=name, retry=Retry(NoBackoff(), 1))
    try:
        # the lone call goes at once on one pooled connection, the two made while it is in
        # flight together on another
        lone = asyncio.ensure_future(_batched.call(client, ("BLPOP", f"{queue_name}:a", 1)))
        await asyncio.sleep(0)
        batch = [
            asyncio.ensure_future(_batched.call(client, command))
            for command in [("INCR", f"{queue_name}:n"), ("BLPOP", f"{queue_name}:b", 1)]
        ]
        for _ in range(200):  # both BLPOPs blocking, so the INCR before one of them answered
            named = [c for c in await redis.client_list() if c.get("name") == name]
            if [c["cmd"] for c in named] == ["blpop", "blpop"]:
                break
            await asyncio.sleep(0.01)
        for c in named:
            await redis.client_kill_filter(_id=c["id"])
        results = await asyncio.wait_for(asyncio.gather(lone, *batch), 5)
        assert results == [None, 1, None]  # the INCR's reply kept, the BLPOPs sent again
        assert await redis.get(f"{queue_name}:n") == b"1"  # and the INCR not run twice
    finally:
        await client.aclose()


async def test_module_level_calls_wait_for_nothing_when_alone_and_batch_when_concurrent(
    redis: AsyncRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    flushes: list[int] = []
    original = _batched._Batches.flush

    def flush(self: _batched._Batches, client: AsyncRedis) -> None:
        flushes.append(len(self.pending))
        original(self, client)

    monkeypatch.setattr(_batched._Batches, "flush", flush)
    for i in range(20):
        assert await _batched.call(redis, ("ECHO", f"m{i}")) == f"m{i}".encode()
    assert flushes == []  # each went out at once, by the call itself
    replies = await asyncio.gather(*(_batched.call(redis, ("ECHO", f"c{i}")) for i in range(100)))
    assert replies == [f"c{i}".encode() for i in range(100)]
    assert flushes == [99]  # the first at once, the 99 made while it was in flight together
