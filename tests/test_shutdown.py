"""A shutdown that keeps its promise: held jobs go back to wait at the end of the grace period,
results that arrive before then are recorded, and ``echomq worker`` exits within its bound
with a documented code even when a sync processor's thread will not stop (real processes)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

import echomq
import echomq.sync
from echomq import Job, Worker
from echomq.worker._session import Session
from helpers import wait_for

FAST: dict[str, Any] = {"drain_delay": 0.2, "stalled_interval": 5.0}


async def _is(redis: Redis, queue: str, job_id: str, state: str) -> bool:
    return str(await echomq.get_state(queue, job_id, connection=redis)) == state


async def test_async_job_past_the_grace_goes_back_to_wait_at_once(
    redis: Redis, queue_name: str
) -> None:
    job = await echomq.add(queue_name, "long", {}, connection=redis)
    started = asyncio.Event()

    async def long(job: Job) -> None:
        started.set()
        await asyncio.sleep(30)

    worker = Worker(queue_name, long, connection=redis, close_grace=0.3, **FAST)
    async with worker:
        await asyncio.wait_for(started.wait(), 5)
        begun = time.monotonic()
        await worker.close()
        took = time.monotonic() - begun
    assert took < 2.0
    assert await _is(redis, queue_name, job.id, "waiting")
    assert not await redis.exists(f"bull:{queue_name}:{job.id}:lock")
    assert worker.abandoned_job_ids == []


async def test_result_arriving_within_the_grace_is_recorded(redis: Redis, queue_name: str) -> None:
    job = await echomq.add(queue_name, "short", {}, connection=redis)
    started = threading.Event()

    def short(job: echomq.sync.Job) -> str:
        started.set()
        time.sleep(0.6)
        return "kept"

    worker = Worker(queue_name, short, connection=redis, close_grace=5, **FAST)
    async with worker:
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 5)
        await worker.close()  # the job ends during the grace period
    assert await _is(redis, queue_name, job.id, "completed")
    assert await redis.hget(f"bull:{queue_name}:{job.id}", "returnvalue") == b'"kept"'


async def test_close_while_a_job_records_its_own_outcome_returns_promptly(
    redis: Redis, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The last job's finish call, made from its own task, is in flight when close() starts:
    close() records it and returns, without waiting out the finish deadline."""
    job = await echomq.add(queue_name, "only", {}, connection=redis)
    in_call, release = asyncio.Event(), asyncio.Event()
    call = Session.call

    async def held(self: Session, items: list[Any], fetch: int, outages: Any = None) -> Any:
        if items:  # the outcome of the only job, recorded by its own task
            in_call.set()
            await release.wait()
        return await call(self, items, fetch, outages)

    monkeypatch.setattr(Session, "call", held)
    worker = Worker(queue_name, lambda j: "done", connection=redis, **FAST)
    runner = asyncio.create_task(worker.run())
    await asyncio.wait_for(in_call.wait(), 5)
    closing = asyncio.create_task(worker.close())
    await asyncio.sleep(0.2)
    release.set()
    started = time.monotonic()
    await asyncio.wait_for(closing, 5)
    assert time.monotonic() - started < 3
    await runner
    assert await _is(redis, queue_name, job.id, "completed")


async def test_sync_thread_past_the_grace_is_told_and_reported(
    redis: Redis, queue_name: str
) -> None:
    job = await echomq.add(queue_name, "stubborn", {}, connection=redis)
    started = threading.Event()
    release = threading.Event()
    saw_cancelled: list[bool] = []

    def stubborn(job: echomq.sync.Job) -> str:
        started.set()
        release.wait(10)
        saw_cancelled.append(job.cancelled)
        return "too late"

    worker = Worker(queue_name, stubborn, connection=redis, close_grace=0.3, **FAST)
    async with worker:
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 5)
        await worker.close()
        assert worker.abandoned_job_ids == [job.id]
    assert await _is(redis, queue_name, job.id, "waiting")
    release.set()
    await wait_for(lambda: worker.abandoned_job_ids == [], timeout=5)
    assert saw_cancelled == [True]
    assert await _is(redis, queue_name, job.id, "waiting")  # its late result was discarded


# -- the CLI ----------------------------------------------------------------------------------

MODULE = textwrap.dedent(
    """
    import os
    import pathlib
    import time

    if os.environ.get("SLOW_IMPORT"):
        pathlib.Path(os.environ["MARKER"] + ".importing").write_text("")
        time.sleep(float(os.environ["SLOW_IMPORT"]))

    def sleepy(job):
        pathlib.Path(os.environ["MARKER"]).write_text(job.id)
        time.sleep(job.data["seconds"])
        return "slept"
    """
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "shutdown_procs.py").write_text(MODULE)
    return tmp_path


@pytest.fixture
def start(
    project: Path, redis_url: str, queue_name: str
) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    procs: list[subprocess.Popen[bytes]] = []

    def run(*extra: str, **env: str) -> subprocess.Popen[bytes]:
        log = open(project / "worker.log", "wb")  # noqa: SIM115
        environ = {k: v for k, v in os.environ.items() if k != "ECHOMQ_REDIS_URL"}
        environ.update(MARKER=str(project / "started"), **env)
        proc = subprocess.Popen(
            [sys.executable, "-m", "echomq.cli", "worker", "shutdown_procs:sleepy"]
            + ["--queue", queue_name, "--url", redis_url, "--drain-delay", "0.5", *extra],
            cwd=project,
            env=environ,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        log.close()
        procs.append(proc)
        return proc

    try:
        yield run
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def wait_until(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


async def test_cli_exits_within_the_bound_with_code_3_and_the_job_back_in_wait(
    redis: Redis,
    queue_name: str,
    project: Path,
    start: Callable[..., subprocess.Popen[bytes]],
) -> None:
    job = await echomq.add(queue_name, "sleepy", {"seconds": 10}, connection=redis)
    proc = start("--close-grace", "1")
    marker = project / "started"
    await asyncio.to_thread(wait_until, marker.exists, "the job to start")
    signalled = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = await asyncio.to_thread(proc.wait, 10)
    took = time.monotonic() - signalled
    log = (project / "worker.log").read_text()
    assert code == 3, log
    assert took < 1 + 3, f"exited {took:.1f} s after SIGTERM"  # grace + hand-back margin
    assert "without waiting for the sync processor thread" in log
    assert job.id in log
    assert await _is(redis, queue_name, job.id, "waiting")
    assert not await redis.exists(f"bull:{queue_name}:{job.id}:lock")


async def test_cli_signal_during_a_slow_start_exits_cleanly_before_taking_a_job(
    redis: Redis,
    queue_name: str,
    project: Path,
    start: Callable[..., subprocess.Popen[bytes]],
) -> None:
    job = await echomq.add(queue_name, "sleepy", {"seconds": 0.1}, connection=redis)
    proc = start(SLOW_IMPORT="2")
    importing = project / "started.importing"
    await asyncio.to_thread(wait_until, importing.exists, "the import to begin")
    proc.send_signal(signal.SIGTERM)
    code = await asyncio.to_thread(proc.wait, 10)
    log = (project / "worker.log").read_text()
    assert code == 0, log
    assert "received SIGTERM during start-up: exiting before taking any job" in log
    assert not (project / "started").exists()
    assert await _is(redis, queue_name, job.id, "waiting")
