"""QueueEvents against a real Redis: typed events, replay, reconnects, restarts, shared waiters."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timezone
from typing import Any

import pytest
from redis.asyncio import Redis

import echomq
from echomq import (
    Active,
    Added,
    Completed,
    Delayed,
    Drained,
    Duplicated,
    Failed,
    Job,
    JobFailedError,
    JobNotFoundError,
    Progress,
    QueueEvent,
    QueueEvents,
    RetriesExhausted,
    Unknown,
    Waiting,
    Worker,
)
from echomq._keys import queue_keys
from echomq.embedded import RedisServer
from helpers import wait_for

FAST: dict[str, Any] = {"drain_delay": 0.5}


async def take(
    events: AsyncIterator[QueueEvent],
    until: Callable[[list[QueueEvent]], bool],
    timeout: float = 10.0,
) -> list[QueueEvent]:
    """Read events until ``until(events so far)`` holds; fail after ``timeout`` seconds."""
    got: list[QueueEvent] = []

    async def run() -> list[QueueEvent]:
        async for event in events:
            got.append(event)
            if until(got):
                break
        return got

    try:
        return await asyncio.wait_for(run(), timeout)
    except asyncio.TimeoutError:
        raise AssertionError(f"events so far: {got}") from None


def count_of(cls: type[QueueEvent], n: int) -> Callable[[list[QueueEvent]], bool]:
    return lambda got: sum(isinstance(e, cls) for e in got) >= n


async def stream_ids(r: Redis, queue: str, after: str = "-") -> list[str]:
    entries: Any = await r.xrange(f"bull:{queue}:events", min=after)
    return [i.decode() for i, _ in entries]


async def qe_clients(r: Redis, queue: str) -> list[dict[str, Any]]:
    name = queue_keys(queue).events_client_name()
    return [c for c in await r.client_list() if c.get("name") == name]


async def one_qe_client(r: Redis, queue: str) -> dict[str, Any]:
    clients = await wait_for(lambda: qe_clients(r, queue), message="no :qe connection")
    assert len(clients) == 1, clients
    client: dict[str, Any] = clients[0]
    return client


async def stalled_check_ran(r: Redis, queue: str) -> None:
    """Wait for the worker's first stalled check: closing a worker during it can hang."""
    await wait_for(lambda: r.exists(f"bull:{queue}:stalled-check"), timeout=5)


async def test_constructor_has_no_side_effects() -> None:
    # Nothing listens there: a constructor that connected would fail.
    events = QueueEvents("q", connection="redis://127.0.0.1:1/0")
    assert events.last_event_id == "$"
    await events.aclose()
    with pytest.raises(echomq.InvalidOptionError):
        QueueEvents("q", connection="redis://127.0.0.1:1/0", block=0)
    with pytest.raises(echomq.InvalidOptionError):
        QueueEvents("q", connection="redis://127.0.0.1:1/0", last_event_id="latest")


async def test_typed_events_of_producer_operations(redis: Redis, queue_name: str) -> None:
    async with QueueEvents(queue_name, connection=redis) as events:
        it = aiter(events)
        queue = echomq.Queue(queue_name, connection=redis)
        plain = await queue.add("plain", {"a": 1})
        before = time.time()
        delayed = await echomq.add(queue_name, "later", None, connection=redis, delay=60)
        prio = await echomq.add(queue_name, "prio", None, connection=redis, priority=3)
        await echomq.add(queue_name, "c", None, connection=redis, job_id="custom")
        await echomq.add(queue_name, "c", None, connection=redis, job_id="custom")
        await plain.update_progress({"pct": 50})
        await redis.xadd(f"bull:{queue_name}:events", {"event": "my-event", "k": "v"})
        got = await take(it, count_of(Unknown, 1))

    ids = await stream_ids(redis, queue_name)
    assert [e.event_id for e in got] == ids
    body = [(type(e), e) for e in got]
    assert body[0][1] == Added(ids[0], plain.id, "plain")
    assert body[1][1] == Waiting(ids[1], plain.id, None)
    assert body[2][1] == Added(ids[2], delayed.id, "later")
    d = got[3]
    assert isinstance(d, Delayed) and d.job_id == delayed.id and d.name == "delayed"
    assert d.delay_until.tzinfo is timezone.utc
    assert before + 59 < d.delay_until.timestamp() < time.time() + 61
    assert got[4] == Added(ids[4], prio.id, "prio")
    assert got[5] == Waiting(ids[5], prio.id, None)
    assert got[6] == Added(ids[6], "custom", "c")
    assert isinstance(got[7], Waiting)
    assert got[8] == Duplicated(ids[8], "custom")
    assert got[9] == Progress(ids[9], plain.id, {"pct": 50})
    assert got[10] == Unknown(ids[10], "my-event", {"k": "v"})
    assert got[10].name == "my-event" and got[9].name == "progress"


async def test_worker_events_and_retries_exhausted(redis: Redis, queue_name: str) -> None:
    async def process(job: Job) -> Any:
        if job.name == "bad":
            raise ValueError("boom")
        return {"double": job.data * 2}

    async with QueueEvents(queue_name, connection=redis) as events:
        it = aiter(events)
        good = await echomq.add(queue_name, "good", 21, connection=redis)
        bad = await echomq.add(queue_name, "bad", 0, connection=redis, attempts=2)
        async with Worker(queue_name, process, connection=redis, concurrency=1, **FAST):
            got = await take(
                it,
                lambda g: (
                    any(isinstance(e, RetriesExhausted) for e in g)
                    and any(isinstance(e, Completed) for e in g)
                ),
            )
            await stalled_check_ran(redis, queue_name)

    completed = [e for e in got if isinstance(e, Completed)]
    assert [(e.job_id, e.return_value, e.prev) for e in completed] == [
        (good.id, {"double": 42}, "active")
    ]
    failed = [e for e in got if isinstance(e, Failed)]
    assert [(e.job_id, e.failed_reason, e.prev) for e in failed] == [(bad.id, "boom", "active")]
    exhausted = [e for e in got if isinstance(e, RetriesExhausted)]
    assert [(e.job_id, e.attempts_made) for e in exhausted] == [(bad.id, 2)]
    actives = [e for e in got if isinstance(e, Active)]
    assert [e.job_id for e in actives].count(bad.id) == 2
    assert all(e.prev == "waiting" for e in actives)
    retried = [e for e in got if isinstance(e, Waiting) and e.prev == "active"]
    assert [e.job_id for e in retried] == [bad.id]


async def test_drained_and_pause_events(redis: Redis, queue_name: str) -> None:
    async with QueueEvents(queue_name, connection=redis) as events:
        it = aiter(events)
        queue = echomq.Queue(queue_name, connection=redis)
        await queue.pause()
        await queue.resume()
        await queue.add("x", 1)

        async def noop(job: Job) -> None:
            return None

        async with Worker(queue_name, noop, connection=redis, **FAST):
            got = await take(it, count_of(Drained, 1))
            await stalled_check_ran(redis, queue_name)
    names = [e.name for e in got]
    assert names[:2] == ["paused", "resumed"]
    assert names[-1] == "drained"


async def test_replays_history_from_zero(redis: Redis, queue_name: str) -> None:
    await echomq.add_bulk(queue_name, [("h", i) for i in range(5)], connection=redis)
    ids = await stream_ids(redis, queue_name)
    async with QueueEvents(queue_name, connection=redis, last_event_id="0") as events:
        got = await take(aiter(events), lambda g: len(g) == len(ids))
        assert [e.event_id for e in got] == ids
        assert [e.job_id for e in got if isinstance(e, Added)] == ["1", "2", "3", "4", "5"]
        assert events.last_event_id == ids[-1]
    # resuming after a given id delivers only what follows it
    async with QueueEvents(queue_name, connection=redis, last_event_id=ids[5]) as events:
        got = await take(aiter(events), lambda g: len(g) == len(ids) - 6)
        assert [e.event_id for e in got] == ids[6:]


async def test_dollar_start_is_fixed_on_enter(redis: Redis, queue_name: str) -> None:
    await echomq.add(queue_name, "old", 1, connection=redis)
    async with QueueEvents(queue_name, connection=redis) as events:
        new = await echomq.add(queue_name, "new", 2, connection=redis)  # before iterating
        got = await take(aiter(events), count_of(Waiting, 1))
    assert [e.job_id for e in got if isinstance(e, Added)] == [new.id]


async def test_reconnects_after_client_kill_without_loss_or_repeat(
    redis: Redis, queue_name: str
) -> None:
    total = 60
    async with QueueEvents(queue_name, connection=redis) as events:
        start = events.last_event_id
        it = aiter(events)
        killed: list[int] = []

        async def produce() -> None:
            for i in range(total):
                await echomq.add(queue_name, "k", i, connection=redis)
                if i in (15, 40):
                    client = await one_qe_client(redis, queue_name)
                    await redis.client_kill_filter(_id=client["id"])
                    killed.append(int(client["id"]))
                await asyncio.sleep(0)

        producer = asyncio.create_task(produce())
        got = await take(it, count_of(Waiting, total), timeout=20)
        await producer
        after = await one_qe_client(redis, queue_name)

    assert len(killed) == 2 and int(after["id"]) not in killed
    expected = await stream_ids(redis, queue_name, after="(" + start)
    assert [e.event_id for e in got] == expected
    assert len(expected) == 2 * total


async def test_server_restart_reader_resumes(
    fresh_server: Callable[..., RedisServer], queue_name: str
) -> None:
    server = fresh_server()
    url = server.url
    async with QueueEvents(queue_name, connection=url) as events:
        it = aiter(events)
        await echomq.add_bulk(queue_name, [("a", i) for i in range(3)], connection=url)
        first = await take(it, count_of(Waiting, 3))
        await asyncio.to_thread(server.restart)
        await echomq.add_bulk(queue_name, [("b", i) for i in range(3)], connection=url)
        second = await take(it, count_of(Waiting, 3), timeout=20)
    check = Redis.from_url(url)
    try:
        ids = await stream_ids(check, queue_name)
    finally:
        await check.aclose()
    assert [e.event_id for e in first + second] == ids
    assert [e.job_id for e in second if isinstance(e, Added)] == ["4", "5", "6"]


async def test_many_waiters_share_one_reader(redis: Redis, queue_name: str) -> None:
    n = 200
    jobs = await echomq.add_bulk(queue_name, [("w", i) for i in range(n)], connection=redis)

    async def square(job: Job) -> int:
        return int(job.data) ** 2

    async with QueueEvents(queue_name, connection=redis) as events:
        waits = [asyncio.create_task(job.wait_until_finished(events, timeout=30)) for job in jobs]
        await one_qe_client(redis, queue_name)
        async with Worker(queue_name, square, connection=redis, concurrency=20, **FAST):
            results = await asyncio.wait_for(asyncio.gather(*waits), 30)
            await one_qe_client(redis, queue_name)
            await stalled_check_ran(redis, queue_name)
    assert results == [i * i for i in range(n)]
    assert await qe_clients(redis, queue_name) == []  # closed on exit


async def test_wait_on_finished_job_returns_at_once(redis: Redis, queue_name: str) -> None:
    ok = await echomq.add(queue_name, "ok", 5, connection=redis)
    bad = await echomq.add(queue_name, "bad", 5, connection=redis)
    gone = await echomq.add(queue_name, "gone", 5, connection=redis, remove_on_complete=True)

    async def process(job: Job) -> Any:
        if job.name == "bad":
            raise RuntimeError("no luck")
        return {"got": job.data}

    async with Worker(queue_name, process, connection=redis, **FAST):
        await wait_for(lambda: _finished_count(redis, queue_name, 2), timeout=10)
        await wait_for(lambda: _missing(redis, queue_name, gone.id), timeout=10)
        await stalled_check_ran(redis, queue_name)

    async with QueueEvents(queue_name, connection=redis) as events:
        started = time.monotonic()
        assert await ok.wait_until_finished(events, timeout=5) == {"got": 5}
        with pytest.raises(JobFailedError) as failed:
            await bad.wait_until_finished(events, timeout=5)
        assert failed.value.job_id == bad.id and failed.value.reason == "no luck"
        # removed before anyone waited: fail fast rather than hang
        with pytest.raises(JobNotFoundError):
            await gone.wait_until_finished(events, timeout=5)
        with pytest.raises(JobNotFoundError):
            await events.wait_for_job("no-such-job", timeout=5)
        assert time.monotonic() - started < 2


async def _finished_count(r: Redis, queue: str, n: int) -> bool:
    done = await r.zcard(f"bull:{queue}:completed") + await r.zcard(f"bull:{queue}:failed")
    return bool(done >= n)


async def _missing(r: Redis, queue: str, job_id: str) -> bool:
    return not await r.exists(f"bull:{queue}:{job_id}")


async def test_waiters_see_live_outcomes(redis: Redis, queue_name: str) -> None:
    ok = await echomq.add(queue_name, "ok", 1, connection=redis, remove_on_complete=True)
    bad = await echomq.add(queue_name, "bad", 1, connection=redis, remove_on_fail=True)

    async def process(job: Job) -> Any:
        if job.name == "bad":
            raise ValueError("broken")
        return [job.data, "done"]

    async with QueueEvents(queue_name, connection=redis) as events:
        wait_ok = asyncio.create_task(ok.wait_until_finished(events))
        wait_bad = asyncio.create_task(bad.wait_until_finished(events, timeout=10))
        await wait_for(lambda: events._waiters.keys() == {ok.id, bad.id})
        async with Worker(queue_name, process, connection=redis, **FAST):
            assert await asyncio.wait_for(wait_ok, 10) == [1, "done"]
            with pytest.raises(JobFailedError, match="broken"):
                await wait_bad
            await stalled_check_ran(redis, queue_name)
    assert await _missing(redis, queue_name, ok.id)


async def test_wait_timeout(redis: Redis, queue_name: str) -> None:
    job = await echomq.add(queue_name, "never", None, connection=redis)
    async with QueueEvents(queue_name, connection=redis) as events:
        with pytest.raises(TimeoutError):
            await job.wait_until_finished(events, timeout=0.2)
        assert events._waiters == {}
    other = await echomq.add(queue_name + "x", "n", None, connection=redis)
    async with QueueEvents(queue_name, connection=redis) as events:
        with pytest.raises(echomq.ValidationError):
            await other.wait_until_finished(events)


async def test_close_ends_iterators_and_waiters_but_not_caller_client(
    redis: Redis, queue_name: str
) -> None:
    job = await echomq.add(queue_name, "x", None, connection=redis)
    events = QueueEvents(queue_name, connection=redis)
    it = aiter(events)
    waiter = asyncio.create_task(events.wait_for_job(job.id))
    reading = asyncio.create_task(take(it, lambda g: False))
    await one_qe_client(redis, queue_name)
    await wait_for(lambda: job.id in events._waiters)
    await events.aclose()
    with pytest.raises(echomq.ConnectionNotOpenError):
        await waiter
    assert await reading == []
    assert await redis.ping()
    assert [e async for e in events] == []
    with pytest.raises(echomq.ConnectionNotOpenError):
        await events.wait_for_job(job.id)
    assert await qe_clients(redis, queue_name) == []


def test_event_is_frozen_and_names_are_wire_names() -> None:
    event = Completed("1-0", "7", {"a": 1}, "active")
    with pytest.raises(AttributeError):
        event.job_id = "8"  # type: ignore[misc]
    assert event.name == "completed"
    assert RetriesExhausted("1-0", "1", 3).name == "retries-exhausted"
    assert Delayed("1-0", "1", datetime.now(timezone.utc)).name == "delayed"
    assert not hasattr(event, "__dict__")
