"""TLS: a Queue, a Worker and QueueEvents over ``rediss://`` (their own connections included).

The suite starts a redis-server with a TLS port and a self-signed certificate made with the
``openssl`` command; the plain port only serves the start-up check.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis as AsyncRedis

import echomq
from echomq.embedded import RedisServer, find_redis_server


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[int, Path]]:
    """``(tls_port, ca_file)`` of a redis-server that speaks TLS."""
    openssl = shutil.which("openssl")
    assert openssl, "the TLS tests need the openssl command (Debian package openssl)"
    data = tmp_path_factory.mktemp("redis-tls")
    cert, key = data / "cert.pem", data / "key.pem"
    subprocess.run(
        [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2"]
        + ["-keyout", str(key), "-out", str(cert), "-subj", "/CN=localhost"],
        check=True,
        capture_output=True,
    )
    port = _free_port()
    server = RedisServer(
        executable=find_redis_server(),
        data_dir=data,
        extra_args=[
            *("--tls-port", str(port), "--tls-cert-file", str(cert)),
            *("--tls-key-file", str(key), "--tls-ca-cert-file", str(cert)),
            *("--tls-auth-clients", "no"),
        ],
    )
    server.start()
    try:
        yield port, cert
    finally:
        server.stop()


async def test_queue_worker_and_events_over_tls(
    tls_server: tuple[int, Path], queue_name: str
) -> None:
    port, ca = tls_server
    client = AsyncRedis.from_url(
        f"rediss://127.0.0.1:{port}/0", ssl_ca_certs=str(ca), ssl_check_hostname=False
    )
    queue = echomq.Queue(queue_name, connection=client)
    seen: list[int] = []

    async def double(job: echomq.Job) -> int:
        seen.append(job.data["i"])
        return int(job.data["i"]) * 2

    try:
        jobs = [await queue.add("x", {"i": i}) for i in range(20)]
        channel = queue._conn.channel
        assert channel is not None  # the queue's own connection mirrors the client's TLS
        wire = channel._holder[0]
        assert wire is not None
        assert isinstance(wire.transport.get_extra_info("ssl_object"), ssl.SSLObject)

        async with (
            echomq.QueueEvents(queue_name, connection=client) as events,
            echomq.Worker(queue_name, double, connection=client, concurrency=4),
        ):
            results = await asyncio.gather(
                *(job.wait_until_finished(events, timeout=10) for job in jobs)
            )
        assert results == [2 * i for i in range(20)]
        assert sorted(seen) == list(range(20))
        assert await queue.get_job_counts("completed", "active", "waiting") == {
            "completed": 20, "active": 0, "waiting": 0,
        }  # fmt: skip
    finally:
        await queue.obliterate(force=True)
        await queue.aclose()
        await client.aclose()
