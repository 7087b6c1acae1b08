"""``@echomq.task`` against a real Redis and a real Worker: binding, validation before any
write, pydantic coercion on both sides, typed results, connections, dispatch by name."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import types
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pydantic
import pytest
from redis import Redis as SyncRedis
from redis.asyncio import Redis

import echomq
from echomq import Job, Worker
from echomq.tasks import _signature
from helpers import queue_key, snapshot, wait_for

FAST: dict[str, Any] = {"drain_delay": 0.2, "stalled_interval": 5.0}


@dataclasses.dataclass
class Receipt:
    to: str
    count: int


class Summary(pydantic.BaseModel):
    total: int
    at: datetime


@pytest.fixture(autouse=True)
def no_default_connection(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Each test starts without a default connection, ``ECHOMQ_REDIS_URL`` or a running
    embedded Redis (an empty data directory of its own: never the developer's)."""
    monkeypatch.delenv("ECHOMQ_REDIS_URL", raising=False)
    monkeypatch.setenv("ECHOMQ_DATA_DIR", str(tmp_path / "no-embedded-redis"))
    echomq.set_default_connection(None)
    yield
    echomq.set_default_connection(None)


async def job_hash(r: Redis, queue: str, job_id: str) -> dict[str, str]:
    raw = await r.hgetall(queue_key(queue, job_id))
    return {_s(k): _s(v) for k, v in raw.items()}


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


async def finished(r: Redis, queue: str, job_id: str) -> dict[str, str]:
    async def done() -> bool:
        h = await job_hash(r, queue, job_id)
        return "finishedOn" in h

    await wait_for(done, timeout=10)
    return await job_hash(r, queue, job_id)


def make_tasks(queue: str) -> tuple[Any, Any]:
    @echomq.task(queue=queue, attempts=3, backoff={"type": "exponential", "delay": 1.0})
    async def send_welcome(to: str, name: str = "there") -> dict[str, str]:
        return {"sent": f"hello {name} <{to}>"}

    @echomq.task(queue=queue, name="count-words")
    def count_words(text: str) -> int:
        return len(text.split())

    return send_welcome, count_words


async def test_a_task_is_still_a_plain_function(queue_name: str) -> None:
    send_welcome, count_words = make_tasks(queue_name)
    assert await send_welcome("ada@example.com") == {"sent": "hello there <ada@example.com>"}
    assert count_words("a b c") == 3
    assert send_welcome.name == "send_welcome" and count_words.name == "count-words"
    assert send_welcome.queue == queue_name and send_welcome.is_async


async def test_aenqueue_binds_arguments_by_name(redis: Redis, queue_name: str) -> None:
    send_welcome, _ = make_tasks(queue_name)
    job = await send_welcome.using(connection=redis).aenqueue("ada@example.com", name="Ada")
    h = await job_hash(redis, queue_name, job.id)
    assert h["name"] == "send_welcome"
    assert json.loads(h["data"]) == {"to": "ada@example.com", "name": "Ada"}
    opts = json.loads(h["opts"])
    assert opts["attempts"] == 3 and opts["backoff"] == {"type": "exponential", "delay": 1000}
    job = await send_welcome.using(connection=redis).aenqueue(to="bob@example.com")
    assert job.data == {"to": "bob@example.com", "name": "there"}  # defaults applied


def test_enqueue_is_the_sync_producer(sync_redis: SyncRedis, queue_name: str) -> None:
    _, count_words = make_tasks(queue_name)
    job = count_words.using(connection=sync_redis).enqueue("one two")
    assert isinstance(job, echomq.sync.Job)
    assert job.name == "count-words" and job.data == {"text": "one two"}
    assert echomq.sync.count(queue_name, connection=sync_redis) == 1


async def test_using_returns_a_copy_with_other_options(redis: Redis, queue_name: str) -> None:
    send_welcome, _ = make_tasks(queue_name)
    other = f"{queue_name}-other"
    copy = send_welcome.using(
        connection=redis, delay=60, priority=3, job_id="welcome-ada", queue=other
    )
    job = await copy.aenqueue("ada@example.com")
    assert job.id == "welcome-ada" and job.queue_name == other
    opts = json.loads((await job_hash(redis, other, "welcome-ada"))["opts"])
    assert opts["delay"] == 60000 and opts["priority"] == 3 and opts["attempts"] == 3
    assert await redis.zscore(queue_key(other, "delayed"), "welcome-ada") is not None
    assert send_welcome.queue == queue_name and send_welcome.options.get("delay") is None
    with pytest.raises(echomq.InvalidOptionError, match="unknown job option"):
        send_welcome.using(dealy=5)


async def test_arguments_are_checked_before_anything_is_written(
    redis: Redis, queue_name: str
) -> None:
    send_welcome, _ = make_tasks(queue_name)
    bound = send_welcome.using(connection=redis)
    before = await snapshot(redis)
    with pytest.raises(echomq.ValidationError, match="missing a required argument: 'to'"):
        await bound.aenqueue()
    with pytest.raises(echomq.ValidationError, match="unexpected keyword argument 'nme'"):
        await bound.aenqueue("a@example.com", nme="x")
    with pytest.raises(echomq.ValidationError, match="argument 'name'"):
        await bound.aenqueue("a@example.com", name=object())

    @echomq.task(queue=queue_name)
    def untyped(blob):  # type: ignore[no-untyped-def]
        return blob

    with pytest.raises(echomq.PayloadError, match="argument 'blob' is not JSON-serialisable"):
        await untyped.using(connection=redis).aenqueue(object())
    assert await snapshot(redis) == before


def test_star_args_are_refused_and_kwargs_are_more_keys(queue_name: str) -> None:
    with pytest.raises(TypeError, match=r"\*args"):

        @echomq.task
        def variadic(*names: str) -> None: ...

    @echomq.task(queue=queue_name)
    def tagged(title: str, **tags: str) -> dict[str, str]:
        return {"title": title, **tags}

    assert tagged.bind("t", color="red") == {"title": "t", "color": "red"}
    assert tagged.name == "tagged"

    @echomq.task(queue=queue_name)
    def counts(**found: int) -> int:
        return sum(found.values())

    # each item is checked against the hint of **found (and coerced)
    assert counts.bind(a="3", b=4) == {"a": 3, "b": 4}  # type: ignore[arg-type]
    with pytest.raises(echomq.ValidationError, match="argument 'c': Input should be"):
        counts.bind(c="many")  # type: ignore[arg-type]


async def test_pydantic_coerces_on_enqueue_and_on_the_worker(redis: Redis, queue_name: str) -> None:
    seen: list[tuple[int, datetime]] = []

    @echomq.task(queue=queue_name)
    async def schedule(count: int, at: datetime) -> Summary:
        seen.append((count, at))
        return Summary(total=count * 2, at=at)

    bound = schedule.using(connection=redis)
    job = await bound.aenqueue("3", at="2026-01-02T03:04:05Z")  # type: ignore[arg-type]
    assert job.data == {"count": 3, "at": "2026-01-02T03:04:05Z"}
    foreign = await echomq.add(
        queue_name, "schedule", {"count": "4", "at": "2026-01-02T03:04:05+00:00"}, connection=redis
    )
    async with Worker.for_tasks([schedule], connection=redis, **FAST):
        first = await bound.aresult(job, timeout=10)
        second = await bound.aresult(foreign.id, timeout=10)
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    assert sorted(seen) == [(3, when), (4, when)]
    assert isinstance(first, Summary) and first == Summary(total=6, at=when)
    assert second.total == 8
    stored = json.loads((await job_hash(redis, queue_name, job.id))["returnvalue"])
    assert stored == {"total": 6, "at": "2026-01-02T03:04:05Z"}


async def test_invalid_foreign_data_fails_at_once_naming_the_field(
    redis: Redis, queue_name: str
) -> None:
    @echomq.task(queue=queue_name, attempts=5)
    def double(n: int) -> int:
        return n * 2

    bad = await echomq.add(queue_name, "double", {"n": "many"}, connection=redis, attempts=5)
    missing = await echomq.add(queue_name, "double", {}, connection=redis, attempts=5)
    extra = await echomq.add(queue_name, "double", {"n": 1, "m": 2}, connection=redis)
    async with Worker.for_tasks([double], connection=redis, **FAST):
        h = await finished(redis, queue_name, bad.id)
        h_missing = await finished(redis, queue_name, missing.id)
        h_extra = await finished(redis, queue_name, extra.id)
    assert h["atm"] == "1"  # no retry, though 5 attempts were allowed
    assert "argument 'n'" in h["failedReason"] and "valid integer" in h["failedReason"]
    assert "missing argument 'n'" in h_missing["failedReason"] and h_missing["atm"] == "1"
    assert "unknown argument(s) ['m']" in h_extra["failedReason"]
    with pytest.raises(echomq.JobFailedError, match="argument 'n'"):
        await double.using(connection=redis).aresult(bad, timeout=5)


async def test_aresult_reads_a_dataclass_back(redis: Redis, queue_name: str) -> None:
    @echomq.task(queue=queue_name)
    def receipt(to: str) -> Receipt:
        return Receipt(to=to, count=len(to))

    bound = receipt.using(connection=redis)
    job = await bound.aenqueue("ada")
    async with Worker.for_tasks([receipt], connection=redis, **FAST):
        value = await bound.aresult(job, timeout=10)
    assert value == Receipt(to="ada", count=3)


async def test_without_pydantic_plain_checks_and_dataclasses(
    redis: Redis, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_signature, "pydantic", None)
    monkeypatch.setattr(_signature, "pydantic_core", None)

    @echomq.task(queue=queue_name)
    def receipt(to: str, count: int) -> Receipt:
        return Receipt(to=to, count=count)

    bound = receipt.using(connection=redis)
    job = await bound.aenqueue("ada", "2")  # type: ignore[arg-type]
    assert job.data == {"to": "ada", "count": "2"}  # no coercion without pydantic
    async with Worker.for_tasks([receipt], connection=redis, **FAST):
        value = await bound.aresult(job, timeout=10)
    assert value == Receipt(to="ada", count="2")  # type: ignore[arg-type]


def test_result_is_the_sync_wait(redis_url: str, sync_redis: SyncRedis, queue_name: str) -> None:
    _, count_words = make_tasks(queue_name)
    job = count_words.using(connection=sync_redis).enqueue("a b c d")
    bad = echomq.sync.add(queue_name, "count-words", {"text": 5}, connection=sync_redis)

    async def work() -> None:
        async with Worker.for_tasks([count_words], connection=redis_url, **FAST) as worker:
            await wait_for(
                lambda: (
                    echomq.sync.get_job_counts(
                        queue_name, "completed", "failed", connection=sync_redis
                    )
                    == {"completed": 1, "failed": 1}
                ),
                timeout=10,
            )
            del worker

    asyncio.run(work())
    assert count_words.using(connection=sync_redis).result(job, timeout=5) == 4
    with pytest.raises(echomq.JobFailedError, match="argument 'text': Input should be a valid"):
        count_words.using(connection=redis_url).result(bad.id, timeout=5)
    late = count_words.using(connection=sync_redis).enqueue("x")
    with pytest.raises(TimeoutError, match="did not finish within 0.1 s"):
        count_words.using(connection=sync_redis).result(late, timeout=0.1)
    with pytest.raises(echomq.JobNotFoundError):
        count_words.using(connection=sync_redis).result("no-such-job", timeout=1)


async def test_default_connection_env_var_and_missing(
    redis: Redis, redis_url: str, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    send_welcome, _ = make_tasks(queue_name)
    before = await snapshot(redis)
    with pytest.raises(echomq.ConnectionNotOpenError, match="set_default_connection"):
        await send_welcome.aenqueue("a@example.com")
    with pytest.raises(echomq.ConnectionNotOpenError, match="ECHOMQ_REDIS_URL"):
        send_welcome.enqueue("a@example.com")
    assert await snapshot(redis) == before
    monkeypatch.setenv("ECHOMQ_REDIS_URL", redis_url)
    by_env = await send_welcome.aenqueue("env@example.com")
    echomq.set_default_connection(redis)
    by_default = await send_welcome.aenqueue("default@example.com")
    with pytest.raises(echomq.ConnectionNotOpenError, match="redis.asyncio.Redis client"):
        send_welcome.enqueue("sync@example.com")
    echomq.set_default_connection(redis_url)
    by_url = send_welcome.enqueue("url@example.com")
    assert await echomq.count(queue_name, connection=redis) == 3
    assert [j.data["to"] for j in (by_env, by_default, by_url)] == [
        "env@example.com",
        "default@example.com",
        "url@example.com",
    ]


def test_sync_enqueues_through_a_url_share_one_client(
    sync_redis: SyncRedis, redis_url: str, queue_name: str
) -> None:
    """A Django or Flask producer with ECHOMQ_REDIS_URL or a default URL must not connect
    once per enqueue: the sync entry points keep one client per URL."""
    _, count_words = make_tasks(queue_name)
    echomq.set_default_connection(redis_url)
    count_words.enqueue("warm up")  # connects (and checks the server) once

    def connections() -> int:
        return int(sync_redis.info("stats")["total_connections_received"])

    before = connections()
    jobs = [count_words.enqueue(f"call {i}") for i in range(20)]
    after = connections()
    assert after == before, f"{after - before} connections for 20 enqueues"
    assert sync_redis.llen(f"bull:{queue_name}:wait") == 21
    assert {job.data["text"] for job in jobs} == {f"call {i}" for i in range(20)}


async def test_for_tasks_dispatches_by_name_and_fails_unknown_names(
    redis: Redis, queue_name: str
) -> None:
    send_welcome, count_words = make_tasks(queue_name)
    welcome = await send_welcome.using(connection=redis).aenqueue("ada@example.com", name="Ada")
    words = await count_words.using(connection=redis).aenqueue("a b")
    unknown = await echomq.add(queue_name, "resize", {}, connection=redis, attempts=3)
    async with Worker.for_tasks([send_welcome, count_words], connection=redis, **FAST):
        assert await send_welcome.using(connection=redis).aresult(welcome, timeout=10) == {
            "sent": "hello Ada <ada@example.com>"
        }
        assert await count_words.using(connection=redis).aresult(words, timeout=10) == 2
        h = await finished(redis, queue_name, unknown.id)
    assert h["atm"] == "1"
    assert h["failedReason"] == (
        "no task named 'resize' in this worker; known tasks: count-words, send_welcome"
    )


async def test_a_sync_task_beside_an_async_one_runs_in_the_workers_threads(
    redis: Redis, queue_name: str
) -> None:
    """In a queue whose tasks mix ``def`` and ``async def``, the sync task runs where the worker
    runs sync processors (its own threads, which it tracks and bounds), not in the event loop's
    default executor."""
    seen: list[str] = []

    @echomq.task(queue=queue_name)
    def blocking(x: int) -> int:
        seen.append(threading.current_thread().name)
        return x * 2

    @echomq.task(queue=queue_name)
    async def awaiting(x: int) -> int:
        return x + 1

    a = await blocking.using(connection=redis).aenqueue(21)
    b = await awaiting.using(connection=redis).aenqueue(1)
    async with Worker.for_tasks([blocking, awaiting], connection=redis, **FAST):
        assert await blocking.using(connection=redis).aresult(a, timeout=10) == 42
        assert await awaiting.using(connection=redis).aresult(b, timeout=10) == 2
    assert len(seen) == 1 and seen[0].startswith(f"echomq-{queue_name}"), seen


async def test_tasks_on_several_queues_need_one_worker_each(redis: Redis, queue_name: str) -> None:
    send_welcome, _ = make_tasks(queue_name)

    @echomq.task(queue=f"{queue_name}-b")
    async def other(x: int) -> int:
        return x

    with pytest.raises(echomq.InvalidOptionError, match="several queues"):
        Worker.for_tasks([send_welcome, other], connection=redis)
    grouped = echomq.tasks_by_queue([send_welcome, other])
    assert {q: [t.name for t in ts] for q, ts in grouped.items()} == {
        queue_name: ["send_welcome"],
        f"{queue_name}-b": ["other"],
    }
    worker = Worker.for_tasks([send_welcome, other], queue=f"{queue_name}-b", connection=redis)
    assert worker.name == f"{queue_name}-b"
    with pytest.raises(echomq.InvalidOptionError, match="no task goes to queue 'nope'"):
        Worker.for_tasks([send_welcome, other], queue="nope", connection=redis)


async def test_a_job_is_an_ordinary_job(redis: Redis, queue_name: str) -> None:
    send_welcome, _ = make_tasks(queue_name)
    job = await send_welcome.using(connection=redis).aenqueue("a@example.com")
    assert isinstance(job, Job)
    got = await echomq.get_job(queue_name, job.id, connection=redis)
    assert got is not None and got.name == "send_welcome"


def test_decorating_checks_the_name_queue_and_options() -> None:
    with pytest.raises(echomq.InvalidQueueNameError):
        echomq.task(queue="a:b")(len)
    with pytest.raises(echomq.InvalidOptionError, match="unknown job option"):
        echomq.task(queue="a", attemps=3)  # type: ignore[call-overload]
    with pytest.raises(echomq.InvalidOptionError, match="priority"):
        echomq.task(queue="a", priority=-1)
    with pytest.raises(echomq.InvalidOptionError, match="non-empty str"):
        echomq.task(name="")(len)


async def test_for_tasks_takes_a_module_and_the_default_connection(
    redis: Redis, queue_name: str
) -> None:
    @echomq.task(queue=queue_name)
    def head(items: list[int], /, n: int = 1) -> list[int]:
        return items[:n]

    module = types.ModuleType("user_tasks")
    module.head = head  # type: ignore[attr-defined]
    module.other = 42  # type: ignore[attr-defined]
    echomq.set_default_connection(redis)
    job = await head.aenqueue([3, 2, 1], n=2)
    assert job.data == {"items": [3, 2, 1], "n": 2}  # positional-only: a key too
    async with Worker.for_tasks(module, **FAST):
        assert await head.aresult(job, timeout=10) == [3, 2]
