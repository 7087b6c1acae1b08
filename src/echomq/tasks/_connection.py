"""The connection a task uses: its own, else the connection rule's.

Order: the task's own (``task.using(connection=...)``), else what the library-wide connection
rule picks (``echomq._redis.default``: the connection set with
:func:`~echomq.set_default_connection`, else ``$ECHOMQ_REDIS_URL``, else the embedded Redis if
it is already running), else :class:`~echomq.ConnectionNotOpenError` saying how to give one: a
task never starts an embedded server on its own.

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

import threading
from typing import Any

import redis

from .._redis import default
from .._redis.default import set_default_connection as set_default_connection
from ..sync import client_from_url

_sync_clients: dict[str, redis.Redis] = {}  # URL -> the client the sync entry points share
_sync_lock = threading.Lock()


def resolve(connection: Any, *, is_async: bool) -> Any:
    """The connection for one call: ``connection`` if given, else the connection rule's.

    Raises:
        ConnectionNotOpenError: no connection anywhere, or a client of the other kind (a sync
            client for an async call, or the reverse).
    """
    if connection is None:
        chosen: Any = default.pick(is_async=is_async)
    else:
        chosen = connection
        if not isinstance(chosen, str):
            default.refuse_other_kind(chosen, is_async=is_async, given="the task's connection")
    if isinstance(chosen, str):
        return chosen if is_async else _shared_sync_client(chosen)
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
