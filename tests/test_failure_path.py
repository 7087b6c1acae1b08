"""A failed attempt's traceback, stored and logged: formatted once, without caret lines, starting
at the user's processor; a retried attempt logs one line, the final failure its traceback.

Against a real Redis and, for ``processes=N`` and the CLI, real child processes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import traceback
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

import echomq
from echomq import Job, Worker
from echomq._tracebacks import format_failure
from echomq.cli import main
from helpers import queue_key, wait_for
from procs import pool as procs

pytestmark = pytest.mark.timeout(60)

FAST: dict[str, Any] = {"drain_delay": 0.2, "stalled_interval": 5.0}
HERE = os.path.abspath(__file__)
POOL_PROCS = os.path.abspath(procs.__file__)
PACKAGE = os.path.dirname(os.path.abspath(echomq.__file__))


async def finished(r: Redis, queue: str, state: str, n: int = 1) -> None:
    async def enough() -> bool:
        return bool(await r.zcard(queue_key(queue, state)) >= n)

    await wait_for(enough, timeout=20, message=f"{n} job(s) {state}")


async def stacktrace_of(r: Redis, queue: str, job_id: str) -> list[str]:
    raw = await r.hget(queue_key(queue, job_id), "stacktrace")
    assert raw is not None
    traces = json.loads(raw)
    assert isinstance(traces, list)
    return traces


def first_frame(trace: str) -> str:
    lines = trace.splitlines()
    assert lines[0] == "Traceback (most recent call last):", trace
    return lines[1]


def assert_no_carets(trace: str) -> None:
    assert not [line for line in trace.splitlines() if line.strip().startswith(("^", "~"))]


def helper_that_fails(n: int) -> None:
    raise ValueError(f"bad input {n}")


async def async_processor(job: Job) -> None:
    await asyncio.sleep(0)
    helper_that_fails(job.data["n"])


def sync_processor(job: echomq.sync.Job) -> None:
    helper_that_fails(job.data["n"])


@pytest.mark.parametrize(
    ("processor", "options"),
    [
        (async_processor, {}),
        (async_processor, {"job_timeout": 5.0}),
        (sync_processor, {}),
        (sync_processor, {"job_timeout": 5.0}),  # in a thread of its own
    ],
    ids=["async", "async-timeout", "sync-thread", "sync-thread-timeout"],
)
async def test_the_stored_traceback_starts_at_the_processor(
    redis: Redis, queue_name: str, processor: Any, options: dict[str, Any]
) -> None:
    job = await echomq.add(queue_name, "t", {"n": 7}, connection=redis)
    async with Worker(queue_name, processor, connection=redis, **FAST, **options):
        await finished(redis, queue_name, "failed")
    [trace] = await stacktrace_of(redis, queue_name, job.id)
    frame = first_frame(trace)
    assert frame.startswith(f'  File "{HERE}", line ') and frame.endswith(processor.__name__)
    assert "helper_that_fails" in trace and trace.endswith("ValueError: bad input 7")
    assert PACKAGE not in trace  # no frame of echomq's above it
    assert "concurrent/futures" not in trace and "threading.py" not in trace
    assert_no_carets(trace)


async def test_a_pool_child_s_traceback_starts_at_the_processor(
    redis: Redis, queue_name: str
) -> None:
    job = await echomq.add(queue_name, "b", {}, attempts=2, connection=redis)
    async with Worker(queue_name, procs.boom, connection=redis, processes=1, **FAST):
        await finished(redis, queue_name, "failed")
    traces = await stacktrace_of(redis, queue_name, job.id)
    assert len(traces) == 2
    for attempt, trace in enumerate(traces, 1):
        assert first_frame(trace) == f'  File "{POOL_PROCS}", line 66, in boom', trace
        assert trace.endswith(f"ValueError: boom on attempt {attempt}")
        assert "_pool.py" not in trace
        assert_no_carets(trace)


async def test_the_cli_shows_the_trace_from_the_processor_on(
    redis: Redis, redis_url: str, queue_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    job = await echomq.add(queue_name, "t", {"n": 3}, connection=redis)
    async with Worker(queue_name, sync_processor, connection=redis, **FAST):
        await finished(redis, queue_name, "failed")
    command = ["queue", queue_name, "job", job.id, "--json", "--url", redis_url]
    assert await asyncio.to_thread(main, command) == 0
    [trace] = json.loads(capsys.readouterr().out)["stacktrace"]
    assert trace == (await stacktrace_of(redis, queue_name, job.id))[0]
    assert first_frame(trace).endswith("in sync_processor")


async def test_a_pool_child_with_stacktrace_limit_zero_sends_no_traceback(
    redis: Redis, queue_name: str
) -> None:
    job = await echomq.add(queue_name, "b", {}, stacktrace_limit=0, connection=redis)
    async with Worker(queue_name, procs.boom, connection=redis, processes=1, **FAST):
        await finished(redis, queue_name, "failed")
    assert await stacktrace_of(redis, queue_name, job.id) == []
    assert await redis.hget(queue_key(queue_name, job.id), "failedReason") == b"boom on attempt 1"


class ObservedError(Exception):
    """An error that notes whether its traceback was formatted: every formatter reads the
    ``__notes__`` of each exception it shows."""

    formatted = 0

    @property
    def __notes__(self) -> list[str]:  # type: ignore[override,unused-ignore]
        ObservedError.formatted += 1
        return []


async def test_stacktrace_limit_zero_stores_nothing_and_formats_nothing(
    redis: Redis, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    ObservedError.formatted = 0
    job = await echomq.add(queue_name, "z", {}, attempts=2, stacktrace_limit=0, connection=redis)

    async def fail(job: Job) -> None:
        raise ObservedError(f"attempt {job.attempts_made + 1}")

    with caplog.at_level(logging.INFO, logger="echomq.worker"):
        async with Worker(queue_name, fail, connection=redis, **FAST):
            await finished(redis, queue_name, "failed")
    assert await stacktrace_of(redis, queue_name, job.id) == []
    assert await redis.hget(queue_key(queue_name, job.id), "failedReason") == b"attempt 2"
    assert ObservedError.formatted == 0
    assert "Traceback" not in caplog.text
    # the formatter does read the notes (so the check above means something)
    assert format_failure(ObservedError("x")) == "test_failure_path.ObservedError: x"
    assert ObservedError.formatted == 1


async def test_stacktrace_limit_keeps_the_newest_traces(redis: Redis, queue_name: str) -> None:
    job = await echomq.add(queue_name, "l", {}, attempts=3, stacktrace_limit=2, connection=redis)

    async def fail(job: Job) -> None:
        raise RuntimeError(f"attempt {job.attempts_made + 1}")

    async with Worker(queue_name, fail, connection=redis, **FAST):
        await finished(redis, queue_name, "failed")
    traces = await stacktrace_of(redis, queue_name, job.id)
    assert [t.splitlines()[-1] for t in traces] == [
        "RuntimeError: attempt 2",
        "RuntimeError: attempt 3",
    ]


async def test_a_retried_attempt_logs_one_line_and_the_failure_its_traceback(
    redis: Redis, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    job = await echomq.add(queue_name, "r", {"n": 1}, attempts=2, connection=redis)
    with caplog.at_level(logging.INFO, logger="echomq.worker"):
        async with Worker(queue_name, sync_processor, connection=redis, **FAST):
            await finished(redis, queue_name, "failed")
    records = [r for r in caplog.records if getattr(r, "job_id", None) == job.id]
    assert [(r.levelno, r.status) for r in records] == [  # type: ignore[attr-defined]
        (logging.WARNING, "retry"),
        (logging.WARNING, "failed"),
    ]
    retry, failed = records
    assert retry.getMessage().endswith(": bad input 1") and "attempt=1 retry" in retry.getMessage()
    assert retry.exc_info is None and retry.exc_text is None
    assert "\n" not in logging.Formatter().format(retry)  # one line
    [_, trace] = await stacktrace_of(redis, queue_name, job.id)
    assert failed.exc_info is not None and failed.exc_info[0] is ValueError
    assert failed.exc_text == trace  # the text stored with the job, not formatted again
    assert logging.Formatter().format(failed).endswith("\n" + trace)
    assert caplog.text.count("Traceback") == 1
    extra = {"queue", "job_id", "job_name", "attempt", "status", "duration"}
    assert all(extra <= set(vars(r)) for r in records)
    assert (retry.attempt, failed.attempt) == (1, 2)  # type: ignore[attr-defined]


def python_without_carets(error: BaseException) -> str:
    text = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    lines = text.rstrip("\n").split("\n")
    return "\n".join(line for line in lines if not (line.strip() and not line.strip(" ^~")))


def test_chained_exceptions_read_as_python_prints_them() -> None:
    def inner() -> None:
        raise KeyError("k")

    def outer() -> None:
        try:
            inner()
        except KeyError as exc:
            raise RuntimeError("wrapped") from exc

    def during() -> None:
        try:
            outer()
        except RuntimeError:
            [][1]

    try:
        during()
    except IndexError as exc:
        error = exc
    ours = format_failure(error)
    assert ours == python_without_carets(error)
    assert "The above exception was the direct cause" in ours
    assert "During handling of the above exception" in ours


def test_recursion_is_collapsed_as_python_does() -> None:
    def down(n: int) -> int:
        return down(n + 1) if n < 40 else int("x")

    try:
        down(0)
    except ValueError as exc:
        error = exc
    ours = format_failure(error)
    assert ours == python_without_carets(error)
    assert "[Previous line repeated 38 more times]" in ours  # 41 frames of down, 3 shown
    assert ours.count("in down") == 3


CLI_MODULE = textwrap.dedent(
    """
    def process(job):
        if job.attempts_made == 0 or job.data.get("always"):
            raise ValueError("bad input")
        return "ok"
    """
)


async def test_the_cli_worker_logs_a_traceback_once(
    redis: Redis, redis_url: str, queue_name: str, tmp_path: Path
) -> None:
    (tmp_path / "failing_procs.py").write_text(CLI_MODULE)
    retried = await echomq.add(queue_name, "once", {}, attempts=2, connection=redis)
    bad = await echomq.add(queue_name, "bad", {"always": True}, attempts=2, connection=redis)
    env = {k: v for k, v in os.environ.items() if k != "ECHOMQ_REDIS_URL"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "echomq.cli", "worker", "failing_procs:process", "--queue"]
        + [queue_name, "--url", redis_url, "--drain-delay", "0.3", "--log-format", "json"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        await finished(redis, queue_name, "failed")
        await finished(redis, queue_name, "completed")
        proc.send_signal(signal.SIGTERM)
        _, err = await asyncio.to_thread(proc.communicate, timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0
    text = err.decode()
    lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    steps = [(x["job_id"], x["status"], x["level"]) for x in lines if x.get("status")]
    assert sorted(steps) == sorted(
        [
            (retried.id, "retry", "WARNING"),
            (retried.id, "completed", "INFO"),
            (bad.id, "retry", "WARNING"),
            (bad.id, "failed", "WARNING"),
        ]
    )
    with_traceback = [x for x in lines if "exc_info" in x]
    assert [(x["job_id"], x["status"]) for x in with_traceback] == [(bad.id, "failed")]
    [_, trace] = await stacktrace_of(redis, queue_name, bad.id)
    assert with_traceback[0]["exc_info"] == trace
    assert first_frame(trace).endswith("in process")
    assert text.count("Traceback (most recent call last)") == 1
