"""Manual processing: take jobs yourself with ``Worker.get_next_job`` and finish them with the
job's ``move_to_*`` methods, as Node's ``getNextJob`` does.

A worker used this way is never ``run()``: it only lends its connections. ``get_next_job(token)``
takes one job locked with exactly ``token`` (finishAndFetch with no items and an empty token
counter); with ``block`` it first waits on the marker key for up to ``drain_delay`` seconds, as
a running worker does. Nothing renews the locks of jobs taken this way: call
``job.extend_lock(token, duration)`` within the lock duration, and
``start_stalled_check_timer()`` to run the stalled check (fleet-wide, as in a running worker).
"""

from __future__ import annotations

import asyncio
import logging

from .._ops import now_ms
from .._ops import worker as wops
from .._redis.connection import AsyncConn
from .._redis.retry import stop_tasks
from ..job import Job
from ..options import WorkerOptions, to_seconds
from ..protocol.keys import QueueKeys
from ._fetch import MarkerWaiter
from ._stalled import StalledChecker

logger = logging.getLogger("echomq.worker")


class ManualFetcher:
    """The parts of a worker that manual processing uses, opened on first use."""

    def __init__(self, keys: QueueKeys, conn: AsyncConn, options: WorkerOptions) -> None:
        self._keys = keys
        self._conn = conn
        self._options = options
        self._waiter: MarkerWaiter | None = None
        self._stalled: asyncio.Task[None] | None = None

    async def next_job(self, token: str, block: bool) -> Job | None:
        """Take the next job, locked with ``token``; None when there is none (after waiting
        up to ``drain_delay`` with ``block``)."""
        if not isinstance(token, str) or not token:
            raise ValueError("token must be a non-empty str")
        opts = self._options
        keys = self._keys
        for attempt in range(2):
            op = wops.fetch_one(keys, token, opts.lock_ms, opts.name or "", now_ms())
            reply: wops.FinishReply = await self._conn.run(op)
            if reply.jobs:
                fetched = reply.jobs[0]
                job = Job.from_hash(fetched.id, fetched.hash, keys, self._conn)
                job._token = fetched.token
                return job
            if not block or attempt or reply.rate_limit_ttl_ms > 0:
                return None
            await self._marker().wait(reply.next_delayed_ms)
        return None

    def _marker(self) -> MarkerWaiter:
        if self._waiter is None:
            blocking = self._conn.new_client(
                client_name=self._keys.worker_client_name(self._options.name),
                socket_timeout=None,
            )
            delay = to_seconds(self._options.drain_delay, "drain_delay")
            self._waiter = MarkerWaiter(self._keys, blocking, delay)
        return self._waiter

    def start_stalled_checks(self) -> None:
        """Run the stalled check every ``stalled_interval`` until the worker closes."""
        if self._stalled is not None and not self._stalled.done():
            return
        opts = self._options
        checker = StalledChecker(
            self._keys,
            self._conn,
            to_seconds(opts.stalled_interval, "stalled_interval"),
            opts.max_stalled_count,
        )
        self._stalled = asyncio.get_running_loop().create_task(
            checker.run(lambda: True), name=f"echomq-stalled-{self._keys.name}"
        )

    async def aclose(self) -> None:
        """Stop the stalled checks and close the blocking connection."""
        if self._stalled is not None:
            await stop_tasks([self._stalled])
        if self._waiter is not None:
            await self._waiter.aclose()
