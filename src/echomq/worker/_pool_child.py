"""A pool's child process (``processes=N``; the pool itself is :mod:`._pool`): the wire
between the worker and a child, and the child's life.

The wire: messages are JSON objects, one per ``send_bytes`` (the whole vocabulary is in
:mod:`._pool`'s docstring). A child imports the processor by its path, says it is ready, then
runs one job per message, each as a :class:`ChildJob` (a sync job whose ``log()`` and
``update_progress()`` are run by the worker, the child having no connection), until it is told
to stop or its pipe closes. It never talks to Redis.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from datetime import datetime, timezone
from multiprocessing.connection import Connection
from typing import Any

from .._json import dumps
from .._keys import queue_keys
from .._tracebacks import format_failure, stacktrace_limit
from ..errors import EchoMQError, PayloadError, RateLimitError, UnrecoverableError
from ..job import Job
from ..sync import Job as SyncJob
from ._import_path import load_processor


def send(conn: Connection, message: dict[str, Any]) -> None:
    conn.send_bytes(dumps(message, "message").encode())


def receive(conn: Connection) -> dict[str, Any]:
    message = json.loads(conn.recv_bytes())
    assert isinstance(message, dict)
    return message


class _NoConnection:
    """The connection of a child's job: there is none (only progress and logs cross)."""

    def _refuse(self, *_: Any) -> Any:
        raise EchoMQError(
            "a job in a process-pool child can only update_progress() and log(); other job "
            "methods need the worker's connection (use processes=0, or an async processor)"
        )

    run = run_plan = _refuse


class ChildJob(SyncJob):
    """The job a pooled processor receives: a :class:`echomq.sync.Job` whose ``log()`` and
    ``update_progress()`` ask the worker to run them (the child has no connection)."""

    __slots__ = ("_pipe",)
    _pipe: Connection

    def log(self, line: str) -> int:
        """Append a line to the job's log (run by the worker); the number of lines."""
        return int(_call(self._pipe, "log", line))

    def update_progress(self, progress: float | dict[str, Any]) -> None:
        """Record the job's progress (run by the worker) and emit a ``progress`` event."""
        dumps(progress, "progress")
        _call(self._pipe, "progress", progress)
        self.progress = progress


def _child_job(conn: Connection, fields_: dict[str, Any]) -> ChildJob:
    processed_on = fields_["processed_on"]
    job = ChildJob(
        id=fields_["id"],
        name=fields_["name"],
        data=fields_["data"],
        queue_name=fields_["queue_name"],
        timestamp=datetime.fromtimestamp(fields_["timestamp"], tz=timezone.utc),
        delay=fields_["delay"],
        priority=fields_["priority"],
        attempts_made=fields_["attempts_made"],
        attempts_started=fields_["attempts_started"],
        stalled_counter=fields_["stalled_counter"],
        processed_on=(
            None if processed_on is None else datetime.fromtimestamp(processed_on, tz=timezone.utc)
        ),
        processed_by=fields_["processed_by"],
        progress=fields_["progress"],
        parent_key=fields_["parent_key"],
        repeat_job_key=fields_["repeat_job_key"],
        deduplication_id=fields_["deduplication_id"],
        wire_options=fields_["wire_options"],
    )
    job._keys = queue_keys(fields_["queue_name"], fields_["prefix"])
    job._conn = _NoConnection()
    job._token = fields_["token"]
    job._pipe = conn
    return job


def _call(conn: Connection, name: str, arg: Any) -> Any:
    send(conn, {"call": name, "arg": arg})
    reply = receive(conn)
    if "reply_error" in reply:
        raise EchoMQError(f"job.{name} failed in the worker: {reply['reply_error']}")
    return reply.get("reply")


def _error_message(exc: BaseException, traced: bool = True) -> dict[str, Any]:
    """What the parent needs to fail the attempt; ``traced``: with the traceback (not for a job
    whose ``stackTraceLimit`` is 0)."""
    kind = None
    if isinstance(exc, UnrecoverableError):
        kind = "unrecoverable"
    elif isinstance(exc, RateLimitError):
        kind = "rate_limit"
    return {
        "message": str(exc) or type(exc).__name__,
        "type": f"{type(exc).__module__}.{type(exc).__qualname__}",
        "traceback": format_failure(exc) if traced else "",
        "kind": kind,
    }


def child_main(path: str, conn: Connection, sys_path: list[str]) -> None:
    """A child's life: import the processor, then run one job per message until told to stop
    or the pipe closes (the worker is gone)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.path[:] = sys_path
    try:
        processor = load_processor(path)
    except BaseException as exc:
        send(conn, {"fatal": f"importing {path} failed: {type(exc).__name__}: {exc}"})
        return
    send(conn, {"ready": os.getpid()})
    while True:
        try:
            message = receive(conn)
        except (EOFError, OSError):
            return
        if "job" not in message:
            return
        job = _child_job(conn, message["job"])
        try:
            value = processor(job)
        except BaseException as exc:
            send(conn, {"error": _error_message(exc, stacktrace_limit(job.wire_options) != 0)})
            continue
        try:
            text = dumps({"result": value}, "return value")
        except PayloadError as exc:
            traced = stacktrace_limit(job.wire_options) != 0
            send(conn, {"error": {**_error_message(exc, traced), "kind": "unrecoverable"}})
            continue
        conn.send_bytes(text.encode())


def job_message(job: Job) -> dict[str, Any]:
    """What a child needs to rebuild ``job`` (JSON)."""
    keys = job._keys
    return {
        "id": job.id,
        "name": job.name,
        "data": job.data,
        "queue_name": job.queue_name,
        "prefix": keys.prefix if keys is not None else "bull",
        "timestamp": job.timestamp.timestamp(),
        "delay": job.delay,
        "priority": job.priority,
        "attempts_made": job.attempts_made,
        "attempts_started": job.attempts_started,
        "stalled_counter": job.stalled_counter,
        "processed_on": None if job.processed_on is None else job.processed_on.timestamp(),
        "processed_by": job.processed_by,
        "progress": job.progress,
        "parent_key": job.parent_key,
        "repeat_job_key": job.repeat_job_key,
        "deduplication_id": job.deduplication_id,
        "wire_options": job.wire_options,
        "token": job._token,
    }
