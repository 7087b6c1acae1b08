"""Producers fail fast: a Redis that refuses or never answers raises RedisUnavailableError in time.

Two unreachable servers: a closed port (refused at once), and a listener that accepts TCP
connections and never answers (what hangs a client: the handshake waits for a reply). The add
must raise :class:`echomq.RedisUnavailableError` within ``connect_timeout`` (plus scheduling
slack), with a message naming the URL (password masked) or, for a client the caller passed,
``host:port``.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
import redis
import redis.asyncio
import redis.exceptions
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

import echomq
import echomq.sync
from echomq.errors import InvalidOptionError, ValidationError

SLACK = 0.5  # scheduling slack on top of the connect budget


class SilentServer:
    """A TCP listener, in a thread, that accepts connections and never sends a byte."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.port: int = self._listener.getsockname()[1]
        self.accepted: list[socket.socket] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            self.accepted.append(conn)

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self._listener.close()
        for conn in self.accepted:
            conn.close()


@pytest.fixture
def silent() -> Iterator[SilentServer]:
    server = SilentServer()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def _url(port: int, scheme: str = "redis") -> str:
    return f"{scheme}://user:s3cret@127.0.0.1:{port}/0"


def _masked(port: int, scheme: str = "redis") -> str:
    return f"{scheme}://user:***@127.0.0.1:{port}/0"


def _check(exc: pytest.ExceptionInfo[echomq.RedisUnavailableError], port: int) -> None:
    message = str(exc.value)
    assert _masked(port) in message
    assert "s3cret" not in message
    assert exc.value.address == _masked(port)
    assert "Check that" in message


# -- the error ------------------------------------------------------------------------------


def test_the_error_is_an_echomq_error_and_a_redis_connection_error() -> None:
    assert issubclass(echomq.RedisUnavailableError, echomq.EchoMQError)
    assert issubclass(echomq.RedisUnavailableError, redis.exceptions.ConnectionError)


# -- async ------------------------------------------------------------------------------------


async def test_async_add_to_a_closed_port(closed_port: int) -> None:
    started = time.monotonic()
    with pytest.raises(echomq.RedisUnavailableError) as exc:
        await echomq.add("q", "n", {}, connection=_url(closed_port))
    assert time.monotonic() - started < 1.0 + SLACK
    _check(exc, closed_port)


async def test_async_add_to_a_server_that_never_answers(silent: SilentServer) -> None:
    started = time.monotonic()
    with pytest.raises(echomq.RedisUnavailableError) as exc:
        await echomq.add("q", "n", {}, connection=_url(silent.port))
    elapsed = time.monotonic() - started
    assert 0.9 < elapsed < 1.0 + SLACK
    _check(exc, silent.port)
    assert "connect_timeout=1s" in str(exc.value)
    assert len(silent.accepted) == 1, "the connect was retried behind the caller's back"


async def test_async_queue_add_with_its_own_connect_timeout(silent: SilentServer) -> None:
    started = time.monotonic()
    queue = echomq.Queue("q", connection=_url(silent.port), connect_timeout=0.3)
    try:
        with pytest.raises(echomq.RedisUnavailableError) as exc:
            await queue.add("n", {})
    finally:
        await queue.aclose()
    assert time.monotonic() - started < 0.3 + SLACK
    _check(exc, silent.port)


async def test_async_queue_getter_fails_fast_too(closed_port: int) -> None:
    async with echomq.Queue("q", connection=_url(closed_port)) as queue:
        with pytest.raises(echomq.RedisUnavailableError):
            await queue.get_job_counts()


async def test_client_from_url(silent: SilentServer) -> None:
    client = echomq.client_from_url(_url(silent.port), connect_timeout=timedelta(seconds=0.3))
    started = time.monotonic()
    try:
        with pytest.raises(echomq.RedisUnavailableError) as exc:
            await client.ping()
    finally:
        await client.aclose()
    assert time.monotonic() - started < 0.3 + SLACK
    _check(exc, silent.port)


async def test_client_from_url_works(redis_url: str, queue_name: str) -> None:
    client = echomq.client_from_url(redis_url, decode_responses=True)
    try:
        job = await echomq.add(queue_name, "n", {"a": 1}, connection=client)
        assert await echomq.get_state(queue_name, job.id, connection=client) == "waiting"
        assert await client.ping() is True
    finally:
        await client.aclose()


async def test_tls_handshake_is_bounded(silent: SilentServer) -> None:
    started = time.monotonic()
    with pytest.raises(echomq.RedisUnavailableError) as exc:
        await echomq.add("q", "n", {}, connection=_url(silent.port, "rediss"))
    assert time.monotonic() - started < 1.0 + SLACK
    assert _masked(silent.port, "rediss") in str(exc.value)


async def test_missing_unix_socket(tmp_path: object) -> None:
    url = f"unix://{tmp_path}/no-such.sock"
    with pytest.raises(echomq.RedisUnavailableError) as exc:
        await echomq.add("q", "n", {}, connection=url)
    assert url in str(exc.value)


async def test_a_client_you_pass_names_host_and_port(silent: SilentServer) -> None:
    # No retries: redis-py's default ones (kept, as it is the caller's client) only slow this.
    client = redis.asyncio.Redis(
        host="127.0.0.1", port=silent.port, socket_timeout=0.3, retry=AsyncRetry(NoBackoff(), 0)
    )
    connection_class = client.connection_pool.connection_class
    try:
        with pytest.raises(echomq.RedisUnavailableError) as exc:
            await echomq.add("q", "n", {}, connection=client)
        with pytest.raises(echomq.RedisUnavailableError):
            await echomq.Queue("q", connection=client).add("n")
    finally:
        await client.aclose()
    assert f"127.0.0.1:{silent.port}" in str(exc.value)
    assert exc.value.address == f"127.0.0.1:{silent.port}"
    assert isinstance(exc.value.__cause__, redis.exceptions.RedisError)
    assert client.connection_pool.connection_class is connection_class  # left as it was


async def test_wrong_credentials_are_not_reported_as_unavailable(redis_url: str) -> None:
    url = redis_url.replace("redis://", "redis://no-such-user:pw@")
    with pytest.raises(redis.exceptions.AuthenticationError) as exc:
        await echomq.add("q", "n", {}, connection=url)
    assert not isinstance(exc.value, echomq.RedisUnavailableError)


# -- sync -------------------------------------------------------------------------------------


def test_sync_add_to_a_closed_port(closed_port: int) -> None:
    started = time.monotonic()
    with pytest.raises(echomq.RedisUnavailableError) as exc:
        echomq.sync.add("q", "n", {}, connection=_url(closed_port))
    assert time.monotonic() - started < 1.0 + SLACK
    _check(exc, closed_port)


def test_sync_add_to_a_server_that_never_answers(silent: SilentServer) -> None:
    started = time.monotonic()
    with pytest.raises(echomq.RedisUnavailableError) as exc:
        echomq.sync.add("q", "n", {}, connection=_url(silent.port))
    elapsed = time.monotonic() - started
    assert 0.9 < elapsed < 1.0 + SLACK
    _check(exc, silent.port)
    assert len(silent.accepted) == 1, "the connect was retried behind the caller's back"


def test_sync_queue_add_with_its_own_connect_timeout(silent: SilentServer) -> None:
    started = time.monotonic()
    with (
        echomq.sync.Queue("q", connection=_url(silent.port), connect_timeout=0.3) as queue,
        pytest.raises(echomq.RedisUnavailableError) as exc,
    ):
        queue.add_bulk([("n", {})])
    assert time.monotonic() - started < 0.3 + SLACK
    _check(exc, silent.port)


def test_sync_tls_handshake_is_bounded(silent: SilentServer) -> None:
    started = time.monotonic()
    with pytest.raises(echomq.RedisUnavailableError):
        echomq.sync.add("q", "n", {}, connection=_url(silent.port, "rediss"))
    assert time.monotonic() - started < 1.0 + SLACK


def test_sync_client_you_pass_names_host_and_port(silent: SilentServer) -> None:
    client = redis.Redis(
        host="127.0.0.1", port=silent.port, socket_timeout=0.3, retry=Retry(NoBackoff(), 0)
    )
    try:
        with pytest.raises(echomq.RedisUnavailableError) as exc:
            echomq.sync.add("q", "n", {}, connection=client)
    finally:
        client.close()
    assert f"127.0.0.1:{silent.port}" in str(exc.value)


def test_sync_client_from_url(silent: SilentServer, redis_url: str, queue_name: str) -> None:
    client = echomq.sync.client_from_url(_url(silent.port), connect_timeout=0.3)
    try:
        with pytest.raises(echomq.RedisUnavailableError):
            client.ping()
    finally:
        client.close()
    good = echomq.sync.client_from_url(redis_url)
    try:
        job = echomq.sync.add(queue_name, "n", {}, connection=good)
        assert echomq.sync.get_state(queue_name, job.id, connection=good) == "waiting"
    finally:
        good.close()


# -- validation -------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -1.0, float("inf"), "1", timedelta(0)])
def test_connect_timeout_must_be_a_positive_duration(bad: object, redis_url: str) -> None:
    with pytest.raises(InvalidOptionError, match="connect_timeout"):
        echomq.Queue("q", connection=redis_url, connect_timeout=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError, match="connect_timeout"):
        echomq.sync.Queue("q", connection=redis_url, connect_timeout=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError, match="connect_timeout"):
        echomq.client_from_url(redis_url, connect_timeout=bad)  # type: ignore[arg-type]


def test_client_from_url_refuses_a_connection_class(redis_url: str) -> None:
    with pytest.raises(ValidationError, match="connection_class"):
        echomq.sync.client_from_url(redis_url, connection_class=redis.Connection)
    with pytest.raises(ValidationError, match="redis://"):
        echomq.sync.client_from_url("http://localhost")
