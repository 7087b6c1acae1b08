"""Worker hooks (called in order, never fatal), failure logs with tracebacks, the event-loop
watchdog, and the CLI's JSON log format."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

import echomq
import echomq.sync
from echomq import Job, Worker
from helpers import wait_for

FAST: dict[str, Any] = {"drain_delay": 0.2, "stalled_interval": 5.0}


async def test_hooks_fire_in_order(redis: Redis, queue_name: str) -> None:
    job = await echomq.add(queue_name, "ok", {"x": 2}, connection=redis)
    seen: list[tuple[Any, ...]] = []

    async def process(job: Job) -> int:
        await job.update_progress(50)
        return int(job.data["x"]) * 2

    worker = Worker(queue_name, process, connection=redis, **FAST)
    worker.on("active", lambda j: seen.append(("active", j.id)))
    worker.on("progress", lambda j, p: seen.append(("progress", j.id, p)))
    worker.on("completed", lambda j, value: seen.append(("completed", j.id, value)))
    worker.on("completed", lambda j, value: seen.append(("completed-2", j.id)))
    worker.on("drained", lambda: seen.append(("drained",)))
    worker.on("closing", lambda: seen.append(("closing",)))
    worker.on("closed", lambda: seen.append(("closed",)))
    async with worker:
        await wait_for(lambda: ("drained",) in seen and len(seen) >= 5, timeout=5)
    assert seen == [
        ("active", job.id),
        ("progress", job.id, 50),
        ("completed", job.id, 4),
        ("completed-2", job.id),
        ("drained",),
        ("closing",),
        ("closed",),
    ]


async def test_failed_hook_gets_the_exception_for_each_attempt(
    redis: Redis, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    job = await echomq.add(queue_name, "bad", {}, connection=redis, attempts=2)
    failures: list[tuple[str, int, BaseException]] = []

    def bad(job: echomq.sync.Job) -> None:
        raise KeyError("missing thing")

    worker = Worker(queue_name, bad, connection=redis, **FAST)
    worker.on("failed", lambda j, exc: failures.append((j.id, j.attempts_made, exc)))
    with caplog.at_level(logging.INFO, logger="echomq.worker"):
        async with worker:
            await wait_for(lambda: len(failures) == 2, timeout=5)
    assert [(i, type(e)) for i, _, e in failures] == [(job.id, KeyError), (job.id, KeyError)]
    records = [r for r in caplog.records if f"job={job.id}" in r.getMessage()]
    failed = [r for r in records if r.getMessage().split()[4] in ("retry", "failed")]
    assert [r.levelno for r in failed] == [logging.WARNING, logging.WARNING]
    retry, final = failed  # only the final failure carries the traceback
    assert retry.exc_info is None and final.exc_info and final.exc_info[0] is KeyError
    assert caplog.text.count("raise KeyError") == 1  # the traceback is in the log, once


async def test_a_raising_hook_is_logged_and_the_others_still_run(
    redis: Redis, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    await echomq.add_bulk(queue_name, [("ok", {}), ("ok", {})], connection=redis)
    done: list[str] = []

    def broken(job: Job, value: Any) -> None:
        raise RuntimeError("hook bug")

    async def async_hook(job: Job, value: Any) -> None:
        await asyncio.sleep(0)
        done.append(job.id)

    async def broken_async(job: Job) -> None:
        raise ValueError("async hook bug")

    worker = Worker(queue_name, lambda job: "v", connection=redis, **FAST)
    worker.on("completed", broken)
    worker.on("completed", async_hook)
    worker.on("active", broken_async)
    async with worker:
        await wait_for(lambda: len(done) == 2, timeout=5)
        assert worker.is_running
    assert "worker hook" in caplog.text and "hook bug" in caplog.text
    assert "async hook bug" in caplog.text
    assert await redis.zcard(f"bull:{queue_name}:completed") == 2


def test_unknown_event_and_bad_callback_are_refused(redis_url: str) -> None:
    worker = Worker("hooks-refused", lambda job: None, connection=redis_url)
    with pytest.raises(ValueError, match="unknown worker event 'done'"):
        worker.on("done", lambda: None)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="must be callable"):
        worker.on("closed", 42)  # type: ignore[call-overload]
    hook = worker.on("closed", lambda: None)
    assert worker.off("closed", hook) is True
    assert worker.off("closed", hook) is False


async def test_lock_renewal_failed_and_stalled_hooks(redis: Redis, queue_name: str) -> None:
    # A job another worker took and then lost: the stalled check of ours recovers it.
    lost = await echomq.add(queue_name, "lost", {}, connection=redis)
    taker = Worker(queue_name, None, connection=redis)
    taken = await taker.get_next_job("dead-worker-token", block=False)
    assert taken is not None and taken.id == lost.id
    await redis.delete(f"bull:{queue_name}:{lost.id}:lock")
    await taker.close()

    stalled: list[str] = []
    renewal_failed: list[list[str]] = []
    started = asyncio.Event()

    async def long(job: Job) -> None:
        started.set()
        await asyncio.sleep(3)

    worker = Worker(
        queue_name, long, connection=redis, lock_duration=1.0, stalled_interval=0.3, drain_delay=0.2
    )
    worker.on("stalled", stalled.append)
    worker.on("lock_renewal_failed", renewal_failed.append)
    async with worker:
        await wait_for(lambda: stalled == [lost.id], timeout=5)
        await asyncio.wait_for(started.wait(), 5)
        running = await redis.lrange(f"bull:{queue_name}:active", 0, -1)
        assert running == [lost.id.encode()]
        await redis.delete(f"bull:{queue_name}:{lost.id}:lock")  # as if it expired
        await wait_for(lambda: renewal_failed, timeout=5)
        await worker.close(force=True)
    assert renewal_failed[0] == [lost.id]


async def test_watchdog_names_the_job_that_blocked_the_loop(
    redis: Redis, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    job = await echomq.add(queue_name, "cpu", {}, connection=redis)

    async def hog(job: Job) -> str:
        time.sleep(0.8)  # blocks the event loop: what the watchdog is for
        return "done"

    worker = Worker(queue_name, hog, connection=redis, lock_duration=2.0, **FAST)
    async with worker:
        await wait_for(lambda: redis.zscore(f"bull:{queue_name}:completed", job.id), timeout=5)
        await asyncio.sleep(0.3)
    warnings = [r for r in caplog.records if "blocked the event loop" in r.getMessage()]
    assert warnings, caplog.text
    message = warnings[0].getMessage()
    assert "processor test_watchdog_names_the_job_that_blocked_the_loop.<locals>.hog" in message
    assert f"(job {job.id})" in message and "use a sync def, asyncio.to_thread" in message
    assert warnings[0].levelno == logging.WARNING


async def test_no_watchdog_warning_for_a_well_behaved_processor(
    redis: Redis, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    await echomq.add_bulk(queue_name, [("ok", {}) for _ in range(20)], connection=redis)

    async def polite(job: Job) -> None:
        await asyncio.sleep(0.01)

    async with Worker(queue_name, polite, connection=redis, lock_duration=2.0, **FAST):
        await wait_for(lambda: _count(redis, f"bull:{queue_name}:completed", 20), timeout=10)
    assert "blocked the event loop" not in caplog.text


async def _count(redis: Redis, key: str, n: int) -> bool:
    return bool(await redis.zcard(key) >= n)


JSON_MODULE = textwrap.dedent(
    """
    def process(job):
        if job.data.get("fail"):
            raise ValueError("bad input")
        return "ok"
    """
)


async def test_cli_json_log_format(
    redis: Redis, redis_url: str, queue_name: str, tmp_path: Path
) -> None:
    (tmp_path / "json_procs.py").write_text(JSON_MODULE)
    ok = await echomq.add(queue_name, "ok", {}, connection=redis)
    bad = await echomq.add(queue_name, "bad", {"fail": True}, connection=redis)
    env = {k: v for k, v in os.environ.items() if k != "ECHOMQ_REDIS_URL"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "echomq.cli", "worker", "json_procs:process", "--queue"]
        + [queue_name, "--url", redis_url, "--drain-delay", "0.3", "--log-format", "json"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        await wait_for(lambda: _count(redis, f"bull:{queue_name}:failed", 1), timeout=15)
        await wait_for(lambda: _count(redis, f"bull:{queue_name}:completed", 1), timeout=15)
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.to_thread(proc.communicate, timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    lines = [json.loads(line) for line in err.decode().splitlines() if line.strip()]
    assert all({"time", "level", "logger", "message"} <= set(line) for line in lines)
    by_job = {line.get("job_id"): line for line in lines if line.get("status")}
    assert by_job[ok.id]["status"] == "completed" and by_job[ok.id]["level"] == "INFO"
    assert by_job[bad.id]["status"] == "failed" and by_job[bad.id]["level"] == "WARNING"
    assert "ValueError: bad input" in by_job[bad.id]["exc_info"]


async def test_error_hook_gets_the_worker_own_errors(redis: Redis, queue_name: str) -> None:
    await redis.set(f"bull:{queue_name}:meta", "not a hash")  # every fetch now fails
    errors: list[BaseException] = []
    worker = Worker(queue_name, lambda job: None, connection=redis, **FAST)
    worker.on("error", errors.append)
    async with worker:
        await wait_for(lambda: errors, timeout=5)
        await redis.delete(f"bull:{queue_name}:meta")
        job = await echomq.add(queue_name, "after", {}, connection=redis)
        await wait_for(lambda: redis.zscore(f"bull:{queue_name}:completed", job.id), timeout=10)
    assert "WRONGTYPE" in str(errors[0])


async def test_progress_hook_from_a_sync_processor_thread(redis: Redis, queue_name: str) -> None:
    job = await echomq.add(queue_name, "sync", {}, connection=redis)
    seen: list[Any] = []

    def steps(job: echomq.sync.Job) -> str:
        job.update_progress(10)
        job.update_progress({"step": 2})
        return "ok"

    worker = Worker(queue_name, steps, connection=redis, **FAST)
    worker.on("progress", lambda j, p: seen.append(p))
    worker.on("completed", lambda j, value: seen.append(("completed", j.id)))
    async with worker:
        await wait_for(lambda: len(seen) == 3, timeout=5)
    assert seen == [10, {"step": 2}, ("completed", job.id)]
