"""The async producer API: module-level functions over a caller's connection, and ``Queue``.

A queue name is a coordinate, not a container: ``await add("emails", "send", data,
connection=redis)`` writes the job with one script call and keeps nothing in memory. ``Queue``
only remembers a name, a prefix, a connection and default job options.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any

import redis.asyncio
from typing_extensions import Unpack

from . import ops, scripts
from ._connection import AsyncConn, AsyncConnection
from .errors import ValidationError
from .job import Job, ms_to_datetime
from .options import EMPTY_OPTIONS, JobOptions, JobOptionsDict, coerce_options
from .protocol import fields
from .protocol.keys import DEFAULT_PREFIX, QueueKeys, queue_keys

#: One item of ``add_bulk``: ``(name, data)`` or ``(name, data, options)``.
BulkItem = tuple[str, Any] | tuple[str, Any, JobOptions | Mapping[str, Any]]


def _job_from_prepared(job_id: str, p: ops.PreparedJob, keys: QueueKeys, conn: AsyncConn) -> Job:
    job = Job(
        id=job_id,
        name=p.name,
        data=p.data,
        queue_name=keys.name,
        timestamp=ms_to_datetime(p.timestamp_ms),  # type: ignore[arg-type]
        delay=p.delay_ms / 1000,
        priority=p.priority,
        wire_options=fields.loads(p.opts_json),
    )
    job._keys = keys
    job._conn = conn
    return job


def prepare_bulk(
    items: Iterable[BulkItem], defaults: JobOptions = EMPTY_OPTIONS
) -> list[ops.PreparedJob]:
    """Validate and encode every item of a bulk add; raises before anything is written."""
    now = ops.now_ms()
    prepared = []
    for index, item in enumerate(items):
        if not isinstance(item, tuple) or len(item) not in (2, 3):
            raise ValidationError(
                f"add_bulk item {index} must be (name, data) or (name, data, options), got {item!r}"
            )
        options = defaults.merged(coerce_options(item[2])) if len(item) == 3 else defaults
        prepared.append(ops.prepare_job(item[0], item[1], options, now))
    return prepared


async def _add(conn: AsyncConn, keys: QueueKeys, name: str, data: Any, options: JobOptions) -> Job:
    prepared = ops.prepare_job(name, data, options)
    job_id = await ops.add_job(keys, prepared).run(conn.client)
    return _job_from_prepared(job_id, prepared, keys, conn)


async def _add_bulk(
    conn: AsyncConn, keys: QueueKeys, items: Iterable[BulkItem], defaults: JobOptions
) -> list[Job]:
    prepared = prepare_bulk(items, defaults)
    if not prepared:
        return []
    calls = [ops.add_job(keys, p) for p in prepared]
    client = conn.client
    await scripts.ensure_loaded(client, [calls[0].script])
    async with client.pipeline(transaction=True) as pipe:
        for call in calls:
            call.script.queue(pipe, call.keys, call.args)
        replies = await pipe.execute()
    return [
        _job_from_prepared(call.parse(reply), p, keys, conn)
        for call, reply, p in zip(calls, replies, prepared)
    ]


async def add(
    queue: str,
    name: str,
    data: Any = None,
    *,
    connection: redis.asyncio.Redis | str,
    prefix: str = DEFAULT_PREFIX,
    **options: Unpack[JobOptionsDict],
) -> Job:
    """Add one job to ``queue``; nothing but Redis holds it afterwards.

    Args:
        queue: the queue name (no ``:``).
        name: the job name, given to the processor.
        data: the payload; any JSON-serialisable value.
        connection: a ``redis.asyncio.Redis`` you own, or a URL (opened and closed here).
        prefix: the key prefix (``bull`` is BullMQ's default).
        **options: job options, see :class:`~echomq.JobOptions`.

    Returns:
        The added job (its ``id`` is the generated or custom id).

    Raises:
        ValidationError: bad name, id, option or payload; nothing was written.
    """
    keys = queue_keys(queue, prefix)
    job_options = JobOptions.build(options)
    conn = AsyncConn(connection)
    try:
        return await _add(conn, keys, name, data, job_options)
    finally:
        await conn.aclose()


async def add_bulk(
    queue: str,
    jobs: Iterable[BulkItem],
    *,
    connection: redis.asyncio.Redis | str,
    prefix: str = DEFAULT_PREFIX,
) -> list[Job]:
    """Add many jobs in one MULTI/EXEC: all of them land, or none.

    Args:
        queue: the queue name.
        jobs: items ``(name, data)`` or ``(name, data, options)``; options are a
            :class:`~echomq.JobOptions` or a mapping of option keywords.
        connection: a ``redis.asyncio.Redis`` you own, or a URL.
        prefix: the key prefix.

    Returns:
        The jobs, in the order given.

    Raises:
        ValidationError: any item is invalid; nothing was written.
    """
    keys = queue_keys(queue, prefix)
    conn = AsyncConn(connection)
    try:
        return await _add_bulk(conn, keys, jobs, EMPTY_OPTIONS)
    finally:
        await conn.aclose()


async def get_job(
    queue: str,
    job_id: str,
    *,
    connection: redis.asyncio.Redis | str,
    prefix: str = DEFAULT_PREFIX,
) -> Job | None:
    """Read one job, or None when it does not exist.

    The returned job is bound to ``connection``; with a URL connection it is closed on return,
    so use a ``Queue`` or your own client to call the job's methods afterwards.
    """
    keys = queue_keys(queue, prefix)
    conn = AsyncConn(connection)
    try:
        return await _get_job(conn, keys, job_id)
    finally:
        await conn.aclose()


async def _get_job(conn: AsyncConn, keys: QueueKeys, job_id: str) -> Job | None:
    h = await ops.get_job_hash(keys, job_id).run(conn.client)
    return None if h is None else Job.from_hash(job_id, h, keys, conn)


class Queue:
    """A convenience that remembers a queue's name, prefix, connection and default options.

    It holds no job. ``async with Queue(...)`` or ``await queue.aclose()`` closes the
    connection if the queue opened it from a URL; a client you pass is never closed.

    Args:
        name: the queue name (no ``:``).
        connection: a ``redis.asyncio.Redis`` you own, or a URL.
        prefix: the key prefix.
        default_job_options: options applied to every job added through this queue.
    """

    def __init__(
        self,
        name: str,
        *,
        connection: AsyncConnection,
        prefix: str = DEFAULT_PREFIX,
        default_job_options: JobOptions | Mapping[str, Any] | None = None,
    ) -> None:
        self._keys = queue_keys(name, prefix)
        self._defaults = coerce_options(default_job_options)
        self._conn = AsyncConn(connection)

    @property
    def name(self) -> str:
        """The queue name."""
        return self._keys.name

    @property
    def prefix(self) -> str:
        """The key prefix."""
        return self._keys.prefix

    @property
    def default_job_options(self) -> JobOptions:
        """Options applied to every job added through this queue."""
        return self._defaults

    async def add(self, name: str, data: Any = None, **options: Unpack[JobOptionsDict]) -> Job:
        """Add one job; per-call options override the queue's defaults. See :func:`add`."""
        merged = self._defaults.merged(JobOptions.build(options))
        return await _add(self._conn, self._keys, name, data, merged)

    async def add_bulk(self, jobs: Sequence[BulkItem]) -> list[Job]:
        """Add many jobs in one MULTI/EXEC. See :func:`add_bulk`."""
        return await _add_bulk(self._conn, self._keys, jobs, self._defaults)

    async def get_job(self, job_id: str) -> Job | None:
        """Read one job, or None when it does not exist."""
        return await _get_job(self._conn, self._keys, job_id)

    async def aclose(self) -> None:
        """Close the connection if this queue opened it."""
        await self._conn.aclose()

    async def __aenter__(self) -> Queue:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"Queue({self.name!r}, prefix={self.prefix!r})"
