"""Workers fail fast at start-up with ``connect_timeout`` (``echomq worker --fail-fast``): a
closed port, a silent server, an unknown host or wrong credentials end ``run()`` (or the
command, with exit code 1 and the reason on stderr) instead of being retried for ever; without
it, or once started, the worker keeps retrying as before."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis.asyncio import Redis

import echomq
from echomq import RedisUnavailableError, Worker
from echomq.embedded import RedisServer
from echomq.worker import WorkerState
from helpers import wait_for
from test_fail_fast import SilentServer


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


@pytest.fixture
def silent() -> Iterator[SilentServer]:
    server = SilentServer()
    try:
        yield server
    finally:
        server.close()


async def noop(job: echomq.Job) -> None:
    return None


async def test_closed_port_fails_at_once(closed_port: int) -> None:
    worker = Worker("q", noop, connection=f"redis://127.0.0.1:{closed_port}", connect_timeout=1)
    began = time.monotonic()
    with pytest.raises(RedisUnavailableError, match="worker for queue 'q' cannot start") as exc:
        await worker.run()
    assert time.monotonic() - began < 1.5
    assert f"127.0.0.1:{closed_port}" in str(exc.value)
    assert worker.state is WorkerState.CLOSED


async def test_silent_server_fails_within_the_timeout(silent: SilentServer) -> None:
    worker = Worker("q", noop, connection=f"redis://127.0.0.1:{silent.port}", connect_timeout=0.5)
    began = time.monotonic()
    with pytest.raises(RedisUnavailableError):
        async with worker:
            pass
    assert time.monotonic() - began < 0.5 + 1.0


async def test_silent_server_with_a_client_you_pass(silent: SilentServer) -> None:
    client = Redis(port=silent.port, socket_connect_timeout=30, socket_timeout=30)
    try:
        worker = Worker("q", noop, connection=client, connect_timeout=0.4)
        began = time.monotonic()
        with pytest.raises(RedisUnavailableError, match="did not answer within"):
            await worker.run()
        assert time.monotonic() - began < 1.5
    finally:
        await client.aclose()


async def test_unknown_host_and_wrong_credentials(redis_url: str) -> None:
    unknown = Worker("q", noop, connection="redis://no-such-host.invalid:6379", connect_timeout=3)
    with pytest.raises(RedisUnavailableError, match="no-such-host.invalid"):
        await unknown.run()
    wrong = redis_url.replace("redis://", "redis://nobody:secret@")
    refused = Worker("q", noop, connection=wrong, connect_timeout=3)
    with pytest.raises(RedisUnavailableError, match="refused the credentials"):
        await refused.run()


async def test_without_connect_timeout_the_worker_keeps_retrying(closed_port: int) -> None:
    worker = Worker("q", noop, connection=f"redis://127.0.0.1:{closed_port}")
    task = asyncio.create_task(worker.run())
    await asyncio.sleep(0.8)
    assert not task.done() and worker.state is WorkerState.RUNNING
    await worker.close()
    await task


async def test_a_reachable_server_starts_as_usual(redis: Redis, queue_name: str) -> None:
    job = await echomq.add(queue_name, "j", {}, connection=redis)
    async with Worker(queue_name, noop, connection=redis, connect_timeout=2, drain_delay=0.2):

        async def done() -> bool:
            return str(await echomq.get_state(queue_name, job.id, connection=redis)) == "completed"

        await wait_for(done, timeout=5)


def run_cli(tmp_path: Path, *args: str) -> tuple[int, str, float]:
    (tmp_path / "ff_procs.py").write_text("def process(job):\n    return 1\n")
    env = {k: v for k, v in os.environ.items() if k != "ECHOMQ_REDIS_URL"}
    began = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "echomq.cli", "worker", "ff_procs:process", "--queue", "q", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        timeout=30,
    )
    return proc.returncode, proc.stderr.decode(), time.monotonic() - began


def test_cli_fail_fast_on_a_closed_port(tmp_path: Path, closed_port: int) -> None:
    url = f"redis://127.0.0.1:{closed_port}"
    code, err, _ = run_cli(tmp_path, "--url", url, "--fail-fast")
    assert code == 1, err
    assert "echomq: error: worker for queue 'q' cannot start: " in err
    assert f"127.0.0.1:{closed_port}" in err


def test_cli_fail_fast_on_a_silent_server(tmp_path: Path, silent: SilentServer) -> None:
    url = f"redis://127.0.0.1:{silent.port}"
    code, err, took = run_cli(tmp_path, "--url", url, "--fail-fast", "--connect-timeout", "0.5")
    assert code == 1, err
    assert "cannot start" in err and "connect_timeout=0.5" in err
    assert took < 10  # the interpreter's start-up plus the budget, not a retry loop


def test_connect_timeout_must_be_positive(redis_url: str) -> None:
    with pytest.raises(echomq.InvalidOptionError, match="connect_timeout must be positive"):
        Worker("q", noop, connection=redis_url, connect_timeout=0)


def test_a_cli_worker_without_redis_says_so_once_and_starts_when_redis_comes(
    tmp_path: Path, closed_port: int
) -> None:
    """Through the real CLI: with nothing listening, the worker logs one WARNING naming the
    address (again only every 30 s) and does not say it started; once a Redis answers on that
    port, it starts within about a second and runs jobs."""
    (tmp_path / "late_procs.py").write_text("def process(job):\n    return job.data['x'] * 2\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ECHOMQ_")}
    url = f"redis://127.0.0.1:{closed_port}/0"
    log_path = tmp_path / "worker.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "echomq.cli", "worker", "late_procs:process"]
            + ["--queue", "late", "--url", url, "--log-level", "DEBUG"],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    server = RedisServer(port=closed_port, data_dir=tmp_path / "redis")
    try:
        began = time.monotonic()
        # several connect attempts, all refused (a DEBUG line each)
        while f"connecting to Redis at {url} failed (attempt 6)" not in log_path.read_text():
            assert time.monotonic() - began < 20, log_path.read_text()
            assert proc.poll() is None, log_path.read_text()
            time.sleep(0.02)
        text = log_path.read_text()
        waiting = [line for line in text.splitlines() if "cannot reach Redis at" in line]
        assert len(waiting) == 1, text
        assert f"127.0.0.1:{closed_port}" in waiting[0] and "starts once it answers" in waiting[0]
        assert "started on queue" not in text
        assert "stalled check failed" not in text and "control channel" not in text
        server.start()
        began = time.monotonic()
        while "started on queue late" not in log_path.read_text():
            assert time.monotonic() - began < 5, log_path.read_text()
            assert proc.poll() is None, log_path.read_text()
            time.sleep(0.02)
        assert time.monotonic() - began < 2.5  # tries at most every second
        job = asyncio.run(echomq.add("late", "double", {"x": 21}, connection=server.url))

        async def state() -> str:
            return str(await echomq.get_state("late", job.id, connection=server.url))

        while asyncio.run(state()) != "completed":
            assert time.monotonic() - began < 15, log_path.read_text()
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        server.stop()
    assert proc.returncode == 0, log_path.read_text()
