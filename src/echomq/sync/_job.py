"""The sync :class:`Job`: the fields of :class:`echomq.job.JobData` with blocking methods.

Each method runs the same :mod:`echomq.ops` operation as its :class:`echomq.Job` twin on the
job's ``redis.Redis`` client, then updates the snapshot the same way.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import redis

from .. import ops
from .._connection import SyncConn
from ..errors import ConnectionNotOpenError, error_for_code
from ..job import JobData, JobState
from ..options import Duration, to_seconds
from ..protocol import codes
from ..protocol.keys import QueueKeys


@dataclasses.dataclass(slots=True, eq=False)
class Job(JobData):
    """Sync twin of :class:`echomq.Job`: the same fields, with blocking producer-side methods.

    The fields are a snapshot; :meth:`refresh` reads them again.
    """

    _keys: QueueKeys | None = dataclasses.field(default=None, repr=False)
    _conn: SyncConn | None = dataclasses.field(default=None, repr=False)

    @classmethod
    def _from_hash(cls, job_id: str, h: dict[str, str], keys: QueueKeys, conn: SyncConn) -> Job:
        job = cls._decoded(job_id, h, keys.name)
        job._keys, job._conn = keys, conn
        return job

    def _bound(self) -> tuple[QueueKeys, redis.Redis]:
        if self._keys is None or self._conn is None:
            raise ConnectionNotOpenError(
                f"job {self.id} is not bound to a connection; read it through a Queue"
            )
        return self._keys, self._conn.client

    def get_state(self) -> JobState:
        """Sync twin of :meth:`echomq.Job.get_state`."""
        keys, client = self._bound()
        return JobState(ops.get_state(keys, self.id).run_sync(client))

    def is_completed(self) -> bool:
        """Sync twin of :meth:`echomq.Job.is_completed`."""
        return self.get_state() is JobState.COMPLETED

    def is_failed(self) -> bool:
        """Sync twin of :meth:`echomq.Job.is_failed`."""
        return self.get_state() is JobState.FAILED

    def refresh(self) -> None:
        """Sync twin of :meth:`echomq.Job.refresh`.

        Raises:
            JobNotFoundError: the job no longer exists.
        """
        keys, client = self._bound()
        h = ops.get_job_hash(keys, self.id).run_sync(client)
        if h is None:
            raise error_for_code(codes.JOB_NOT_EXIST, job_id=self.id, command="refresh")
        self._fill_from_hash(h)

    def get_logs(self, start: int = 0, end: int = -1, asc: bool = True) -> tuple[list[str], int]:
        """Sync twin of :meth:`echomq.Job.get_logs`."""
        keys, client = self._bound()
        return ops.get_logs(keys, self.id, start, end, asc).run_sync(client)

    def log(self, line: str) -> int:
        """Sync twin of :meth:`echomq.Job.log`; returns how many lines the log holds now."""
        keys, client = self._bound()
        return ops.add_log(keys, self.id, line, self._keep_logs()).run_sync(client)

    def update_data(self, data: Any) -> None:
        """Sync twin of :meth:`echomq.Job.update_data`."""
        keys, client = self._bound()
        ops.update_data(keys, self.id, data).run_sync(client)
        self.data = data

    def update_progress(self, progress: float | dict[str, Any]) -> None:
        """Sync twin of :meth:`echomq.Job.update_progress`."""
        keys, client = self._bound()
        ops.update_progress(keys, self.id, progress).run_sync(client)
        self.progress = progress

    def retry(
        self,
        state: str = "failed",
        *,
        reset_attempts_made: bool = False,
        reset_attempts_started: bool = False,
    ) -> None:
        """Sync twin of :meth:`echomq.Job.retry`."""
        keys, client = self._bound()
        self._retry_op(keys, state, reset_attempts_made, reset_attempts_started).run_sync(client)
        self._reset_for_retry(reset_attempts_made, reset_attempts_started)

    def promote(self) -> None:
        """Sync twin of :meth:`echomq.Job.promote`."""
        keys, client = self._bound()
        ops.promote_job(keys, self.id).run_sync(client)
        self.delay = 0.0

    def change_priority(self, priority: int, *, lifo: bool = False) -> None:
        """Sync twin of :meth:`echomq.Job.change_priority`."""
        keys, client = self._bound()
        ops.change_priority(keys, self.id, priority, lifo=lifo).run_sync(client)
        self.priority = priority

    def change_delay(self, delay: Duration) -> None:
        """Sync twin of :meth:`echomq.Job.change_delay`."""
        keys, client = self._bound()
        ops.change_delay(keys, self.id, delay).run_sync(client)
        self.delay = to_seconds(delay, "delay")

    def remove(self, *, remove_children: bool = True) -> bool:
        """Sync twin of :meth:`echomq.Job.remove`; True if the job existed."""
        keys, client = self._bound()
        return ops.remove_job(keys, self.id, remove_children=remove_children).run_sync(client)
