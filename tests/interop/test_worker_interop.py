"""The echomq worker against the real BullMQ 6.7.6 for Node (issue "the worker and the events").

A Python worker must leave the same keys, fields and events as a Node worker, finish jobs a
Node worker started (and the reverse), recover jobs a crashed Node worker left (and the
reverse), honour deferred failures written by the other side, and share a queue with a Node
worker. The Node side runs through ``tests/interop/node/driver.mjs`` (``npm ci --prefix tests``).
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from redis.asyncio import Redis

if str(Path(__file__).resolve().parent) not in sys.path:  # works with or without __init__.py
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import nodepeer
from _util import CLOCK_FIELDS, diff, node_subset
from nodepeer import NodePeer

import echomq
from _procs import WorkerProcs, run_counts
from echomq import Job, UnrecoverableError, Worker
from helpers import queue_key, wait_for

pytestmark = pytest.mark.timeout(90)

STALLED_REASON = "job stalled more than allowable limit"
FAST: dict[str, Any] = {"drain_delay": 0.2, "lock_duration": 1.0, "stalled_interval": 0.3}
NODE_FAST: dict[str, Any] = {"drainDelay": 1, "lockDuration": 1000, "stalledInterval": 300}


@pytest.fixture
async def peer(redis_url: str, queue_name: str) -> AsyncIterator[NodePeer]:
    assert nodepeer.node_available(), "node >= 20 is required for the interop tests"
    async with NodePeer(redis_url, queue_name) as p:
        yield p


@pytest.fixture
async def twin(redis_url: str) -> AsyncIterator[NodePeer]:
    """A second, empty queue driven from Node (for side-by-side comparisons)."""
    async with NodePeer(redis_url, f"q-{uuid4().hex[:12]}") as p:
        yield p


@pytest.fixture
def procs(tmp_path: Path, redis_url: str) -> Iterator[WorkerProcs]:
    with WorkerProcs(tmp_path, redis_url) as group:
        yield group


class Behave:
    """A Python processor doing what the driver's ``work`` ``behaviour`` does (same keys)."""

    def __init__(self, behaviour: dict[str, dict[str, Any]]) -> None:
        self.behaviour = behaviour
        self.invocations: list[tuple[str, int]] = []  # (job id, attempts made)

    async def __call__(self, job: Job) -> Any:
        b = self.behaviour.get(job.name, self.behaviour.get("*", {}))
        self.invocations.append((job.id, job.attempts_made))
        if b.get("sleepMs"):
            await asyncio.sleep(b["sleepMs"] / 1000)
        if "unrecoverable" in b:
            raise UnrecoverableError(str(b["unrecoverable"]))
        if "fail" in b and job.attempts_made < b.get("failTimes", float("inf")):
            raise RuntimeError(str(b["fail"]))
        if b.get("echo"):
            return job.data
        return b.get("return")


async def final_count(r: Redis, queue: str) -> int:
    return int(await r.zcard(queue_key(queue, "completed"))) + int(
        await r.zcard(queue_key(queue, "failed"))
    )


async def wait_final(r: Redis, queue: str, n: int, timeout: float = 15) -> None:
    async def done() -> bool:
        return await final_count(r, queue) >= n

    await wait_for(done, timeout=timeout, message=f"{queue}: fewer than {n} final outcomes")


async def hash_of(r: Redis, queue: str, job_id: str) -> dict[str, str]:
    raw = await r.hgetall(queue_key(queue, job_id))
    return {k.decode(): v.decode() for k, v in raw.items()}


# -- the same jobs, processed by Python and by Node ------------------------------------------

TWIN_JOBS: list[dict[str, Any]] = [
    {"name": "a", "data": {"i": 1}},
    {"name": "p5", "data": {"i": 2}, "opts": {"priority": 5}},
    {"name": "p1", "data": {"i": 3}, "opts": {"priority": 1}},
    {
        "name": "fixed",
        "data": {"i": 4},
        "opts": {"attempts": 3, "backoff": {"type": "fixed", "delay": 50}},
    },
    {
        "name": "expo",
        "data": {"i": 5},
        "opts": {"attempts": 2, "backoff": {"type": "exponential", "delay": 30}},
    },
    {"name": "once", "data": {"i": 6}},
    {"name": "lifo", "data": {"i": 7}, "opts": {"lifo": True}},
    {"name": "delayed", "data": {"i": 8}, "opts": {"delay": 250}},
    {"name": "unrec", "data": {"i": 9}, "opts": {"attempts": 3}},
    {"name": "retry-now", "data": {"i": 10}, "opts": {"attempts": 2}},
    {"name": "b", "data": {"i": 11}},
]
TWIN_BEHAVIOUR: dict[str, dict[str, Any]] = {
    "*": {"return": {"ok": True}},
    "fixed": {"fail": "boom", "failTimes": 2, "return": "fixed-ok"},
    "expo": {"fail": "bad"},
    "once": {"fail": "nope"},
    "unrec": {"unrecoverable": "stop"},
    "retry-now": {"fail": "again", "failTimes": 1, "echo": True},
}
TWIN_FAILED = {"expo", "once", "unrec"}


def per_job_events(events: list[dict[str, Any]]) -> dict[str, list[tuple[Any, ...]]]:
    """Node QueueEvents' view, per job: (event, prev, value) with clock values left out."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    for e in events:
        args = e["args"] or {}
        if "jobId" not in args:
            continue
        value: Any = None
        name = e["event"]
        if name == "completed":
            value = args.get("returnvalue")
        elif name == "failed":
            value = args.get("failedReason")
        elif name == "retries-exhausted":
            value = args.get("attemptsMade")
        elif name == "added":
            value = args.get("name")
        out.setdefault(str(args["jobId"]), []).append((name, args.get("prev"), value))
    return out


def first_activations(events: list[dict[str, Any]], skip: set[str]) -> list[str]:
    seen: list[str] = []
    for e in events:
        job_id = str((e["args"] or {}).get("jobId"))
        if e["event"] == "active" and job_id not in seen and job_id not in skip:
            seen.append(job_id)
    return seen


def comparable(json_view: dict[str, Any]) -> dict[str, Any]:
    view = {k: v for k, v in node_subset(json_view).items() if k not in CLOCK_FIELDS}
    view["stacktrace"] = len(view["stacktrace"] or [])
    return view


async def test_node_jobs_processed_by_python_as_by_node(
    peer: NodePeer, twin: NodePeer, redis: Redis
) -> None:
    py_ids, node_ids = await asyncio.gather(peer.add_many(TWIN_JOBS), twin.add_many(TWIN_JOBS))
    assert py_ids == node_ids
    n = len(TWIN_JOBS)
    behave = Behave(TWIN_BEHAVIOUR)
    node_work = twin.work(count=n, name="twin", behaviour=TWIN_BEHAVIOUR, **NODE_FAST)
    async with Worker(peer.queue, behave, connection=redis, name="twin", **FAST):
        report, _ = await asyncio.gather(node_work, wait_final(redis, peer.queue, n))
    assert report["reason"] == "count"

    # Outcomes and final fields, as Node reads them.
    py_jobs, node_jobs = await asyncio.gather(
        peer.batch([("getJob", {"id": i}) for i in py_ids]),
        twin.batch([("getJob", {"id": i}) for i in node_ids]),
    )
    for spec, py_job, node_job in zip(TWIN_JOBS, py_jobs, node_jobs):
        expected_state = "failed" if spec["name"] in TWIN_FAILED else "completed"
        assert py_job["state"] == node_job["state"] == expected_state, spec["name"]
        py_view, node_view = comparable(py_job["json"]), comparable(node_job["json"])
        assert py_view == node_view, (spec["name"], diff(py_view, node_view))
        assert py_job["json"]["finishedOn"] and node_job["json"]["finishedOn"]

    # Same processing order (first attempts of the jobs that were ready at start).
    py_events, node_events = await asyncio.gather(
        peer.call("events", lastId="0", timeoutMs=700),
        twin.call("events", lastId="0", timeoutMs=700),
    )
    assert not py_events["errors"] and not node_events["errors"]
    delayed_id = {s["name"]: i for s, i in zip(TWIN_JOBS, py_ids)}["delayed"]
    py_order = first_activations(py_events["events"], {delayed_id})
    node_order = first_activations(node_events["events"], {delayed_id})
    assert py_order == node_order
    names = {i: spec["name"] for spec, i in zip(TWIN_JOBS, py_ids)}
    expected = ["lifo", "a", "fixed", "expo", "once", "unrec", "retry-now", "b", "p1", "p5"]
    assert [names[i] for i in py_order] == expected
    assert [i for i, made in behave.invocations if made == 0 and i != delayed_id] == py_order

    # The same event sequence per job, as Node's QueueEvents sees it.
    py_seq, node_seq = per_job_events(py_events["events"]), per_job_events(node_events["events"])
    for job_id in py_ids:
        assert py_seq[job_id] == node_seq[job_id], (job_id, py_seq[job_id], node_seq[job_id])
    drained = [sum(e["event"] == "drained" for e in r["events"]) for r in (py_events, node_events)]
    assert drained[0] >= 1 and drained[1] >= 1


# -- a job handed over between the two sides ---------------------------------------------------


async def test_python_job_failed_by_node_then_completed_by_python(
    peer: NodePeer, redis: Redis
) -> None:
    job = await echomq.add(
        peer.queue,
        "hand",
        {"v": 1},
        connection=redis,
        attempts=3,
        backoff={"type": "fixed", "delay": 0.4},
    )
    node = await peer.start("work", behaviour={"*": {"fail": "node says no"}}, **NODE_FAST)
    await node.wait_for_event("failed", job.id, timeout=15)
    await node.stop()
    h = await hash_of(redis, peer.queue, job.id)
    assert h["atm"] == "1" and h["failedReason"] == "node says no"
    assert await redis.zscore(queue_key(peer.queue, "delayed"), job.id) is not None

    behave = Behave({"*": {"return": "python-done"}})
    async with Worker(peer.queue, behave, connection=redis, **FAST):
        await wait_final(redis, peer.queue, 1)
    assert behave.invocations == [(job.id, 1)]
    got = await peer.get_job(job.id)
    assert got is not None and got["state"] == "completed"
    j = got["json"]
    assert (j["attemptsMade"], j["attemptsStarted"], j["returnvalue"]) == (2, 2, "python-done")
    assert len(j["stacktrace"]) == 1 and "node says no" in j["stacktrace"][0]
    assert j["failedReason"] == "node says no"  # kept from the failed attempt, as Node does


async def test_node_job_failed_by_python_then_completed_by_node(
    peer: NodePeer, redis: Redis
) -> None:
    job_id = await peer.add(
        "hand", {"v": 2}, {"attempts": 3, "backoff": {"type": "fixed", "delay": 400}}
    )
    behave = Behave({"*": {"fail": "python says no"}})
    async with Worker(peer.queue, behave, connection=redis, **FAST):
        await wait_for(
            lambda: redis.zscore(queue_key(peer.queue, "delayed"), job_id),
            timeout=10,
            message="the failed attempt was not moved to delayed",
        )
    assert behave.invocations == [(job_id, 0)]
    report = await peer.work(count=1, behaviour={"*": {"return": "node-done"}}, **NODE_FAST)
    assert [(i["id"], i["attemptsMade"]) for i in report["invocations"]] == [(job_id, 1)]
    got = await peer.get_job(job_id)
    assert got is not None and got["state"] == "completed"
    j = got["json"]
    assert (j["attemptsMade"], j["attemptsStarted"], j["returnvalue"]) == (2, 2, "node-done")
    assert j["failedReason"] == "python says no"
    assert len(j["stacktrace"]) == 1 and "python says no" in j["stacktrace"][0]


# -- stalled jobs across the two sides ---------------------------------------------------------


async def test_job_of_killed_python_worker_recovered_by_node(
    peer: NodePeer, procs: WorkerProcs, redis: Redis
) -> None:
    (job,) = await echomq.add_bulk(peer.queue, [("crash", {"sleep": 30})], connection=redis)
    py = procs.start(peer.queue)
    await wait_for(lambda: _ran(redis, peer.queue, job.id), timeout=15)
    py.kill()
    report = await peer.work(count=1, behaviour={"*": {"return": "node-recovered"}}, **NODE_FAST)
    assert [i["id"] for i in report["invocations"]] == [job.id]
    assert any(e["event"] == "stalled" and e["jobId"] == job.id for e in report["events"])
    got = await peer.get_job(job.id)
    assert got is not None and got["state"] == "completed"
    j = got["json"]
    assert (j["returnvalue"], j["stalledCounter"], j["attemptsStarted"], j["attemptsMade"]) == (
        "node-recovered",
        1,
        2,
        1,
    )


async def _ran(r: Redis, queue: str, job_id: str) -> bool:
    return (await run_counts(r, queue))[job_id] >= 1


async def test_job_of_killed_node_worker_recovered_by_python(peer: NodePeer, redis: Redis) -> None:
    job_id = await peer.add("crash", {"v": 3})
    crashed = await peer.start("work", behaviour={"*": {"exitProcessMidJob": True}}, **NODE_FAST)
    assert await crashed.wait() == 137
    assert await redis.lrange(queue_key(peer.queue, "active"), 0, -1) == [job_id.encode()]
    behave = Behave({"*": {"return": "python-recovered"}})
    async with Worker(peer.queue, behave, connection=redis, **FAST):
        await wait_final(redis, peer.queue, 1)
    assert behave.invocations == [(job_id, 0)]
    h = await hash_of(redis, peer.queue, job_id)
    assert (h["returnvalue"], h["stc"], h["ats"], h["atm"]) == ('"python-recovered"', "1", "2", "1")
    events = await peer.call("xrange")
    names = [f["event"] for _, f in events if f.get("jobId") == job_id]
    assert names == ["added", "waiting", "active", "waiting", "stalled", "active", "completed"]


async def test_deferred_failure_written_by_python_honoured_by_node(
    peer: NodePeer, procs: WorkerProcs, redis: Redis
) -> None:
    (crash,) = await echomq.add_bulk(peer.queue, [("crash", {"sleep": 30})], connection=redis)
    py = procs.start(peer.queue)
    await wait_for(lambda: _ran(redis, peer.queue, crash.id), timeout=15)
    py.kill()
    # A Python worker kept busy (concurrency 1) writes `defa` from its stalled check only.
    busy = await echomq.add(peer.queue, "busy", {}, connection=redis)
    gate = asyncio.Event()

    async def hold(job: Job) -> str:
        await gate.wait()
        return "held"

    async with Worker(peer.queue, hold, connection=redis, max_stalled_count=0, **FAST):
        await wait_for(lambda: redis.hget(queue_key(peer.queue, crash.id), "defa"), timeout=10)
        assert await redis.lrange(queue_key(peer.queue, "wait"), 0, -1) == [crash.id.encode()]
        report = await peer.work(count=1, maxStalledCount=0, behaviour={}, **NODE_FAST)
        gate.set()
    assert report["invocations"] == [], "Node ran a job it must fail without running"
    assert [(e["event"], e["jobId"], e["failedReason"]) for e in report["events"]] == [
        ("failed", crash.id, STALLED_REASON)
    ]
    h = await hash_of(redis, peer.queue, crash.id)
    assert h["failedReason"] == STALLED_REASON and "defa" not in h
    assert (await run_counts(redis, peer.queue))[crash.id] == 1
    assert await redis.hget(queue_key(peer.queue, busy.id), "returnvalue") == b'"held"'


async def test_deferred_failure_written_by_node_honoured_by_python(
    peer: NodePeer, redis: Redis
) -> None:
    crash_id = await peer.add("crash", {})
    crashed = await peer.start("work", behaviour={"*": {"exitProcessMidJob": True}}, **NODE_FAST)
    assert await crashed.wait() == 137
    await peer.add("busy", {})
    # A Node worker kept busy (concurrency 1) writes `defa` from its stalled check only.
    node = await peer.start(
        "work", maxStalledCount=0, behaviour={"busy": {"hangForever": True}}, **NODE_FAST
    )
    await node.wait_for_event("started", timeout=15)
    await wait_for(lambda: redis.hget(queue_key(peer.queue, crash_id), "defa"), timeout=10)
    behave = Behave({"*": {"return": "must not run"}})
    async with Worker(peer.queue, behave, connection=redis, **FAST):
        await wait_for(lambda: redis.zscore(queue_key(peer.queue, "failed"), crash_id), timeout=10)
    node.kill()
    assert behave.invocations == []
    h = await hash_of(redis, peer.queue, crash_id)
    assert h["failedReason"] == STALLED_REASON and "defa" not in h
    assert (h["atm"], h["stc"]) == ("1", "1")
    events = await peer.call("xrange")
    names = [f["event"] for _, f in events if f.get("jobId") == crash_id]
    assert names[-5:] == ["waiting", "stalled", "active", "failed", "retries-exhausted"]


# -- waitUntilFinished in Node for jobs a Python worker finished -------------------------------


async def test_node_wait_until_finished_on_python_outcomes(peer: NodePeer, redis: Redis) -> None:
    ok = await echomq.add(peer.queue, "ok", {"x": [1, "two"]}, connection=redis)
    bad = await echomq.add(peer.queue, "bad", {}, connection=redis)
    waits = [
        peer.call("waitUntilFinished", id=job_id, timeoutMs=15000) for job_id in (ok.id, bad.id)
    ]
    behave = Behave({"ok": {"echo": True}, "bad": {"fail": "python failure"}})

    async def process_later() -> None:
        await asyncio.sleep(0.8)  # let the Node waiters subscribe first (either order works)
        async with Worker(peer.queue, behave, connection=redis, **FAST):
            await wait_final(redis, peer.queue, 2)

    got_ok, got_bad, _ = await asyncio.gather(*waits, process_later())
    assert got_ok == {"returnvalue": {"x": [1, "two"]}}
    assert got_bad == {"failed": "python failure"}


# -- a mixed fleet -----------------------------------------------------------------------------


async def test_mixed_fleet_completes_every_job_once(peer: NodePeer, redis: Redis) -> None:
    n = 200
    behave = Behave({"*": {"echo": True, "sleepMs": 5}})
    node = await peer.start(
        "work",
        concurrency=4,
        name="nodew",
        behaviour={"*": {"echo": True, "sleepMs": 5}},
        timeoutMs=60000,
        **NODE_FAST,
    )
    await node.wait_ready()
    async with Worker(peer.queue, behave, connection=redis, concurrency=4, name="pyw", **FAST):
        node_listed = await peer.call("getWorkers")
        py_listed = await echomq.get_workers(peer.queue, connection=redis)
        half = n // 2
        node_ids = await peer.add_many(
            [{"name": "n", "data": {"i": i}} for i in range(half)], bulk=True
        )
        py_jobs = await echomq.add_bulk(
            peer.queue, [("p", {"i": i}) for i in range(half, n)], connection=redis
        )
        ids = node_ids + [j.id for j in py_jobs]
        await wait_final(redis, peer.queue, n, timeout=40)
        report = await node.stop()
    suffix = ":w:"
    assert sorted(w["rawname"].rsplit(suffix, 1)[-1] for w in node_listed) == ["nodew", "pyw"]
    assert sorted(w["rawname"].rsplit(suffix, 1)[-1] for w in py_listed) == ["nodew", "pyw"]
    assert all(w["name"] == peer.queue for w in node_listed + py_listed)

    assert await redis.zcard(queue_key(peer.queue, "completed")) == n
    assert await redis.zcard(queue_key(peer.queue, "failed")) == 0
    assert await redis.llen(queue_key(peer.queue, "active")) == 0
    node_runs = [i["id"] for i in report["invocations"]]
    py_runs = [job_id for job_id, _ in behave.invocations]
    runs = Counter(node_runs + py_runs)
    assert sorted(runs) == sorted(ids) and set(runs.values()) == {1}
    assert node_runs and py_runs, "both workers took jobs"
    entries = await redis.xrange(queue_key(peer.queue, "events"), count=10 * n)
    completed = Counter(f[b"jobId"].decode() for _, f in entries if f[b"event"] == b"completed")
    assert set(completed.values()) == {1} and len(completed) == n
    by_worker = {"nodew": set(node_runs), "pyw": set(py_runs)}
    for i, job_id in enumerate(ids):
        h = await hash_of(redis, peer.queue, job_id)
        assert json.loads(h["returnvalue"]) == {"i": i}
        assert (h["atm"], h["ats"]) == ("1", "1")
        assert job_id in by_worker[h["pb"]]


async def test_metrics_read_the_same_from_both_sides(peer: NodePeer, redis: Redis) -> None:
    """Node and Python workers write the same metrics keys; both getMetrics read them alike."""

    def as_node(m: echomq.Metrics) -> dict[str, Any]:
        meta = {"count": m.meta.count, "prevTS": m.meta.prev_ts, "prevCount": m.meta.prev_count}
        return {"meta": meta, "data": m.data, "count": m.count}

    await peer.add_many([{"name": "n", "data": {"i": i}} for i in range(3)], bulk=True)
    report = await peer.work(
        count=3, behaviour={"*": {"return": 1}}, metrics={"maxDataPoints": 10}, **NODE_FAST
    )
    assert report["reason"] == "count", report
    await echomq.add_bulk(peer.queue, [("p", {}) for _ in range(2)], connection=redis)

    async def ok(job: Job) -> int:
        return 1

    async with Worker(peer.queue, ok, connection=redis, metrics_max_data_points=10, **FAST):
        await wait_final(redis, peer.queue, 5, timeout=20)
    # move the last boundary 3 minutes back: the next finish closes the minute that held
    # jobs 2..5 (4 of them) and two empty minutes since, newest first
    metrics_key = queue_key(peer.queue, "metrics:completed")
    prev_ts = int(await redis.hget(metrics_key, "prevTS") or 0)
    moved_ts = prev_ts - 3 * 60_000
    await redis.hset(metrics_key, mapping={"prevTS": moved_ts, "prevCount": 1})
    await echomq.add(peer.queue, "last", {}, connection=redis)
    async with Worker(peer.queue, ok, connection=redis, metrics_max_data_points=10, **FAST):
        await wait_final(redis, peer.queue, 6, timeout=20)

    for kind in ("completed", "failed"):
        ours = await echomq.get_metrics(peer.queue, kind, connection=redis)
        node = await peer.call("queueMethod", method="getMetrics", args=[kind, 0, -1])
        assert node == as_node(ours), (kind, node, ours)
    ours = await echomq.get_metrics(peer.queue, connection=redis)
    assert (ours.meta.count, ours.meta.prev_count) == (6, 5)
    minutes = ours.meta.prev_ts // 60_000 - moved_ts // 60_000  # 3, or 4 across a boundary
    assert (ours.data, ours.count) == ([0] * (minutes - 1) + [4], minutes)
    window = await peer.call("queueMethod", method="getMetrics", args=["completed", 1, 1])
    assert window == as_node(
        await echomq.get_metrics(peer.queue, "completed", 1, 1, connection=redis)
    )


# -- job schedulers created by BullMQ ----------------------------------------------------------


async def upsert_every(peer: NodePeer, scheduler: str, every_ms: int) -> None:
    template = {"name": "tick", "data": {"x": 1}, "opts": {"attempts": 2}}
    await peer.call(
        "queueMethod", method="upsertJobScheduler", args=[scheduler, {"every": every_ms}, template]
    )


async def scheduler_state(r: Redis, queue: str, scheduler: str) -> tuple[int, dict[str, str]]:
    """(score of the scheduler's current iteration, the iteration's hash)."""
    score = int(await r.zscore(queue_key(queue, "repeat"), scheduler) or 0)
    return score, await hash_of(r, queue, f"repeat:{scheduler}:{score}")


def iteration_view(h: dict[str, str], score: int) -> dict[str, Any]:
    """An iteration hash with its clock-dependent values replaced by what they must equal."""
    opts = json.loads(h["opts"])
    assert opts.pop("jobId") == f"repeat:{h['rjk']}:{score}"
    # BullMQ takes the opts' clock on the client and the hash's in the script: allow for a
    # round trip (a few ms, more on a loaded machine)
    assert int(opts.pop("delay")) == int(h["delay"])
    assert abs(int(h["delay"]) - (score - int(h["timestamp"]))) <= 100
    assert abs(int(opts.pop("timestamp")) - int(h["timestamp"])) <= 100
    rest = {k: v for k, v in h.items() if k not in ("opts", "delay", "timestamp")}
    return {**rest, "opts": opts}


async def test_every_scheduler_continues_on_python_and_node_workers_alike(
    peer: NodePeer, twin: NodePeer, redis: Redis
) -> None:
    """An iteration taken by a Python worker creates the next one exactly as a Node worker does;
    and a Node worker continues from the iteration Python created."""
    every = 3_600_000  # the first iteration runs now, the second an hour later
    for side in (peer, twin):
        await upsert_every(side, "s-every", every)

    async def ok(job: Job) -> str:
        return "tick"

    async with Worker(peer.queue, ok, connection=redis, **FAST):
        await wait_final(redis, peer.queue, 1)
    report = await twin.work(count=1, behaviour={"*": {"return": "tick"}}, **NODE_FAST)
    assert report["reason"] == "count", report

    py_score, py_next = await scheduler_state(redis, peer.queue, "s-every")
    node_score, node_next = await scheduler_state(redis, twin.queue, "s-every")
    assert py_next and node_next
    assert iteration_view(py_next, py_score) == iteration_view(node_next, node_score)
    assert json.loads(py_next["opts"])["repeat"] == {"every": every, "count": 2}
    for q, score in ((peer.queue, py_score), (twin.queue, node_score)):
        assert await redis.hget(queue_key(q, "repeat:s-every"), "ic") == b"2"
        assert await redis.zscore(queue_key(q, "delayed"), f"repeat:s-every:{score}") is not None
    events = [f[b"event"] for _, f in await redis.xrange(queue_key(peer.queue, "events"))][-4:]
    node_events = [f[b"event"] for _, f in await redis.xrange(queue_key(twin.queue, "events"))][-4:]
    assert events == node_events

    # A Node worker takes the iteration Python created (promoted to run now) and goes on.
    await peer.call("jobMethod", id=f"repeat:s-every:{py_score}", method="promote")
    report = await peer.work(count=1, behaviour={"*": {"return": "tick"}}, **NODE_FAST)
    assert report["reason"] == "count", report
    third_score, third = await scheduler_state(redis, peer.queue, "s-every")
    assert third_score == py_score + every
    assert json.loads(third["opts"])["repeat"] == {"every": every, "count": 3}
    assert await redis.hget(queue_key(peer.queue, "repeat:s-every"), "ic") == b"3"


async def test_cron_scheduler_continues_on_python_and_node_workers_alike(
    peer: NodePeer, twin: NodePeer, redis: Redis
) -> None:
    """An iteration of a cron scheduler taken by a Python worker creates the next one (the next
    1 January, Madrid time) exactly as a Node worker does."""
    for side in (peer, twin):
        await side.call(
            "queueMethod",
            method="upsertJobScheduler",
            args=[
                "s-cron",
                {"pattern": "0 0 1 1 *", "tz": "Europe/Madrid", "immediately": True},
                {"name": "yearly"},
            ],
        )
    ran: list[str] = []

    async def run(job: Job) -> None:
        ran.append(job.id)

    async with Worker(peer.queue, run, connection=redis, **FAST):
        await wait_final(redis, peer.queue, 1)
    report = await twin.work(count=1, behaviour={"*": {"return": None}}, **NODE_FAST)
    assert report["reason"] == "count", report
    assert len(ran) == 1 and ran[0].startswith("repeat:s-cron:")

    py_score, py_next = await scheduler_state(redis, peer.queue, "s-cron")
    node_score, node_next = await scheduler_state(redis, twin.queue, "s-cron")
    assert py_next and node_next and py_score == node_score
    assert iteration_view(py_next, py_score) == iteration_view(node_next, node_score)
    opts = json.loads(py_next["opts"])
    assert opts["prevMillis"] == py_score and opts["repeat"]["count"] == 2
    for q in (peer.queue, twin.queue):
        assert await redis.hget(queue_key(q, "repeat:s-cron"), "ic") == b"2"


# -- deduplication: keepLastIfActive ----------------------------------------------------------

KEEP_LAST = {"deduplication": {"id": "kla", "keepLastIfActive": True}}


async def active_ids(r: Redis, queue: str) -> list[str]:
    return [i.decode() for i in await r.lrange(queue_key(queue, "active"), 0, -1)]


async def test_keep_last_if_active_job_is_added_when_a_python_worker_finishes_the_owner(
    peer: NodePeer, twin: NodePeer, redis: Redis
) -> None:
    """Adds deduplicated while the owner was active wait in `dn:kla`; finishing the owner turns
    the last of them into a job, on a Python worker exactly as on a Node worker."""
    gate = asyncio.Event()

    async def run(job: Job) -> Any:
        if job.name == "owner":
            await gate.wait()
        return job.data

    owner = await peer.add("owner", {"v": 0}, KEEP_LAST)
    async with Worker(peer.queue, run, connection=redis, **FAST):
        await wait_for(lambda: active_ids(redis, peer.queue), timeout=10)
        later = [await peer.add("next", {"v": v}, KEEP_LAST) for v in (1, 2)]
        assert await redis.exists(queue_key(peer.queue, "dn:kla")) == 1
        gate.set()
        await wait_final(redis, peer.queue, 2)

    node_owner = await twin.add("owner", {"v": 0}, KEEP_LAST)
    node = await twin.start(
        "work", count=2, behaviour={"owner": {"sleepMs": 5000}, "*": {"echo": True}}, **NODE_FAST
    )
    await wait_for(lambda: active_ids(redis, twin.queue), timeout=10)
    node_later = [await twin.add("next", {"v": v}, KEEP_LAST) for v in (1, 2)]
    report = await node.result(30)
    assert report["reason"] == "count", report

    assert (owner, later) == (node_owner, node_later) == ("1", ["1", "1"])  # deduplicated
    for q in (peer.queue, twin.queue):
        assert await redis.exists(queue_key(q, "dn:kla"), queue_key(q, "de:kla")) == 0
        assert await redis.zrange(queue_key(q, "completed"), 0, -1) == [b"1", b"3"]
    ours, theirs = await hash_of(redis, peer.queue, "3"), await hash_of(redis, twin.queue, "3")
    skip = {"timestamp", "processedOn", "finishedOn", "returnvalue", "pb"}
    assert {k: v for k, v in ours.items() if k not in skip} == {
        k: v for k, v in theirs.items() if k not in skip
    }
    assert json.loads(ours["data"]) == {"v": 2} and ours["deid"] == "kla"

    def names(entries: list[Any]) -> list[tuple[str, str]]:
        return [(f[b"event"].decode(), f.get(b"jobId", b"").decode()) for _, f in entries]

    py_events = names(await redis.xrange(queue_key(peer.queue, "events")))
    node_events = names(await redis.xrange(queue_key(twin.queue, "events")))
    assert py_events == node_events
