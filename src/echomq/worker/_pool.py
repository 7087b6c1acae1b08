"""Process isolation: a small pool of child processes that run a sync processor.

The worker's process keeps the connection, the locks and the fetch loop; a child only runs the
processor, so CPU-bound Python in a child never starves the event loop that renews locks.

**Why not ``concurrent.futures.ProcessPoolExecutor``** (or ``multiprocessing.Pool``): neither
can stop one task. A job that timed out or was cancelled could only be abandoned, its process
still busy; and a child that dies breaks the whole executor (``BrokenProcessPool``), failing
every job in flight. Here each child is a ``multiprocessing.Process`` with a duplex pipe of its
own, running one job at a time, so killing it (SIGKILL) stops exactly that job and a crash
fails exactly that job; the child is then replaced.

**Why forkserver (spawn where it does not exist), never fork:** the worker's process has
threads (the thread pool, redis-py, asyncio's executor) and an event loop with open sockets.
``fork`` would copy locks held by those threads and the loop's file descriptors into the
child. ``forkserver`` forks each child from a small single-threaded server started clean, so a
child starts fast (no new interpreter; the server preloads this module, hence ``echomq``)
and shares nothing with the loop. ``spawn`` (Windows) is slower at start-up but equally clean.
As with any ``multiprocessing`` use, a script that starts a pooled worker must guard its entry
point with ``if __name__ == "__main__":``.

**The wire:** messages are JSON objects, one per ``send_bytes``. Parent to child: ``{"job":
{...}}``, ``{"reply": value}`` / ``{"reply_error": message}``, ``{"stop": true}``. Child to
parent: ``{"ready": pid}`` or ``{"fatal": message}`` at start-up, ``{"call": "progress" |
"log", "arg": value}`` (``job.update_progress()`` / ``job.log()``, which block the child until
the parent ran them on its connection), ``{"result": value}`` or ``{"error": {...}}``.

Invariants: a child holds at most one job; the parent sends a job only to an idle child; the
child never talks to Redis; a child that is killed or exits is never reused. Children ignore
SIGINT and SIGTERM (a Ctrl-C or a systemd stop reaching the whole process group must not kill
running jobs behind the worker's back): the worker stops them, and kills them at the end of
its grace period. They are daemonic, so they die with a worker process that exits without
closing, and an orphaned child exits once its current job ends (its pipe is closed).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import json
import logging
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any

from .._json import dumps
from .._keys import queue_keys
from .._tracebacks import format_failure, stacktrace_limit
from ..errors import (
    EchoMQError,
    InvalidOptionError,
    JobTimeoutError,
    PayloadError,
    ProcessorCrashedError,
    RateLimitError,
    UnrecoverableError,
)
from ..job import Job
from ..sync import Job as SyncJob

logger = logging.getLogger("echomq.worker")

#: Seconds a new child may take to import the processor and say it is ready.
START_TIMEOUT = 60.0
#: Seconds a child asked to stop may take before it is killed.
STOP_TIMEOUT = 2.0


def _context() -> BaseContext:
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    # The server imports echomq once, so a child (a fork of it) starts in milliseconds. This
    # replaces multiprocessing's process-wide default (["__main__"]): the server must not run
    # the user's script (a processor in __main__ is refused anyway). It takes effect only if
    # the server has not started yet.
    ctx.set_forkserver_preload([__name__])
    return ctx


# -- the processor's import path -------------------------------------------------------------


def processor_path(processor: Any) -> str:
    """The ``module:qualname`` a child imports ``processor`` by.

    Raises:
        InvalidOptionError: ``processor`` cannot be imported by path (a lambda, a nested
            function, a callable instance, something defined in ``__main__``, or a name that
            resolves to another object).
    """
    module = getattr(processor, "__module__", None)
    qualname = getattr(processor, "__qualname__", None)
    what = f"processor {processor!r} cannot run with processes > 0"
    if not isinstance(module, str) or not isinstance(qualname, str):
        raise InvalidOptionError(
            f"{what}: a child process imports it by 'module:function', and it has no "
            "module-level name; use a function defined at the top level of a module"
        )
    if "<" in qualname:  # <lambda>, <locals>
        raise InvalidOptionError(
            f"{what}: {qualname} is a lambda or a nested function, which a child process "
            "cannot import; define it at the top level of a module"
        )
    if module == "__main__":
        raise InvalidOptionError(
            f"{what}: it is defined in __main__, which a child process cannot import by "
            "name; move it into a module (e.g. tasks.py) and import it from there"
        )
    path = f"{module}:{qualname}"
    try:
        found = load_processor(path)
    except Exception as exc:
        raise InvalidOptionError(f"{what}: importing {path} failed: {exc}") from None
    if found is not processor:
        raise InvalidOptionError(
            f"{what}: {path} names another object (a decorator that does not keep "
            "__qualname__?); a child process would run that one"
        )
    return path


def load_processor(path: str) -> Callable[[Any], Any]:
    """Import ``module:qualname`` and return the object it names."""
    module_name, _, qualname = path.partition(":")
    obj: Any = importlib.import_module(module_name)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not callable(obj):
        raise TypeError(f"{path} is not callable")
    return obj  # type: ignore[no-any-return]


# -- the child side ----------------------------------------------------------------------------


def _send(conn: Connection, message: dict[str, Any]) -> None:
    conn.send_bytes(dumps(message, "message").encode())


def _receive(conn: Connection) -> dict[str, Any]:
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
    _send(conn, {"call": name, "arg": arg})
    reply = _receive(conn)
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
        _send(conn, {"fatal": f"importing {path} failed: {type(exc).__name__}: {exc}"})
        return
    _send(conn, {"ready": os.getpid()})
    while True:
        try:
            message = _receive(conn)
        except (EOFError, OSError):
            return
        if "job" not in message:
            return
        job = _child_job(conn, message["job"])
        try:
            value = processor(job)
        except BaseException as exc:
            _send(conn, {"error": _error_message(exc, stacktrace_limit(job.wire_options) != 0)})
            continue
        try:
            text = dumps({"result": value}, "return value")
        except PayloadError as exc:
            traced = stacktrace_limit(job.wire_options) != 0
            _send(conn, {"error": {**_error_message(exc, traced), "kind": "unrecoverable"}})
            continue
        conn.send_bytes(text.encode())


# -- the parent side ---------------------------------------------------------------------------


class ProcessorError(Exception):
    """A processor's exception, raised again in the worker: its message is the original's,
    and ``remote_traceback`` the traceback printed in the child."""

    def __init__(self, message: str, type_name: str, remote_traceback: str) -> None:
        super().__init__(message)
        self.type_name = type_name
        self.remote_traceback = remote_traceback


def _rebuild(error: dict[str, Any]) -> Exception:
    message = str(error.get("message", ""))
    exc: Exception
    if error.get("kind") == "unrecoverable":
        exc = UnrecoverableError(message)
    elif error.get("kind") == "rate_limit":
        exc = RateLimitError(message)
    else:
        exc = ProcessorError(message, str(error.get("type")), str(error.get("traceback", "")))
    setattr(exc, "remote_traceback", str(error.get("traceback", "")))  # noqa: B010
    return exc


def crash_reason(exitcode: int | None) -> str:
    """What to say about a child that exited while running a job."""
    if exitcode is None:
        return "the worker process running the job closed its pipe and was killed"
    if exitcode < 0:
        try:
            name = f" ({signal.Signals(-exitcode).name})"
        except ValueError:
            name = ""
        return f"the worker process running the job exited with signal {-exitcode}{name}"
    return f"the worker process running the job exited with code {exitcode}"


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


class _Deadline(Exception):
    """The job's timeout passed while its child was running it."""


@dataclass(eq=False)
class _Child:
    process: BaseProcess
    conn: Connection
    tasks: int = 0
    pid: int | None = field(default=None)
    retired: bool = False


async def _readable(*fds: int, timeout: float | None = None) -> bool:
    """Wait until one of ``fds`` is readable; False on timeout."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    for fd in fds:
        loop.add_reader(fd, wake)
    try:
        await asyncio.wait_for(ready, timeout)
        return True
    except asyncio.TimeoutError:
        return False
    finally:
        for fd in fds:
            loop.remove_reader(fd)


class ProcessPool:
    """``size`` child processes running the processor imported from ``path``."""

    def __init__(self, path: str, size: int, max_tasks_per_child: int | None, name: str) -> None:
        self._path = path
        self._size = size
        self._max_tasks = max_tasks_per_child
        self._name = name
        self._ctx = _context()
        self._idle: asyncio.Queue[_Child] = asyncio.Queue()
        self._children: set[_Child] = set()
        self._tasks: set[asyncio.Task[None]] = set()  # replacements and reaping
        self._replacing: set[asyncio.Task[None]] = set()
        self._closed = False

    @property
    def pids(self) -> list[int]:
        """The pids of the live children."""
        return sorted(c.pid for c in self._children if c.pid is not None)

    async def start(self) -> None:
        """Start every child and wait until each imported the processor.

        Raises:
            InvalidOptionError: a child could not import the processor.
        """
        started = await asyncio.gather(
            *(self._start_child() for _ in range(self._size)), return_exceptions=True
        )
        for result in started:
            if isinstance(result, BaseException):
                await self.close()
                raise result
        for child in started:
            assert isinstance(child, _Child)
            self._idle.put_nowait(child)

    async def _start_child(self) -> _Child:
        loop = asyncio.get_running_loop()
        child = await loop.run_in_executor(None, self._spawn)
        self._children.add(child)
        try:
            if not await _readable(child.conn.fileno(), timeout=START_TIMEOUT):
                raise InvalidOptionError(
                    f"a worker process did not start within {START_TIMEOUT:g} s"
                )
            try:
                hello = _receive(child.conn)
            except (EOFError, OSError):
                await _readable(child.process.sentinel, timeout=STOP_TIMEOUT)
                raise InvalidOptionError(
                    f"a worker process for {self._path} died at start-up "
                    f"({crash_reason(child.process.exitcode)})"
                ) from None
            if "fatal" in hello:
                raise InvalidOptionError(
                    f"a worker process cannot use the processor: {hello['fatal']}"
                )
            child.pid = int(hello["ready"])
            return child
        except BaseException:
            self._discard(child, kill=True)
            raise

    def _spawn(self) -> _Child:
        parent_end, child_end = self._ctx.Pipe(duplex=True)
        process = self._ctx.Process(  # type: ignore[attr-defined]
            target=child_main,
            args=(self._path, child_end, list(sys.path)),
            name=f"echomq-{self._name}",
            daemon=True,
        )
        process.start()
        child_end.close()
        return _Child(process, parent_end)

    async def run(self, job: Job, timeout: float | None = None) -> Any:
        """Run ``job`` in an idle child and return the processor's value.

        ``timeout`` (seconds) counts from when a child took the job, not while the job
        waited for a free child.

        Raises:
            ProcessorError, UnrecoverableError, RateLimitError: the processor raised.
            ProcessorCrashedError: the child exited before it answered (it is replaced).
            JobTimeoutError: ``timeout`` passed first (the child is killed and replaced).
            asyncio.CancelledError: cancelled (a timeout, or closing): the child is killed and
                replaced.
        """
        child = await self._take(dumps({"job": job_message(job)}, "job").encode())
        deadline = None if timeout is None else asyncio.get_running_loop().time() + timeout
        healthy = False
        try:
            while True:
                try:
                    message = await self._receive(child, deadline)
                except _Deadline:
                    raise JobTimeoutError(timeout or 0) from None
                if "call" in message:
                    await self._serve_call(job, child, message)
                    continue
                healthy = True
                if "error" in message:
                    raise _rebuild(message["error"])
                return message.get("result")
        finally:
            child.tasks += 1
            if not healthy:
                self._replace(child, kill=True)
            elif self._max_tasks is not None and child.tasks >= self._max_tasks:
                self._replace(child, kill=False)
            else:
                self._idle.put_nowait(child)

    async def _take(self, payload: bytes) -> _Child:
        """An idle child that accepted ``payload``; a child that died while idle is replaced
        (the job never reached it, so it does not count as an attempt of this job)."""
        while True:
            child = await self._idle.get()
            if child.process.exitcode is None:
                try:
                    child.conn.send_bytes(payload)
                    return child
                except OSError:
                    pass
            logger.warning(
                "queue=%s worker process %s exited while idle (%s); replacing it",
                self._name,
                child.pid,
                crash_reason(child.process.exitcode),
            )
            self._replace(child, kill=True)

    async def _serve_call(self, job: Job, child: _Child, message: dict[str, Any]) -> None:
        try:
            if message["call"] == "progress":
                await job.update_progress(message["arg"])
                reply: dict[str, Any] = {"reply": None}
            elif message["call"] == "log":
                reply = {"reply": await job.log(str(message["arg"]))}
            else:
                reply = {"reply_error": f"unknown call {message['call']!r}"}
        except Exception as exc:
            reply = {"reply_error": f"{type(exc).__name__}: {exc}"}
        _send(child.conn, reply)

    async def _receive(self, child: _Child, deadline: float | None) -> dict[str, Any]:
        conn, process = child.conn, child.process
        loop = asyncio.get_running_loop()
        while True:
            if conn.poll():
                try:
                    return _receive(conn)
                except (EOFError, OSError):
                    break
            if process.exitcode is not None:
                if conn.poll():  # its last words arrived with its exit
                    continue
                break
            left = None if deadline is None else deadline - loop.time()
            if (
                left is not None
                and left <= 0
                or not await _readable(conn.fileno(), process.sentinel, timeout=left)
            ):
                raise _Deadline
        if not await _readable(process.sentinel, timeout=STOP_TIMEOUT):
            process.kill()
            await _readable(process.sentinel, timeout=STOP_TIMEOUT)
        exitcode = process.exitcode
        logger.warning(
            "queue=%s worker process %s exited while running a job (%s); replacing it",
            self._name,
            child.pid,
            crash_reason(exitcode),
        )
        raise ProcessorCrashedError(crash_reason(exitcode), exitcode)

    def _replace(self, child: _Child, *, kill: bool) -> None:
        """Retire ``child`` (killed, or asked to stop) and start another in its place."""
        self._discard(child, kill=kill)
        if not self._closed:
            task = self._track(self._start_replacement())
            self._replacing.add(task)
            task.add_done_callback(self._replacing.discard)

    def _discard(self, child: _Child, *, kill: bool) -> None:
        if child.retired:
            return
        child.retired = True
        self._children.discard(child)
        if kill:
            with contextlib.suppress(Exception):
                child.process.kill()
        else:
            with contextlib.suppress(Exception):
                _send(child.conn, {"stop": True})
        self._track(self._reap(child))

    def _track(self, coro: Any) -> asyncio.Task[None]:
        task: asyncio.Task[None] = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _reap(self, child: _Child) -> None:
        process = child.process
        if not await _readable(process.sentinel, timeout=STOP_TIMEOUT):
            process.kill()
            await _readable(process.sentinel, timeout=STOP_TIMEOUT)
        child.conn.close()
        with contextlib.suppress(Exception):
            process.join(0)
            process.close()

    async def _start_replacement(self) -> None:
        delay = 0.1
        while not self._closed:
            try:
                child = await self._start_child()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                logger.error(
                    "queue=%s starting a worker process failed (%s); retrying in %.1f s",
                    self._name,
                    exc,
                    delay,
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
                continue
            if self._closed:
                self._discard(child, kill=False)
                return
            self._idle.put_nowait(child)
            return

    async def close(self) -> None:
        """Stop idle children, kill busy ones, and wait until every child is gone."""
        self._closed = True
        for task in list(self._replacing):
            task.cancel()
        idle: set[_Child] = set()
        while not self._idle.empty():
            idle.add(self._idle.get_nowait())
        for child in list(self._children):
            self._discard(child, kill=child not in idle)
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
