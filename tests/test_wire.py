"""The pipelined Channel: replies matched in order, errors, cancellation, loss and reconnects,
and its own connection: the error table, the handshake (AUTH, names, SELECT), TLS elsewhere
(tests/test_tls.py), unix sockets, timeouts and the settings it declines."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import socket
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import RedisCluster
from redis.credentials import UsernamePasswordCredentialProvider
from redis.exceptions import (
    AuthenticationError,
    BusyLoadingError,
    NoPermissionError,
    NoScriptError,
    OutOfMemoryError,
    ReadOnlyError,
    ResponseError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

import echomq
from echomq._redis.wire import Channel, open_channel, parse_error
from echomq.embedded import RedisServer, find_redis_server
from helpers import wait_for

NAME = "echomq-wire-test"

#: Keeps the server busy for half a second (DEBUG SLEEP is disabled on default servers).
BUSY_HALF_SECOND = """
local t = redis.call('TIME')
local start = t[1] * 1000000 + t[2]
repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - start > 500000
return 1
"""


def channel_of(client: AsyncRedis) -> Channel:
    channel = open_channel(client)
    assert channel is not None
    return channel


@contextlib.asynccontextmanager
async def own_channel(url: str, **settings: Any) -> AsyncIterator[Channel]:
    """A channel over a client of its own with ``settings``; both closed on exit."""
    client = AsyncRedis.from_url(url, **settings)
    channel = channel_of(client)
    try:
        yield channel
    finally:
        await channel.aclose()
        await client.aclose()


async def channel_clients(observer: AsyncRedis, name: str = NAME) -> list[dict[str, object]]:
    return [c for c in await observer.client_list() if c.get("name") == name]


async def test_concurrent_calls_pipeline_and_each_gets_its_own_reply(
    redis: AsyncRedis, queue_name: str
) -> None:
    channel = channel_of(redis)
    try:
        key = f"{queue_name}:counter"
        replies = await asyncio.gather(*(channel.call(("INCR", key)) for _ in range(500)))
        assert replies == list(range(1, 501))
        echoes = await asyncio.gather(*(channel.call(("ECHO", f"m{i}")) for i in range(200)))
        assert echoes == [f"m{i}".encode() for i in range(200)]
    finally:
        await channel.aclose()


async def test_error_replies_raise_redis_py_classes_and_keep_the_order(
    redis: AsyncRedis, queue_name: str
) -> None:
    channel = channel_of(redis)
    try:
        with pytest.raises(NoScriptError):
            await channel.call(("EVALSHA", "0" * 40, 0))
        with pytest.raises(ResponseError, match="wrong number of arguments"):
            await channel.call(("GET",))
        replies = await asyncio.gather(
            channel.call(("SET", f"{queue_name}:k", "v")),
            channel.call(("HGET", f"{queue_name}:k", "f")),  # WRONGTYPE
            channel.call(("GET", f"{queue_name}:k")),
            return_exceptions=True,
        )
        assert replies[0] == b"OK"
        assert isinstance(replies[1], ResponseError) and "WRONGTYPE" in str(replies[1])
        assert replies[2] == b"v"
    finally:
        await channel.aclose()


async def test_a_cancelled_call_does_not_shift_later_replies(redis: AsyncRedis) -> None:
    channel = channel_of(redis)
    try:
        await channel.call(("PING",))  # connected
        task = asyncio.ensure_future(channel.call(("ECHO", "cancelled")))
        await asyncio.sleep(0)  # written, reply not read yet
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await channel.call(("ECHO", "next")) == b"next"
    finally:
        await channel.aclose()


async def test_settings_of_the_client_apply(redis_url: str, queue_name: str) -> None:
    client = AsyncRedis.from_url(
        redis_url.rsplit("/", 1)[0] + "/3", decode_responses=True, client_name=NAME
    )
    channel = channel_of(client)
    try:
        assert await channel.call(("SET", f"{queue_name}:db3", "x")) == "OK"
        assert await client.get(f"{queue_name}:db3") == "x"  # same database, str replies
        assert await channel.call(("CLIENT", "GETNAME")) == NAME
        await client.delete(f"{queue_name}:db3")
    finally:
        await channel.aclose()
        await client.aclose()


async def test_a_connection_closed_by_the_server_is_reopened_and_logged(
    redis_url: str, redis: AsyncRedis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="echomq")
    async with own_channel(redis_url, client_name=NAME) as channel:
        await channel.call(("PING",))
        (victim,) = await channel_clients(redis)
        await redis.client_kill_filter(_id=victim["id"])
        for _ in range(100):  # the EOF reaches the channel
            if caplog.records:
                break
            await asyncio.sleep(0.01)
        assert await channel.call(("PING",)) == b"PONG"  # reopened before writing
        (now,) = await channel_clients(redis)
        assert now["id"] != victim["id"]
        assert any("connection to Redis lost" in r.getMessage() for r in caplog.records)


async def test_a_call_in_flight_when_the_connection_drops_fails_and_is_not_resent(
    redis_url: str, redis: AsyncRedis, queue_name: str
) -> None:
    async with own_channel(redis_url, client_name=NAME) as channel:
        await channel.call(("PING",))
        blocked = asyncio.ensure_future(channel.call(("BLPOP", f"{queue_name}:nothing", 10)))
        for _ in range(100):
            clients = await channel_clients(redis)
            if clients and clients[0]["cmd"] == "blpop":
                break
            await asyncio.sleep(0.01)
        await redis.client_kill_filter(_id=clients[0]["id"])
        with pytest.raises(RedisConnectionError):
            await asyncio.wait_for(blocked, 5)
        assert await channel.call(("ECHO", "again")) == b"again"


async def test_socket_timeout_bounds_a_call_and_the_next_call_reconnects(redis_url: str) -> None:
    async with own_channel(redis_url, socket_timeout=0.2) as channel:
        with pytest.raises(RedisTimeoutError, match="socket_timeout"):
            await channel.call(("EVAL", BUSY_HALF_SECOND, 0))
        await asyncio.sleep(0.5)  # the server is busy until then (a handshake would time out)
        assert await channel.call(("PING",)) == b"PONG"


async def test_clients_a_channel_cannot_mirror_get_none(
    redis_url: str, redis_cluster: list[str]
) -> None:
    resp3 = AsyncRedis.from_url(redis_url, protocol=3)
    single = AsyncRedis.from_url(redis_url, single_connection_client=True)
    cluster = RedisCluster.from_url(redis_cluster[0])
    try:
        assert open_channel(resp3) is None
        assert open_channel(single) is None
        assert open_channel(cluster) is None  # type: ignore[arg-type]
    finally:
        await resp3.aclose()
        await single.aclose()
        await cluster.aclose()


async def one_channel_left(redis: AsyncRedis) -> bool:
    """Whether only the client pool's own connection of ``NAME`` is left."""
    return len(await channel_clients(redis)) == 1


async def test_a_queue_closes_its_channel_and_a_dropped_queue_releases_it(
    redis_url: str, redis: AsyncRedis, queue_name: str
) -> None:
    client = AsyncRedis.from_url(redis_url, client_name=NAME)
    try:
        await client.ping()  # the pool's own connection
        queue = echomq.Queue(queue_name, connection=client)
        await queue.add("a", {})
        assert len(await channel_clients(redis)) == 2
        await queue.aclose()
        await wait_for(lambda: one_channel_left(redis), message="the queue's channel stayed open")

        dropped = echomq.Queue(queue_name, connection=client)
        await dropped.add("b", {})
        assert len(await channel_clients(redis)) == 2
        del dropped
        gc.collect()  # closed, with no ResourceWarning
        await wait_for(lambda: one_channel_left(redis), message="the dropped queue's channel")
        assert await echomq.count(queue_name, connection=client) == 2
    finally:
        await client.aclose()


@pytest.mark.filterwarnings("ignore::ResourceWarning")  # the first loop's socket, left open
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_a_channel_used_from_a_new_event_loop_reconnects_instead_of_hanging(
    redis_url: str,
) -> None:
    client = AsyncRedis.from_url(redis_url)
    channel = channel_of(client)

    async def echo(text: str) -> Any:
        return await asyncio.wait_for(channel.call(("ECHO", text)), 5)

    def two_loops() -> list[Any]:
        first = asyncio.run(echo("first"))  # this loop closes with the connection open
        second = asyncio.run(echo("second"))
        asyncio.run(channel.aclose())
        return [first, second]

    assert await asyncio.to_thread(two_loops) == [b"first", b"second"]
    await client.aclose()
    gc.collect()  # the first loop's transport: its __del__ closes the socket (with a warning)


async def test_keep_open_reopens_a_lost_connection_without_a_call(
    redis_url: str, redis: AsyncRedis
) -> None:
    client = AsyncRedis.from_url(redis_url, client_name=NAME)
    channel = open_channel(client, keep_open=True)
    assert channel is not None
    try:
        await channel.call(("PING",))
        (victim,) = await channel_clients(redis)
        await redis.client_kill_filter(_id=victim["id"])

        async def reopened() -> bool:
            now = await channel_clients(redis)
            return len(now) == 1 and now[0]["id"] != victim["id"]

        for _ in range(200):
            if await reopened():
                break
            await asyncio.sleep(0.01)
        assert await reopened(), "the connection was not reopened"
    finally:
        await channel.aclose()
        await client.aclose()

    async def none_left() -> bool:
        return await channel_clients(redis) == []

    await wait_for(none_left, message="the channel's connection stayed open")
    assert channel._reopening is None  # closed for good: nothing reopens it


# -- the Channel's own connection: error table, handshake, settings --------------------------


@pytest.mark.parametrize(
    ("reply", "kind", "message"),
    [
        ("NOSCRIPT No matching script.", NoScriptError, "No matching script."),
        ("OOM command not allowed", OutOfMemoryError, "command not allowed"),
        ("LOADING Redis is loading", BusyLoadingError, "Redis is loading"),
        ("READONLY You can't write", ReadOnlyError, "You can't write"),
        ("WRONGPASS invalid username", AuthenticationError, "invalid username"),
        ("NOPERM no permissions", NoPermissionError, "no permissions"),
        ("ERR invalid password", AuthenticationError, "invalid password"),
        ("ERR max number of clients reached", RedisConnectionError, "max number of clients"),
        ("ERR unknown command 'X'", ResponseError, "unknown command 'X'"),
        # Unknown first words stay in the message: the worker classifies BUSY/MISCONF by it.
        ("BUSY Redis is busy running a script", ResponseError, "BUSY Redis is busy"),
        ("MISCONF no disk", ResponseError, "MISCONF no disk"),
        ("WRONGTYPE Operation against a key", ResponseError, "WRONGTYPE Operation"),
    ],
)
def test_error_replies_map_to_the_classes_redis_py_raises(
    reply: str, kind: type[Exception], message: str
) -> None:
    error = parse_error(reply)
    assert type(error) is kind
    assert str(error).startswith(message)


async def test_error_classes_match_redis_py_own_path(redis: AsyncRedis) -> None:
    channel = channel_of(redis)
    try:
        for command in [("EVALSHA", "0" * 40, 0), ("GET",), ("NOSUCHCOMMAND",)]:
            with pytest.raises(ResponseError) as ours:
                await channel.call(command)
            with pytest.raises(ResponseError) as theirs:
                await redis.execute_command(*command)
            assert (type(ours.value), str(ours.value)) == (type(theirs.value), str(theirs.value))
    finally:
        await channel.aclose()


@pytest_asyncio.fixture
async def acl_user(redis: AsyncRedis) -> AsyncIterator[tuple[str, str]]:
    user, password = f"echomq-{uuid.uuid4().hex[:8]}", "s3cret"
    await redis.acl_setuser(
        user, enabled=True, passwords=[f"+{password}"], keys=["*"], commands=["+@all"]
    )
    try:
        yield user, password
    finally:
        await redis.acl_deluser(user)


async def test_the_handshake_authenticates_names_and_selects(
    redis_url: str, acl_user: tuple[str, str], queue_name: str
) -> None:
    user, password = acl_user
    base = redis_url.rsplit("/", 1)[0].replace("redis://", f"redis://{user}:{password}@")
    async with own_channel(base + "/2", client_name=NAME) as channel:
        assert await channel.call(("ACL", "WHOAMI")) == user.encode()
        assert await channel.call(("CLIENT", "GETNAME")) == NAME.encode()
        info = await channel.call(("CLIENT", "INFO"))
        assert b" db=2 " in info

    provider = UsernamePasswordCredentialProvider(user, password)
    client = AsyncRedis.from_url(redis_url, credential_provider=provider)
    channel = channel_of(client)
    try:
        assert await channel.call(("ACL", "WHOAMI")) == user.encode()
    finally:
        await channel.aclose()
        await client.aclose()

    async with own_channel(base.replace(password, "wrong") + "/0") as channel:
        with pytest.raises(AuthenticationError):
            await channel.call(("PING",))


async def test_a_unix_socket_server(tmp_path_factory: pytest.TempPathFactory) -> None:
    data = tmp_path_factory.mktemp("wire-unix")
    server = RedisServer(executable=find_redis_server(), unix_socket=data / "r.sock", data_dir=data)
    server.start()
    try:
        async with own_channel(server.url, decode_responses=True, client_name=NAME) as channel:
            assert await channel.call(("SET", "k", "v")) == "OK"
            assert await channel.call(("GET", "k")) == "v"
            assert await channel.call(("CLIENT", "GETNAME")) == NAME
    finally:
        server.stop()


async def test_default_and_url_clients_get_a_channel_and_unknown_settings_decline(
    redis_url: str,
) -> None:
    made = [AsyncRedis(), AsyncRedis.from_url(redis_url), AsyncRedis.from_url(redis_url + "?a=b")]
    unknown = AsyncRedis.from_url(redis_url)
    unknown.connection_pool.connection_kwargs["some_future_setting"] = True
    try:
        # Every redis-py in the supported range: a new setting must not silently cost the
        # pipelined path (nor be ignored by it).
        assert all(open_channel(client) is not None for client in made[:2])
        assert open_channel(unknown) is None
    finally:
        for client in [*made, unknown]:
            await client.aclose()


async def test_socket_connect_timeout_bounds_a_connect_to_a_silent_host() -> None:
    with socket.socket() as silent:  # accepts (backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        client = AsyncRedis(port=port, socket_connect_timeout=0.3, socket_timeout=0.3)
        channel = channel_of(client)
        try:
            with pytest.raises(RedisTimeoutError):
                await asyncio.wait_for(channel.call(("PING",)), 5)
        finally:
            await channel.aclose()
            await client.aclose()
