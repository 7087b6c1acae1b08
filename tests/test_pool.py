"""Process isolation (``processes=N``) with real child processes and a real Redis.

The processors live in ``tests/procs/pool.py``: a child imports them by ``module:function``.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

import echomq
from echomq import InvalidOptionError, Job, Worker, WorkerOptions
from echomq.cli import main
from helpers import queue_key, session_of, wait_for
from procs import pool as procs

pytestmark = pytest.mark.timeout(60)

FAST: dict[str, Any] = {"drain_delay": 0.2, "stalled_interval": 5.0}


async def state_count(r: Redis, queue: str, state: str, n: int, timeout: float = 20) -> None:
    async def enough() -> bool:
        return bool(await r.zcard(queue_key(queue, state)) >= n)

    await wait_for(enough, timeout=timeout, message=f"{n} job(s) {state}")


async def hash_of(r: Redis, queue: str, job_id: str) -> dict[str, str]:
    h = await r.hgetall(queue_key(queue, job_id))
    return {k.decode(): v.decode() for k, v in h.items()}


async def test_sync_processor_runs_in_child_processes(redis: Redis, queue_name: str) -> None:
    jobs = await echomq.add_bulk(
        queue_name, [("sq", {"x": i}) for i in range(12)], connection=redis
    )
    worker = Worker(queue_name, procs.square, connection=redis, processes=2, **FAST)
    assert worker.options.concurrency == 2  # one job per child unless told otherwise
    async with worker:
        await state_count(redis, queue_name, "completed", 12)
    pids = set()
    for job in jobs:
        value = json.loads((await hash_of(redis, queue_name, job.id))["returnvalue"])
        assert value["y"] == job.data["x"] ** 2
        pids.add(value["pid"])
    assert os.getpid() not in pids
    assert 1 <= len(pids) <= 2
    for pid in pids:  # the children are gone once the worker closed
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


async def test_progress_and_logs_from_a_child_land_in_redis(redis: Redis, queue_name: str) -> None:
    job = await echomq.add(queue_name, "r", {}, connection=redis)
    async with Worker(queue_name, procs.report, connection=redis, processes=1, **FAST):
        await state_count(redis, queue_name, "completed", 1)
    h = await hash_of(redis, queue_name, job.id)
    assert json.loads(h["progress"]) == {"done": True}
    assert h["returnvalue"] == "2"  # log() answered the line count to the child
    logs = await redis.lrange(queue_key(queue_name, f"{job.id}:logs"), 0, -1)
    assert logs[0].startswith(b"child ") and logs[1] == b"second line"
    events = await redis.xrange(queue_key(queue_name, "events"))
    progress = [f[b"data"] for _, f in events if f[b"event"] == b"progress"]
    assert [json.loads(p) for p in progress] == [50, {"done": True}]


async def test_a_child_killed_mid_job_fails_only_its_job_which_is_retried(
    redis: Redis, queue_name: str, tmp_path: Path
) -> None:
    victim_pid, other_pid = tmp_path / "victim.pid", tmp_path / "other.pid"
    release = tmp_path / "release"
    victim = await echomq.add(
        queue_name,
        "victim",
        {"pidfile": str(victim_pid), "release": str(release)},
        attempts=2,
        connection=redis,
    )
    other = await echomq.add(
        queue_name,
        "other",
        {"pidfile": str(other_pid), "release": str(release)},
        connection=redis,
    )
    async with Worker(queue_name, procs.wait_for_file, connection=redis, processes=2, **FAST):
        await wait_for(lambda: victim_pid.exists() and other_pid.exists(), timeout=20)
        first = int(victim_pid.read_text())
        victim_pid.unlink()
        os.kill(first, signal.SIGKILL)

        async def reason() -> str:
            return (await hash_of(redis, queue_name, victim.id)).get("failedReason", "")

        crash = await wait_for(reason, timeout=10)
        assert crash == "the worker process running the job exited with signal 9 (SIGKILL)"
        await wait_for(victim_pid.exists, timeout=20)  # retried, in a new child
        second = int(victim_pid.read_text())
        assert second != first
        release.touch()
        await state_count(redis, queue_name, "completed", 2)
    v = await hash_of(redis, queue_name, victim.id)
    o = await hash_of(redis, queue_name, other.id)
    assert (v["atm"], json.loads(v["returnvalue"])) == ("2", second)
    assert (o["atm"], json.loads(o["returnvalue"])) == ("1", int(other_pid.read_text()))
    assert "failedReason" not in o
    assert await redis.zcard(queue_key(queue_name, "failed")) == 0


async def test_a_child_that_exits_fails_its_job_with_its_exit_code(
    redis: Redis, queue_name: str
) -> None:
    job = await echomq.add(queue_name, "x", {}, attempts=2, connection=redis)
    async with Worker(queue_name, procs.exit_hard, connection=redis, processes=1, **FAST):
        await state_count(redis, queue_name, "failed", 1)
        after = await echomq.add(queue_name, "y", {}, connection=redis)  # the pool recovered
        await state_count(redis, queue_name, "failed", 2)
    h = await hash_of(redis, queue_name, job.id)
    assert h["atm"] == "2"
    assert h["failedReason"] == "the worker process running the job exited with code 3"
    assert (await hash_of(redis, queue_name, after.id))["atm"] == "1"


async def test_max_tasks_per_child_recycles_children(redis: Redis, queue_name: str) -> None:
    await echomq.add_bulk(queue_name, [("p", {}) for _ in range(6)], connection=redis)
    async with Worker(
        queue_name, procs.pid, connection=redis, processes=1, max_tasks_per_child=2, **FAST
    ):
        await state_count(redis, queue_name, "completed", 6)
    ids = [m.decode() for m in await redis.zrange(queue_key(queue_name, "completed"), 0, -1)]
    pids = [int((await hash_of(redis, queue_name, i))["returnvalue"]) for i in ids]
    assert sorted(Counter(pids).values()) == [2, 2, 2]


async def test_processor_errors_keep_the_childs_traceback(redis: Redis, queue_name: str) -> None:
    job = await echomq.add(queue_name, "b", {}, attempts=2, connection=redis)
    async with Worker(queue_name, procs.boom, connection=redis, processes=1, **FAST):
        await state_count(redis, queue_name, "failed", 1)
    h = await hash_of(redis, queue_name, job.id)
    assert (h["atm"], h["failedReason"]) == ("2", "boom on attempt 2")
    stack = json.loads(h["stacktrace"])
    assert len(stack) == 2
    assert "ValueError: boom on attempt 1" in stack[0] and "procs/pool.py" in stack[0]


async def test_a_non_json_return_value_fails_the_job_without_retries(
    redis: Redis, queue_name: str
) -> None:
    job = await echomq.add(queue_name, "n", {}, attempts=3, connection=redis)
    async with Worker(queue_name, procs.not_json, connection=redis, processes=1, **FAST):
        await state_count(redis, queue_name, "failed", 1)
    h = await hash_of(redis, queue_name, job.id)
    assert h["atm"] == "1"
    assert h["failedReason"].startswith("return value is not JSON-serialisable")


async def test_a_noisy_child_that_ignores_sigterm_does_not_break_the_worker(
    redis: Redis, queue_name: str
) -> None:
    await echomq.add_bulk(queue_name, [("n", {}) for _ in range(3)], connection=redis)
    worker = Worker(queue_name, procs.noisy, connection=redis, processes=2, **FAST)
    async with worker:
        await state_count(redis, queue_name, "completed", 3)
        assert session_of(worker).pool is not None
        pids = session_of(worker).pool.pids
        for pid in pids:
            os.kill(pid, signal.SIGTERM)  # ignored by the child
        await echomq.add(queue_name, "n", {}, connection=redis)
        await state_count(redis, queue_name, "completed", 4)
        assert session_of(worker).pool.pids == pids
        started = time.monotonic()
    assert time.monotonic() - started < 5
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


async def test_a_job_running_in_a_child_at_close_goes_back_to_wait(
    redis: Redis, queue_name: str
) -> None:
    job = await echomq.add(queue_name, "s", {"seconds": 30}, connection=redis)
    worker = Worker(queue_name, procs.sleep, connection=redis, processes=1, close_grace=0.2, **FAST)
    async with worker:
        await wait_for(lambda: redis.lrange(queue_key(queue_name, "active"), 0, -1), timeout=20)
        assert session_of(worker).pool is not None
        pids = session_of(worker).pool.pids
        started = time.monotonic()
    assert time.monotonic() - started < 5
    assert await redis.lrange(queue_key(queue_name, "wait"), 0, -1) == [job.id.encode()]
    with pytest.raises(ProcessLookupError):
        os.kill(pids[0], 0)


@pytest.mark.parametrize(
    ("processor", "words"),
    [
        (lambda job: None, "lambda"),
        (procs.nested, "nested"),
        (functools.partial(procs.square), "no module-level name"),
    ],
)
async def test_a_processor_a_child_cannot_import_is_refused_at_start_up(
    redis: Redis, queue_name: str, processor: Any, words: str
) -> None:
    with pytest.raises(InvalidOptionError, match="cannot run with processes > 0") as info:
        Worker(queue_name, processor, connection=redis, processes=2)
    assert words in str(info.value)


async def test_processes_refuses_async_processors_and_bad_counts(
    redis: Redis, queue_name: str
) -> None:
    async def run(job: Job) -> None:
        return None

    with pytest.raises(InvalidOptionError, match="runs sync processors"):
        Worker(queue_name, run, connection=redis, processes=1)
    with pytest.raises(InvalidOptionError, match="processes must be >= 0, got -1"):
        Worker(queue_name, procs.square, connection=redis, processes=-1)
    with pytest.raises(InvalidOptionError, match="max_tasks_per_child must be >= 1"):
        WorkerOptions(processes=1, max_tasks_per_child=0)
    with pytest.raises(InvalidOptionError, match="max_tasks_per_child needs processes"):
        Worker(queue_name, procs.square, connection=redis, max_tasks_per_child=3)


async def test_processes_zero_keeps_threads(redis: Redis, queue_name: str) -> None:
    await echomq.add(queue_name, "p", {}, connection=redis)
    worker = Worker(queue_name, procs.pid, connection=redis, **FAST)
    async with worker:
        await state_count(redis, queue_name, "completed", 1)
        assert session_of(worker).pool is None
    ids = await redis.zrange(queue_key(queue_name, "completed"), 0, -1)
    assert (await hash_of(redis, queue_name, ids[0].decode()))["returnvalue"] == str(os.getpid())


async def test_concurrency_above_processes_waits_for_a_free_child(
    redis: Redis, queue_name: str
) -> None:
    processes, concurrency = 2, 4
    jobs = await echomq.add_bulk(
        queue_name, [("b", {"ms": 100}) for _ in range(8)], connection=redis
    )
    worker = Worker(
        queue_name,
        procs.busy,
        connection=redis,
        processes=processes,
        concurrency=concurrency,
        **FAST,
    )

    async def all_slots_taken() -> bool:
        return bool(await redis.llen(queue_key(queue_name, "active")) == concurrency)

    async with worker:
        # The worker holds as many jobs as its concurrency (active, locked) ...
        await wait_for(all_slots_taken, timeout=20, message=f"{concurrency} jobs active at once")
        await state_count(redis, queue_name, "completed", len(jobs))
        assert session_of(worker).pool is not None
        children = set(session_of(worker).pool.pids)
    # ... but runs at most one per child: the others waited for a free child.
    runs = [json.loads((await hash_of(redis, queue_name, j.id))["returnvalue"]) for j in jobs]
    assert {r["pid"] for r in runs} <= children and len(children) == processes
    assert os.getpid() not in children
    by_child: dict[int, list[dict[str, Any]]] = {}
    for r in sorted(runs, key=lambda r: r["start"]):
        by_child.setdefault(r["pid"], []).append(r)
    for pid, mine in by_child.items():  # a child starts a job only after its last one ended
        for before, after in zip(mine, mine[1:]):
            assert after["start"] >= before["end"], (pid, before, after)
    # At no moment did more jobs run than there are children (an end before a start at a tie).
    edges = sorted([(r["start"], 1) for r in runs] + [(r["end"], -1) for r in runs])
    running = [sum(step for _, step in edges[: i + 1]) for i in range(len(edges))]
    assert max(running) <= processes, edges
    # Each job past the first ``processes`` started only after an earlier one had ended.
    starts = sorted(r["start"] for r in runs)
    ends = sorted(r["end"] for r in runs)
    for k, start in enumerate(starts[processes:]):
        assert start >= ends[k], (k, starts, ends)


async def test_the_cli_runs_a_pool_with_processes(
    redis: Redis, redis_url: str, queue_name: str, tmp_path: Path
) -> None:
    tests_dir = Path(__file__).resolve().parent
    log = tmp_path / "worker.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "echomq.cli", "worker", "procs.pool:pid", "--queue", queue_name]
            + ["--url", redis_url, "--drain-delay", "0.5", "--processes", "2"],
            cwd=tests_dir,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        await echomq.add_bulk(queue_name, [("p", {}) for _ in range(4)], connection=redis)
        await state_count(redis, queue_name, "completed", 4)
        ids = await redis.zrange(queue_key(queue_name, "completed"), 0, -1)
        pids = {int((await hash_of(redis, queue_name, i.decode()))["returnvalue"]) for i in ids}
        assert proc.pid not in pids and 1 <= len(pids) <= 2
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 15) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert "Traceback" not in log.read_text()


def test_the_cli_refuses_a_negative_process_count(
    redis_url: str, queue_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["worker", "procs.pool:pid", "--queue", queue_name, "--url", redis_url]
    assert main([*base, "--processes", "-1"]) == 2
    assert "processes must be >= 0, got -1" in capsys.readouterr().err


async def test_a_child_killed_while_idle_is_replaced_without_failing_a_job(
    redis: Redis, queue_name: str
) -> None:
    worker = Worker(queue_name, procs.pid, connection=redis, processes=1, **FAST)
    async with worker:
        await wait_for(
            lambda: session_of(worker).pool is not None and session_of(worker).pool.pids, timeout=20
        )
        assert session_of(worker).pool is not None
        [idle] = session_of(worker).pool.pids
        os.kill(idle, signal.SIGKILL)
        await asyncio.sleep(0.2)
        job = await echomq.add(queue_name, "p", {}, connection=redis)
        await state_count(redis, queue_name, "completed", 1)
    h = await hash_of(redis, queue_name, job.id)
    assert (h["atm"], "failedReason" in h) == ("1", False)
    assert int(h["returnvalue"]) != idle
