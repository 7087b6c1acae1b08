"""Batches: ``Worker(..., batch=Batch(size, wait))`` calls the processor with lists of jobs.

Real Redis, real workers. Each job of a batch keeps its own lock, progress, logs, retries,
outcome and stalled recovery; a result that is an exception fails its job alone.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

import echomq
import echomq.sync
from _procs import WorkerProcs, run_counts
from echomq import Batch, BatchResultError, InvalidOptionError, Job, Queue, Worker, WorkerOptions
from echomq.cli import main
from helpers import queue_key, wait_for

FAST: dict[str, Any] = {"drain_delay": 0.2, "stalled_interval": 5.0}


async def state_of(redis: Redis, queue: str, job_id: str) -> str:
    return str(await echomq.get_state(queue, job_id, connection=redis))


async def all_in(redis: Redis, queue: str, ids: list[str], state: str) -> bool:
    return all([await state_of(redis, queue, job_id) == state for job_id in ids])


async def add_jobs(redis: Redis, queue: str, datas: list[Any], **options: Any) -> list[str]:
    items = [("j", data, options) for data in datas]
    return [job.id for job in await echomq.add_bulk(queue, items, connection=redis)]


# -- options -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"size": 0}, "batch.size must be >= 1, got 0"),
        ({"size": "3"}, "batch.size must be an int"),
        ({"size": 2, "wait": -1}, "batch.wait must not be negative"),
        ({"size": 2, "wait": "soon"}, "batch.wait must be seconds"),
    ],
)
def test_batch_refuses_bad_values(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidOptionError, match=message):
        Batch(**kwargs)


def test_batch_options_with_worker_options(redis: Redis, queue_name: str) -> None:
    with pytest.raises(InvalidOptionError, match="batch must be a Batch"):
        WorkerOptions(batch=5)  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError, match="batch does not work with processes"):
        WorkerOptions(batch=Batch(size=2), processes=2)

    async def p(jobs: list[Job]) -> list[Any]:
        return [None] * len(jobs)

    # concurrency defaults to the batch size; a lower explicit one is refused
    worker = Worker(queue_name, p, connection=redis, batch=Batch(size=5))
    assert worker.concurrency == 5
    with pytest.raises(InvalidOptionError, match=r"at least batch.size \(5\)"):
        worker.concurrency = 4
    worker.concurrency = 8
    assert worker.concurrency == 8
    with pytest.raises(InvalidOptionError, match=r"at least batch.size \(5\)"):
        Worker(queue_name, p, connection=redis, concurrency=2, batch=Batch(size=5))
    options = WorkerOptions(batch=Batch(size=3, wait=0.1))  # concurrency 1, raised to 3
    assert Worker(queue_name, p, connection=redis, options=options).concurrency == 3


def test_cli_batch_flags(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["worker", "procs.batching:process", "--queue", "q", "--url", "redis://127.0.0.1:1/0"]
    assert main([*base, "--batch-wait", "0.5"]) == 2
    assert "--batch-wait needs --batch-size" in capsys.readouterr().err
    assert main([*base, "--batch-size", "5", "--concurrency", "2"]) == 2
    assert "--concurrency (2) must be at least --batch-size (5)" in capsys.readouterr().err
    assert main([*base, "--batch-size", "0"]) == 2
    assert "batch.size must be >= 1" in capsys.readouterr().err


# -- batching ------------------------------------------------------------------------------


async def test_batches_hold_up_to_size_jobs_and_results_keep_their_order(
    redis: Redis, queue_name: str
) -> None:
    ids = await add_jobs(redis, queue_name, [{"n": n} for n in range(10)])
    calls: list[list[str]] = []

    async def double(jobs: list[Job]) -> list[int]:
        calls.append([job.id for job in jobs])
        return [job.data["n"] * 2 for job in jobs]

    async with Worker(queue_name, double, connection=redis, batch=Batch(size=4, wait=0.2), **FAST):
        await wait_for(lambda: all_in(redis, queue_name, ids, "completed"), timeout=10)
    assert all(1 <= len(call) <= 4 for call in calls), calls
    assert sorted((i for call in calls for i in call), key=int) == ids  # each job once
    assert len(calls[0]) == 4  # ten jobs were waiting: the first batch is full
    for n, job_id in enumerate(ids):
        job = await echomq.get_job(queue_name, job_id, connection=redis)
        assert job is not None and job.return_value == n * 2


async def test_wait_fills_a_partial_batch(redis: Redis, queue_name: str) -> None:
    calls: list[tuple[float, list[str]]] = []
    actives: list[float] = []

    async def record(jobs: list[Job]) -> list[str]:
        calls.append((time.monotonic(), [job.id for job in jobs]))
        return [job.id for job in jobs]

    worker = Worker(queue_name, record, connection=redis, batch=Batch(size=10, wait=0.6), **FAST)
    worker.on("active", lambda job: actives.append(time.monotonic()))
    async with worker:
        first = await echomq.add(queue_name, "j", {}, connection=redis)
        await wait_for(lambda: actives, timeout=5)
        await asyncio.sleep(0.1)
        second = await echomq.add(queue_name, "j", {}, connection=redis)
        await wait_for(lambda: all_in(redis, queue_name, [first.id, second.id], "completed"))
    assert [ids for _, ids in calls] == [[first.id, second.id]]  # one batch, not full
    waited = calls[0][0] - actives[0]
    assert 0.55 <= waited < 1.5, waited  # called `wait` after its first job arrived


# -- per-job outcomes ----------------------------------------------------------------------


async def test_an_exception_at_a_position_fails_that_job_alone(
    redis: Redis, queue_name: str
) -> None:
    retried = await add_jobs(redis, queue_name, [{"fail": "once"}], attempts=2)
    failed = await add_jobs(redis, queue_name, [{"fail": "always"}], attempts=1)
    fine = await add_jobs(redis, queue_name, [{}, {}])
    calls: list[list[str]] = []

    async def picky(jobs: list[Job]) -> list[Any]:
        calls.append([job.id for job in jobs])
        out: list[Any] = []
        for job in jobs:
            fail = job.data.get("fail")
            if fail == "always" or (fail == "once" and job.attempts_made == 0):
                out.append(ValueError(f"no good: {job.id}"))
            else:
                out.append(f"ok {job.id}")
        return out

    async with Worker(queue_name, picky, connection=redis, batch=Batch(size=4, wait=0.3), **FAST):
        await wait_for(lambda: all_in(redis, queue_name, fine + retried, "completed"), timeout=10)
        await wait_for(lambda: all_in(redis, queue_name, failed, "failed"), timeout=5)
    assert sorted(calls[0], key=int) == sorted(retried + failed + fine, key=int)
    assert calls[1:] == [retried]  # the retry runs alone, in a batch of its own
    for job_id in fine:
        h = await redis.hgetall(queue_key(queue_name, job_id))
        assert h[b"atm"] == b"1" and h[b"returnvalue"] == f'"ok {job_id}"'.encode()
    h = await redis.hgetall(queue_key(queue_name, retried[0]))
    assert h[b"atm"] == b"2" and h[b"returnvalue"] == f'"ok {retried[0]}"'.encode()
    h = await redis.hgetall(queue_key(queue_name, failed[0]))
    assert h[b"failedReason"] == f"no good: {failed[0]}".encode()
    assert b"ValueError" in h[b"stacktrace"]


async def test_a_list_of_the_wrong_length_fails_every_job(redis: Redis, queue_name: str) -> None:
    ids = await add_jobs(redis, queue_name, [{}, {}, {}])

    async def short(jobs: list[Job]) -> list[Any]:
        return ["only one"]

    async with Worker(queue_name, short, connection=redis, batch=Batch(size=3, wait=0.3), **FAST):
        await wait_for(lambda: all_in(redis, queue_name, ids, "failed"), timeout=10)
    for job_id in ids:
        h = await redis.hgetall(queue_key(queue_name, job_id))
        assert h[b"failedReason"] == (
            b"the batch processor must return a list of 3 results (one per job, in order), "
            b"got a list of 1"
        )
        assert BatchResultError.__name__.encode() in h[b"stacktrace"]


async def test_a_raising_processor_fails_every_job_and_each_is_retried(
    redis: Redis, queue_name: str
) -> None:
    ids = await add_jobs(redis, queue_name, [{}, {}], attempts=2)
    calls: list[int] = []

    async def flaky(jobs: list[Job]) -> list[str]:
        calls.append(len(jobs))
        if len(calls) == 1:
            raise RuntimeError("the database is down")
        return ["done"] * len(jobs)

    async with Worker(queue_name, flaky, connection=redis, batch=Batch(size=2, wait=0.3), **FAST):
        await wait_for(lambda: all_in(redis, queue_name, ids, "completed"), timeout=10)
    assert calls[0] == 2 and sum(calls[1:]) == 2
    for job_id in ids:
        h = await redis.hgetall(queue_key(queue_name, job_id))
        assert h[b"atm"] == b"2" and b"the database is down" in h[b"stacktrace"]


def _charge(card: str, job_id: str) -> str:
    """The user's code a batch processor calls for each job; raises for a declined card."""
    if card == "declined":
        raise ValueError(f"card declined: {job_id}")
    return f"charged {job_id}"


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_a_members_failure_is_logged_and_stored_with_the_users_traceback(
    redis: Redis, queue_name: str, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """One member's error raised in the user's code (and caught there) shows the user's frames
    down to the raise; one returned without being raised shows no frame but a note naming the
    processor, its file and line. Neither shows this package's frame that hands the result to
    the job's task (``return await entry.future`` in worker/_batches.py)."""
    declined, unknown, fine = await add_jobs(
        redis, queue_name, [{"card": "declined"}, {"card": "unknown"}, {"card": "ok"}]
    )

    def settle(jobs: list[Any]) -> list[Any]:
        results: list[Any] = []
        for job in jobs:
            if job.data["card"] == "unknown":
                results.append(LookupError(f"no such card: {job.id}"))  # never raised
                continue
            try:
                results.append(_charge(job.data["card"], job.id))
            except ValueError as exc:
                results.append(exc)
        return results

    async def async_settle(jobs: list[Job]) -> list[Any]:
        return settle(jobs)

    processor: Any = async_settle if kind == "async" else settle
    with caplog.at_level(logging.WARNING, logger="echomq.worker"):
        async with Worker(
            queue_name, processor, connection=redis, batch=Batch(size=3, wait=0.3), **FAST
        ):
            await wait_for(lambda: all_in(redis, queue_name, [declined, unknown], "failed"))
    assert await state_of(redis, queue_name, fine) == "completed"
    here = settle.__code__.co_filename
    assert Path(here).name == "test_batches.py"
    traces = {}
    for job_id in (declined, unknown):
        [trace] = json.loads(await redis.hget(queue_key(queue_name, job_id), "stacktrace"))
        [record] = [
            r
            for r in caplog.records
            if getattr(r, "job_id", None) == job_id and getattr(r, "status", "") == "failed"
        ]
        assert record.exc_text == trace  # what is logged is what is stored
        assert "worker/_batches.py" not in trace and "entry.future" not in trace, trace
        traces[job_id] = trace.splitlines()
    assert traces[declined][0] == "Traceback (most recent call last):"
    assert traces[declined][1].startswith(f'  File "{here}", line ')
    assert traces[declined][1].endswith(", in settle")
    assert traces[declined][-3:] == [
        f'  File "{here}", line {_charge.__code__.co_firstlineno + 3}, in _charge',
        '    raise ValueError(f"card declined: {job_id}")',
        f"ValueError: card declined: {declined}",
    ]
    named = async_settle if kind == "async" else settle
    assert traces[unknown] == [
        f"LookupError: no such card: {unknown}",
        f"returned, not raised, by the batch processor {named.__qualname__} "
        f'(File "{here}", line {named.__code__.co_firstlineno})',
    ]


async def test_a_raising_batch_processors_traceback_ends_where_it_raised(
    redis: Redis, queue_name: str
) -> None:
    [job_id] = await add_jobs(redis, queue_name, [{"card": "declined"}])

    async def charge_all(jobs: list[Job]) -> list[str]:
        return [_charge(job.data["card"], job.id) for job in jobs]

    async with Worker(
        queue_name, charge_all, connection=redis, batch=Batch(size=1, wait=0.3), **FAST
    ):
        await wait_for(lambda: all_in(redis, queue_name, [job_id], "failed"))
    [trace] = json.loads(await redis.hget(queue_key(queue_name, job_id), "stacktrace"))
    lines = trace.splitlines()
    assert "worker/_batches.py" not in trace, trace
    assert lines[1].endswith(", in charge_all") and lines[-3].endswith(", in _charge"), trace


async def test_the_job_timeout_applies_to_the_batch_call(redis: Redis, queue_name: str) -> None:
    ids = await add_jobs(redis, queue_name, [{}, {}])
    cancelled: list[int] = []

    async def slow(jobs: list[Job]) -> list[str]:
        try:
            await asyncio.sleep(10)
        except asyncio.CancelledError:
            cancelled.append(len(jobs))
            raise
        return ["late"] * len(jobs)

    async with Worker(
        queue_name,
        slow,
        connection=redis,
        batch=Batch(size=2, wait=0.3),
        job_timeout=0.3,
        **FAST,
    ):
        await wait_for(lambda: all_in(redis, queue_name, ids, "failed"), timeout=10)
    assert cancelled == [2]
    for job_id in ids:
        h = await redis.hgetall(queue_key(queue_name, job_id))
        assert h[b"failedReason"] == b"timed out after 0.3 s"


@pytest.mark.parametrize("kind", ["async", "sync"])
async def test_progress_and_logs_are_per_job(redis: Redis, queue_name: str, kind: str) -> None:
    ids = await add_jobs(redis, queue_name, [{"n": n} for n in range(3)])
    progress: list[tuple[str, Any]] = []

    async def async_batch(jobs: list[Job]) -> list[int]:
        for job in jobs:
            await job.update_progress(job.data["n"] * 10)
            await job.log(f"line of {job.id}")
        return [job.data["n"] for job in jobs]

    def sync_batch(jobs: list[echomq.sync.Job]) -> list[int]:
        for job in jobs:
            job.update_progress(job.data["n"] * 10)
            job.log(f"line of {job.id}")
        return [job.data["n"] for job in jobs]

    processor: Any = async_batch if kind == "async" else sync_batch
    worker = Worker(queue_name, processor, connection=redis, batch=Batch(size=3, wait=0.3), **FAST)
    worker.on("progress", lambda job, value: progress.append((job.id, value)))
    async with worker:
        await wait_for(lambda: all_in(redis, queue_name, ids, "completed"), timeout=10)
        await wait_for(lambda: len(progress) == 3)
    async with Queue(queue_name, connection=redis) as q:
        for n, job_id in enumerate(ids):
            job = await q.get_job(job_id)
            assert job is not None and job.progress == n * 10 and job.return_value == n
            assert await q.get_job_logs(job_id) == ([f"line of {job_id}"], 1)
    assert sorted(progress) == sorted((job_id, n * 10) for n, job_id in enumerate(ids))


async def test_locks_of_a_running_batch_are_renewed(redis: Redis, queue_name: str) -> None:
    ids = await add_jobs(redis, queue_name, [{}, {}, {}])

    async def long(jobs: list[Job]) -> list[str]:
        await asyncio.sleep(1.5)  # three lock durations
        return ["ok"] * len(jobs)

    async with Worker(
        queue_name,
        long,
        connection=redis,
        batch=Batch(size=3, wait=0.2),
        lock_duration=0.5,
        drain_delay=0.2,
        stalled_interval=0.2,
    ):
        await wait_for(lambda: all_in(redis, queue_name, ids, "completed"), timeout=10)
    for job_id in ids:
        h = await redis.hgetall(queue_key(queue_name, job_id))
        assert h[b"atm"] == b"1" and b"stc" not in h, h  # never taken for stalled


async def test_cancelling_one_job_of_a_batch(redis: Redis, queue_name: str) -> None:
    ids = await add_jobs(redis, queue_name, [{}, {}, {}], attempts=3)
    gate = asyncio.Event()
    started = asyncio.Event()

    async def gated(jobs: list[Job]) -> list[str]:
        started.set()
        await gate.wait()
        return [f"ok {job.id}" for job in jobs]

    async with Worker(
        queue_name, gated, connection=redis, batch=Batch(size=3, wait=0.3), **FAST
    ) as worker:
        await asyncio.wait_for(started.wait(), 5)
        assert await worker.cancel_job(ids[1], "not this one") is True
        await wait_for(lambda: all_in(redis, queue_name, [ids[1]], "failed"), timeout=5)
        gate.set()
        await wait_for(lambda: all_in(redis, queue_name, [ids[0], ids[2]], "completed"))
    h = await redis.hgetall(queue_key(queue_name, ids[1]))
    assert h[b"failedReason"] == b"not this one" and h[b"atm"] == b"1"  # no retry
    assert b"returnvalue" not in h or h[b"returnvalue"] in (b"null", b"")


async def test_cancelling_one_job_of_a_sync_batch(redis: Redis, queue_name: str) -> None:
    ids = await add_jobs(redis, queue_name, [{}, {}, {}])
    gate = threading.Event()
    started = threading.Event()
    seen: list[bool] = []

    def gated(jobs: list[echomq.sync.Job]) -> list[str]:
        started.set()
        gate.wait(10)
        seen.extend(job.cancelled for job in jobs)
        return [f"ok {job.id}" for job in jobs]

    async with Worker(
        queue_name, gated, connection=redis, batch=Batch(size=3, wait=0.3), **FAST
    ) as worker:
        await asyncio.to_thread(started.wait, 5)
        assert await worker.cancel_job(ids[0], "not this one") is True
        await wait_for(lambda: all_in(redis, queue_name, [ids[0]], "failed"), timeout=5)
        gate.set()
        await wait_for(lambda: all_in(redis, queue_name, ids[1:], "completed"))
    assert seen == [True, False, False]  # the thread saw which job was cancelled
    h = await redis.hgetall(queue_key(queue_name, ids[0]))
    assert h[b"failedReason"] == b"not this one"


async def test_closing_hands_back_the_jobs_of_a_running_batch(
    redis: Redis, queue_name: str
) -> None:
    ids = await add_jobs(redis, queue_name, [{}, {}])
    started = asyncio.Event()

    cancelled: list[int] = []

    async def endless(jobs: list[Job]) -> list[str]:
        started.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            cancelled.append(len(jobs))
            raise
        return ["never"] * len(jobs)

    worker = Worker(
        queue_name,
        endless,
        connection=redis,
        batch=Batch(size=2, wait=0.2),
        close_grace=0.2,
        **FAST,
    )
    async with worker:
        await asyncio.wait_for(started.wait(), 5)
    assert worker.state.value == "closed"
    assert cancelled == [2]  # the batch call was cancelled once its jobs were handed back
    await wait_for(lambda: all_in(redis, queue_name, ids, "waiting"), timeout=5)


# -- crash and latency ---------------------------------------------------------------------


@pytest.fixture
def procs(tmp_path: Path, redis_url: str) -> Iterator[WorkerProcs]:
    with WorkerProcs(tmp_path, redis_url) as group:
        yield group


@pytest.mark.timeout(60)
async def test_a_sigkilled_batch_workers_jobs_are_recovered_as_stalled(
    procs: WorkerProcs, redis: Redis, queue_name: str
) -> None:
    ids = await add_jobs(redis, queue_name, [{"sleep": 30} for _ in range(4)])
    batch = ("--batch-size", "4", "--batch-wait", "0.2")
    start: dict[str, Any] = {"concurrency": 4, "processor": "procs.batching:process"}
    start["extra"] = batch
    first = procs.start(queue_name, name="first", **start)
    # the four jobs are running in one batch call
    await wait_for(lambda: _runs_is(redis, queue_name, 4), timeout=15)
    first.kill()
    await redis.delete(f"rec:{queue_name}:runs")
    for job_id in ids:  # quick jobs now, for the second worker
        await redis.hset(queue_key(queue_name, job_id), "data", "{}")
    second = procs.start(queue_name, name="second", **start)
    await wait_for(lambda: all_in(redis, queue_name, ids, "completed"), timeout=20)
    counts = await run_counts(redis, queue_name)
    assert counts == dict.fromkeys(ids, 1)
    for job_id in ids:
        h = await redis.hgetall(queue_key(queue_name, job_id))
        assert h[b"stc"] == b"1" and h[b"pb"] == b"second", h
        assert h[b"returnvalue"] == f'"{job_id}"'.encode()
    assert second.terminate() == 0


async def _runs_is(r: Redis, queue: str, n: int) -> bool:
    return bool(await r.llen(f"rec:{queue}:runs") == n)


#: The most a job may wait beyond ``wait`` on an idle batch worker (expected: a few ms).
MAX_LAG = 0.5


@pytest.mark.parametrize("size", [1, 5])
async def test_a_single_job_on_an_idle_batch_worker_starts_within_wait(
    redis: Redis, queue_name: str, size: int
) -> None:
    wait = 0.3
    starts: list[float] = []

    async def record(jobs: list[Job]) -> list[None]:
        starts.append(time.time())
        return [None] * len(jobs)

    # the default drain_delay (5 s): an idle worker must be woken, not sleep it out
    async with Worker(queue_name, record, connection=redis, batch=Batch(size=size, wait=wait)):
        await asyncio.sleep(0.4)  # idle
        added = time.time()
        await echomq.add(queue_name, "j", {}, connection=redis)
        await wait_for(lambda: starts, timeout=5)
    lag = starts[0] - added
    expected = 0.0 if size == 1 else wait  # a full batch of one does not wait
    assert expected - 0.05 <= lag < expected + MAX_LAG, lag
