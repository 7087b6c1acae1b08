"""A worker's outcomes survive a graceful close, BUSY, OOM and lost replies, with no duplicate.

Each test runs real workers against a real redis-server and counts executions in the test
process (outside Redis). The fault suite (tests/faults/) does the same with worker processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import redis
from redis.asyncio import Redis

import echomq
from echomq.embedded import RedisServer
from echomq.worker import WorkerState
from helpers import busy_for, queue_key, wait_for

pytestmark = pytest.mark.timeout(60)


class Runs:
    """Executions counted outside Redis, and an event per started job."""

    def __init__(self) -> None:
        self.started: Counter[str] = Counter()
        self.finished: Counter[str] = Counter()

    def processor(self, seconds: float, on_start: Callable[[echomq.Job], Any] | None = None):  # type: ignore[no-untyped-def]
        async def process(job: echomq.Job) -> str:
            self.started[job.id] += 1
            if on_start is not None:
                on_start(job)
            await asyncio.sleep(seconds)
            self.finished[job.id] += 1
            return job.id

        return process


async def completed_ids(r: Redis, queue: str) -> list[str]:
    return sorted(m.decode() for m in await r.zrange(queue_key(queue, "completed"), 0, -1))


async def completed_events(r: Redis, queue: str) -> Counter[str]:
    entries = await r.xrange(queue_key(queue, "events"))
    return Counter(f[b"jobId"].decode() for _, f in entries if f[b"event"] == b"completed")


async def test_graceful_close_keeps_locks_so_no_job_runs_twice(
    redis: Redis, redis_url: str, queue_name: str
) -> None:
    """Jobs outlive their lock duration during the grace period; another worker's stalled
    check must not take them (it did when close() stopped renewing locks)."""
    jobs = await echomq.add_bulk(queue_name, [("j", {}) for _ in range(3)], connection=redis)
    ids = sorted(job.id for job in jobs)
    runs = Runs()
    quick = {"lock_duration": 0.4, "stalled_interval": 0.15, "drain_delay": 0.1}
    first = echomq.Worker(
        queue_name,
        runs.processor(2.0),
        connection=redis_url,
        concurrency=3,
        close_grace=10,
        **quick,  # type: ignore[arg-type]
    )
    second = echomq.Worker(
        queue_name,
        runs.processor(0.01),
        connection=redis_url,
        concurrency=3,
        **quick,  # type: ignore[arg-type]
    )
    async with first:
        await wait_for(lambda: len(runs.started) == 3, timeout=10)
        async with second:
            closing = asyncio.create_task(first.close())
            await asyncio.sleep(0.1)
            assert first.state is WorkerState.CLOSING
            await closing
            assert first.state is WorkerState.CLOSED
            assert await completed_ids(redis, queue_name) == ids
            await asyncio.sleep(1.0)  # several stalled checks of the second worker
    assert runs.started == Counter(dict.fromkeys(ids, 1)), "a job ran twice"
    assert await completed_events(redis, queue_name) == Counter(dict.fromkeys(ids, 1))
    for job_id in ids:
        assert await redis.hget(queue_key(queue_name, job_id), "atm") == b"1"


async def test_forced_end_of_grace_hands_jobs_back_to_wait_at_once(
    redis: Redis, redis_url: str, queue_name: str
) -> None:
    job = await echomq.add(queue_name, "slow", {}, connection=redis)
    runs = Runs()
    worker = echomq.Worker(
        queue_name, runs.processor(30), connection=redis_url, lock_duration=30, close_grace=0.3
    )
    async with worker:
        await wait_for(lambda: runs.started[job.id] == 1, timeout=10)
        began = time.monotonic()
    assert time.monotonic() - began < 5
    assert await redis.lrange(queue_key(queue_name, "wait"), 0, -1) == [job.id.encode()]
    assert await redis.llen(queue_key(queue_name, "active")) == 0
    assert not await redis.exists(queue_key(queue_name, f"{job.id}:lock"))
    fields = await redis.hmget(queue_key(queue_name, job.id), "atm", "ats")
    assert fields[0] in (None, b"0"), "the cut attempt is not counted as made"
    assert fields[1] == b"1", "it was started once"
    events = await redis.xrange(queue_key(queue_name, "events"))
    assert any(
        f[b"event"] == b"waiting" and f.get(b"prev") == b"active" and f[b"jobId"] == job.id.encode()
        for _, f in events
    )
    # and any worker takes it again at once
    async with echomq.Worker(queue_name, runs.processor(0.01), connection=redis_url):
        await wait_for(lambda: runs.finished[job.id] == 1, timeout=10)


@pytest.fixture
def busy_server(fresh_server: Callable[..., RedisServer]) -> RedisServer:
    # BUSY replies after 50 ms of a running script (lua-time-limit: Redis 6.2 and 7.x alike)
    return fresh_server(appendonly=False, extra_args=["--lua-time-limit", "50"])


async def test_busy_redis_holds_the_outcome_until_it_can_be_recorded(
    busy_server: RedisServer, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    url = busy_server.url
    r = Redis.from_url(url)
    try:
        jobs = await echomq.add_bulk(queue_name, [("j", {}) for _ in range(4)], connection=r)
        ids = sorted(job.id for job in jobs)
        runs = Runs()
        busy: list[threading.Thread] = []

        def on_start(job: echomq.Job) -> None:
            if not busy:  # the first job's outcome arrives while Redis is busy
                busy.append(busy_for(url, 1.5))

        worker = echomq.Worker(
            queue_name,
            runs.processor(0.3, on_start),
            connection=url,
            lock_duration=5,
            concurrency=2,
            stalled_interval=0.5,
        )
        with caplog.at_level(logging.WARNING, "echomq.worker"):
            async with worker:
                await wait_for(lambda: sum(runs.finished.values()) == 4, timeout=20)
                await wait_for(lambda: completed_ids(r, queue_name), timeout=20)

                async def all_completed() -> bool:
                    return await completed_ids(r, queue_name) == ids

                await wait_for(all_completed, timeout=20)
        busy[0].join(5)
        assert runs.started == Counter(dict.fromkeys(ids, 1))
        assert await completed_events(r, queue_name) == Counter(dict.fromkeys(ids, 1))
        assert "refused the call" in caplog.text  # the BUSY was met, and waited out
        assert "not recorded" not in caplog.text
    finally:
        await r.aclose()


async def test_locks_are_renewed_and_outcomes_recorded_when_redis_is_out_of_memory(
    fresh_server: Callable[..., RedisServer], queue_name: str
) -> None:
    server = fresh_server(appendonly=False, extra_args=["--maxmemory-policy", "noeviction"])
    r = Redis.from_url(server.url)
    try:
        job = await echomq.add(queue_name, "j", {}, connection=r)
        runs = Runs()
        worker = echomq.Worker(
            queue_name,
            runs.processor(2.0),
            connection=server.url,
            lock_duration=0.6,
            stalled_interval=0.2,
        )
        async with worker:
            await wait_for(lambda: runs.started[job.id] == 1, timeout=10)
            used = int((await r.info("memory"))["used_memory"])
            await r.config_set("maxmemory", str(used // 2))  # every denyoom command fails
            with pytest.raises(redis.exceptions.OutOfMemoryError):
                await r.set("probe", b"x" * 1024)
            await wait_for(lambda: runs.finished[job.id] == 1, timeout=10)

            async def completed() -> bool:
                return await completed_ids(r, queue_name) == [job.id]

            await wait_for(completed, timeout=10)
            await r.config_set("maxmemory", "0")
        assert runs.started[job.id] == 1, "the lock lapsed under OOM and the job ran twice"
        assert await redis_field(r, queue_name, job.id, "atm") == "1"
    finally:
        await r.config_set("maxmemory", "0")
        await r.aclose()


async def redis_field(r: Redis, queue: str, job_id: str, field: str) -> str | None:
    value = await r.hget(queue_key(queue, job_id), field)
    return None if value is None else value.decode()


class ReplyDroppingProxy:
    """A TCP proxy to Redis that, once armed, lets the next script call through and swallows
    its reply, then cuts that client connection: the call is applied, never acknowledged."""

    def __init__(self, port: int) -> None:
        self._port = port
        self.armed = False
        self.dropped = 0
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()  # one per client connection

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"redis://127.0.0.1:{port}"

    def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        # Every connection's task is kept, so that aclose() can wait for each to close both of
        # its streams (an unawaited one would leave its StreamWriter to the garbage collector).
        task = asyncio.create_task(self._serve(reader, writer))
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers = [writer]
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self._port)
            writers.append(up_writer)
            doomed = asyncio.Event()

            async def upstream() -> None:
                while data := await reader.read(65536):
                    if self.armed and b"EVALSHA" in data:
                        self.armed = False
                        doomed.set()
                    up_writer.write(data)
                    await up_writer.drain()

            async def downstream() -> None:
                while data := await up_reader.read(65536):
                    if doomed.is_set():
                        self.dropped += 1
                        break
                    writer.write(data)
                    await writer.drain()

            tasks = [asyncio.create_task(upstream()), asyncio.create_task(downstream())]
            try:
                await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
        except (OSError, asyncio.CancelledError):
            pass  # upstream refused or the proxy is closing: the client sees its socket closed
        finally:
            for each in writers:
                each.close()
            for each in writers:
                with contextlib.suppress(OSError):
                    await each.wait_closed()

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._handlers):
            task.cancel()
        await asyncio.gather(*self._handlers, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()


@pytest.fixture
async def proxy(redis_server: RedisServer) -> AsyncIterator[ReplyDroppingProxy]:
    made = ReplyDroppingProxy(redis_server.port)
    yield made
    await made.aclose()


async def test_lost_finish_reply_is_resent_safely_and_its_jobs_are_found_again(
    redis: Redis, proxy: ReplyDroppingProxy, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The finish call that completes job 1 and takes job 2 is applied but its reply is lost.
    Job 1 is recorded once (and said to be recorded); job 2 runs at once, not after its 30 s
    lock expires; nothing runs twice."""
    url = await proxy.start()
    jobs = await echomq.add_bulk(queue_name, [("j", {}) for _ in range(3)], connection=redis)
    ids = sorted(job.id for job in jobs)
    runs = Runs()

    def on_start(job: echomq.Job) -> None:
        if job.id == jobs[0].id:
            proxy.armed = True  # the next script call is the one recording this job

    worker = echomq.Worker(
        queue_name,
        runs.processor(0.2, on_start),
        connection=url,
        lock_duration=30,
        concurrency=1,
    )
    began = time.monotonic()
    with caplog.at_level(logging.INFO, "echomq.worker"):
        async with worker:

            async def all_completed() -> bool:
                return await completed_ids(redis, queue_name) == ids

            await wait_for(all_completed, timeout=15)
    assert time.monotonic() - began < 10, "jobs of the lost call waited for the stalled check"
    assert proxy.dropped == 1
    assert runs.started == Counter(dict.fromkeys(ids, 1))
    assert await completed_events(redis, queue_name) == Counter(dict.fromkeys(ids, 1))
    assert "recorded by a call whose reply was lost" in caplog.text
    assert "not recorded" not in caplog.text
