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
child starts fast (no new interpreter; the server preloads the child's module,
:mod:`._pool_child`, hence ``echomq``)
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
import logging
import multiprocessing
import signal
import sys
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any

from .._json import dumps
from ..errors import (
    InvalidOptionError,
    JobTimeoutError,
    ProcessorCrashedError,
    RateLimitError,
    UnrecoverableError,
)
from ..job import Job
from ._pool_child import child_main, job_message, receive, send

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
    ctx.set_forkserver_preload([child_main.__module__])
    return ctx


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
                hello = receive(child.conn)
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
        send(child.conn, reply)

    async def _receive(self, child: _Child, deadline: float | None) -> dict[str, Any]:
        conn, process = child.conn, child.process
        loop = asyncio.get_running_loop()
        while True:
            if conn.poll():
                try:
                    return receive(conn)
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
                send(child.conn, {"stop": True})
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
