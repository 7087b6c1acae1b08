"""One source for the async and sync APIs.

``echomq.sync`` is generated from the async code by ``scripts/unasync.py``; these tests prove the
generated files are current, that the two surfaces (module functions, ``Queue``, ``Job``) have
the same public names, parameters, kinds and defaults with docstrings on both, that a sync
processor gets a job whose methods block and land in Redis, and what a job read through a URL
connection does.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from redis import Redis as SyncRedis
from redis.asyncio import Redis as AsyncRedis

import echomq
import echomq.queue
import echomq.sync
from echomq import JobState, Worker
from helpers import wait_for

ROOT = Path(__file__).resolve().parent.parent

#: Public names only the async API has, and why.
ASYNC_ONLY = {
    "Job": {"wait_until_finished"},  # waits on a QueueEvents, which is an event-loop reader
    "Queue": set(),
    "FlowProducer": set(),
    "functions": set(),
}
#: The classes both surfaces export (the rest are module functions).
CLASSES = {"FlowJob", "FlowProducer", "Job", "JobNode", "Queue"}
#: Same operation, each surface's own spelling.
RENAMED = {"aclose": "close", "__aenter__": "__enter__", "__aexit__": "__exit__"}


def _unasync() -> ModuleType:
    spec = importlib.util.spec_from_file_location("unasync", ROOT / "scripts" / "unasync.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_files_are_current() -> None:
    unasync = _unasync()
    for source, target in unasync.SOURCES.items():
        current = (ROOT / target).read_text(encoding="utf-8")
        assert current == unasync.generate(source, target), (
            f"{target} is stale: run `python scripts/unasync.py`"
        )
        assert current.startswith(f"# Generated from {source} by scripts/unasync.py")


def test_unasync_rewrites() -> None:
    unasync = _unasync()
    text = (
        "import redis.asyncio\n"
        "from . import ops\n"
        "from ._job import Job\n"
        "from .protocol.keys import QueueKeys\n"
        "async def f(c: AsyncConn) -> redis.asyncio.Redis:\n"
        "    async with x:\n"
        "        await c.aclose()\n"
        "# unasync: async-only\n"
        "async def only(): ...\n"
        "# unasync: end\n"
    )
    assert unasync.unasync_text(text) == (
        "import redis\n"
        "from .. import ops\n"
        "from ._job import Job\n"
        "from ..protocol.keys import QueueKeys\n"
        "def f(c: SyncConn) -> redis.Redis:\n"
        "    with x:\n"
        "        c.close()\n"
    )
    with pytest.raises(ValueError):
        unasync.unasync_text("# unasync: async-only\n")


def test_unasync_rewrites_the_redis_io_beside_its_source() -> None:
    # _redis/run.py -> _redis/run_sync.py: relative imports stay, the Redis I/O modules become
    # their twins, and each step where redis-py's two APIs differ takes its sync variant.
    unasync = _unasync()
    text = (
        "from . import variants\n"
        "from .run import run_op\n"
        "from .._redis.connection import AsyncConn\n"
        "FirstUse = Callable[[AsyncConn], Awaitable[None]]\n"
        "    await variants.call(client, None, cmd)\n"
    )
    assert unasync.unasync_text(text, beside=True) == (
        "from . import variants\n"
        "from .run_sync import run_op\n"
        "from .._redis.connection_sync import SyncConn\n"
        "FirstUse = Callable[[SyncConn], None]\n"
        "    variants.call_sync(client, None, cmd)\n"
    )


def _public(obj: Any) -> set[str]:
    names = {n for n in dir(obj) if not n.startswith("_")}
    if inspect.isclass(obj):
        names |= {n for n in RENAMED.values() if hasattr(obj, n)} | {
            n for n in RENAMED if hasattr(obj, n)
        }
    return names


def _signature(fn: Any) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def _assert_twins(async_obj: Any, sync_obj: Any, what: str) -> None:
    sync_names = _public(sync_obj)
    async_names = {RENAMED.get(n, n) for n in _public(async_obj)} - ASYNC_ONLY[what]
    assert sync_names == async_names, what
    for name in sorted(async_names):
        async_name = {v: k for k, v in RENAMED.items()}.get(name, name)
        a, s = getattr(async_obj, async_name), getattr(sync_obj, name)
        if isinstance(a, property) or not callable(a) or inspect.isclass(a):
            assert type(inspect.getattr_static(async_obj, async_name)) is type(
                inspect.getattr_static(sync_obj, name)
            ), (what, name)
            continue
        assert _signature(s) == _signature(a), (what, name)
        if inspect.iscoroutinefunction(a):
            assert not inspect.iscoroutinefunction(s), (what, name)
        if not name.startswith("__"):
            assert (a.__doc__ or "").strip() and (s.__doc__ or "").strip(), (what, name)


def test_module_functions_match() -> None:
    functions = {n for n in echomq.sync.__all__ if n not in CLASSES}
    async_functions = {
        n for n in echomq.__all__ if inspect.isfunction(getattr(echomq.queue, n, None))
    }
    assert functions == async_functions - ASYNC_ONLY["functions"]
    for name in sorted(functions):
        a, s = getattr(echomq, name), getattr(echomq.sync, name)
        assert _signature(s) == _signature(a), name
        assert not inspect.iscoroutinefunction(s), name
        assert (a.__doc__ or "").strip() and (s.__doc__ or "").strip(), name
        assert s.__doc__ == a.__doc__.replace("redis.asyncio.Redis", "redis.Redis").replace(
            "await ", ""
        ).replace("aclose", "close"), name


def test_queue_matches() -> None:
    _assert_twins(echomq.Queue, echomq.sync.Queue, "Queue")
    assert _signature(echomq.sync.Queue.__init__) == _signature(echomq.Queue.__init__)


def test_flow_producer_matches() -> None:
    _assert_twins(echomq.FlowProducer, echomq.sync.FlowProducer, "FlowProducer")
    assert _signature(echomq.sync.FlowProducer.__init__) == _signature(echomq.FlowProducer.__init__)
    assert echomq.sync.FlowJob is echomq.FlowJob  # a node holds no connection: one class
    assert [f.name for f in dataclasses.fields(echomq.sync.JobNode)] == ["job", "children"]


def test_job_matches() -> None:
    _assert_twins(echomq.Job, echomq.sync.Job, "Job")
    assert issubclass(echomq.sync.Job, echomq.JobData)


def test_documented_async_only_names_exist() -> None:
    for name in ASYNC_ONLY["Job"]:
        assert inspect.iscoroutinefunction(getattr(echomq.Job, name))
        assert not hasattr(echomq.sync.Job, name)


# -- a sync processor's job ------------------------------------------------------------------


async def test_sync_processor_job_methods_block_and_land_in_redis(
    redis: AsyncRedis, queue_name: str
) -> None:
    added = await echomq.add(queue_name, "s", {"n": 1}, connection=redis, keep_logs=2)
    seen: dict[str, Any] = {}

    def process(job: echomq.sync.Job) -> str:
        seen["type"] = type(job)
        seen["thread"] = threading.current_thread() is not threading.main_thread()
        seen["progress"] = job.update_progress(40)
        seen["lines"] = [job.log("one"), job.log("two"), job.log("three")]
        job.update_progress({"step": 2})
        seen["state"] = job.get_state()
        seen["logs"] = job.get_logs()
        seen["token"] = job.token
        return "done"

    async with Worker(queue_name, process, connection=redis, drain_delay=0.2):
        await wait_for(lambda: _completed(redis, queue_name), timeout=10)
    assert seen["type"] is echomq.sync.Job and seen["thread"]
    assert seen["progress"] is None and seen["lines"] == [1, 2, 2]
    assert seen["state"] is JobState.ACTIVE and seen["token"]
    assert seen["logs"] == (["two", "three"], 2)
    h = await redis.hgetall(f"bull:{queue_name}:{added.id}")
    assert h[b"progress"] == b'{"step":2}' and h[b"returnvalue"] == b'"done"'
    assert await redis.lrange(f"bull:{queue_name}:{added.id}:logs", 0, -1) == [b"two", b"three"]
    events = await redis.xrange(f"bull:{queue_name}:events")
    progress = [f[b"data"] for _, f in events if f[b"event"] == b"progress"]
    assert progress == [b"40", b'{"step":2}']


async def _completed(r: AsyncRedis, queue: str) -> bool:
    return bool(await r.zcard(f"bull:{queue}:completed"))


def test_sync_job_refuses_to_block_its_own_loop() -> None:
    import asyncio

    from echomq.worker._execute import blocking_job

    async def main() -> None:
        job = echomq.Job.from_hash(
            "1", {"name": "n", "data": "{}", "timestamp": "1"}, _keys("q"), _NeverRun()
        )
        twin = blocking_job(job, asyncio.get_running_loop())
        with pytest.raises(RuntimeError, match="sync processor's thread"):
            twin.get_state()

    asyncio.run(main())


class _NeverRun:
    async def run(self, op: Any) -> Any:
        raise AssertionError("not reached")

    async def run_plan(self, plan: Any) -> Any:
        raise AssertionError("not reached")


def _keys(name: str) -> Any:
    from echomq._keys import queue_keys

    return queue_keys(name)


# -- jobs read through a URL connection --------------------------------------------------------


async def test_url_jobs_keep_fields_and_say_how_to_act(redis_url: str, queue_name: str) -> None:
    added = await echomq.add(queue_name, "u", {"x": 1}, connection=redis_url)
    got = await echomq.get_job(queue_name, added.id, connection=redis_url)
    listed = await echomq.get_jobs(queue_name, connection=redis_url)
    assert got is not None and got.data == {"x": 1} and [j.id for j in listed] == [added.id]
    for job in (added, got, listed[0]):
        with pytest.raises(echomq.ConnectionNotOpenError, match="read it through a Queue"):
            await job.get_state()
    async with echomq.Queue(queue_name, connection=redis_url) as q:
        again = await q.get_job(added.id)
        assert again is not None and await again.get_state() is JobState.WAITING


def test_sync_url_jobs_keep_fields_and_say_how_to_act(
    redis_url: str, sync_redis: SyncRedis, queue_name: str
) -> None:
    added = echomq.sync.add(queue_name, "u", {"x": 1}, connection=redis_url)
    got = echomq.sync.get_job(queue_name, added.id, connection=redis_url)
    assert got is not None and got.data == {"x": 1}
    for job in (added, got):
        with pytest.raises(echomq.ConnectionNotOpenError, match="pass a client you own"):
            job.log("x")
    # with a client the caller owns, the job stays bound and usable
    own = echomq.sync.get_job(queue_name, added.id, connection=sync_redis)
    assert own is not None and own.log("x") == 1
