"""The sync :class:`Queue`: remembers a queue's name, prefix, connection and default options.

Each method builds the :mod:`echomq.ops` operation (or plan) its :class:`echomq.Queue` twin
builds and runs it with ``run_sync`` / ``run_plan_sync``. Like its twin, it fails fast
(``connect_timeout``, :class:`~echomq.RedisUnavailableError`) and checks its server once per
process after its first call that succeeds.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar

from typing_extensions import Unpack

from .. import ops
from .._connection import SyncConn, SyncConnection
from .._fail_fast import DEFAULT_CONNECT_TIMEOUT, UNREACHABLE, connect_budget, raise_unavailable
from .._queue import QueueBase, job_from_prepared
from .._server_checks import check_on_first_use_sync
from ..job import JobState
from ..ops import BulkItem, Metrics
from ..options import UNSET, Duration, JobOptions, JobOptionsDict
from ..protocol.keys import DEFAULT_PREFIX
from ._job import Job

T = TypeVar("T")


class Queue(QueueBase):
    """Sync twin of :class:`echomq.Queue`: remembers a name, prefix, connection and defaults.

    ``with Queue(...)`` or :meth:`close` closes the client if the queue opened it from a URL; a
    ``redis.Redis`` you pass is never closed.

    Args:
        name: the queue name (no ``:``).
        connection: a ``redis.Redis`` you own, or a URL.
        prefix: the key prefix.
        default_job_options: options applied to every job added through this queue.
        connect_timeout: with a URL, seconds (or a timedelta) each connection has to connect
            (TCP and handshake) before :class:`~echomq.RedisUnavailableError`; ignored for a
            client you pass.

    Raises:
        InvalidOptionError: ``connect_timeout`` is not a positive duration.
    """

    def __init__(
        self,
        name: str,
        *,
        connection: SyncConnection,
        prefix: str = DEFAULT_PREFIX,
        default_job_options: JobOptions | Mapping[str, Any] | None = None,
        connect_timeout: Duration = DEFAULT_CONNECT_TIMEOUT,
    ) -> None:
        super().__init__(name, prefix, default_job_options, connection)
        self._conn = SyncConn(connection, connect_timeout=connect_budget(connect_timeout))
        check_on_first_use_sync(self._conn)

    def _run(self, op: ops.Op[T]) -> T:
        return self._conn.run(op)

    def _plan(self, plan: ops.Plan[T]) -> T:
        return self._conn.run_plan(plan)

    def _added(self, job_id: str, prepared: ops.PreparedJob) -> Job:
        job = job_from_prepared(Job, job_id, prepared, self._keys.name)
        job._keys, job._conn = self._keys, self._conn
        return job

    def add(self, name: str, data: Any = UNSET, **options: Unpack[JobOptionsDict]) -> Job:
        """Sync twin of :meth:`echomq.Queue.add`; per-call options override the defaults."""
        prepared = ops.prepare_job(name, data, self._defaults.merged(JobOptions.build(options)))
        try:
            job_id = self._conn.run(ops.add_job(self._keys, prepared))
        except UNREACHABLE as exc:
            raise_unavailable(exc, self._conn.address)
        return self._added(job_id, prepared)

    def add_bulk(self, jobs: Iterable[BulkItem]) -> list[Job]:
        """Sync twin of :meth:`echomq.Queue.add_bulk`: one MULTI/EXEC, all or nothing."""
        prepared = ops.prepare_bulk(jobs, self._defaults)
        if not prepared:
            return []
        try:
            job_ids = self._conn.run(ops.add_jobs(self._keys, prepared))
        except UNREACHABLE as exc:
            raise_unavailable(exc, self._conn.address)
        return [self._added(job_id, p) for job_id, p in zip(job_ids, prepared)]

    def get_job(self, job_id: str) -> Job | None:
        """Sync twin of :meth:`echomq.Queue.get_job`."""
        h = self._run(ops.get_job_hash(self._keys, job_id))
        return None if h is None else Job._from_hash(job_id, h, self._keys, self._conn)

    def get_state(self, job_id: str) -> JobState:
        """Sync twin of :meth:`echomq.Queue.get_state`."""
        return JobState(self._run(ops.get_state(self._keys, job_id)))

    def get_jobs(
        self,
        states: str | Iterable[str] | None = None,
        start: int = 0,
        end: int = -1,
        asc: bool = False,
    ) -> list[Job]:
        """Sync twin of :meth:`echomq.Queue.get_jobs`."""
        types = ops.normalize_types(states, ops.DEFAULT_COUNT_TYPES)
        pairs = self._plan(ops.get_jobs_plan(self._keys, types, start, end, asc))
        return [Job._from_hash(i, h, self._keys, self._conn) for i, h in pairs]

    def get_waiting(self, start: int = 0, end: int = -1) -> list[Job]:
        """Waiting jobs, next to run first."""
        return self.get_jobs("waiting", start, end, asc=True)

    def get_prioritized(self, start: int = 0, end: int = -1) -> list[Job]:
        """Prioritized jobs, next to run first."""
        return self.get_jobs("prioritized", start, end, asc=True)

    def get_delayed(self, start: int = 0, end: int = -1) -> list[Job]:
        """Delayed jobs, soonest due first."""
        return self.get_jobs("delayed", start, end, asc=True)

    def get_active(self, start: int = 0, end: int = -1) -> list[Job]:
        """Active jobs, longest running first."""
        return self.get_jobs("active", start, end, asc=True)

    def get_completed(self, start: int = 0, end: int = -1) -> list[Job]:
        """Completed jobs, most recently finished first."""
        return self.get_jobs("completed", start, end, asc=False)

    def get_failed(self, start: int = 0, end: int = -1) -> list[Job]:
        """Failed jobs, most recently finished first."""
        return self.get_jobs("failed", start, end, asc=False)

    def get_waiting_children(self, start: int = 0, end: int = -1) -> list[Job]:
        """Parent jobs waiting for their children, oldest first."""
        return self.get_jobs("waiting-children", start, end, asc=True)

    def get_job_counts(self, *states: str) -> dict[str, int]:
        """Sync twin of :meth:`echomq.Queue.get_job_counts`."""
        types = ops.normalize_types(states or None, ops.DEFAULT_COUNT_TYPES)
        return self._run(ops.get_counts(self._keys, types))

    def count(self) -> int:
        """Sync twin of :meth:`echomq.Queue.count`."""
        return sum(self._run(ops.get_counts(self._keys, ops.PENDING_TYPES)).values())

    def get_job_logs(
        self, job_id: str, start: int = 0, end: int = -1, asc: bool = True
    ) -> tuple[list[str], int]:
        """Sync twin of :meth:`echomq.Queue.get_job_logs`."""
        return self._run(ops.get_logs(self._keys, job_id, start, end, asc))

    def get_metrics(self, kind: str = "completed", start: int = 0, end: int = -1) -> Metrics:
        """Sync twin of :meth:`echomq.Queue.get_metrics`."""
        return self._run(ops.get_metrics(self._keys, kind, start, end))

    def is_paused(self) -> bool:
        """Sync twin of :meth:`echomq.Queue.is_paused`."""
        return self._run(ops.is_paused(self._keys))

    def pause(self) -> None:
        """Sync twin of :meth:`echomq.Queue.pause`."""
        self._run(ops.pause_queue(self._keys, True))

    def resume(self) -> None:
        """Sync twin of :meth:`echomq.Queue.resume`."""
        self._plan(ops.resume_plan(self._keys))

    def get_workers(self) -> list[dict[str, str]]:
        """Sync twin of :meth:`echomq.Queue.get_workers`."""
        return self._run(ops.get_workers(self._keys))

    def trim_events(self, max_len: int) -> int:
        """Sync twin of :meth:`echomq.Queue.trim_events`."""
        return self._run(ops.trim_events(self._keys, max_len))

    def remove(self, job_id: str, *, remove_children: bool = True) -> bool:
        """Sync twin of :meth:`echomq.Queue.remove`."""
        return self._run(ops.remove_job(self._keys, job_id, remove_children=remove_children))

    def drain(self, *, delayed: bool = False) -> None:
        """Sync twin of :meth:`echomq.Queue.drain`."""
        self._plan(ops.drain_plan(self._keys, delayed=delayed))

    def clean(self, grace: Duration, limit: int = 0, state: str = "completed") -> list[str]:
        """Sync twin of :meth:`echomq.Queue.clean`."""
        return self._plan(ops.clean_plan(self._keys, grace, limit, state))

    def obliterate(self, *, force: bool = False) -> None:
        """Sync twin of :meth:`echomq.Queue.obliterate`."""
        self._plan(ops.obliterate_plan(self._keys, force=force))

    def retry_jobs(
        self,
        state: str = "failed",
        count: int = ops.admin.BATCH,
        timestamp: datetime | float | None = None,
    ) -> None:
        """Sync twin of :meth:`echomq.Queue.retry_jobs`."""
        self._plan(ops.retry_jobs_plan(self._keys, state, count, timestamp))

    def promote_jobs(self, count: int = ops.admin.BATCH) -> None:
        """Sync twin of :meth:`echomq.Queue.promote_jobs`."""
        self._plan(ops.promote_jobs_plan(self._keys, count))

    def close(self) -> None:
        """Close the connection if this queue opened it."""
        self._conn.close()

    def __enter__(self) -> Queue:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Queue({self.name!r}, prefix={self.prefix!r})"
