"""What the docs test (``tests/test_docs_blocks.py``) gives the code blocks it runs.

Every Python process the test starts has ``tests/docs_prelude`` on its ``PYTHONPATH`` and
``ECHOMQ_DOCS_TEST`` set, so ``sitecustomize`` calls :func:`install` at start-up, which:

- puts the **placeholders** in :data:`PLACEHOLDERS` into ``builtins``: small stand-ins for the
  user's own code that the docs name without defining (``send_email``, ``call_api``, ``heavy``,
  ``create_user``, a ``database``, an ``http`` client, ``metrics``, ``resize``). A block that
  defines one of these names itself uses its own; the test's static check (ruff ``F821``) treats
  only these names, and those of the block's setups, as defined;
- applies the **stop rule** to workers that run until stopped: a ``Worker`` whose ``run()`` is
  awaited directly (``await worker.run()``, ``echomq worker``, ``manage.py echomq_worker``, all
  of which run until a signal or ``close()``) is stopped once its queue has held no waiting,
  prioritized, delayed or active job for :data:`QUIET` seconds: by SIGTERM to its own process
  when the program handles SIGTERM (the CLI, or a program with its own handler), as systemd
  would stop it, else by ``await worker.close()``. A worker entered with ``async with`` is
  left alone: its program ends it.

:func:`main` (``[--repl] [--setup NAME]... FILE``) runs one block; the test calls it for REPL
blocks and blocks with setups (other blocks run as ``python FILE``):

- ``--setup NAME`` first fills the block's namespace from :data:`SETUPS` (``client``,
  ``queue``, ``worker``, ``quickstart``, ``django``);
- ``--repl`` compiles the block with top-level ``await`` allowed and runs it on one event loop,
  as ``python -m asyncio`` would. A SIGTERM (the test's ``stop=``) cancels it as Ctrl-C would,
  and that ends the run with exit code 0.

Every block finds its Redis in ``ECHOMQ_REDIS_URL``, by echomq's connection rule, as a
reader's program does (its text is not rewritten).
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import builtins
import contextlib
import inspect
import json
import os
import signal
import sys
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import echomq

#: Seconds a directly run worker's queue must stay empty before the stop rule stops it.
QUIET = 1.0
_POLL = 0.1


def redis_url() -> str:
    """The URL of the Redis the test gave this block."""
    return os.environ["ECHOMQ_REDIS_URL"]


# -- placeholders for the user's code -------------------------------------------------------------


async def send_email(job: Any) -> dict[str, Any]:
    """The user's processor that sends an email."""
    data = job.data if isinstance(job.data, dict) else {}
    return {"sent": data.get("to", True)}


async def call_api(job: Any) -> dict[str, Any]:
    """The user's processor that calls some API."""
    return {"called": True}


async def resize(job: Any) -> dict[str, Any]:
    """The user's image processor (docs/workers.md defines one like it in its first example)."""
    data = job.data if isinstance(job.data, dict) else {}
    return {"width": int(data.get("width", 0)) // 2}


def heavy(data: Any) -> int:
    """The user's CPU-bound work."""
    return sum(len(json.dumps(data)) * i for i in range(1000)) % 997


def create_user(request: Any) -> SimpleNamespace:
    """The user's code that creates a user row."""
    return SimpleNamespace(pk=1)


class _Database:
    """The user's database library: ``async with database.connect(): ...``."""

    @contextlib.asynccontextmanager
    async def connect(self) -> AsyncIterator[None]:
        yield


class _Response:
    def __init__(self) -> None:
        self.status_code = 200
        self.headers = {"retry-after": "1"}

    def json(self) -> dict[str, Any]:
        return {"ok": True}


class _Http:
    """The user's HTTP client (``httpx.AsyncClient``-like)."""

    async def post(self, url: str, **kwargs: Any) -> _Response:
        return _Response()


class _Counter:
    def inc(self, amount: float = 1) -> None:
        pass


PLACEHOLDERS: dict[str, Any] = {
    "call_api": call_api,
    "create_user": create_user,
    "database": _Database(),
    "heavy": heavy,
    "http": _Http(),
    "metrics": SimpleNamespace(ok=_Counter(), failed=_Counter()),
    "resize": resize,
    "send_email": send_email,
}


# -- the stop rule --------------------------------------------------------------------------------

_where: weakref.WeakKeyDictionary[echomq.Worker, dict[str, Any]] = weakref.WeakKeyDictionary()
_managed: weakref.WeakSet[echomq.Worker] = weakref.WeakSet()


async def _stop_when_idle(worker: echomq.Worker, closing: asyncio.Event) -> None:
    where = _where.get(worker, {})
    loop = asyncio.get_running_loop()
    async with echomq.Queue(worker.name, **where) as queue:
        quiet_since: float | None = None
        while True:
            await asyncio.sleep(_POLL)
            if not worker.is_running:
                quiet_since = None
                continue
            counts = await queue.get_job_counts("waiting", "prioritized", "delayed", "active")
            if any(counts.values()):
                quiet_since = None
            elif quiet_since is None:
                quiet_since = loop.time()
            elif loop.time() - quiet_since >= QUIET:
                break
    if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN, None):
        os.kill(os.getpid(), signal.SIGTERM)  # the program's own handler stops it
    else:
        closing.set()
        await worker.close()


def _install_stop_rule() -> None:
    worker_class = echomq.Worker
    original_init = worker_class.__init__
    original_aenter = worker_class.__aenter__
    original_run = worker_class.run

    def __init__(self: echomq.Worker, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        _where[self] = {k: kwargs[k] for k in ("connection", "prefix") if k in kwargs}

    async def __aenter__(self: echomq.Worker) -> echomq.Worker:
        _managed.add(self)
        return await original_aenter(self)

    async def run(self: echomq.Worker) -> None:
        if self in _managed:
            await original_run(self)
            return
        closing = asyncio.Event()
        watcher = asyncio.create_task(_stop_when_idle(self, closing))
        try:
            await original_run(self)
        finally:
            if closing.is_set():
                await watcher  # it is inside close(): let it finish
            else:
                watcher.cancel()
                await asyncio.gather(watcher, return_exceptions=True)

    worker_class.__init__ = __init__  # type: ignore[method-assign]
    worker_class.__aenter__ = __aenter__  # type: ignore[method-assign]
    worker_class.run = run  # type: ignore[method-assign]


def install() -> None:
    """Put the placeholders in ``builtins`` and apply the stop rule (see the module docstring)."""
    for name, value in PLACEHOLDERS.items():
        setattr(builtins, name, value)
    _install_stop_rule()


# -- setups ---------------------------------------------------------------------------------------

Cleanup = Callable[[], Awaitable[None]]


def _client(ns: dict[str, Any]) -> list[Cleanup]:
    """``client``: an async client of the block's Redis (yours: closed after the block); ``url``."""
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(redis_url())
    ns["client"], ns["url"] = client, redis_url()
    return [client.aclose]


def _queue(ns: dict[str, Any]) -> list[Cleanup]:
    """``client`` and ``queue``, an ``echomq.Queue("emails")`` on it."""
    cleanups = _client(ns)
    queue = echomq.Queue("emails", connection=ns["client"])
    ns["queue"] = queue
    return [queue.aclose, *cleanups]


def _worker(ns: dict[str, Any]) -> list[Cleanup]:
    """``client``, ``url``, ``worker`` (``images``, not started) and ``job_id``, a job it holds."""
    from echomq import sync

    cleanups = _client(ns)
    ns["job_id"] = sync.add("images", "resize", {"width": 640}, connection=redis_url()).id
    worker = echomq.Worker("images", resize, connection=ns["client"])
    ns["worker"] = worker
    return [worker.close, *cleanups]


def _quickstart(ns: dict[str, Any]) -> list[Cleanup]:
    """``client``, and the state docs/index.md's quickstart leaves: job ``1`` of ``emails`` done."""
    from echomq.testing import run_until_drained

    async def send(job: echomq.Job) -> dict[str, bool]:
        await job.log(f"sending to {job.data['to']}")
        await job.update_progress(50)
        return {"sent": True}

    async def fill() -> None:
        async with echomq.Queue("emails", connection=redis_url()) as queue:
            await queue.add("welcome", {"to": "ada@example.com"}, attempts=3)
            await run_until_drained(queue, send)

    asyncio.run(fill())
    return _client(ns)


def _django(ns: dict[str, Any]) -> list[Cleanup]:
    """Django set up with the test project's settings (``tests/django_project``)."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    django.setup()
    return []


SETUPS: dict[str, Callable[[dict[str, Any]], list[Cleanup]]] = {
    "client": _client,
    "django": _django,
    "queue": _queue,
    "quickstart": _quickstart,
    "worker": _worker,
}

#: The names each setup defines, for the test's static check of undefined names.
SETUP_NAMES: dict[str, tuple[str, ...]] = {
    "client": ("client", "url"),
    "django": (),
    "queue": ("client", "url", "queue"),
    "quickstart": ("client", "url"),
    "worker": ("client", "url", "worker", "job_id"),
}


# -- the runner -----------------------------------------------------------------------------------


async def _run_repl(code: Any, ns: dict[str, Any], cleanups: list[Cleanup]) -> None:
    task = asyncio.current_task()
    assert task is not None
    stopped = False

    def stop() -> None:
        nonlocal stopped
        stopped = True
        task.cancel()

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop)
    try:
        result = eval(code, ns)
        if inspect.iscoroutine(result):
            await result
    except asyncio.CancelledError:
        if not stopped:
            raise
    finally:
        for cleanup in cleanups:
            await cleanup()


def run_block(path: str, *, repl: bool, setups: list[str]) -> None:
    """Run the block in ``path`` in a fresh ``__main__`` namespace after its setups."""
    source = Path(path).read_text(encoding="utf-8")
    ns: dict[str, Any] = {"__name__": "__main__", "__file__": path, "__builtins__": builtins}
    cleanups: list[Cleanup] = []
    for name in setups:
        cleanups[:0] = SETUPS[name](ns)
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT if repl else 0
    code = compile(source, path, "exec", flags=flags, dont_inherit=True)
    if repl:
        asyncio.run(_run_repl(code, ns, cleanups))
        return
    exec(code, ns)

    async def clean() -> None:
        for cleanup in cleanups:
            await cleanup()

    asyncio.run(clean())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="docs_prelude", description=__doc__)
    parser.add_argument("--repl", action="store_true", help="allow top-level await")
    parser.add_argument("--setup", action="append", default=[], choices=sorted(SETUPS))
    parser.add_argument("file")
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(args.file).resolve().parent))  # as `python FILE` does
    run_block(args.file, repl=args.repl, setups=args.setup)
