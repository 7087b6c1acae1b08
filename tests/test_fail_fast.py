"""Producers fail fast: a Redis that refuses or never answers raises RedisUnavailableError in time.

Two unreachable servers: a closed port (refused at once), and a listener that accepts TCP
connections and never answers (what hangs a client: the handshake waits for a reply). The add
must raise :class:`echomq.RedisUnavailableError` within ``connect_timeout`` (plus scheduling
slack), with a message naming the URL (password masked) or, for a client the caller passed,
``host:port``. A third server answers like Redis, slowly if asked, in plain TCP or TLS: a
handshake slower than the budget fails, and a connection that made it in time keeps the
caller's ``socket_timeout``.
"""

from __future__ import annotations

import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
import redis
import redis.asyncio
import redis.connection
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


# A self-signed certificate for 127.0.0.1 (EC P-256), for the TLS server below; the clients
# do not verify it.
_TLS_CERT = """-----BEGIN CERTIFICATE-----
MIIBkDCCATagAwIBAgIUUfb4RFMN7Q9FuN6G9GmEgHw7rA8wCgYIKoZIzj0EAwIw
FDESMBAGA1UEAwwJMTI3LjAuMC4xMCAXDTI2MTIwMjExMzkzMloYDzIxMjYxMTA4
MTEzOTMyWjAUMRIwEAYDVQQDDAkxMjcuMC4wLjEwWTATBgcqhkjOPQIBBggqhkjO
PQMBBwNCAAQdjv9M7sKvB1kkXYK6tfaOmyQPJz6vYJw2k1z7I/z47M7mFyIWDUrq
FSc3u7ZFcKoPTi9Ih/yB4v6Ky5LOlNVQo2QwYjAdBgNVHQ4EFgQUsvqRiqdgitlG
V9GzBF7Gk9oFBC8wHwYDVR0jBBgwFoAUsvqRiqdgitlGV9GzBF7Gk9oFBC8wDwYD
VR0TAQH/BAUwAwEB/zAPBgNVHREECDAGhwR/AAABMAoGCCqGSM49BAMCA0gAMEUC
IQD/GrwYTvU8K7Cib+P3pdbB46ybbjZ+aJiUNLXjTGNYYAIgW6Tvhg+NMUkUeAGB
GH6fHYmu110SAArR+rfirv4lHPY=
-----END CERTIFICATE-----
"""
_TLS_KEY = """-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgAl5YTeV5KZ4xnHYD
fDSpsmyR2RvpWz1NEVl5q8eUqNShRANCAAQdjv9M7sKvB1kkXYK6tfaOmyQPJz6v
YJw2k1z7I/z47M7mFyIWDUrqFSc3u7ZFcKoPTi9Ih/yB4v6Ky5LOlNVQ
-----END PRIVATE KEY-----
"""
_TLS_OPTIONS: dict[str, object] = {"ssl_cert_reqs": "none", "ssl_check_hostname": False}


def _parse_command(buffer: bytes) -> tuple[list[bytes], bytes] | None:
    """The first whole command (a RESP array of bulk strings) in ``buffer``, and the rest."""
    head, sep, rest = buffer.partition(b"\r\n")
    if not sep:
        return None
    args: list[bytes] = []
    for _ in range(int(head[1:])):
        line, sep, rest = rest.partition(b"\r\n")
        if not sep or len(rest) < int(line[1:]) + 2:
            return None
        size = int(line[1:])
        args.append(rest[:size])
        rest = rest[size + 2 :]
    return args, rest


def _hello_reply(args: list[bytes]) -> bytes:
    """What Redis 7 answers to ``HELLO [protover [AUTH user pass] [SETNAME name]]``: the
    server's properties, a RESP3 map when the client asks for protocol 3, else (RESP2) the
    same pairs as a flat array. redis-py 8.2 speaks RESP3 by default: it sends HELLO 3 first
    and reads ``proto`` from that map."""
    proto = int(args[1]) if len(args) > 1 else 2
    pairs = [
        (b"+server", b"+redis"),
        (b"+version", b"+7.0.15"),
        (b"+proto", b":%d" % proto),
        (b"+id", b":1"),
        (b"+mode", b"+standalone"),
        (b"+role", b"+master"),
        (b"+modules", b"*0"),
    ]
    head = b"%%%d\r\n" % len(pairs) if proto == 3 else b"*%d\r\n" % (2 * len(pairs))
    return head + b"".join(key + b"\r\n" + value + b"\r\n" for key, value in pairs)


class SlowServer:
    """A TCP (or TLS) listener, in threads, that answers each command ``delay`` seconds late:
    PONG to PING, a nil to ``BLPOP`` once its timeout has passed, Redis's map of properties to
    HELLO (:func:`_hello_reply`), OK to anything else."""

    def __init__(self, delay: float, tls: ssl.SSLContext | None = None) -> None:
        self.delay = delay
        self._tls = tls
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.port: int = self._listener.getsockname()[1]
        self.accepted = 0
        self.commands: list[bytes] = []  # the name of each command answered
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._serve, daemon=True)]
        self._threads[0].start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            thread = threading.Thread(target=self._answer, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _answer(self, conn: socket.socket) -> None:
        try:
            conn.settimeout(5.0)
            if self._tls is not None:
                conn = self._tls.wrap_socket(conn, server_side=True)
            conn.settimeout(0.05)
            pending = b""
            while not self._stop.is_set():
                try:
                    chunk = conn.recv(4096)
                except TimeoutError:
                    continue
                if not chunk:
                    return
                pending += chunk
                while (parsed := _parse_command(pending)) is not None:
                    args, pending = parsed
                    name = args[0].upper()
                    wait = self.delay + (float(args[-1]) if name == b"BLPOP" else 0.0)
                    if self._stop.wait(wait):
                        return
                    self.commands.append(name)
                    if name == b"HELLO":
                        reply = _hello_reply(args)
                    else:
                        replies = {b"PING": b"+PONG\r\n", b"BLPOP": b"*-1\r\n"}
                        reply = replies.get(name, b"+OK\r\n")
                    conn.sendall(reply)
        except OSError:
            pass  # the client went away
        finally:
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._threads[0].join()  # no connection is accepted after this
        for thread in self._threads[1:]:
            thread.join()
        self._listener.close()


@pytest.fixture
def tls_context(tmp_path: Path) -> ssl.SSLContext:
    """A server-side TLS context with the test certificate."""
    (tmp_path / "cert.pem").write_text(_TLS_CERT)
    (tmp_path / "key.pem").write_text(_TLS_KEY)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    return context


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


@contextmanager
def _slow_server(delay: float, tls: ssl.SSLContext | None = None) -> Iterator[SlowServer]:
    server = SlowServer(delay, tls)
    try:
        yield server
    finally:
        server.close()


@pytest.mark.parametrize("scheme", ["redis", "rediss"])
def test_sync_handshake_slower_than_the_budget(scheme: str, tls_context: ssl.SSLContext) -> None:
    # Each reply comes within the budget; the handshake (AUTH or HELLO, CLIENT SETINFO) does not.
    tls = tls_context if scheme == "rediss" else None
    options = _TLS_OPTIONS if tls else {}
    with _slow_server(0.2, tls) as server:
        client = echomq.sync.client_from_url(
            _url(server.port, scheme), connect_timeout=0.3, **options
        )
        started = time.monotonic()
        try:
            with pytest.raises(echomq.RedisUnavailableError) as exc:
                client.ping()
        finally:
            client.close()
        elapsed = time.monotonic() - started
        assert 0.25 < elapsed < 0.3 + SLACK
        assert _masked(server.port, scheme) in str(exc.value)
        assert "connect_timeout=0.3s" in str(exc.value)
        assert server.accepted == 1, "the connect was retried behind the caller's back"


@pytest.mark.parametrize("scheme", ["redis", "rediss"])
def test_sync_slow_handshake_within_the_budget(scheme: str, tls_context: ssl.SSLContext) -> None:
    tls = tls_context if scheme == "rediss" else None
    options = _TLS_OPTIONS if tls else {}
    with _slow_server(0.05, tls) as server:
        client = echomq.sync.client_from_url(
            _url(server.port, scheme), connect_timeout=1.0, **options
        )
        try:
            assert client.ping() is True
        finally:
            client.close()
        assert server.commands[0] in (b"AUTH", b"HELLO")
        assert server.commands[-1] == b"PING"


@pytest.mark.parametrize("socket_timeout", [5.0, None])
def test_sync_connection_keeps_the_socket_timeout_given(
    socket_timeout: float | None, redis_url: str, queue_name: str
) -> None:
    # BLPOP waits longer than connect_timeout and less than socket_timeout: a socket left
    # with the connect budget as its timeout would time out.
    client = echomq.sync.client_from_url(
        redis_url, connect_timeout=0.3, socket_timeout=socket_timeout
    )
    try:
        assert client.ping() is True
        assert client.blpop([f"{queue_name}:missing"], 0.8) is None
    finally:
        client.close()


@pytest.mark.parametrize("socket_timeout", [5.0, None])
def test_sync_tls_connection_keeps_the_socket_timeout_given(
    socket_timeout: float | None, tls_context: ssl.SSLContext
) -> None:
    # Over TLS echomq bounds the TLS handshake with the budget as socket_timeout, so it must
    # put the caller's back on the socket once connected.
    with _slow_server(0.0, tls_context) as server:
        client = echomq.sync.client_from_url(
            _url(server.port, "rediss"),
            connect_timeout=0.3,
            socket_timeout=socket_timeout,
            **_TLS_OPTIONS,
        )
        try:
            assert client.ping() is True
            assert client.blpop(["missing"], 0.8) is None
            assert client.ping() is True
        finally:
            client.close()
        assert server.accepted == 1


def test_sync_connected_client_leaves_no_thread(
    redis_url: str, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[threading.Thread] = []
    start = threading.Thread.start

    def counted_start(thread: threading.Thread) -> None:
        started.append(thread)
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", counted_start)
    before = threading.active_count()
    client = echomq.sync.client_from_url(redis_url, connect_timeout=0.3)
    try:
        first = client.client_id()
        assert threading.active_count() == before  # the connect's timer thread has ended
        connect_threads = len(started)
        for i in range(300):  # each one checks a connection out of the pool: connect()
            client.set(queue_name, i)
            assert client.get(queue_name) == str(i).encode()
        assert len(started) == connect_threads, "a call on a connected client started a thread"
        assert threading.active_count() == before
        time.sleep(0.4)  # past the budget: the connection is not cut
        assert client.client_id() == first
    finally:
        client.close()


def test_sync_connection_found_closed_connects_again(
    redis_url: str, sync_redis: redis.Redis
) -> None:
    client = echomq.sync.client_from_url(redis_url, connect_timeout=0.3)
    try:
        first = client.client_id()
        sync_redis.client_kill_filter(_id=str(first))
        time.sleep(0.05)
        second = client.client_id()  # the pool sees the closed socket and connects again
        assert second != first
        assert client.ping() is True
    finally:
        client.close()


def test_sync_single_connection_client_reconnects_within_the_budget() -> None:
    # redis-py reconnects a single-connection client inside its command, not through the
    # pool's checkout (on redis-py 8 not through connect() at all): the budget holds there too.
    with _slow_server(0.0) as server:
        client = echomq.sync.client_from_url(
            _url(server.port), connect_timeout=0.3, single_connection_client=True
        )
        try:
            assert client.ping() is True
            server.delay = 2.0
            assert client.connection is not None
            client.connection.disconnect()  # type: ignore[no-untyped-call]
            started = time.monotonic()
            with pytest.raises(echomq.RedisUnavailableError) as exc:
                client.ping()
            assert time.monotonic() - started < 0.3 + SLACK
        finally:
            client.close()
        assert "connect_timeout=0.3s" in str(exc.value)
        assert server.accepted == 2


def test_sync_caller_redis_connect_func_runs_within_the_budget(
    redis_url: str, silent: SilentServer
) -> None:
    calls: list[object] = []

    def on_connect(connection: redis.connection.Connection) -> None:
        calls.append(connection)
        connection.on_connect()  # type: ignore[no-untyped-call]

    client = echomq.sync.client_from_url(
        redis_url, connect_timeout=0.3, redis_connect_func=on_connect
    )
    try:
        assert client.ping() is True
        assert client.ping() is True
    finally:
        client.close()
    assert len(calls) == 1
    hung = echomq.sync.client_from_url(
        _url(silent.port), connect_timeout=0.3, redis_connect_func=on_connect
    )
    started = time.monotonic()
    try:
        with pytest.raises(echomq.RedisUnavailableError):
            hung.ping()
    finally:
        hung.close()
    assert time.monotonic() - started < 0.3 + SLACK
    assert len(calls) == 2


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
