"""Manual processing: Worker.get_next_job and the Job's move_to_* / extend_lock methods, the
stalled-check timer, and the recipe of docs/workers.md#manual-processing run as written."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

import echomq
import echomq.sync
from echomq import Backoff, Job, LockMismatchError, UnrecoverableError, Worker
from helpers import wait_for

DOC = Path(__file__).resolve().parents[1] / "docs" / "workers.md"


async def state(redis: Redis, queue: str, job_id: str) -> str:
    return str(await echomq.get_state(queue, job_id, connection=redis))


async def test_get_next_job_locks_with_exactly_the_token(redis: Redis, queue_name: str) -> None:
    added = await echomq.add(queue_name, "by-hand", {"n": 1}, connection=redis)
    worker = Worker(queue_name, None, connection=redis, drain_delay=0.2)
    try:
        job = await worker.get_next_job("my-token-007")
        assert job is not None and job.id == added.id and job.data == {"n": 1}
        assert job.token == "my-token-007"
        assert await redis.get(f"bull:{queue_name}:{job.id}:lock") == b"my-token-007"
        assert await state(redis, queue_name, job.id) == "active"
        with pytest.raises(LockMismatchError):
            await job.move_to_completed("x", "someone-else")
        await job.move_to_completed({"ok": True}, "my-token-007")
        assert await state(redis, queue_name, job.id) == "completed"
        assert await redis.hget(f"bull:{queue_name}:{job.id}", "returnvalue") == b'{"ok":true}'
        assert await worker.get_next_job("t2", block=False) is None
    finally:
        await worker.close()


async def test_block_waits_for_a_job_added_meanwhile(redis: Redis, queue_name: str) -> None:
    # The job is added once the worker is seen blocked on the marker; a drain_delay far past
    # the test's own timeout means only that add can end the wait.
    worker = Worker(queue_name, None, connection=redis, drain_delay=60.0)
    name = f"bull:{base64.b64encode(queue_name.encode()).decode()}"

    async def blocked() -> bool:
        return any(c["name"] == name and c["cmd"] == "bzpopmin" for c in await redis.client_list())

    async def add_once_blocked() -> None:
        await wait_for(blocked, timeout=10, message="get_next_job never waited on the marker")
        await echomq.add(queue_name, "late", {}, connection=redis)

    try:
        adder = asyncio.create_task(add_once_blocked())
        job = await asyncio.wait_for(worker.get_next_job("tok"), 15)
        await adder
        assert job is not None and job.name == "late"
    finally:
        await worker.close()


async def test_move_to_failed_retries_per_attempts_then_fails(
    redis: Redis, queue_name: str
) -> None:
    added = await echomq.add(queue_name, "flaky", {}, connection=redis, attempts=3)
    worker = Worker(queue_name, None, connection=redis, drain_delay=0.2)
    try:
        outcomes = []
        for token in ("a", "b", "c"):
            job = await worker.get_next_job(token)
            assert job is not None and job.id == added.id
            outcomes.append(await job.move_to_failed(ValueError(f"try {token}"), token))
        assert outcomes == ["retry", "retry", "failed"]
        h = await redis.hgetall(f"bull:{queue_name}:{added.id}")
        assert h[b"failedReason"] == b"try c" and h[b"atm"] == b"3"
        assert b"ValueError" in h[b"stacktrace"]
    finally:
        await worker.close()


async def test_move_to_failed_stores_the_trace_as_a_worker_does(
    redis: Redis, queue_name: str
) -> None:
    """A job failed by hand keeps the traceback format of a worker's failures: from where it
    was raised, no caret lines; with stacktrace_limit 0, none."""
    kept = await echomq.add(queue_name, "kept", {}, connection=redis)
    bare = await echomq.add(queue_name, "bare", {}, connection=redis, stacktrace_limit=0)
    worker = Worker(queue_name, None, connection=redis, drain_delay=0.2)

    def charge() -> None:
        raise ValueError("card declined")

    try:
        for added, token in ((kept, "k"), (bare, "b")):
            job = await worker.get_next_job(token)
            assert job is not None and job.id == added.id
            try:
                charge()
            except ValueError as exc:
                assert await job.move_to_failed(exc, token) == "failed"
        traces = json.loads(await redis.hget(f"bull:{queue_name}:{kept.id}", "stacktrace"))
        assert len(traces) == 1 and "in charge" in traces[0] and "^^" not in traces[0]
        assert traces[0].endswith("ValueError: card declined")
        assert await redis.hget(f"bull:{queue_name}:{bare.id}", "stacktrace") == b"[]"
    finally:
        await worker.close()


async def test_move_to_failed_with_backoff_delays_and_unrecoverable_fails(
    redis: Redis, queue_name: str
) -> None:
    delayed = await echomq.add(
        queue_name, "d", {}, connection=redis, attempts=2, backoff=Backoff(type="fixed", delay=60)
    )
    doomed = await echomq.add(queue_name, "u", {}, connection=redis, attempts=5)
    worker = Worker(queue_name, None, connection=redis, drain_delay=0.2)
    try:
        first = await worker.get_next_job("t1")
        assert first is not None and first.id == delayed.id
        assert await first.move_to_failed(RuntimeError("later"), "t1") == "delayed"
        assert await state(redis, queue_name, delayed.id) == "delayed"
        second = await worker.get_next_job("t2")
        assert second is not None and second.id == doomed.id
        assert await second.move_to_failed(UnrecoverableError("no"), "t2") == "failed"
        assert await state(redis, queue_name, doomed.id) == "failed"
    finally:
        await worker.close()


async def test_move_to_wait_delayed_and_extend_lock(redis: Redis, queue_name: str) -> None:
    added = await echomq.add(queue_name, "w", {}, connection=redis)
    worker = Worker(queue_name, None, connection=redis, drain_delay=0.2, lock_duration=5)
    try:
        job = await worker.get_next_job("t1")
        assert job is not None
        assert 0 < await redis.pttl(f"bull:{queue_name}:{job.id}:lock") <= 5000
        assert await job.extend_lock("t1", 60) is True
        assert await redis.pttl(f"bull:{queue_name}:{job.id}:lock") > 50_000
        assert await job.extend_lock("not-mine", 60) is False
        await job.move_to_wait("t1")
        assert await state(redis, queue_name, added.id) == "waiting"
        assert await redis.hget(f"bull:{queue_name}:{added.id}", "atm") in (None, b"0")
        again = await worker.get_next_job("t2")
        assert again is not None and again.id == added.id
        await again.move_to_delayed(time.time() + 60, "t2")
        assert await state(redis, queue_name, added.id) == "delayed"
    finally:
        await worker.close()


async def test_stalled_check_timer_recovers_a_job_whose_lock_expired(
    redis: Redis, queue_name: str
) -> None:
    added = await echomq.add(queue_name, "s", {}, connection=redis)
    worker = Worker(queue_name, None, connection=redis, stalled_interval=0.2, drain_delay=0.2)
    try:
        job = await worker.get_next_job("t")
        assert job is not None
        await redis.delete(f"bull:{queue_name}:{job.id}:lock")  # as if it expired
        worker.start_stalled_check_timer()

        async def back() -> bool:
            return await state(redis, queue_name, added.id) == "waiting"

        await wait_for(back, timeout=5)
    finally:
        await worker.close()


async def test_manual_and_running_modes_are_exclusive(redis: Redis, queue_name: str) -> None:
    manual = Worker(queue_name, None, connection=redis)
    with pytest.raises(RuntimeError, match="no processor"):
        await manual.run()
    await manual.close()

    async def noop(job: Job) -> None:
        return None

    async with Worker(queue_name, noop, connection=redis, drain_delay=0.2) as running:
        with pytest.raises(RuntimeError, match="get_next_job is for workers"):
            await running.get_next_job("t")
        with pytest.raises(RuntimeError, match="checks stalled jobs itself"):
            running.start_stalled_check_timer()


def test_sync_job_has_the_manual_methods(sync_redis: Any, queue_name: str) -> None:
    added = echomq.sync.add(queue_name, "sync", {}, connection=sync_redis)

    async def take() -> str:
        redis = echomq.client_from_url(
            "redis://{host}:{port}".format(**sync_redis.connection_pool.connection_kwargs)
        )
        worker = Worker(queue_name, None, connection=redis, drain_delay=0.2)
        try:
            job = await worker.get_next_job("sync-token", block=False)
            assert job is not None
            return job.id
        finally:
            await worker.close()
            await redis.aclose()

    assert asyncio.run(take()) == added.id
    job = echomq.sync.get_job(queue_name, added.id, connection=sync_redis)
    assert job is not None
    assert job.extend_lock("sync-token", 30) is True
    job.move_to_completed(7, "sync-token")
    assert echomq.sync.get_state(queue_name, added.id, connection=sync_redis) == "completed"


# -- the documented recipe --------------------------------------------------------------------

Recipe = Callable[[Worker, Callable[[Job], Awaitable[Any]], asyncio.Event], Awaitable[None]]


def documented_recipe() -> Recipe:
    text = DOC.read_text()
    section = text[text.index("## Manual processing") :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None, "docs/workers.md#manual-processing has no python block"
    namespace: dict[str, Any] = {}
    exec(compile(match.group(1), str(DOC), "exec"), namespace)
    recipe: Recipe = namespace["work_by_hand"]
    return recipe


async def test_documented_recipe(redis: Redis, queue_name: str) -> None:
    ok = await echomq.add(queue_name, "ok", {"x": 3}, connection=redis)
    bad = await echomq.add(queue_name, "bad", {"x": 0}, connection=redis)
    later = await echomq.add(queue_name, "later", {"later": True}, connection=redis)

    async def handle(job: Job) -> float:
        return 6 / int(job.data["x"])

    work_by_hand = documented_recipe()
    worker = Worker(queue_name, None, connection=redis, drain_delay=0.2)
    stop = asyncio.Event()
    try:
        await asyncio.wait_for(work_by_hand(worker, handle, stop), 10)
    finally:
        await worker.close()
    assert await state(redis, queue_name, ok.id) == "completed"
    assert await redis.hget(f"bull:{queue_name}:{ok.id}", "returnvalue") == b"2.0"
    assert await state(redis, queue_name, bad.id) == "failed"
    reason = await redis.hget(f"bull:{queue_name}:{bad.id}", "failedReason")
    assert reason is not None and b"division by zero" in reason
    assert await state(redis, queue_name, later.id) == "waiting"
