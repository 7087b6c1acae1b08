"""bull-board 9 (Node, over BullMQ 6.7.6) shows and acts on queues that echomq fills and works.

``node/board.mjs`` serves bull-board's Express adapter for the test's queue; these tests call
its JSON API (the routes of ``@bull-board/api``'s ``dist/routes.js``) while every job is added
with ``echomq.Queue`` and run by an ``echomq.Worker``. The board answers are checked against
echomq's own reads of the same Redis keys, and the board's actions (retry, promote, clean,
remove, pause, resume) against what echomq sees and what its workers do next. The board is
started with bull-board's ``validateResponses``, so an answer that breaks bull-board's response
schema (a job hash field of the wrong shape, say) is an HTTP 500 here.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis

if str(Path(__file__).resolve().parent) not in sys.path:  # works with or without __init__.py
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import nodepeer
from _util import ms

from echomq import Job, Queue, Worker
from helpers import wait_for

pytestmark = pytest.mark.timeout(60)

BOARD_SCRIPT = Path(__file__).resolve().parent / "node" / "board.mjs"
FAST: dict[str, Any] = {"drain_delay": 0.2, "stalled_interval": 1.0}
#: bull-board's "clean" action keeps jobs that finished less than this long ago (fixed in 9.x).
CLEAN_GRACE = 5.0

Processor = Callable[[Job], Awaitable[Any]]


class Board:
    """A running ``board.mjs`` and a small JSON client for its API."""

    def __init__(self, base_url: str, stderr_path: Path) -> None:
        self.base_url = base_url
        self.stderr_path = stderr_path
        # No proxy from the environment: the board is on the loopback interface.
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    def _send(self, method: str, path: str) -> tuple[int, Any]:
        request = urllib.request.Request(
            self.base_url + path,
            method=method,
            data=b"{}" if method != "GET" else None,
            headers={"content-type": "application/json", "accept": "application/json"},
        )
        try:
            with self._opener.open(request, timeout=10) as response:
                status, raw = response.status, response.read()
        except urllib.error.HTTPError as error:
            status, raw = error.code, error.read()
        return status, json.loads(raw) if raw.strip() else None

    async def call(self, method: str, path: str, *expected: int) -> Any:
        """Send one request; fail (with the board's answer and stderr) unless the status fits."""
        status, body = await asyncio.to_thread(self._send, method, path)
        wanted = expected or (200,)
        if status not in wanted:
            stderr = self.stderr_path.read_text(errors="replace")[-4000:]
            raise AssertionError(
                f"{method} {path}: HTTP {status}, expected {wanted}: {body!r}\n"
                f"board stderr:\n{stderr}"
            )
        return body

    async def get(self, path: str) -> Any:
        return await self.call("GET", path)

    async def put(self, path: str, *expected: int) -> Any:
        return await self.call("PUT", path, *expected)

    async def queue(self, name: str, **query: str) -> dict[str, Any]:
        """The entry of ``GET /api/queues`` for one queue."""
        qs = urllib.parse.urlencode(query)
        body = await self.get("/api/queues" + (f"?{qs}" if qs else ""))
        found: list[dict[str, Any]] = [e for e in body["queues"] if e["name"] == name]
        assert len(found) == 1, f"queue {name} not on the board: {body!r}"
        return found[0]

    async def job(self, queue: str, job_id: str) -> dict[str, Any]:
        """``GET /api/queues/:queueName/:jobId``: ``{"job": {...}, "status": state}``."""
        body: dict[str, Any] = await self.get(f"/api/queues/{queue}/{job_id}")
        return body


@pytest.fixture
async def board(redis_url: str, queue_name: str, tmp_path: Path) -> AsyncIterator[Board]:
    binary = nodepeer.node_binary()
    assert binary is not None and nodepeer.node_available(), "node >= 20 is required"
    nodepeer.require_node_modules()
    config = {"url": redis_url, "queues": [queue_name], "prefix": "bull"}
    stderr_path = tmp_path / "board.stderr"
    with stderr_path.open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            binary,
            str(BOARD_SCRIPT),
            json.dumps(config),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=stderr,
        )
    try:
        assert proc.stdout is not None
        line = await asyncio.wait_for(proc.stdout.readline(), 20)
        started = json.loads(line) if line.strip() else {}
        if started.get("event") != "listening":
            raise AssertionError(
                f"board did not start: {line!r}\n{stderr_path.read_text(errors='replace')}"
            )
        assert started["versions"]["bullmq"] == nodepeer.BULLMQ_VERSION
        yield Board(f"http://127.0.0.1:{started['port']}", stderr_path)
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 5)
            except asyncio.TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()


@pytest.fixture
async def queue(redis: Redis, queue_name: str) -> AsyncIterator[Queue]:
    async with Queue(queue_name, connection=redis) as q:
        yield q


def worker(queue: Queue, redis: Redis, run: Processor, **options: Any) -> Worker:
    return Worker(queue.name, run, connection=redis, **FAST, **options)


async def wait_counts(queue: Queue, expected: dict[str, int], timeout: float = 10) -> None:
    async def reached() -> bool:
        return await queue.get_job_counts(*expected) == expected

    await wait_for(reached, timeout=timeout, message=f"counts {expected}")


async def wait_state(queue: Queue, job_id: str, state: str, timeout: float = 10) -> None:
    async def reached() -> bool:
        return await queue.get_state(job_id) == state

    await wait_for(reached, timeout=timeout, message=f"job {job_id} {state}")


async def test_counts_jobs_and_paused_flag_match_echomq(
    board: Board, queue: Queue, redis: Redis
) -> None:
    async def run(job: Job) -> str:
        if job.name == "bad":
            raise RuntimeError("bad job")
        return "fine"

    await queue.add_bulk([("ok", {}), ("ok", {}), ("bad", {})])
    async with worker(queue, redis, run):
        await wait_counts(queue, {"completed": 2, "failed": 1})
    await queue.add("later", {}, delay=60)
    await queue.add("urgent", {}, priority=3)
    await queue.add("plain", {"n": 1})
    await queue.add("plain", {"n": 2})
    taker = Worker(queue.name, None, connection=redis)
    try:
        assert await taker.get_next_job("board-token", block=False) is not None
        ours = await queue.get_job_counts()
        assert ours == {
            "active": 1,
            "completed": 2,
            "delayed": 1,
            "failed": 1,
            "prioritized": 1,
            "waiting": 1,
            "waiting-children": 0,
        }
        shown = await board.queue(queue.name)
        assert shown["counts"] == ours
        assert shown["isPaused"] is False
        for state, count in ours.items():
            page = await board.queue(queue.name, activeQueue=queue.name, status=state)
            ids = [job.id for job in await queue.get_jobs(state)]
            assert len(ids) == count
            assert [job["id"] for job in page["jobs"]] == ids, state

        await queue.pause()
        shown = await board.queue(queue.name)
        assert shown["isPaused"] is True
        assert shown["counts"] == ours  # BullMQ 6 keeps a paused queue's jobs in "waiting"
        await queue.resume()
        assert (await board.queue(queue.name))["isPaused"] is False
    finally:
        await taker.close()


async def test_job_details_logs_and_failures(board: Board, queue: Queue, redis: Redis) -> None:
    async def run(job: Job) -> Any:
        if job.name == "sum":
            await job.log("adding")
            await job.update_progress(40)
            await job.log(f"{job.data['a']} + {job.data['b']}")
            await job.update_progress({"done": 2, "of": 2})
            return {"total": job.data["a"] + job.data["b"]}
        await job.update_progress(30)
        raise ValueError(f"cannot handle {job.data['n']}")

    done = await queue.add("sum", {"a": 1, "b": 2}, attempts=3, job_id="sum-1")
    bad = await queue.add("broken", {"n": 7}, attempts=2)
    async with worker(queue, redis, run, name="board-worker"):
        await wait_counts(queue, {"completed": 1, "failed": 1})

    ours = await queue.get_job(done.id)
    assert ours is not None
    shown = await board.job(queue.name, done.id)
    assert shown["status"] == await queue.get_state(done.id) == "completed"
    job = shown["job"]
    assert job["id"] == "sum-1"
    assert job["name"] == "sum"
    assert job["data"] == {"a": 1, "b": 2}
    assert job["opts"]["attempts"] == 3
    assert job["returnValue"] == ours.return_value == {"total": 3}
    assert job["progress"] == ours.progress == {"done": 2, "of": 2}
    assert job["attempts"] == ours.attempts_made == 1
    assert job["timestamp"] == ms(ours.timestamp)
    assert job["processedOn"] == ms(ours.processed_on)
    assert job["finishedOn"] == ms(ours.finished_on)
    assert job["timestamp"] <= job["processedOn"] <= job["finishedOn"]
    assert job["processedBy"] == ours.processed_by == "board-worker"
    assert job["isFailed"] is False
    assert job["stacktrace"] == []
    logs = await board.get(f"/api/queues/{queue.name}/{done.id}/logs")
    assert logs == ["adding", "1 + 2"]
    assert logs == (await queue.get_job_logs(done.id))[0]

    failed = await queue.get_job(bad.id)
    assert failed is not None
    shown = await board.job(queue.name, bad.id)
    assert shown["status"] == "failed"
    job = shown["job"]
    assert job["name"] == "broken"
    assert job["failedReason"] == failed.failed_reason == "cannot handle 7"
    assert job["isFailed"] is True
    assert job["attempts"] == failed.attempts_made == 2
    assert job["progress"] == 30
    assert job["finishedOn"] == ms(failed.finished_on)
    # bull-board shows the stack traces newest first; the job hash keeps them oldest first.
    assert len(failed.stacktrace) == 2
    assert job["stacktrace"] == list(reversed(failed.stacktrace))
    assert "ValueError: cannot handle 7" in job["stacktrace"][0]
    assert await board.get(f"/api/queues/{queue.name}/{bad.id}/logs") == []


async def test_retry_one_and_all_failed_then_echomq_completes_them(
    board: Board, queue: Queue, redis: Redis
) -> None:
    healthy = asyncio.Event()
    runs: dict[str, int] = {}

    async def run(job: Job) -> int:
        runs[job.id] = runs.get(job.id, 0) + 1
        if not healthy.is_set():
            raise RuntimeError("not yet")
        return int(job.data["n"]) * 10

    jobs = await queue.add_bulk([("calc", {"n": n}) for n in (1, 2, 3)])
    ids = [job.id for job in jobs]
    async with worker(queue, redis, run):
        await wait_counts(queue, {"failed": 3, "completed": 0})
        healthy.set()
        assert (await board.queue(queue.name))["counts"]["failed"] == 3

        await board.put(f"/api/queues/{queue.name}/{ids[0]}/retry", 204)
        await wait_state(queue, ids[0], "completed")
        assert await queue.get_job_counts("failed", "completed") == {"failed": 2, "completed": 1}
        first = await queue.get_job(ids[0])
        assert first is not None and first.return_value == 10

        body = await board.put(f"/api/queues/{queue.name}/retry/failed")
        assert body == {"retried": 2, "skipped": 0}
        await wait_counts(queue, {"failed": 0, "completed": 3})
        for job_id, n in zip(ids, (1, 2, 3), strict=True):
            job = await queue.get_job(job_id)
            assert job is not None and job.return_value == n * 10
            shown = await board.job(queue.name, job_id)
            assert shown["status"] == "completed"
            assert shown["job"]["returnValue"] == n * 10
        assert runs == {ids[0]: 2, ids[1]: 2, ids[2]: 2}

        # A completed job may be retried too: the worker runs it once more.
        await board.put(f"/api/queues/{queue.name}/{ids[2]}/retry", 204)
        await wait_for(lambda: runs[ids[2]] == 3, timeout=10)
        await wait_state(queue, ids[2], "completed")
        # Retrying a job that is neither failed nor completed is refused.
        later = await queue.add("calc", {"n": 4}, delay=60)
        await board.put(f"/api/queues/{queue.name}/{later.id}/retry", 400)
        assert await queue.get_state(later.id) == "delayed"


async def test_promote_one_and_all_delayed(board: Board, queue: Queue, redis: Redis) -> None:
    ran: list[str] = []

    async def run(job: Job) -> None:
        ran.append(job.id)

    async with worker(queue, redis, run):
        ids = [(await queue.add("later", {"n": n}, delay=60)).id for n in range(3)]
        shown = await board.queue(queue.name)
        assert shown["counts"]["delayed"] == 3

        await board.put(f"/api/queues/{queue.name}/{ids[0]}/promote", 204)
        await wait_state(queue, ids[0], "completed")
        assert ran == [ids[0]]
        assert [await queue.get_state(job_id) for job_id in ids[1:]] == ["delayed", "delayed"]

        await board.put(f"/api/queues/{queue.name}/promote")
        await wait_counts(queue, {"delayed": 0, "completed": 3})
        assert sorted(ran) == sorted(ids)
        assert (await board.queue(queue.name))["counts"]["completed"] == 3


async def test_pause_resume_and_remove_from_the_board(
    board: Board, queue: Queue, redis: Redis
) -> None:
    ran: list[str] = []

    async def run(job: Job) -> None:
        ran.append(job.id)

    async with worker(queue, redis, run):

        async def has_workers() -> bool:
            return bool((await board.queue(queue.name))["hasWorkers"])

        await wait_for(has_workers, timeout=5, message="bull-board sees the echomq worker")

        await board.put(f"/api/queues/{queue.name}/pause")
        assert await queue.is_paused() is True
        first = await queue.add("job", {"n": 1})
        second = await queue.add("job", {"n": 2})
        await asyncio.sleep(0.6)  # three drain_delay rounds of the worker
        assert ran == []
        assert [await queue.get_state(j.id) for j in (first, second)] == ["waiting", "waiting"]
        shown = await board.queue(queue.name)
        assert shown["isPaused"] is True
        assert shown["counts"]["waiting"] == 2

        await board.put(f"/api/queues/{queue.name}/{first.id}/clean", 204)
        assert await queue.get_job(first.id) is None
        assert await redis.exists(f"bull:{queue.name}:{first.id}") == 0
        await board.call("GET", f"/api/queues/{queue.name}/{first.id}", 404)
        assert (await board.queue(queue.name))["counts"]["waiting"] == 1

        await board.put(f"/api/queues/{queue.name}/resume")
        assert await queue.is_paused() is False
        await wait_state(queue, second.id, "completed")
        assert ran == [second.id]
        assert (await board.queue(queue.name))["isPaused"] is False


async def test_clean_completed_keeps_recent_jobs(board: Board, queue: Queue, redis: Redis) -> None:
    async def run(job: Job) -> str:
        return job.name

    async with worker(queue, redis, run):
        old = await queue.add_bulk([("old", {}), ("old", {})])
        await wait_counts(queue, {"completed": 2})
        await asyncio.sleep(CLEAN_GRACE + 0.3)
        recent = await queue.add("recent", {})
        await wait_state(queue, recent.id, "completed")

        await board.put(f"/api/queues/{queue.name}/clean/completed")
        assert [await queue.get_job(job.id) for job in old] == [None, None]
        kept = await queue.get_job(recent.id)
        assert kept is not None and kept.return_value == "recent"
        assert await queue.get_job_counts("completed") == {"completed": 1}
        assert (await board.queue(queue.name))["counts"]["completed"] == 1
