"""FastAPI and Starlette: one :class:`~echomq.Queue` per app, opened and closed by its lifespan.

::

    app = FastAPI(lifespan=echomq_lifespan("emails"))   # or connection="redis://..."

    @app.post("/signup")
    async def signup(queue: Annotated[echomq.Queue, Depends(get_queue)]) -> dict[str, str]:
        job = await queue.add("welcome", {"to": "ada@example.com"})
        return {"job": job.id}

At startup the lifespan opens the queue (and, unless ``events=False``, a
:class:`~echomq.QueueEvents` reader for ``job.wait_until_finished``), and can run a
:class:`~echomq.Worker` in the app's process (``processor=``); at shutdown it closes the
worker gracefully, then the reader and the queue. Everything lives on ``app.state.echomq``
(an :class:`EchoMQState`), never in module globals, so two apps in one process stay apart.
With a URL, each of them opens (and closes) its own client; with a client you pass, nothing
closes it; with none, each follows echomq's connection rule (:func:`echomq.set_default_connection`)
when the app starts.

Importing this module without Starlette raises ``ImportError`` naming the pip command.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

try:
    from starlette.requests import HTTPConnection
except ImportError as exc:
    raise ImportError(
        "echomq.contrib.asgi needs Starlette (or FastAPI): pip install 'echomq[asgi]' "
        "or pip install 'echomq[fastapi]'"
    ) from exc

from .._redis.connection import AsyncConnection
from ..events import QueueEvents
from ..options import WorkerOptions
from ..protocol.keys import DEFAULT_PREFIX
from ..queue import Queue
from ..worker import Processor, Worker

__all__ = ["EchoMQState", "echomq_lifespan", "get_queue", "get_queue_events", "get_state"]

Lifespan = Callable[[Any], AbstractAsyncContextManager[None]]


@dataclass(frozen=True, slots=True)
class EchoMQState:
    """What the lifespan opened for one app (``app.state.echomq``).

    Attributes:
        queue: the app's queue.
        events: its events reader, or None with ``events=False``.
        worker: the worker running in the app's process, or None.
    """

    queue: Queue
    events: QueueEvents | None
    worker: Worker | None


def echomq_lifespan(
    queue: str,
    *,
    connection: AsyncConnection | None = None,
    prefix: str = DEFAULT_PREFIX,
    events: bool = True,
    processor: Processor | None = None,
    worker_options: WorkerOptions | None = None,
) -> Lifespan:
    """A lifespan for ``FastAPI(lifespan=...)`` or ``Starlette(lifespan=...)``.

    To combine it with a lifespan of your own, enter it inside yours:
    ``async with echomq_lifespan(...)(app): yield``.

    Args:
        queue: the queue name.
        connection: a URL (each object opens and closes its own client) or a
            ``redis.asyncio.Redis`` you own. None (default): the connection rule, see
            :func:`echomq.set_default_connection`.
        prefix: the key prefix.
        events: open a :class:`~echomq.QueueEvents` reader too (one blocking connection),
            for ``await job.wait_until_finished(events)`` in endpoints.
        processor: run a :class:`~echomq.Worker` with it in the app's process (see
            docs/integrations.md for the trade-offs); None runs no worker.
        worker_options: the worker's options (concurrency, close grace, ...).

    Returns:
        A function of the app returning an async context manager, as Starlette expects.

    Raises:
        ValidationError: a bad queue name, prefix or connection (when the app starts).
        ConnectionNotOpenError: no connection given and none found by the connection rule
            (when the app starts).
    """

    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            opened = Queue(queue, connection=connection, prefix=prefix)
            stack.push_async_callback(opened.aclose)
            reader = None
            if events:
                reader = QueueEvents(queue, connection=connection, prefix=prefix)
                await stack.enter_async_context(reader)
            worker = None
            if processor is not None:
                worker = Worker(
                    queue, processor, connection=connection, prefix=prefix, options=worker_options
                )
                await stack.enter_async_context(worker)
            app.state.echomq = EchoMQState(queue=opened, events=reader, worker=worker)
            try:
                yield
            finally:
                del app.state.echomq

    return lifespan


def get_state(connection: HTTPConnection) -> EchoMQState:
    """The :class:`EchoMQState` of the app serving this request.

    Raises:
        RuntimeError: the app was not started with :func:`echomq_lifespan`.
    """
    state = getattr(connection.app.state, "echomq", None)
    if not isinstance(state, EchoMQState):
        raise RuntimeError(
            "no echomq queue on this app: create it with lifespan=echomq_lifespan(...) and "
            "run it with its lifespan (TestClient needs `with TestClient(app)`)"
        )
    return state


def get_queue(connection: HTTPConnection) -> Queue:
    """FastAPI dependency: the app's :class:`~echomq.Queue`
    (``queue: Annotated[echomq.Queue, Depends(get_queue)]``).

    Raises:
        RuntimeError: the app was not started with :func:`echomq_lifespan`.
    """
    return get_state(connection).queue


def get_queue_events(connection: HTTPConnection) -> QueueEvents:
    """FastAPI dependency: the app's :class:`~echomq.QueueEvents` reader.

    Raises:
        RuntimeError: the app was not started with :func:`echomq_lifespan`, or with
            ``events=False``.
    """
    events = get_state(connection).events
    if events is None:
        raise RuntimeError("this app's echomq_lifespan was made with events=False")
    return events
