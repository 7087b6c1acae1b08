"""The fault suite's own tools: the RESP parser and proxy, the ledger, the server wrapper."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
import redis.asyncio
from faultkit.ledger import FINISH, START, Ledger, LedgerWriter
from faultkit.proxy import FaultProxy, flatten, parse
from faultkit.servers import FaultServer
from redis.exceptions import ConnectionError as RedisConnectionError


def test_parse_resp2_and_resp3() -> None:
    assert parse(b"+OK\r\n") == (b"OK", 5)
    assert parse(b":42\r\n")[0] == 42
    assert parse(b"$3\r\nabc\r\n") == (b"abc", 9)
    assert parse(b"$-1\r\n")[0] is None
    assert parse(b"*2\r\n$1\r\na\r\n*1\r\n:1\r\n")[0] == [b"a", [1]]
    assert parse(b"%1\r\n+k\r\n$1\r\nv\r\n")[0] == [b"k", b"v"]
    assert parse(b"_\r\n")[0] is None
    assert parse(b"#t\r\n")[0] is True
    assert parse(b"|1\r\n+a\r\n+b\r\n:7\r\n")[0] == 7  # the attribute is skipped


@pytest.mark.parametrize("partial", [b"", b"$3\r\nab", b"*2\r\n$1\r\na\r\n", b"+OK"])
def test_parse_incomplete(partial: bytes) -> None:
    value, end = parse(partial)
    assert end == 0 and value is not None and not isinstance(value, (bytes, list, int))


def test_flatten() -> None:
    assert flatten([[b"j1", b"tok", [b"name", b"x"]], 3, None]) == [b"j1", b"tok", b"name", b"x"]


def test_ledger_in_flight_per_process(tmp_path: Path) -> None:
    path = tmp_path / "ledger.txt"
    writer = LedgerWriter(path)
    try:
        writer.write("a", START)
        writer.write("b", START)
        writer.write("a", FINISH)
    finally:
        writer.close()
    with open(path, "a") as other:  # another process started "a" again and was killed
        other.write(f"a 1 {START} 1.0\n")
    ledger = Ledger(path)
    assert ledger.in_flight(os.getpid()) == {"b"}
    assert ledger.in_flight() == {"a", "b"}
    assert ledger.starts() == {"a": 2, "b": 1}
    assert ledger.pids_of("a") == [os.getpid(), 1]


def test_ledger_lines_carry_the_group(tmp_path: Path) -> None:
    path = tmp_path / "ledger.txt"
    writer = LedgerWriter(path)
    try:
        writer.write("a", START, "tenant 1/ü")
        writer.write("b", START)
    finally:
        writer.close()
    with open(path, "a") as other:
        other.write(f"c 1 {START} 1.0 g")  # still being written: no newline yet
    entries = Ledger(path).entries()
    assert [(e.job_id, e.group) for e in entries] == [("a", "tenant 1/ü"), ("b", None)]


@pytest_asyncio.fixture
async def server(tmp_path: Path) -> AsyncIterator[FaultServer]:
    srv = FaultServer(tmp_path / "redis")
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


async def test_proxy_applies_the_command_and_loses_its_reply(server: FaultServer) -> None:
    proxy = FaultProxy(server.port)
    await proxy.start()
    via = redis.asyncio.Redis.from_url(proxy.url, retry=None)
    direct = redis.asyncio.Redis.from_url(server.url)
    try:
        assert await via.set("before", "1")
        proxy.drop_replies(lambda args: args[:2] == [b"SET", b"lost"], count=1)
        with pytest.raises(RedisConnectionError):
            await via.set("lost", "1")
        assert await direct.get("lost") == b"1", "the command was applied"
        assert [d.command[:2] for d in proxy.dropped] == [[b"SET", b"lost"]]
        assert await via.get("before") == b"1", "a new connection works"
        assert proxy.cut_all() >= 1
    finally:
        await via.aclose()
        await direct.aclose()
        await proxy.aclose()


async def test_server_restarts_on_its_port_with_its_data(tmp_path: Path) -> None:
    srv = FaultServer(tmp_path / "redis", ["--appendonly", "yes", "--appendfsync", "always"])
    srv.start()
    try:
        before = redis.asyncio.Redis.from_url(srv.url)
        await before.set("kept", "1")
        await before.aclose()
        port = srv.port
        srv.kill9()
        srv.start()
        assert srv.port == port
        after = redis.asyncio.Redis.from_url(srv.url)
        assert await after.get("kept") == b"1"
        await after.aclose()
    finally:
        srv.stop()
