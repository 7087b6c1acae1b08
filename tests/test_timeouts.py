"""Per-job timeouts in each execution mode, against a real Redis (and real child processes)."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from redis.asyncio import Redis

import echomq
from echomq import (
    EchoMQError,
    InvalidOptionError,
    Job,
    JobOptions,
    JobTimeoutError,
    Worker,
    WorkerOptions,
)
from helpers import queue_key, session_of, wait_for
from procs import pool as procs

pytestmark = pytest.mark.timeout(60)

FAST: dict[str, Any] = {"drain_delay": 0.2, "stalled_interval": 5.0}


async def hash_of(r: Redis, queue: str, job_id: str) -> dict[str, str]:
    h = await r.hgetall(queue_key(queue, job_id))
    return {k.decode(): v.decode() for k, v in h.items()}


async def state_count(r: Redis, queue: str, state: str, n: int, timeout: float = 20) -> None:
    async def enough() -> bool:
        return bool(await r.zcard(queue_key(queue, state)) >= n)

    await wait_for(enough, timeout=timeout, message=f"{n} job(s) {state}")


def test_job_timeout_error_says_how_long() -> None:
    error = JobTimeoutError(30)
    assert str(error) == "timed out after 30 s" and error.timeout == 30
    assert isinstance(error, EchoMQError) and isinstance(error, TimeoutError)
    assert str(JobTimeoutError(0.25)) == "timed out after 0.25 s"


@pytest.mark.parametrize("bad", [0, -1, 0.0, timedelta(0), float("inf"), "5", True])
def test_bad_timeouts_are_refused(bad: Any) -> None:
    with pytest.raises(InvalidOptionError, match="timeout"):
        JobOptions(timeout=bad)
    with pytest.raises(InvalidOptionError, match="job_timeout"):
        WorkerOptions(job_timeout=bad)


async def test_a_bad_timeout_writes_nothing(redis: Redis, queue_name: str) -> None:
    with pytest.raises(InvalidOptionError, match="timeout must be positive"):
        await echomq.add(queue_name, "t", {}, timeout=0, connection=redis)
    assert await redis.keys(f"bull:{queue_name}:*") == []


async def test_the_timeout_is_stored_in_ms_under_a_name_node_ignores(
    redis: Redis, queue_name: str
) -> None:
    job = await echomq.add(queue_name, "t", {}, timeout=1.5, connection=redis)
    opts = json.loads((await hash_of(redis, queue_name, job.id))["opts"])
    assert opts["emqTimeout"] == 1500 and "timeout" not in opts
    assert JobOptions.from_wire(opts).timeout == 1.5
    assert JobOptions(timeout=timedelta(milliseconds=250)).to_wire()["emqTimeout"] == 250


async def test_an_async_processor_is_cancelled_at_the_deadline_and_retried(
    redis: Redis, queue_name: str
) -> None:
    cancelled: list[str] = []

    async def slow(job: Job) -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(job.id)
            raise
        return "never"

    job = await echomq.add(queue_name, "s", {}, timeout=0.3, attempts=2, connection=redis)
    started = time.monotonic()
    async with Worker(queue_name, slow, connection=redis, **FAST):
        await state_count(redis, queue_name, "failed", 1)
    assert time.monotonic() - started < 10
    h = await hash_of(redis, queue_name, job.id)
    assert (h["failedReason"], h["atm"]) == ("timed out after 0.3 s", "2")
    assert "JobTimeoutError" in json.loads(h["stacktrace"])[0]
    assert cancelled == [job.id, job.id]


async def test_a_processor_raising_timeout_error_itself_is_no_timeout(
    redis: Redis, queue_name: str
) -> None:
    async def raises(job: Job) -> None:
        raise TimeoutError("upstream timed out")

    job = await echomq.add(queue_name, "s", {}, timeout=5, connection=redis)
    async with Worker(queue_name, raises, connection=redis, **FAST):
        await state_count(redis, queue_name, "failed", 1)
    assert (await hash_of(redis, queue_name, job.id))["failedReason"] == "upstream timed out"


async def test_the_worker_default_applies_and_the_jobs_own_timeout_wins(
    redis: Redis, queue_name: str
) -> None:
    async def nap(job: Job) -> str:
        await asyncio.sleep(job.data["s"])
        return "ok"

    short = await echomq.add(queue_name, "short", {"s": 5}, connection=redis)
    own = await echomq.add(queue_name, "own", {"s": 0.5}, timeout=10, connection=redis)
    async with Worker(queue_name, nap, connection=redis, concurrency=2, job_timeout=0.2, **FAST):
        await state_count(redis, queue_name, "failed", 1)
        await state_count(redis, queue_name, "completed", 1)
    assert (await hash_of(redis, queue_name, short.id))["failedReason"] == "timed out after 0.2 s"
    assert (await hash_of(redis, queue_name, own.id))["returnvalue"] == '"ok"'


async def test_a_pool_child_is_killed_at_the_deadline_and_replaced(
    redis: Redis, queue_name: str
) -> None:
    job = await echomq.add(queue_name, "s", {"seconds": 30}, timeout=0.5, connection=redis)
    worker = Worker(queue_name, procs.sleep, connection=redis, processes=1, **FAST)
    async with worker:
        await wait_for(
            lambda: session_of(worker).pool is not None and session_of(worker).pool.pids, timeout=20
        )
        assert session_of(worker).pool is not None
        first = session_of(worker).pool.pids
        await state_count(redis, queue_name, "failed", 1)
        await wait_for(
            lambda: session_of(worker).pool is not None and session_of(worker).pool.pids, timeout=20
        )
        assert session_of(worker).pool.pids != first
        quick = await echomq.add(queue_name, "q", {"seconds": 0}, connection=redis)
        await state_count(redis, queue_name, "completed", 1)
    h = await hash_of(redis, queue_name, job.id)
    assert h["failedReason"] == "timed out after 0.5 s"
    assert int(h["finishedOn"]) - int(h["processedOn"]) < 5000
    assert (await hash_of(redis, queue_name, quick.id))["returnvalue"] == '"slept"'


async def test_thread_mode_fails_the_job_frees_the_slot_and_says_the_thread_runs(
    redis: Redis, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    release = threading.Event()
    ran: list[str] = []

    def stuck(job: Job) -> str:
        if job.name == "stuck":
            release.wait(20)
        ran.append(job.name)
        return job.name

    caplog.set_level(logging.WARNING, logger="echomq.worker")
    stuck_job = await echomq.add(queue_name, "stuck", {}, timeout=0.3, connection=redis)
    await echomq.add(queue_name, "next", {}, connection=redis)
    try:
        async with Worker(queue_name, stuck, connection=redis, concurrency=1, **FAST):
            await state_count(redis, queue_name, "failed", 1)
            await state_count(redis, queue_name, "completed", 1)  # the slot was freed
            assert ran == ["next"]
    finally:
        release.set()
    assert (await hash_of(redis, queue_name, stuck_job.id))["failedReason"] == (
        "timed out after 0.3 s"
    )
    assert any(
        f"job={stuck_job.id} timed out after 0.3 s" in r.getMessage()
        and "still running" in r.getMessage()
        for r in caplog.records
    )


async def test_thread_mode_warns_at_start_up_when_a_timeout_is_set(
    redis: Redis, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    def sync(job: Job) -> None:
        return None

    async def run_async(job: Job) -> None:
        return None

    caplog.set_level(logging.WARNING, logger="echomq.worker")
    async with Worker(queue_name, run_async, connection=redis, job_timeout=5, **FAST):
        pass
    assert not [r for r in caplog.records if "cannot be stopped" in r.getMessage()]
    async with Worker(queue_name, sync, connection=redis, job_timeout=5, **FAST):
        await wait_for(
            lambda: [r for r in caplog.records if "cannot be stopped" in r.getMessage()],
            timeout=5,
        )


async def test_a_pooled_jobs_deadline_starts_when_a_child_takes_it(
    redis: Redis, queue_name: str
) -> None:
    await echomq.add_bulk(
        queue_name,
        [("s", {"seconds": 0.5}, {"timeout": 0.9}) for _ in range(2)],
        connection=redis,
    )
    async with Worker(
        queue_name, procs.sleep, connection=redis, processes=1, concurrency=2, **FAST
    ):
        await state_count(redis, queue_name, "completed", 2)  # the second waited ~0.5 s first
    assert await redis.zcard(queue_key(queue_name, "failed")) == 0


async def test_a_pool_larger_than_concurrency_is_reported_at_start_up(
    redis: Redis, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="echomq.worker")
    options = WorkerOptions(processes=2, **FAST)  # concurrency stays 1
    async with Worker(queue_name, procs.pid, connection=redis, options=options):
        await wait_for(
            lambda: [r for r in caplog.records if "only 1 child process(es)" in r.getMessage()],
            timeout=10,
        )
