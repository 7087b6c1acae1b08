"""The connection a task uses when ``using(connection=...)`` gave none.

Order: the task's own (``task.using(connection=...)``), else the process default set once with
:func:`set_default_connection`, else the ``ECHOMQ_REDIS_URL`` environment variable. With none
of them, :class:`~echomq.ConnectionNotOpenError` says how to set one: a task never starts an
embedded server on its own.

A client is used as given (and never closed here). A URL serves both kinds of entry points:
the sync ones (``enqueue``, ``result``) share one ``redis.Redis`` per URL for the life of the
process (made by :func:`echomq.sync.client_from_url`: thread-safe, its pool reconnects after a
fork), so a Django or Flask producer pays no connect per enqueue; the async ones (``aenqueue``,
``aresult``) open a client for one call and close it afterwards, as the module-level functions
do, since an asyncio client belongs to one event loop (an async application that enqueues often
gives a ``redis.asyncio.Redis`` it keeps). A ``redis.asyncio.Redis`` serves the async entry
points and a ``redis.Redis`` the sync ones.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import redis
import redis.asyncio

from ..errors import ConnectionNotOpenError
from ..sync import client_from_url

#: The environment variable read when no connection was given or set.
ENV_VAR = "ECHOMQ_REDIS_URL"

_default: list[Any] = []  # one slot: the process-wide default connection
_sync_clients: dict[str, redis.Redis] = {}  # URL -> the client the sync entry points share
_sync_lock = threading.Lock()


def set_default_connection(connection: Any) -> None:
    """Set the connection every task uses unless ``using(connection=...)`` gives one.

    Args:
        connection: a Redis URL, a ``redis.asyncio.Redis`` (for ``aenqueue`` / ``aresult``), a
            ``redis.Redis`` (for ``enqueue`` / ``result``), or None to forget the default
            (``ECHOMQ_REDIS_URL`` is then read again).
    """
    _default.clear()
    if connection is not None:
        _default.append(connection)


def resolve(connection: Any, *, is_async: bool) -> Any:
    """The connection for one call: ``connection`` if given, else the default, else the
    environment variable.

    Raises:
        ConnectionNotOpenError: no connection anywhere, or a client of the other kind (a sync
            client for an async call, or the reverse).
    """
    chosen = connection
    if chosen is None and _default:
        chosen = _default[0]
    if chosen is None:
        chosen = os.environ.get(ENV_VAR) or None
    if chosen is None:
        raise ConnectionNotOpenError(
            "a task needs a Redis connection: call echomq.set_default_connection(url_or_client) "
            f"once at start-up, set the {ENV_VAR} environment variable, or pass one with "
            "task.using(connection=...)"
        )
    if isinstance(chosen, str):
        return chosen if is_async else _shared_sync_client(chosen)
    if is_async and isinstance(chosen, redis.Redis):
        raise ConnectionNotOpenError(
            "a redis.Redis (sync) client cannot serve aenqueue/aresult: use enqueue/result, "
            "or give a redis.asyncio.Redis or a URL"
        )
    if not is_async and isinstance(chosen, redis.asyncio.Redis):
        raise ConnectionNotOpenError(
            "a redis.asyncio.Redis client cannot serve enqueue/result (sync): use "
            "aenqueue/aresult, or give a redis.Redis or a URL"
        )
    return chosen


def _shared_sync_client(url: str) -> redis.Redis:
    """The ``redis.Redis`` the sync entry points use for ``url``, made on first use.

    Raises:
        ValidationError: ``url`` is not a URL echomq can open.
    """
    client = _sync_clients.get(url)
    if client is None:
        with _sync_lock:
            client = _sync_clients.get(url)
            if client is None:
                client = _sync_clients[url] = client_from_url(url)
    return client
