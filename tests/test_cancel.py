"""Cancelling running jobs: in the worker's process, and from another process through the
queue's control channel; async and sync processors; fail or requeue; unknown jobs."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

import echomq
import echomq.sync
from echomq import Job, JobCancelledError, Queue, Worker
from helpers import session_of, wait_for

FAST: dict[str, Any] = {"drain_delay": 0.2, "stalled_interval": 5.0}


async def state_of(redis: Redis, queue: str, job_id: str) -> str:
    return str(await echomq.get_state(queue, job_id, connection=redis))


async def test_cancel_async_job_fails_it_with_the_reason(redis: Redis, queue_name: str) -> None:
    job = await echomq.add(queue_name, "long", {}, connection=redis, attempts=3)
    started = asyncio.Event()
    saw: list[str] = []

    async def long(job: Job) -> str:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            saw.append("cancelled")
            raise
        return "never"

    async with Worker(queue_name, long, connection=redis, **FAST) as worker:
        await asyncio.wait_for(started.wait(), 5)
        assert await worker.cancel_job(job.id, "user asked") is True
        await wait_for(lambda: state_of(redis, queue_name, job.id), timeout=5)
        await wait_for(
            lambda: _is(redis, queue_name, job.id, "failed"), timeout=5, message="not failed"
        )
        assert await worker.cancel_job(job.id) is False  # finished: nothing to cancel
    assert saw == ["cancelled"]
    h = await redis.hgetall(f"bull:{queue_name}:{job.id}")
    assert h[b"failedReason"] == b"user asked"
    assert h[b"atm"] == b"1"  # no retry although attempts=3
    assert b"JobCancelledError" in h[b"stacktrace"]


async def _is(redis: Redis, queue: str, job_id: str, state: str) -> bool:
    return await state_of(redis, queue, job_id) == state


async def test_cancel_with_requeue_puts_the_job_back_in_wait(redis: Redis, queue_name: str) -> None:
    job = await echomq.add(queue_name, "long", {}, connection=redis)
    runs = 0
    started = asyncio.Event()

    async def long(job: Job) -> str:
        nonlocal runs
        runs += 1
        started.set()
        await asyncio.sleep(30)
        return "never"

    worker = Worker(queue_name, long, connection=redis, **FAST)
    async with worker:
        await asyncio.wait_for(started.wait(), 5)
        await worker.pause(wait_for_active=False)  # so the job is not taken again at once
        assert await worker.cancel_job(job.id, "later", requeue=True) is True
        await wait_for(lambda: _is(redis, queue_name, job.id, "waiting"), timeout=5)
    assert runs == 1
    h = await redis.hgetall(f"bull:{queue_name}:{job.id}")
    assert h.get(b"atm", b"0") == b"0"  # the attempt is not counted
    assert not await redis.exists(f"bull:{queue_name}:{job.id}:lock")


async def test_sync_processor_sees_the_flag_and_raises(redis: Redis, queue_name: str) -> None:
    job = await echomq.add(queue_name, "steps", {}, connection=redis)
    started = threading.Event()
    stopped = threading.Event()
    steps: list[int] = []

    def steps_processor(job: echomq.sync.Job) -> str:
        started.set()
        for i in range(300):
            job.raise_if_cancelled()
            steps.append(i)
            time.sleep(0.01)
        return "all steps"

    def stopped_at_flag(job: echomq.sync.Job) -> str:
        try:
            return steps_processor(job)
        except JobCancelledError:
            stopped.set()
            raise

    async with Worker(queue_name, stopped_at_flag, connection=redis, **FAST) as worker:
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 5)
        assert await worker.cancel_job(job.id, "stop now") is True
        await wait_for(lambda: _is(redis, queue_name, job.id, "failed"), timeout=5)
        await asyncio.get_running_loop().run_in_executor(None, stopped.wait, 5)
    assert stopped.is_set()
    assert len(steps) < 300
    assert await redis.hget(f"bull:{queue_name}:{job.id}", "failedReason") == b"stop now"


async def test_unknown_waiting_and_finished_jobs_return_false(
    redis: Redis, queue_name: str, redis_url: str
) -> None:
    waiting = await echomq.add(queue_name, "w", {}, connection=redis)
    worker = Worker(queue_name, lambda job: None, connection=redis, **FAST)
    assert await worker.cancel_job("no-such-job") is False  # never run
    assert await worker.cancel_all_jobs() == 0
    async with Queue(queue_name, connection=redis_url) as queue:
        assert await queue.cancel_job("no-such-job") is False
        assert await queue.cancel_job(waiting.id) is False  # not held by anyone
        async with worker:
            await wait_for(lambda: _is(redis, queue_name, waiting.id, "completed"), timeout=5)
            assert await worker.cancel_job(waiting.id) is False
            assert await queue.cancel_job(waiting.id) is False  # finished: nothing sent
    assert await redis.hget(f"bull:{queue_name}:{waiting.id}", "returnvalue") == b"null"


async def test_cancel_all_jobs(redis: Redis, queue_name: str) -> None:
    jobs = await echomq.add_bulk(queue_name, [("j", {}) for _ in range(3)], connection=redis)
    running = 0
    all_started = asyncio.Event()

    async def long(job: Job) -> None:
        nonlocal running
        running += 1
        if running == 3:
            all_started.set()
        await asyncio.sleep(30)

    async with Worker(queue_name, long, connection=redis, concurrency=3, **FAST) as worker:
        await asyncio.wait_for(all_started.wait(), 5)
        assert await worker.cancel_all_jobs("shutdown of a feature") == 3
        for job in jobs:
            await wait_for(lambda j=job: _is(redis, queue_name, j.id, "failed"), timeout=5)  # type: ignore[misc]
    reasons = {await redis.hget(f"bull:{queue_name}:{j.id}", "failedReason") for j in jobs}
    assert reasons == {b"shutdown of a feature"}


CANCEL_FROM_ANOTHER_PROCESS = """
import asyncio, sys
import echomq

async def main() -> None:
    url, queue, job_id = sys.argv[1:4]
    async with echomq.Queue(queue, connection=url) as q:
        print(await q.cancel_job(job_id, "from another process"))

asyncio.run(main())
"""


async def test_cancel_from_another_process_reaches_the_worker_within_a_second(
    redis: Redis, queue_name: str, redis_url: str
) -> None:
    job = await echomq.add(queue_name, "long", {}, connection=redis)
    started = asyncio.Event()

    async def long(job: Job) -> None:
        started.set()
        await asyncio.sleep(30)

    async with Worker(queue_name, long, connection=redis, **FAST) as worker:
        await asyncio.wait_for(started.wait(), 5)
        await asyncio.wait_for(session_of(worker).control.ready.wait(), 5)
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            CANCEL_FROM_ANOTHER_PROCESS,
            redis_url,
            queue_name,
            job.id,
            stdout=subprocess.PIPE,
        )
        out, _ = await asyncio.wait_for(proc.communicate(), 20)
        sent = time.monotonic()
        assert out.decode().strip() == "True"
        await wait_for(lambda: _is(redis, queue_name, job.id, "failed"), timeout=5)
        assert time.monotonic() - sent < 1.0
    reason = await redis.hget(f"bull:{queue_name}:{job.id}", "failedReason")
    assert reason == b"from another process"


async def test_sync_queue_cancel_job_requeues(
    redis: Redis, queue_name: str, redis_url: str
) -> None:
    job = await echomq.add(queue_name, "long", {}, connection=redis)
    started = asyncio.Event()
    runs = 0

    async def long(job: Job) -> None:
        nonlocal runs
        runs += 1
        started.set()
        await asyncio.sleep(30)

    async with Worker(queue_name, long, connection=redis, **FAST) as worker:
        await asyncio.wait_for(started.wait(), 5)
        await asyncio.wait_for(session_of(worker).control.ready.wait(), 5)
        await worker.pause(wait_for_active=False)

        def cancel() -> bool:
            with echomq.sync.Queue(queue_name, connection=redis_url) as q:
                return q.cancel_job(job.id, requeue=True)

        assert await asyncio.get_running_loop().run_in_executor(None, cancel) is True
        await wait_for(lambda: _is(redis, queue_name, job.id, "waiting"), timeout=5)
    assert runs == 1


async def test_malformed_control_messages_are_ignored(redis: Redis, queue_name: str) -> None:
    job = await echomq.add(queue_name, "long", {}, connection=redis)
    started = asyncio.Event()

    async def long(job: Job) -> str:
        started.set()
        await asyncio.sleep(0.5)
        return "done"

    async with Worker(queue_name, long, connection=redis, **FAST) as worker:
        await asyncio.wait_for(started.wait(), 5)
        await asyncio.wait_for(session_of(worker).control.ready.wait(), 5)
        channel = f"bull:{queue_name}:echomq:control"
        for message in (b"not json", b"[]", b'{"op":"reboot"}', b'{"op":"cancel"}'):
            assert await redis.publish(channel, message) == 1
        await wait_for(lambda: _is(redis, queue_name, job.id, "completed"), timeout=5)
        assert worker.state.value == "running"


async def test_cancel_in_a_process_pool_kills_the_child(
    redis: Redis, queue_name: str, tmp_path: Path
) -> None:
    from procs import pool as procs

    pidfile, release = tmp_path / "pid", tmp_path / "release"
    job = await echomq.add(
        queue_name,
        "held",
        {"pidfile": str(pidfile), "release": str(release)},
        connection=redis,
    )
    worker = Worker(queue_name, procs.wait_for_file, connection=redis, processes=1, **FAST)
    async with worker:
        await wait_for(pidfile.exists, timeout=20)
        child = int(pidfile.read_text())
        assert await worker.cancel_job(job.id, "killed by a cancel") is True
        await wait_for(lambda: _is(redis, queue_name, job.id, "failed"), timeout=10)
        await wait_for(lambda: not _alive(child), timeout=10)
    assert await redis.hget(f"bull:{queue_name}:{job.id}", "failedReason") == b"killed by a cancel"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a killed child not yet reaped by its parent is a zombie
    with contextlib.suppress(OSError):
        if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            return False
    return True


async def test_a_processor_that_swallows_the_cancel_still_ends_cancelled(
    redis: Redis, queue_name: str
) -> None:
    first = await echomq.add(queue_name, "stubborn", {}, connection=redis)
    started = asyncio.Event()

    async def stubborn(job: Job) -> str:
        if job.id != first.id:
            await asyncio.sleep(0.01)  # the task must not carry a stale cancel into this job
            return "next ok"
        started.set()
        with contextlib.suppress(asyncio.CancelledError):  # swallowed
            await asyncio.sleep(30)
        return "swallowed"

    async with Worker(queue_name, stubborn, connection=redis, **FAST) as worker:
        await asyncio.wait_for(started.wait(), 5)
        assert await worker.cancel_job(first.id, "no means no") is True
        await wait_for(lambda: _is(redis, queue_name, first.id, "failed"), timeout=5)
        second = await echomq.add(queue_name, "next", {}, connection=redis)
        await wait_for(lambda: _is(redis, queue_name, second.id, "completed"), timeout=5)
    assert await redis.hget(f"bull:{queue_name}:{first.id}", "failedReason") == b"no means no"
