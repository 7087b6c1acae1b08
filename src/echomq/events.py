"""QueueEvents: typed events read from a queue's events stream, and waiting for jobs to finish.

Every script that changes a job's state appends an entry to the stream ``<prefix>:<queue>:events``
(docs/protocol/events.md). :class:`QueueEvents` reads it with ``XREAD BLOCK`` on a connection
of its own: a blocking read holds its connection for up to ``block`` seconds, so sharing the
caller's pool would starve every other command, and the connection is named
``<prefix>:<base64(queue)>:qe`` so that Node's ``getQueueEvents`` counts it (it stays unnamed
where the server refuses ``CLIENT SETNAME``, as managed Redis may: see ``_redis.restricted``).

Invariants:

- One reader task per ``QueueEvents``; it is started by the first iteration or wait, never by
  the constructor. Iterators and :meth:`QueueEvents.wait_for_job` callers all share it.
- The reader's position is the id of the last entry it delivered. A ``"$"`` start is turned
  into a concrete id (the stream's newest entry) before the first read, so after a dropped
  connection or a server restart it resumes exactly there: no entry is skipped or repeated.
- Connection errors never end the reader: it logs, backs off and reads again.
- A waiter registers before it looks at the job, and looks only once the reader's start is
  concrete, so a job that finishes at any moment is seen either in Redis or as an event.

Wire names (``jobId``, ``failedReason``, ...) are translated to the event classes in one table,
:data:`_SPECS`; an event whose name is not in it (a custom event) is an :class:`Unknown`.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import redis.asyncio
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from ._event_types import (
    Active,
    Added,
    Cleaned,
    Completed,
    Deduplicated,
    Delayed,
    Drained,
    Duplicated,
    Failed,
    Paused,
    Progress,
    QueueEvent,
    Removed,
    Resumed,
    RetriesExhausted,
    Stalled,
    Unknown,
    Waiting,
    WaitingChildren,
    is_builtin_event,
    parse_entry,
)
from ._keys import queue_keys
from ._ops import publish_event, to_str
from ._redis.connection import AsyncConn, AsyncConnection, resolve_connection
from ._redis.retry import TRANSIENT, RetryBackoff
from ._redis.wire import Channel, open_channel, send
from .errors import (
    ConnectionNotOpenError,
    InvalidOptionError,
    JobFailedError,
    ValidationError,
    error_for_code,
)
from .options import Duration, to_seconds
from .protocol import codes, fields
from .protocol.keys import DEFAULT_PREFIX

__all__ = [
    "Active",
    "Added",
    "Cleaned",
    "Completed",
    "Deduplicated",
    "Delayed",
    "Drained",
    "Duplicated",
    "Failed",
    "Paused",
    "Progress",
    "QueueEvent",
    "QueueEvents",
    "QueueEventsProducer",
    "Removed",
    "Resumed",
    "RetriesExhausted",
    "Stalled",
    "Unknown",
    "Waiting",
    "WaitingChildren",
]

logger = logging.getLogger(__name__)

#: Errors the reader survives: the server went away, restarted or killed its connection.
#: Most entries one XREAD returns.
_READ_COUNT = 500


def _id_key(event_id: str) -> tuple[int, int]:
    ms, _, seq = event_id.partition("-")
    return int(ms), int(seq or 0)


def _entries(reply: Any) -> list[tuple[str, dict[str, str]]]:
    """The entries of an XREAD reply on one stream (RESP2 list or RESP3 map; bytes or str)."""
    if not reply:
        return []
    streams = reply.values() if isinstance(reply, Mapping) else [s[1] for s in reply]
    out: list[tuple[str, dict[str, str]]] = []
    for entries in streams:
        if entries and (not entries[0] or not isinstance(entries[0][0], (bytes, str))):
            entries = entries[0]  # redis-py's RESP3 reply wraps a stream's entries: [[...]]
        for entry_id, raw in entries:
            if isinstance(raw, Mapping):
                entry = {to_str(k): to_str(v) for k, v in raw.items()}
            else:
                it = iter(raw or ())
                entry = {to_str(k): to_str(v) for k, v in zip(it, it)}
            out.append((to_str(entry_id), entry))
    return out


# --------------------------------------------------------------------------- the reader


_CLOSED: Any = object()


class _Subscription:
    """One ``async for`` over a QueueEvents: its own buffer, fed by the shared reader."""

    __slots__ = ("__weakref__", "_buffer")

    def __init__(self) -> None:
        self._buffer: asyncio.Queue[QueueEvent] = asyncio.Queue()

    def put(self, event: QueueEvent) -> None:
        self._buffer.put_nowait(event)

    def __aiter__(self) -> _Subscription:
        return self

    async def __anext__(self) -> QueueEvent:
        event = await self._buffer.get()
        if event is _CLOSED:
            self._buffer.put_nowait(_CLOSED)  # keep later calls ending too
            raise StopAsyncIteration
        return event


class QueueEvents:
    """Typed events of one queue, read on a dedicated connection; many waiters share it.

    ``async for event in events`` yields :class:`QueueEvent` subclasses. Each ``async for``
    gets every event the reader delivers from the moment it starts; the very first one (and
    any started before the reader) begins at ``last_event_id``. Events are buffered per
    iterator, so a slow consumer holds memory rather than slowing the others.

    Constructing it does nothing. ``async with`` fixes a ``"$"`` start to the stream's end at
    that moment (so events from then on are kept for the first iterator); the reader starts on
    the first iteration or wait. ``aclose()`` (or leaving ``async with``) stops it.

    Args:
        queue: the queue name.
        connection: a ``redis.asyncio.Redis`` you own, or a URL (opened and closed here). Its
            settings are used for one more connection, the blocking reader. None (default): the
            connection rule, see :func:`echomq.set_default_connection`.
        prefix: the key prefix.
        last_event_id: where to start: ``"$"`` (only new events), ``"0"`` (the whole stream
            as trimmed), or an entry id (the events after it).
        block: seconds each XREAD may block for.

    Raises:
        InvalidOptionError: ``block`` is not a positive duration.
        ValidationError: bad queue name, prefix or connection.
    """

    def __init__(
        self,
        queue: str,
        *,
        connection: AsyncConnection | None = None,
        prefix: str = DEFAULT_PREFIX,
        last_event_id: str = "$",
        block: Duration = 10.0,
    ) -> None:
        self._keys = queue_keys(queue, prefix)
        block_s = to_seconds(block, "block")
        if block_s <= 0:
            raise InvalidOptionError(f"block must be more than 0 seconds, got {block!r}")
        if last_event_id != "$":
            try:
                _id_key(last_event_id)
            except ValueError:
                raise InvalidOptionError(
                    f"last_event_id must be '$', '0' or a stream id like '1700000000000-0',"
                    f" got {last_event_id!r}"
                ) from None
        self._block_ms = max(1, round(block_s * 1000))
        self._conn = AsyncConn(resolve_connection(connection))
        self._last_id = last_event_id
        self._reader: redis.asyncio.Redis | None = None
        self._reader_channel: Channel | None = None  # XREAD on the reader's own connection
        self._task: asyncio.Task[None] | None = None
        self._ready: asyncio.Event | None = None
        self._resolving: asyncio.Lock | None = None
        self._closed = False
        self._subscribers: weakref.WeakSet[_Subscription] = weakref.WeakSet()
        self._waiters: dict[str, set[asyncio.Future[Any]]] = {}
        # Waiters whose job hash was missing: they fail once the reader passes this id.
        self._missing: dict[asyncio.Future[Any], tuple[str, tuple[int, int]]] = {}
        # Waiters whose job is still to be looked at, and the task that looks (in batches).
        self._checks: list[tuple[str, asyncio.Future[Any]]] = []
        self._check_task: asyncio.Task[None] | None = None

    @property
    def name(self) -> str:
        """The queue name."""
        return self._keys.name

    @property
    def last_event_id(self) -> str:
        """The id of the last entry delivered (or the start position before any)."""
        return self._last_id

    # -- lifecycle ----------------------------------------------------------------------------

    async def __aenter__(self) -> QueueEvents:
        await self._resolve_start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop the reader, close its connection (and a URL-opened one); end every iterator.

        Waiters still pending get :class:`~echomq.ConnectionNotOpenError`.
        """
        if self._closed:
            return
        self._closed = True
        tasks = [t for t in (self._task, self._check_task) if t is not None]
        self._task = self._check_task = None
        pending = set(tasks)
        while pending:
            # Cancel again until they end: a cancellation that lands while redis-py opens a
            # connection can be lost, and close must not hang on it.
            for task in pending:
                task.cancel()
            _, pending = await asyncio.wait(pending, timeout=0.1)
        reader, self._reader = self._reader, None
        channel, self._reader_channel = self._reader_channel, None
        if channel is not None:
            await channel.aclose()
        if reader is not None:
            await reader.aclose()
        await self._conn.aclose()
        for subscription in list(self._subscribers):
            subscription.put(_CLOSED)
        for job_id, futures in self._waiters.items():
            for future in futures:
                if not future.done():
                    future.set_exception(
                        ConnectionNotOpenError(f"QueueEvents closed while waiting for job {job_id}")
                    )

    def __aiter__(self) -> _Subscription:
        subscription = _Subscription()
        if self._closed:
            subscription.put(_CLOSED)
            return subscription
        self._subscribers.add(subscription)
        self._start()
        return subscription

    def _start(self) -> asyncio.Event:
        if self._closed:
            raise ConnectionNotOpenError("this QueueEvents was closed; create a new one")
        if self._ready is None:
            self._ready = asyncio.Event()
            if self._last_id != "$":
                self._ready.set()
        if self._task is None:
            self._task = asyncio.create_task(
                self._read_loop(), name=f"echomq-events-{self._keys.name}"
            )
        return self._ready

    def _reader_client(self) -> redis.asyncio.Redis:
        if self._reader is None:
            # No retries inside redis-py: the loop below reconnects with its own backoff
            # and always from the position it has delivered up to.
            self._reader = self._conn.new_client(
                client_name=self._keys.events_client_name(),
                socket_timeout=None,
                retry=Retry(NoBackoff(), 0),
            )
            self._reader_channel = open_channel(self._reader)
        return self._reader

    async def _resolve_start(self) -> None:
        """Replace a ``"$"`` start by the id of the stream's newest entry (``0-0`` if none)."""
        if self._resolving is None:
            self._resolving = asyncio.Lock()
        async with self._resolving:
            if self._last_id == "$":
                newest = await self._read("XREVRANGE", self._keys.events, "+", "-", "COUNT", 1)
                self._last_id = to_str(newest[0][0]) if newest else "0-0"
                logger.debug("events of %s start after %s", self._keys.name, self._last_id)
        if self._ready is not None:
            self._ready.set()

    async def _read_loop(self) -> None:
        backoff = RetryBackoff()
        while not self._closed:
            try:
                await self._resolve_start()
                reply = await self._read(
                    *("XREAD", "COUNT", _READ_COUNT, "BLOCK", self._block_ms),
                    *("STREAMS", self._keys.events, self._last_id),
                )
                self._deliver(_entries(reply))
            except TRANSIENT as exc:
                logger.warning(
                    "reading events of queue %s failed (%s: %s); reconnecting in %.2fs",
                    self._keys.name,
                    type(exc).__name__,
                    exc,
                    backoff.next_delay,
                )
            except Exception:  # a bug must not end the reader silently: log, back off, go on
                logger.exception("events reader of queue %s failed", self._keys.name)
            else:
                backoff.reset()
                continue
            await backoff.sleep()

    async def _read(self, *command: Any) -> Any:
        """A command of the reader: on its channel when it has one (that connection carries
        nothing else, so a blocking XREAD holds up no one), else on its client."""
        reader = self._reader_client()
        return await send(reader, self._reader_channel, command)

    def _deliver(self, entries: list[tuple[str, dict[str, str]]]) -> None:
        for entry_id, entry in entries:
            event = parse_entry(entry_id, entry)
            if isinstance(event, (Completed, Failed)):
                self._settle(event)
            for subscription in list(self._subscribers):
                subscription.put(event)
            self._last_id = entry_id
        if entries and self._missing:
            self._fail_missing()

    def _settle(self, event: Completed | Failed) -> None:
        for future in self._waiters.get(event.job_id, ()):
            if future.done():
                continue
            if isinstance(event, Completed):
                future.set_result(event.return_value)
            else:
                future.set_exception(JobFailedError(event.job_id, event.failed_reason))

    def _fail_missing(self) -> None:
        position = _id_key(self._last_id)
        for future, (job_id, horizon) in list(self._missing.items()):
            if position >= horizon:
                del self._missing[future]
                if not future.done():
                    future.set_exception(
                        error_for_code(
                            codes.JOB_NOT_EXIST, job_id=job_id, command="wait_until_finished"
                        )
                    )

    # -- waiting for jobs ---------------------------------------------------------------------

    async def wait_for_job(self, job_id: str, timeout: Duration | None = None) -> Any:
        """Wait until job ``job_id`` completes or fails, through this reader.

        A job that had already finished returns (or raises) at once.

        Args:
            job_id: the job.
            timeout: seconds (or a timedelta) to wait at most; None waits without limit.

        Returns:
            The job's return value (decoded JSON).

        Raises:
            JobFailedError: the job failed; ``reason`` is its failed reason.
            JobNotFoundError: the job does not exist (removed before it could be seen to finish).
            asyncio.TimeoutError: ``timeout`` passed first (the builtin ``TimeoutError``).
            ConnectionNotOpenError: this QueueEvents was closed.
        """
        seconds = None if timeout is None else to_seconds(timeout, "timeout")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters.setdefault(job_id, set()).add(future)
        try:
            return await asyncio.wait_for(self._wait(job_id, future), seconds)
        finally:
            self._missing.pop(future, None)
            futures = self._waiters.get(job_id)
            if futures is not None:
                futures.discard(future)
                if not futures:
                    del self._waiters[job_id]
            if not future.done():
                future.cancel()

    async def _wait(self, job_id: str, future: asyncio.Future[Any]) -> Any:
        # The reader's start must be concrete before the job is looked at: a finish after the
        # look is then an entry the reader will deliver.
        await self._start().wait()
        if not future.done():
            self._checks.append((job_id, future))
            if self._check_task is None or self._check_task.done():
                self._check_task = asyncio.create_task(
                    self._check_loop(), name=f"echomq-events-check-{self._keys.name}"
                )
        return await future

    async def _check_loop(self) -> None:
        """Look at the jobs of every waiter that registered meanwhile, in one round trip."""
        backoff = RetryBackoff()
        while self._checks and not self._closed:
            batch = [(job_id, f) for job_id, f in self._checks if not f.done()]
            if not batch:
                self._checks.clear()
                break
            try:
                replies = await self._check_jobs([job_id for job_id, _ in batch])
            except TRANSIENT as exc:
                logger.warning(
                    "checking jobs of queue %s failed (%s: %s); retrying in %.2fs",
                    self._keys.name,
                    type(exc).__name__,
                    exc,
                    backoff.next_delay,
                )
                await backoff.sleep()
                continue
            backoff.reset()
            checked = {id(f) for _, f in batch}
            self._checks = [(j, f) for j, f in self._checks if id(f) not in checked]
            *per_job, newest = replies
            horizon = _id_key(to_str(newest[0][0]) if newest else "0-0")
            for (job_id, future), reply in zip(batch, per_job):
                self._settle_from_hash(job_id, future, reply, horizon)
            if self._missing:
                self._fail_missing()

    async def _check_jobs(self, job_ids: list[str]) -> list[Any]:
        keys = self._keys
        async with self._conn.client.pipeline(transaction=True) as pipe:
            for job_id in job_ids:
                pipe.zscore(keys.completed, job_id)
                pipe.zscore(keys.failed, job_id)
                pipe.hmget(keys.job(job_id), [fields.RETURN_VALUE, fields.FAILED_REASON])
                pipe.exists(keys.job(job_id))
            # In the same transaction: where the stream stood when the jobs were looked at.
            pipe.xrevrange(keys.events, count=1)
            flat = await pipe.execute()
        return [flat[i : i + 4] for i in range(0, len(flat) - 1, 4)] + [flat[-1]]

    def _settle_from_hash(
        self, job_id: str, future: asyncio.Future[Any], reply: list[Any], horizon: tuple[int, int]
    ) -> None:
        completed, failed, (value, reason), exists = reply
        if future.done():
            return
        if completed is not None:
            future.set_result(fields.loads_or(None if value is None else to_str(value), None))
        elif failed is not None:
            future.set_exception(JobFailedError(job_id, "" if reason is None else to_str(reason)))
        elif not exists:
            # Gone without a trace: only an event before `horizon` can still tell its outcome.
            self._missing[future] = (job_id, horizon)

    def __repr__(self) -> str:
        return f"<QueueEvents {self._keys.qualified!r} last_event_id={self._last_id!r}>"


class QueueEventsProducer:
    """Publishes custom events to a queue's events stream, for :class:`QueueEvents` readers
    (an :class:`Unknown` event there) and BullMQ's ``QueueEvents`` (an event named after it),
    as BullMQ's ``QueueEventsProducer``.

    Args:
        queue: the queue name.
        connection: a ``redis.asyncio.Redis`` you own, or a URL (opened here, closed by
            :meth:`aclose`). None (default): the connection rule, see
            :func:`echomq.set_default_connection`.
        prefix: the key prefix.

    Raises:
        ValidationError: bad queue name, prefix or connection.
    """

    def __init__(
        self, queue: str, *, connection: AsyncConnection | None = None, prefix: str = DEFAULT_PREFIX
    ) -> None:
        self._keys = queue_keys(queue, prefix)
        self._conn = AsyncConn(resolve_connection(connection))

    @property
    def name(self) -> str:
        """The queue name."""
        return self._keys.name

    async def publish_event(
        self,
        event_name: str,
        args: Mapping[str, str | int | float | bool] | None = None,
        *,
        max_events: int = 1000,
    ) -> str:
        """Append the event ``event_name`` with the fields ``args`` to the stream, trimmed to
        about ``max_events`` entries (BullMQ's ``publishEvent({eventName, ...args},
        maxEvents)``).

        Field values are stored as text (numbers and booleans as JavaScript writes them), as
        every stream field is: a reader gets strings back. Encode structured values yourself.

        Args:
            event_name: the event's name; not one of the names echomq and BullMQ emit
                (``completed``, ``progress``, ...), which readers would take for a job's.
            args: the event's fields; ``event`` is reserved for the name.
            max_events: about how many entries the stream keeps (``MAXLEN ~``).

        Returns:
            The stream id of the entry.

        Raises:
            ValidationError: the name is empty or built in, a field is named ``event`` or has
                a value that is not a str, int, finite float or bool, or ``max_events`` is not
                an int >= 1; nothing was written.
        """
        if isinstance(event_name, str) and is_builtin_event(event_name):
            raise ValidationError(
                f"event_name {event_name!r} is an event echomq and BullMQ emit for jobs and"
                " queues; readers would take it for theirs: choose a name of your own"
            )
        op = publish_event(self._keys, event_name, args or {}, max_events)
        return await self._conn.run(op)

    async def aclose(self) -> None:
        """Close the connection if it was opened from a URL (a client you own stays open)."""
        await self._conn.aclose()

    async def __aenter__(self) -> QueueEventsProducer:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"QueueEventsProducer({self._keys.name!r}, prefix={self._keys.prefix!r})"
