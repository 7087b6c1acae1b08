"""``echomq.sync``: the blocking producer API has the async one's surface and Redis effects.

Most tests run one thing twice, once through the async API on queue A and once through the sync
API on queue B (or on the same queue for reads), and compare the results and every key of the
queues, with epoch-millisecond values normalised away. Sync clients are tried with
``decode_responses`` off and on. Other tests cover the one-transaction bulk add, refused calls
(nothing written, same exception as async), URL connections (opened and closed per call), and
use from an event loop's thread, an executor thread and a plain thread without any event loop.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import gc
import inspect
import re
import threading
import time
from collections.abc import Callable, Iterator
from importlib import resources
from typing import Any

import pytest
from redis import Redis as SyncRedis
from redis.asyncio import Redis as AsyncRedis

import echomq
import echomq.sync
from echomq import JobData, JobState
from echomq._keys import queue_keys
from helpers import snapshot_sync

FUNCTIONS = [
    "add",
    "add_bulk",
    "clean",
    "client_from_url",
    "count",
    "drain",
    "get_counts_per_priority",
    "get_deduplication_job_id",
    "get_global_concurrency",
    "get_global_rate_limit",
    "get_group_concurrency",
    "get_group_job_counts",
    "get_group_jobs",
    "get_group_rate_limit",
    "get_groups",
    "get_job",
    "get_job_counts",
    "get_job_logs",
    "get_jobs",
    "get_meta",
    "get_metrics",
    "get_rate_limit_ttl",
    "get_state",
    "get_workers",
    "is_maxed",
    "is_paused",
    "obliterate",
    "pause",
    "pause_group",
    "promote_jobs",
    "rate_limit",
    "remove",
    "remove_deduplication_key",
    "remove_global_concurrency",
    "remove_global_rate_limit",
    "remove_group_concurrency",
    "remove_group_jobs",
    "remove_group_rate_limit",
    "remove_rate_limit_key",
    "resume",
    "resume_group",
    "retry_jobs",
    "set_global_concurrency",
    "set_global_rate_limit",
    "set_group_concurrency",
    "set_group_rate_limit",
    "trim_events",
]
JOB_METHODS = [
    "change_delay",
    "change_priority",
    "clear_logs",
    "get_logs",
    "get_state",
    "is_active",
    "is_completed",
    "is_delayed",
    "is_failed",
    "is_waiting",
    "is_waiting_children",
    "log",
    "promote",
    "refresh",
    "remove",
    "remove_deduplication_key",
    "retry",
    "update_data",
    "update_progress",
]
OLD_MS = 1_600_000_000_000  # a finish time long past, the same on both queues


@pytest.fixture(params=[False, True], ids=["bytes", "decoded"])
def sync_client(request: pytest.FixtureRequest, redis_url: str) -> Iterator[SyncRedis]:
    """A sync client with ``decode_responses`` off, then on; closed after the test."""
    client = SyncRedis.from_url(redis_url, decode_responses=request.param)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def empty_db(sync_redis: SyncRedis) -> SyncRedis:
    """``sync_redis`` on a flushed database (of the server the suite started): small snapshots."""
    sync_redis.flushdb()
    return sync_redis


@pytest.fixture
def other_queue(queue_name: str) -> str:
    """A second queue name, for the sync twin of what the test does on ``queue_name``."""
    return queue_name + "-sync"


# -- helpers -------------------------------------------------------------------------------

_EPOCH_MS = re.compile(r"1\d{12}")


def _norm(value: Any) -> Any:
    """Bytes as str; epoch milliseconds (and scores built from them) as ``<ts>``."""
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, float) and value >= 1e12:
        return "<ts>"
    if isinstance(value, str) and _EPOCH_MS.fullmatch(value):
        return "<ts>"
    return value


def dump(r: Any, name: str) -> dict[str, Any]:
    """Every key of queue ``name`` (on sync client ``r``) by suffix, as ``(type, content)``."""
    base = queue_keys(name).base
    out: dict[str, Any] = {}
    for raw in r.scan_iter(match=base + "*", count=1000):
        kind = _norm(r.type(raw))
        if kind == "hash":
            value: Any = {_norm(k): _norm(v) for k, v in r.hgetall(raw).items()}
        elif kind == "list":
            value = [_norm(v) for v in r.lrange(raw, 0, -1)]
        elif kind == "zset":
            value = [(_norm(m), _norm(s)) for m, s in r.zrange(raw, 0, -1, withscores=True)]
        elif kind == "stream":
            value = [{_norm(k): _norm(v) for k, v in f.items()} for _, f in r.xrange(raw)]
        elif kind == "set":
            value = sorted(_norm(m) for m in r.smembers(raw))
        else:
            value = _norm(r.get(raw))
        out[_norm(raw)[len(base) :]] = (kind, value)
    return out


def fields_of(job: JobData, exact: bool) -> dict[str, Any]:
    """A job's fields; unless ``exact``, without the clock-dependent ones and the queue name."""
    skip = set() if exact else {"timestamp", "processed_on", "finished_on", "queue_name"}
    return {f.name: getattr(job, f.name) for f in dataclasses.fields(JobData) if f.name not in skip}


def comparable(value: Any, exact: bool = False) -> Any:
    """A result with jobs replaced by their fields and tuples by lists, recursively."""
    if isinstance(value, (echomq.Job, echomq.sync.Job)):
        return ("job", fields_of(value, exact))
    if isinstance(value, (list, tuple)):
        return [comparable(v, exact) for v in value]
    if isinstance(value, dict):
        return {k: comparable(v, exact) for k, v in value.items()}
    return value


def place(r: SyncRedis, name: str, job_id: str, state: str) -> None:
    """Move a waiting job into ``state`` as a worker would leave it (finished long ago)."""
    keys = queue_keys(name)
    r.lrem(keys.wait, 0, job_id)
    if state in ("active", "paused"):
        r.lpush(keys.state(state), job_id)
        return
    r.zadd(keys.state(state), {job_id: OLD_MS})
    if state in ("completed", "failed"):
        r.hset(keys.job(job_id), mapping={"finishedOn": OLD_MS, "processedOn": OLD_MS - 5})
        r.hset(keys.job(job_id), "returnvalue" if state == "completed" else "failedReason", '"x"')


async def seed(r: AsyncRedis, sync_r: SyncRedis, name: str) -> None:
    """The same queue content, written through the async API: jobs in every state, a log."""
    async with echomq.Queue(name, connection=r) as q:
        await q.add_bulk([("w", {"i": i}) for i in range(6)])  # ids 1..6
        await q.add("d", 7, delay=60)
        await q.add("p", 8, priority=3)
        custom = await q.add("c", 9, job_id="custom", keep_logs=5)
        await custom.log("first")
        await custom.log("second")
    for job_id, state in [
        ("1", "completed"),
        ("2", "failed"),
        ("3", "active"),
        ("4", "waiting-children"),
        ("5", "paused"),
    ]:
        place(sync_r, name, job_id, state)


# -- surface -------------------------------------------------------------------------------


def _params(fn: Any) -> list[tuple[str, Any, Any]]:
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


def test_import_and_docs() -> None:
    assert "echomq.sync" in (echomq.__doc__ or "")
    assert "sync" not in echomq.__all__
    assert echomq.sync.__all__ == sorted(echomq.sync.__all__)
    assert set(echomq.sync.__all__) == {
        *FUNCTIONS,
        "FlowJob",
        "FlowProducer",
        "Job",
        "JobNode",
        "Queue",
    }
    for name in echomq.sync.__all__:
        assert (getattr(echomq.sync, name).__doc__ or "").strip(), name
    assert issubclass(echomq.sync.Job, JobData)
    assert not issubclass(echomq.sync.Job, echomq.Job)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_functions_have_the_async_signatures(name: str) -> None:
    sync_fn, async_fn = getattr(echomq.sync, name), getattr(echomq, name)
    assert not inspect.iscoroutinefunction(sync_fn)
    assert _params(sync_fn) == _params(async_fn)


def test_queue_has_the_async_methods() -> None:
    def public(cls: type) -> set[str]:
        return {n for n in vars(cls) if not n.startswith("_")}

    assert public(echomq.sync.Queue) == public(echomq.Queue) - {"aclose"} | {"close"}
    for name in public(echomq.sync.Queue) - {"close"}:
        if isinstance(vars(echomq.Queue)[name], property):  # name, prefix, defaults...
            continue
        sync_m, async_m = getattr(echomq.sync.Queue, name), getattr(echomq.Queue, name)
        assert not inspect.iscoroutinefunction(sync_m), name
        assert _params(sync_m) == _params(async_m), name
    assert _params(echomq.sync.Queue.__init__) == _params(echomq.Queue.__init__)


@pytest.mark.parametrize("name", JOB_METHODS)
def test_job_has_the_async_methods(name: str) -> None:
    sync_m, async_m = getattr(echomq.sync.Job, name), getattr(echomq.Job, name)
    assert not inspect.iscoroutinefunction(sync_m)
    assert _params(sync_m) == _params(async_m)
    assert (sync_m.__doc__ or "").strip()


def test_no_event_loop_code_in_the_sync_package() -> None:
    for path in (resources.files("echomq") / "sync").iterdir():
        if not path.name.endswith(".py"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                imported |= {alias.name for alias in node.names}
                imported.add(getattr(node, "module", None) or "")
            assert not isinstance(node, (ast.Await, ast.AsyncFunctionDef)), path.name
        assert not [n for n in imported if "asyncio" in n], path.name


# -- same Redis effects ----------------------------------------------------------------------


async def producer_async(q: echomq.Queue, sync_r: SyncRedis) -> list[Any]:
    out: list[Any] = []
    a = await q.add("a", {"x": 1}, attempts=3, backoff=5, remove_on_complete=10)
    d = await q.add("d", 2, delay=60)
    p = await q.add("p", [1], priority=5)
    c = await q.add("c", None, job_id="custom-1", lifo=True, keep_logs=1)
    bulk = await q.add_bulk([("b1", 1), ("b2", 2, {"priority": 2}), ("b3", 3, {"delay": 10})])
    out += [a, d, p, c, bulk]
    await a.update_progress(50)
    await a.update_progress({"step": "two"})
    out += [await a.log("hello"), await c.log("one"), await c.log("two")]
    await a.update_data({"x": 2})
    await p.change_priority(1, lifo=True)
    await d.change_delay(120)
    await bulk[2].promote()
    await q.pause()
    out.append(await q.is_paused())
    await q.resume()
    out += [await bulk[0].remove(), await q.remove("nope")]
    place(sync_r, q.name, a.id, "failed")
    place(sync_r, q.name, c.id, "completed")
    out += [await a.is_failed(), await c.is_completed(), await a.is_completed()]
    await a.refresh()
    await a.retry(reset_attempts_made=True, reset_attempts_started=True)
    await c.retry("completed")
    await c.refresh()
    out += [a, c, await a.get_state(), await c.get_logs(), await c.get_logs(0, 0, asc=False)]
    out += [await q.get_jobs(), await q.get_job_counts(), await q.count()]
    return out


def producer_sync(q: echomq.sync.Queue, sync_r: SyncRedis) -> list[Any]:
    out: list[Any] = []
    a = q.add("a", {"x": 1}, attempts=3, backoff=5, remove_on_complete=10)
    d = q.add("d", 2, delay=60)
    p = q.add("p", [1], priority=5)
    c = q.add("c", None, job_id="custom-1", lifo=True, keep_logs=1)
    bulk = q.add_bulk([("b1", 1), ("b2", 2, {"priority": 2}), ("b3", 3, {"delay": 10})])
    out += [a, d, p, c, bulk]
    a.update_progress(50)
    a.update_progress({"step": "two"})
    out += [a.log("hello"), c.log("one"), c.log("two")]
    a.update_data({"x": 2})
    p.change_priority(1, lifo=True)
    d.change_delay(120)
    bulk[2].promote()
    q.pause()
    out.append(q.is_paused())
    q.resume()
    out += [bulk[0].remove(), q.remove("nope")]
    place(sync_r, q.name, a.id, "failed")
    place(sync_r, q.name, c.id, "completed")
    out += [a.is_failed(), c.is_completed(), a.is_completed()]
    a.refresh()
    a.retry(reset_attempts_made=True, reset_attempts_started=True)
    c.retry("completed")
    c.refresh()
    out += [a, c, a.get_state(), c.get_logs(), c.get_logs(0, 0, asc=False)]
    out += [q.get_jobs(), q.get_job_counts(), q.count()]
    return out


async def test_producer_calls_have_the_same_effects(
    redis: AsyncRedis, sync_client: SyncRedis, queue_name: str, other_queue: str
) -> None:
    async with echomq.Queue(queue_name, connection=redis) as aq:
        expected = await producer_async(aq, sync_client)
    with echomq.sync.Queue(other_queue, connection=sync_client) as sq:
        got = producer_sync(sq, sync_client)
    assert comparable(got) == comparable(expected)
    assert all(isinstance(j, echomq.sync.Job) for j in got[4])
    assert dump(sync_client, other_queue) == dump(sync_client, queue_name)
    assert dump(sync_client, queue_name)  # the comparison saw keys


def test_queue_defaults_apply(sync_redis: SyncRedis, queue_name: str) -> None:
    with echomq.sync.Queue(
        queue_name, connection=sync_redis, default_job_options={"attempts": 4, "priority": 2}
    ) as q:
        assert (q.name, q.prefix, q.default_job_options.attempts) == (queue_name, "bull", 4)
        assert repr(q) == f"Queue({queue_name!r}, prefix='bull')"
        one = q.add("one", priority=1)
        two, three = q.add_bulk([("two", 2), ("three", 3, {"attempts": 1})])
        assert q.add_bulk([]) == []
    assert (one.priority, one.attempts) == (1, 4)
    assert (two.priority, two.attempts, three.attempts) == (2, 4, 1)


ADMIN_CALLS = [
    pytest.param("pause", (), {}, id="pause"),
    pytest.param("resume", (), {}, id="resume-legacy-list"),
    pytest.param("trim_events", (2,), {}, id="trim_events"),
    pytest.param("remove", ("6",), {}, id="remove"),
    pytest.param("remove", ("nope",), {}, id="remove-missing"),
    pytest.param("drain", (), {"delayed": True}, id="drain"),
    pytest.param("clean", (0, 0, "completed"), {}, id="clean-completed"),
    pytest.param("clean", (0, 1, "wait"), {}, id="clean-wait-limit"),
    pytest.param("obliterate", (), {"force": True}, id="obliterate"),
    pytest.param("retry_jobs", (), {}, id="retry-failed"),
    pytest.param("retry_jobs", ("completed", 1), {}, id="retry-completed"),
    pytest.param("promote_jobs", (), {}, id="promote_jobs"),
]


@pytest.mark.parametrize(("name", "args", "kwargs"), ADMIN_CALLS)
async def test_queue_wide_calls_have_the_same_effects(
    redis: AsyncRedis,
    sync_client: SyncRedis,
    queue_name: str,
    other_queue: str,
    name: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> None:
    await seed(redis, sync_client, queue_name)
    await seed(redis, sync_client, other_queue)
    assert dump(sync_client, other_queue) == dump(sync_client, queue_name)
    expected = await getattr(echomq, name)(queue_name, *args, connection=redis, **kwargs)
    got = getattr(echomq.sync, name)(other_queue, *args, connection=sync_client, **kwargs)
    assert got == expected
    assert dump(sync_client, other_queue) == dump(sync_client, queue_name)


@pytest.mark.parametrize(("name", "args", "kwargs"), ADMIN_CALLS)
async def test_queue_methods_have_the_same_effects(
    redis: AsyncRedis,
    sync_client: SyncRedis,
    queue_name: str,
    other_queue: str,
    name: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> None:
    await seed(redis, sync_client, queue_name)
    await seed(redis, sync_client, other_queue)
    async with echomq.Queue(queue_name, connection=redis) as aq:
        expected = await getattr(aq, name)(*args, **kwargs)
    with echomq.sync.Queue(other_queue, connection=sync_client) as sq:
        got = getattr(sq, name)(*args, **kwargs)
    assert got == expected
    assert dump(sync_client, other_queue) == dump(sync_client, queue_name)


# -- reads ---------------------------------------------------------------------------------

READS = [
    ("get_job", ("7",)),
    ("get_job", ("custom",)),
    ("get_job", ("1",)),
    ("get_job", ("nope",)),
    *[("get_state", (i,)) for i in ("1", "2", "3", "4", "5", "6", "7", "8", "nope")],
    ("get_jobs", ()),
    ("get_jobs", ("waiting",)),
    ("get_jobs", (["completed", "failed", "paused"], 0, 0)),
    ("get_jobs", (None, 0, 1, True)),
    ("get_job_counts", ()),
    ("get_job_counts", ("waiting", "paused", "delayed")),
    ("count", ()),
    ("get_job_logs", ("custom",)),
    ("get_job_logs", ("custom", 0, 0, False)),
    ("is_paused", ()),
]
QUEUE_GETTERS = [
    "get_waiting",
    "get_prioritized",
    "get_delayed",
    "get_active",
    "get_completed",
    "get_failed",
    "get_waiting_children",
]


async def test_reads_return_what_async_returns(
    redis: AsyncRedis, sync_client: SyncRedis, queue_name: str
) -> None:
    await seed(redis, sync_client, queue_name)
    async with echomq.Queue(queue_name, connection=redis) as aq:
        with echomq.sync.Queue(queue_name, connection=sync_client) as sq:
            for name, args in READS:
                expected = await getattr(echomq, name)(queue_name, *args, connection=redis)
                got = getattr(echomq.sync, name)(queue_name, *args, connection=sync_client)
                assert comparable(got, True) == comparable(expected, True), (name, args)
                from_queue = getattr(sq, name)(*args)
                assert comparable(from_queue, True) == comparable(expected, True), (name, args)
                assert type(got) is (
                    echomq.sync.Job if type(expected) is echomq.Job else type(expected)
                )
            for name in QUEUE_GETTERS:
                expected = await getattr(aq, name)()
                assert expected, name
                assert comparable(getattr(sq, name)(), True) == comparable(expected, True)
                assert comparable(getattr(sq, name)(0, 0), True) == comparable(expected[:1], True)


async def test_get_workers_matches_async(
    redis: AsyncRedis, sync_client: SyncRedis, redis_url: str, queue_name: str
) -> None:
    keys = queue_keys(queue_name)
    worker_conn = SyncRedis.from_url(redis_url, client_name=keys.worker_client_name("w1"))
    try:
        worker_conn.ping()
        expected = await echomq.get_workers(queue_name, connection=redis)
        got = echomq.sync.get_workers(queue_name, connection=sync_client)
    finally:
        worker_conn.close()

    def names(workers: list[dict[str, str]]) -> list[tuple[str, str]]:
        return sorted((w["name"], w["rawname"]) for w in workers)

    assert names(got) == names(expected) == [(queue_name, keys.worker_client_name("w1"))]


def test_unbound_and_missing_jobs_raise(sync_redis: SyncRedis, queue_name: str) -> None:
    job = echomq.sync.Job(id="1", name="x", data=None, queue_name=queue_name, timestamp=None)  # type: ignore[arg-type]
    with pytest.raises(echomq.ConnectionNotOpenError, match="read it through a Queue"):
        job.get_state()
    with echomq.sync.Queue(queue_name, connection=sync_redis) as q:
        added = q.add("x")
        assert added.remove() is True
        assert added.remove() is False
        assert added.get_state() is JobState.UNKNOWN
        with pytest.raises(echomq.JobNotFoundError):
            added.refresh()
        with pytest.raises(echomq.JobNotFoundError):
            added.update_data(1)


# -- add_bulk: one transaction -------------------------------------------------------------


def _calls(r: SyncRedis, command: str) -> int:
    stats = r.info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


def test_add_bulk_is_one_multi_exec_with_scripts_loaded_first(
    sync_client: SyncRedis, queue_name: str
) -> None:
    sync_client.script_flush()
    execs, multis = _calls(sync_client, "exec"), _calls(sync_client, "multi")
    jobs = echomq.sync.add_bulk(queue_name, [("j", i) for i in range(5)], connection=sync_client)
    assert [j.id for j in jobs] == ["1", "2", "3", "4", "5"]
    assert (_calls(sync_client, "exec"), _calls(sync_client, "multi")) == (execs + 1, multis + 1)
    assert echomq.sync.count(queue_name, connection=sync_client) == 5
    assert echomq.sync.add_bulk(queue_name, [], connection=sync_client) == []
    assert _calls(sync_client, "exec") == execs + 1


def test_add_bulk_with_one_bad_item_writes_nothing(empty_db: SyncRedis, queue_name: str) -> None:
    sync_redis = empty_db
    echomq.sync.add(queue_name, "seed", connection=sync_redis)
    before = snapshot_sync(sync_redis)
    items: list[Any] = [("ok", 1), ("ok", 2), ("bad", 3, {"job_id": "12"})]
    with pytest.raises(echomq.InvalidJobIdError):
        echomq.sync.add_bulk(queue_name, items, connection=sync_redis)
    with pytest.raises(echomq.ValidationError, match="add_bulk item 1"):
        echomq.sync.add_bulk(queue_name, [("ok", 1), "nope"], connection=sync_redis)  # type: ignore[list-item]
    assert snapshot_sync(sync_redis) == before


# -- refused calls -------------------------------------------------------------------------

REFUSED = [
    pytest.param("add", ("n", {}), {"job_id": "123"}, id="add-int-id"),
    pytest.param("add", ("n", {}), {"attempts": -1}, id="add-bad-option"),
    pytest.param("add", ("n", {}), {"nope": 1}, id="add-unknown-option"),
    pytest.param("add", ("n", object()), {}, id="add-not-json"),
    pytest.param("add", ("n", "x" * 20), {"size_limit": 10}, id="add-too-big"),
    pytest.param("add_bulk", ([("a", 1), ("b", 2, {"delay": -1})],), {}, id="add_bulk"),
    pytest.param("get_jobs", ("nope",), {}, id="get_jobs-state"),
    pytest.param("get_jobs", ("waiting", "0"), {}, id="get_jobs-index"),
    pytest.param("get_job_counts", ("nope",), {}, id="get_job_counts"),
    pytest.param("get_job_logs", ("1", 0.5), {}, id="get_job_logs"),
    pytest.param("trim_events", (-1,), {}, id="trim_events"),
    pytest.param("clean", (-1,), {}, id="clean-grace"),
    pytest.param("clean", (0, 0, "nope"), {}, id="clean-state"),
    pytest.param("clean", (0, -1), {}, id="clean-limit"),
    pytest.param("retry_jobs", ("waiting",), {}, id="retry_jobs-state"),
    pytest.param("retry_jobs", ("failed", 0), {}, id="retry_jobs-count"),
    pytest.param("promote_jobs", (0,), {}, id="promote_jobs"),
    pytest.param("obliterate", (), {}, id="obliterate-active"),
    pytest.param("remove", ("3",), {}, id="remove-locked"),
]


@pytest.mark.parametrize(("name", "args", "kwargs"), REFUSED)
async def test_refused_calls_write_nothing_and_raise_as_async(
    redis: AsyncRedis,
    empty_db: SyncRedis,
    queue_name: str,
    name: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> None:
    sync_redis = empty_db
    await seed(redis, sync_redis, queue_name)
    sync_redis.set(queue_keys(queue_name).lock("3"), "token")
    before = snapshot_sync(sync_redis)
    with pytest.raises(echomq.EchoMQError) as expected:
        await getattr(echomq, name)(queue_name, *args, connection=redis, **kwargs)
    assert snapshot_sync(sync_redis) == before
    with pytest.raises(echomq.EchoMQError) as got:
        getattr(echomq.sync, name)(queue_name, *args, connection=sync_redis, **kwargs)
    assert snapshot_sync(sync_redis) == before
    assert type(got.value) is type(expected.value)
    assert str(got.value) == str(expected.value)


def test_refused_job_calls_write_nothing(empty_db: SyncRedis, queue_name: str) -> None:
    sync_redis = empty_db
    with echomq.sync.Queue(queue_name, connection=sync_redis) as q:
        job = q.add("x", 1)
        waiting = q.add("y", 2)
        before = snapshot_sync(sync_redis)
        refused: list[tuple[Callable[[], Any], type[Exception]]] = [
            (lambda: job.update_data(object()), echomq.PayloadError),
            (lambda: job.update_progress("50%"), echomq.ValidationError),  # type: ignore[arg-type]
            (lambda: job.log(3), echomq.ValidationError),  # type: ignore[arg-type]
            (lambda: job.change_priority(-1), echomq.ValidationError),
            (lambda: job.change_delay(-1), echomq.InvalidOptionError),
            (lambda: job.retry("waiting"), echomq.ValidationError),
            (lambda: job.get_logs(0, "1"), echomq.ValidationError),  # type: ignore[arg-type]
            (lambda: waiting.promote(), echomq.JobNotInStateError),
            (lambda: waiting.change_delay(5), echomq.JobNotInStateError),
            (lambda: waiting.retry(), echomq.JobNotInStateError),
            (lambda: q.add("z", job_id="a:b"), echomq.InvalidJobIdError),
        ]
        for call, exc_type in refused:
            with pytest.raises(exc_type):
                call()
            assert snapshot_sync(sync_redis) == before
        with pytest.raises(echomq.InvalidQueueNameError):
            echomq.sync.Queue("a:b", connection=sync_redis)
        with pytest.raises(echomq.ValidationError, match="redis.Redis"):
            echomq.sync.Queue(queue_name, connection=object())  # type: ignore[arg-type]
        with pytest.raises(echomq.ValidationError, match="must start with"):
            echomq.sync.count(queue_name, connection="http://nope")
        assert snapshot_sync(sync_redis) == before


# -- connections ---------------------------------------------------------------------------


def _client_count(r: SyncRedis) -> int:
    return len(r.client_list())


def _wait_client_count(r: SyncRedis, expected: int) -> None:
    deadline = time.monotonic() + 5
    while _client_count(r) != expected:
        assert time.monotonic() < deadline, f"{_client_count(r)} clients, expected {expected}"
        time.sleep(0.01)


def test_url_connections_are_opened_and_closed_per_call(
    sync_redis: SyncRedis, redis_url: str, queue_name: str
) -> None:
    clients = _client_count(sync_redis)
    url = redis_url
    job = echomq.sync.add(queue_name, "a", {"x": 1}, connection=url)
    echomq.sync.add_bulk(queue_name, [("b", 1), ("c", 2)], connection=url)
    got = echomq.sync.get_job(queue_name, job.id, connection=url)
    assert got is not None and got.data == {"x": 1}
    assert echomq.sync.get_state(queue_name, job.id, connection=url) is JobState.WAITING
    assert len(echomq.sync.get_jobs(queue_name, connection=url)) == 3
    assert echomq.sync.get_job_counts(queue_name, "waiting", connection=url) == {"waiting": 3}
    assert echomq.sync.count(queue_name, connection=url) == 3
    assert echomq.sync.get_job_logs(queue_name, job.id, connection=url) == ([], 0)
    echomq.sync.pause(queue_name, connection=url)
    assert echomq.sync.is_paused(queue_name, connection=url) is True
    echomq.sync.resume(queue_name, connection=url)
    assert echomq.sync.get_workers(queue_name, connection=url) == []
    assert echomq.sync.trim_events(queue_name, 1000, connection=url) == 0
    assert echomq.sync.remove(queue_name, job.id, connection=url) is True
    assert echomq.sync.clean(queue_name, 0, 1, "wait", connection=url) == ["2"]
    echomq.sync.retry_jobs(queue_name, connection=url)
    echomq.sync.promote_jobs(queue_name, connection=url)
    echomq.sync.drain(queue_name, connection=url)
    echomq.sync.obliterate(queue_name, connection=url)
    assert not list(sync_redis.scan_iter(match=queue_keys(queue_name).base + "*"))
    # the jobs returned keep their fields but are unbound: the client was closed on return
    with pytest.raises(echomq.ConnectionNotOpenError, match="read it through a Queue"):
        got.get_state()
    gc.collect()
    _wait_client_count(sync_redis, clients)


def test_queue_closes_only_the_client_it_opened(
    sync_redis: SyncRedis, redis_url: str, queue_name: str
) -> None:
    clients = _client_count(sync_redis)
    with echomq.sync.Queue(queue_name, connection=redis_url) as q:
        job = q.add("a")
        assert job.get_state() is JobState.WAITING
        assert _client_count(sync_redis) == clients + 1
    with pytest.raises(echomq.ConnectionNotOpenError):
        q.count()
    with pytest.raises(echomq.ConnectionNotOpenError):
        job.get_state()
    _wait_client_count(sync_redis, clients)

    own_id = sync_redis.client_id()
    with echomq.sync.Queue(queue_name, connection=sync_redis) as q:
        assert q.count() == 1
    q.close()  # idempotent
    assert sync_redis.client_id() == own_id  # the caller's connection was kept open
    assert echomq.sync.count(queue_name, connection=sync_redis) == 1
    assert sync_redis.client_id() == own_id


# -- threads and event loops ---------------------------------------------------------------


def _work(url_or_client: SyncRedis | str, name: str) -> list[Any]:
    """A typical request handler: add, read back, touch the job, count."""
    with echomq.sync.Queue(name, connection=url_or_client) as q:
        job = q.add("mail", {"to": "a@example.com"})
        job.log("queued")
        got = q.get_job(job.id)
        assert got is not None
        got.update_progress(10)
        return [got.data, got.progress, got.get_logs(), q.count(), q.get_state(job.id)]


@pytest.fixture
def no_new_loops(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make any attempt to create or run an event loop fail the test."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("echomq.sync tried to create or run an event loop")

    for name in ("new_event_loop", "run", "set_event_loop"):
        monkeypatch.setattr(asyncio, name, refuse)
    monkeypatch.setattr(asyncio.events, "new_event_loop", refuse)
    monkeypatch.setattr(asyncio.DefaultEventLoopPolicy, "new_event_loop", refuse)


EXPECTED_WORK = [{"to": "a@example.com"}, 10, (["queued"], 1), 1, JobState.WAITING]


async def test_works_in_a_running_loops_thread(
    no_new_loops: None, redis_url: str, sync_redis: SyncRedis, queue_name: str
) -> None:
    loop = asyncio.get_running_loop()
    assert _work(sync_redis, queue_name) == EXPECTED_WORK
    assert asyncio.get_running_loop() is loop


async def test_works_in_a_loops_executor(
    no_new_loops: None, redis_url: str, sync_redis: SyncRedis, queue_name: str
) -> None:
    def handler(connection: SyncRedis | str, name: str) -> list[Any]:
        with pytest.raises(RuntimeError):
            asyncio.get_running_loop()  # no loop in this thread, and none is made
        result = _work(connection, name)
        assert asyncio._get_running_loop() is None
        return result

    loop = asyncio.get_running_loop()
    got = await loop.run_in_executor(None, handler, sync_redis, queue_name)
    assert got == EXPECTED_WORK
    got = await loop.run_in_executor(None, handler, redis_url, queue_name + "-url")
    assert got == EXPECTED_WORK


def test_works_from_plain_threads(no_new_loops: None, redis_url: str, queue_name: str) -> None:
    client = SyncRedis.from_url(redis_url)
    results: dict[int, Any] = {}

    def run(i: int) -> None:
        try:
            connection: SyncRedis | str = client if i % 2 else redis_url
            results[i] = _work(connection, f"{queue_name}-{i}")
        except BaseException as exc:  # reported below, in the test's thread
            results[i] = exc

    try:
        threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
    finally:
        client.close()
    assert results == dict.fromkeys(range(4), EXPECTED_WORK)
