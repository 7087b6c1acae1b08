"""BullMQ 6.7 names added for parity, each against a real Redis (and through the generated
sync twin where there is one): the job state predicates, ``Job.clear_logs``,
``Job.remove_deduplication_key``, ``Queue.add_job_log``, ``Queue.update_job_progress``,
``Queue.get_workers_count``, ``Queue.get_dependencies`` and ``QueueEventsProducer`` (its Node
interop is in tests/interop/test_events_producer_interop.py)."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from redis.asyncio import Redis

import echomq
import echomq.sync
from echomq import (
    ChildrenPage,
    Deduplication,
    FlowJob,
    FlowProducer,
    InvalidOptionError,
    Job,
    JobNotFoundError,
    Limiter,
    Queue,
    QueueEvents,
    QueueEventsProducer,
    Unknown,
    ValidationError,
    Worker,
    WorkerOptions,
)
from echomq._keys import queue_keys


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def _events(r: Redis, stream: str) -> list[dict[str, str]]:
    entries = await r.xrange(stream) or []
    return [{_s(k): _s(v) for k, v in fields.items()} for _, fields in entries]


async def test_state_predicates(redis: Redis, redis_url: str, queue_name: str) -> None:
    keys = queue_keys(queue_name)
    async with Queue(queue_name, connection=redis) as q:
        waiting = await q.add("w", {})
        delayed = await q.add("d", {}, delay=60)
        prioritized = await q.add("p", {}, priority=2)
        active = await q.add("a", {})
        await redis.lrem(keys.wait, 0, active.id)
        await redis.lpush(keys.active, active.id)
        async with FlowProducer(connection=redis) as flows:
            node = await flows.add(
                FlowJob(
                    name="parent",
                    queue_name=queue_name,
                    children=[FlowJob(name="child", queue_name=queue_name)],
                )
            )
        parent = await q.get_job(node.job.id)
        assert parent is not None

        def row(job: Any) -> Any:
            return job.is_waiting(), job.is_delayed(), job.is_active(), job.is_waiting_children()

        async def arow(job: Any) -> tuple[bool, ...]:
            return tuple([await c for c in row(job)])

        assert await arow(waiting) == (True, False, False, False)
        assert await arow(delayed) == (False, True, False, False)
        assert await arow(prioritized) == (False, False, False, False)  # as BullMQ's isWaiting
        assert await arow(active) == (False, False, True, False)
        assert await arow(parent) == (False, False, False, True)
        await q.pause()  # a paused queue's jobs are still waiting
        assert await waiting.is_waiting()
        await waiting.remove()
        assert await arow(waiting) == (False, False, False, False)

    with echomq.sync.Queue(queue_name, connection=redis_url) as sq:
        sjob = sq.get_job(delayed.id)
        assert sjob is not None
        assert (sjob.is_waiting(), sjob.is_delayed(), sjob.is_active()) == (False, True, False)
        assert sq.get_job(parent.id).is_waiting_children()  # type: ignore[union-attr]


async def test_clear_logs(redis: Redis, redis_url: str, queue_name: str) -> None:
    keys = queue_keys(queue_name)
    async with Queue(queue_name, connection=redis) as q:
        job = await q.add("x", {})
        for i in range(5):
            await job.log(f"line {i}")
        await job.clear_logs(2)
        assert await job.get_logs() == (["line 3", "line 4"], 2)
        await job.clear_logs()
        assert await job.get_logs() == ([], 0)
        assert not await redis.exists(keys.logs(job.id))
        await job.log("again")
        await job.clear_logs(0)  # 0 deletes every line, as BullMQ's falsy keepLogs
        assert await job.get_logs() == ([], 0)
        await job.clear_logs()  # no log at all: nothing to do, no error
        for bad in (-1, 1.5, True, "2"):
            await job.log("kept")
            with pytest.raises(ValidationError, match="keep_logs must be None or an int >= 0"):
                await job.clear_logs(bad)  # type: ignore[arg-type]
        assert (await job.get_logs())[1] == 4  # nothing was deleted by a refused call

    with echomq.sync.Queue(queue_name, connection=redis_url) as sq:
        sjob = sq.get_job(job.id)
        assert sjob is not None
        sjob.clear_logs(1)
        assert sjob.get_logs() == (["kept"], 1)


async def test_add_job_log(redis: Redis, redis_url: str, queue_name: str) -> None:
    async with Queue(queue_name, connection=redis) as q:
        job = await q.add("x", {})
        assert await q.add_job_log(job.id, "one") == 1
        assert await q.add_job_log(job.id, "two") == 2
        assert await q.add_job_log(job.id, "three", keep_logs=2) == 2
        assert await q.get_job_logs(job.id) == (["two", "three"], 2)
        assert await q.add_job_log(job.id, "four", 0) == 3  # 0 keeps every line
        with pytest.raises(JobNotFoundError):
            await q.add_job_log("missing", "x")
        assert await q.get_job_logs("missing") == ([], 0)
        with pytest.raises(ValidationError, match="a log line must be a str"):
            await q.add_job_log(job.id, 3)  # type: ignore[arg-type]
        with pytest.raises(ValidationError, match="keep_logs must be None or an int >= 0"):
            await q.add_job_log(job.id, "x", keep_logs=-2)
        assert (await q.get_job_logs(job.id))[1] == 3

    with echomq.sync.Queue(queue_name, connection=redis_url) as sq:
        assert sq.add_job_log(job.id, "five") == 4


async def test_update_job_progress(redis: Redis, redis_url: str, queue_name: str) -> None:
    keys = queue_keys(queue_name)
    async with Queue(queue_name, connection=redis) as q:
        job = await q.add("x", {})
        await q.update_job_progress(job.id, 42)
        await q.update_job_progress(job.id, {"step": "b"})
        await job.refresh()
        assert job.progress == {"step": "b"}
        progress = [e for e in await _events(redis, keys.events) if e["event"] == "progress"]
        assert progress == [
            {"event": "progress", "jobId": job.id, "data": "42"},
            {"event": "progress", "jobId": job.id, "data": '{"step":"b"}'},
        ]
        with pytest.raises(JobNotFoundError):
            await q.update_job_progress("missing", 1)
        with pytest.raises(ValidationError, match="progress must be a number or a mapping"):
            await q.update_job_progress(job.id, "half")  # type: ignore[arg-type]
        await job.refresh()
        assert job.progress == {"step": "b"}

    with echomq.sync.Queue(queue_name, connection=redis_url) as sq:
        sq.update_job_progress(job.id, 7)
        sjob = sq.get_job(job.id)
        assert sjob is not None and sjob.progress == 7


async def test_get_workers_count(redis: Redis, redis_url: str, queue_name: str) -> None:
    keys = queue_keys(queue_name)
    async with Queue(queue_name, connection=redis) as q:
        assert await q.get_workers_count() == 0
        clients = [Redis.from_url(redis_url) for _ in range(3)]
        try:
            await clients[0].client_setname(keys.worker_client_name())
            await clients[1].client_setname(keys.worker_client_name("w1"))
            await clients[2].client_setname(keys.events_client_name())  # not a worker
            assert await q.get_workers_count() == 2
            with echomq.sync.Queue(queue_name, connection=redis_url) as sq:
                assert sq.get_workers_count() == 2
        finally:
            for c in clients:
                await c.aclose()


async def test_job_remove_deduplication_key(redis: Redis, redis_url: str, queue_name: str) -> None:
    keys = queue_keys(queue_name)
    async with Queue(queue_name, connection=redis) as q:
        first = await q.add("a", {"v": 1}, deduplication=Deduplication("s"))
        assert (await q.add("a", {"v": 2}, deduplication={"id": "s"})).deduplicated
        assert await first.remove_deduplication_key() is True
        assert not await redis.exists(keys.dedup("s"))
        second = await q.add("a", {"v": 3}, deduplication=Deduplication("s"))
        assert not second.deduplicated and second.id != first.id
        # the window is the second job's now: the first one leaves it alone
        assert await first.remove_deduplication_key() is False
        assert await q.get_deduplication_job_id("s") == second.id
        plain = await q.add("a", {})
        assert await plain.remove_deduplication_key() is False

    with echomq.sync.Queue(queue_name, connection=redis_url) as sq:
        sjob = sq.get_job(second.id)
        assert sjob is not None and sjob.deduplication_id == "s"
        assert sjob.remove_deduplication_key() is True
        assert sq.get_deduplication_job_id("s") is None
        assert sjob.remove_deduplication_key() is False


async def test_queue_get_dependencies(redis: Redis, redis_url: str, queue_name: str) -> None:
    child_q = queue_name + "-kids"
    async with FlowProducer(connection=redis) as flows:
        node = await flows.add(
            FlowJob(
                "parent",
                queue_name,
                children=[
                    FlowJob("fast", child_q, {"n": 1}, job_id="c1"),
                    FlowJob("fast", child_q, {"n": 2}, job_id="c2"),
                    FlowJob("later", child_q, {"n": 3}, job_id="c3", delay=60),
                    FlowJob("later", child_q, {"n": 4}, job_id="c4", delay=60),
                    FlowJob("later", child_q, {"n": 5}, job_id="c5", delay=60),
                ],
            )
        )
    parent_id = node.job.id

    async def process(job: Job) -> int:
        return int(job.data["n"]) * 10

    async with Worker(child_q, process, connection=redis, drain_delay=0.2):
        for _ in range(200):
            if await redis.hlen(f"bull:{queue_name}:{parent_id}:processed") == 2:
                break
            await asyncio.sleep(0.05)
    key = f"bull:{child_q}:"
    async with Queue(queue_name, connection=redis) as q:
        done = await q.get_dependencies(parent_id, "processed")
        assert isinstance(done, ChildrenPage)
        assert done.items == [key + "c1", key + "c2"] and done.total == 2
        assert done.values == {key + "c1": 10, key + "c2": 20}
        assert [(j.id, j.return_value) for j in done.jobs] == [("c1", 10), ("c2", 20)]
        pending = await q.get_dependencies(parent_id)  # "pending" by default
        assert pending.items == [key + "c3", key + "c4", key + "c5"] and pending.total == 3
        assert pending.values == {} and [j.id for j in pending.jobs] == ["c3", "c4", "c5"]
        assert pending.jobs[0].queue_name == child_q
        page = await q.get_dependencies(parent_id, "pending", 1, 1)
        assert (page.items, page.total) == ([key + "c4"], 3)
        assert (await q.get_dependencies(parent_id, "pending", -2)).items == [
            key + "c4",
            key + "c5",
        ]
        await redis.delete(key + "c5")  # a child gone: listed, no job
        gone = await q.get_dependencies(parent_id, "pending", 2)
        assert gone.items == [key + "c5"] and gone.jobs == []
        empty = await q.get_dependencies("no-such-parent", "processed")
        assert (empty.items, empty.values, empty.jobs, empty.total) == ([], {}, [], 0)
        with pytest.raises(ValidationError, match='type must be "processed" or "pending"'):
            await q.get_dependencies(parent_id, "unprocessed")
        with pytest.raises(ValidationError, match="start must be an int"):
            await q.get_dependencies(parent_id, "pending", "0")  # type: ignore[arg-type]

    with echomq.sync.Queue(queue_name, connection=redis_url) as sq:
        sync_page = sq.get_dependencies(parent_id, "processed", 0, 0)
        assert sync_page.items == [key + "c1"] and sync_page.total == 2
        assert isinstance(sync_page.jobs[0], echomq.sync.Job)
        assert sync_page.jobs[0].get_state() == "completed"


async def test_queue_events_producer(redis: Redis, redis_url: str, queue_name: str) -> None:
    keys = queue_keys(queue_name)
    async with QueueEvents(queue_name, connection=redis, block=0.2) as events:
        stream = events.__aiter__()
        async with QueueEventsProducer(queue_name, connection=redis_url) as producer:
            assert producer.name == queue_name
            entry_id = await producer.publish_event(
                "report-ready", {"url": "s3://r/1", "pages": 12, "ratio": 0.5, "final": True}
            )
            await producer.publish_event("ping")
        first = await asyncio.wait_for(stream.__anext__(), 5)
        assert isinstance(first, Unknown) and first.event_id == entry_id
        assert first.name == "report-ready"
        assert dict(first.fields) == {
            "url": "s3://r/1",
            "pages": "12",
            "ratio": "0.5",
            "final": "true",
        }
        second = await asyncio.wait_for(stream.__anext__(), 5)
        assert isinstance(second, Unknown) and (second.name, dict(second.fields)) == ("ping", {})

    async with QueueEventsProducer(queue_name, connection=redis) as producer:
        before = await redis.xlen(keys.events)
        refused: list[tuple[Any, ...]] = [
            ("completed", {}, 1000, "choose a name of your own"),
            ("error", {}, 1000, "choose a name of your own"),
            ("", {}, 1000, "event_name must be a non-empty str"),
            ("mine", {"event": "x"}, 1000, 'field "event" is reserved'),
            ("mine", {"data": {"a": 1}}, 1000, r"encode structured values yourself \(json.dumps\)"),
            ("mine", {"n": float("nan")}, 1000, "finite float"),
            ("mine", {}, 0, "max_events must be an int >= 1"),
        ]
        for name, fields, max_events, message in refused:
            with pytest.raises(ValidationError, match=message):
                await producer.publish_event(name, fields, max_events=max_events)
        assert await redis.xlen(keys.events) == before  # nothing was written
        for i in range(300):
            await producer.publish_event("tick", {"i": i}, max_events=10)
        assert await redis.xlen(keys.events) < 300  # trimmed (MAXLEN ~: about 10)
    # a client passed in is the caller's: still open
    assert await redis.ping()


async def test_worker_concurrency_setter(redis: Redis, queue_name: str) -> None:
    release = asyncio.Event()
    running: set[str] = set()
    most: list[int] = []

    async def process(job: Job) -> None:
        running.add(job.id)
        most.append(len(running))
        try:
            await release.wait()
        finally:
            running.discard(job.id)

    async def until(pred: Any, what: str) -> None:
        for _ in range(200):
            if pred():
                return
            await asyncio.sleep(0.025)
        raise AssertionError(what)

    worker = Worker(queue_name, process, connection=redis, drain_delay=0.2)
    assert worker.concurrency == 1
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(InvalidOptionError, match="concurrency must be an int >= 1"):
            worker.concurrency = bad  # type: ignore[assignment]
    assert worker.concurrency == 1
    async with Queue(queue_name, connection=redis) as q:
        await q.add_bulk([("j", {}) for _ in range(6)])
        async with worker:
            await until(lambda: len(running) == 1, "one job runs")
            await asyncio.sleep(0.2)
            assert len(running) == 1
            worker.concurrency = 4  # more slots: filled at once
            await until(lambda: len(running) == 4, "four jobs run")
            assert worker.options.concurrency == 4
            worker.concurrency = 1  # fewer: running jobs finish, no new fetch until under 1
            most.clear()
            await asyncio.sleep(0.2)
            assert len(running) == 4 and most == []
            release.set()
            await until(lambda: worker.is_running and not running, "the rest ran")
            for _ in range(200):
                if (await q.get_job_counts("completed"))["completed"] == 6:
                    break
                await asyncio.sleep(0.025)
            assert (await q.get_job_counts("completed"))["completed"] == 6
            assert most and max(most) == 1  # the last two ran one at a time


async def test_worker_concurrency_setter_grows_the_threads_of_a_sync_processor(
    redis: Redis, queue_name: str
) -> None:
    release = threading.Event()
    running: set[str] = set()
    lock = threading.Lock()

    def process(job: Any) -> None:
        with lock:
            running.add(job.id)
        release.wait(10)
        with lock:
            running.discard(job.id)

    async with Queue(queue_name, connection=redis) as q:
        await q.add_bulk([("j", {}) for _ in range(3)])
        async with Worker(queue_name, process, connection=redis, drain_delay=0.2) as worker:
            try:
                for _ in range(200):
                    if running:
                        break
                    await asyncio.sleep(0.025)
                worker.concurrency = 3
                for _ in range(200):
                    if len(running) == 3:
                        break
                    await asyncio.sleep(0.025)
                assert len(running) == 3  # three threads run at once
            finally:
                release.set()


async def test_worker_ready_paused_resumed_hooks(redis: Redis, queue_name: str) -> None:
    seen: list[str] = []
    release = asyncio.Event()

    async def process(job: Job) -> None:
        await release.wait()

    worker = Worker(queue_name, process, connection=redis, drain_delay=0.2)

    def record(event: str) -> Any:
        return lambda *args: seen.append(event)

    for event in ("ready", "paused", "resumed", "active", "closed"):
        worker.on(event, record(event))  # type: ignore[call-overload]
    async with Queue(queue_name, connection=redis) as q:
        async with worker:
            for _ in range(200):
                if "ready" in seen:
                    break
                await asyncio.sleep(0.025)
            assert seen == ["ready"]  # before any job, once connected
            assert any(w["rawname"].startswith("bull:") for w in await q.get_workers())
            await q.add("j", {})
            for _ in range(200):
                if "active" in seen:
                    break
                await asyncio.sleep(0.025)
            pausing = asyncio.create_task(worker.pause())  # waits for the running job
            await asyncio.sleep(0.1)
            assert "paused" not in seen and not pausing.done()
            release.set()
            await asyncio.wait_for(pausing, 5)
            assert seen == ["ready", "active", "paused"]
            await worker.pause(wait_for_active=False)  # already paused: no second event
            worker.resume()
            worker.resume()  # not paused any more: no second event
            await worker.pause(wait_for_active=False)
            worker.resume()
        assert seen == ["ready", "active", "paused", "resumed", "paused", "resumed", "closed"]


async def test_worker_option_skip_stalled_check(redis: Redis, queue_name: str) -> None:
    keys = queue_keys(queue_name)
    job = await echomq.add(queue_name, "s", {}, connection=redis)
    await redis.rpoplpush(keys.wait, keys.active)  # as a crashed worker leaves it
    await redis.sadd(keys.stalled, job.id)
    done: list[str] = []

    async def ok(job: Job) -> None:
        done.append(job.id)

    async with Worker(
        queue_name,
        ok,
        connection=redis,
        stalled_interval=0.1,
        drain_delay=0.2,
        skip_stalled_check=True,
    ) as worker:
        assert worker.options.skip_stalled_check is True
        await asyncio.sleep(0.6)
        assert done == [] and await redis.lrange(keys.active, 0, -1) == [job.id.encode()]
    async with Worker(queue_name, ok, connection=redis, stalled_interval=0.1, drain_delay=0.2):
        for _ in range(200):
            if done:
                break
            await asyncio.sleep(0.025)
    assert done == [job.id]  # a worker with the check recovers it


async def test_worker_option_skip_lock_renewal(redis: Redis, queue_name: str) -> None:
    keys = queue_keys(queue_name)
    release = asyncio.Event()
    started = asyncio.Event()

    async def slow(job: Job) -> None:
        started.set()
        await release.wait()

    for skip in (True, False):
        job = await echomq.add(queue_name, "slow", {}, connection=redis)
        started.clear()
        release.clear()
        async with Worker(
            queue_name,
            slow,
            connection=redis,
            lock_duration=0.3,
            drain_delay=0.2,
            stalled_interval=30,
            skip_lock_renewal=skip,
        ):
            await asyncio.wait_for(started.wait(), 5)
            await asyncio.sleep(0.7)  # over twice the lock's life
            assert bool(await redis.exists(keys.lock(job.id))) is not skip
            release.set()


async def test_worker_option_maximum_rate_limit_delay(redis: Redis, queue_name: str) -> None:
    done = asyncio.Event()

    async def ok(job: Job) -> None:
        done.set()

    async with Queue(queue_name, connection=redis) as q:
        await q.rate_limit(60)  # the queue is rate limited for a minute
        await q.add("j", {})
        async with Worker(
            queue_name,
            ok,
            connection=redis,
            drain_delay=0.2,
            limiter=Limiter(max=10, duration=1),
            maximum_rate_limit_delay=0.2,
        ):
            await asyncio.sleep(0.5)
            assert not done.is_set()
            await q.remove_rate_limit_key()  # no marker is written: the worker asks again
            await asyncio.wait_for(done.wait(), 2)  # within its maximum delay, not 30 s


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("skip_stalled_check", 1, "skip_stalled_check must be True or False"),
        ("skip_lock_renewal", "yes", "skip_lock_renewal must be True or False"),
        ("maximum_rate_limit_delay", 0, "maximum_rate_limit_delay must be more than 0"),
        ("maximum_rate_limit_delay", -1.5, "maximum_rate_limit_delay must not be negative"),
    ],
)
def test_worker_options_refuse_bad_values(field: str, value: Any, message: str) -> None:
    with pytest.raises(InvalidOptionError, match=message):
        WorkerOptions(**{field: value})
