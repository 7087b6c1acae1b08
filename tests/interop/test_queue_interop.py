"""The stateless queue against the real BullMQ 6.7.6 for Node (issue item 9).

Jobs written by echomq are read, processed and administered by Node, and the other way round;
both sides must see the same fields, states, counts, orders and events. The Node side runs
through ``tests/interop/node/driver.mjs`` (``npm ci --prefix tests`` once).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from redis.asyncio import Redis as AsyncRedis

if str(Path(__file__).resolve().parent) not in sys.path:  # works with or without __init__.py
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import nodepeer
from _util import CLOCK_FIELDS, diff, ms, node_subset, node_view, without
from nodepeer import NodePeer

import echomq
from echomq import Backoff, JobOptions, JobState, KeepJobs, Queue

pytestmark = pytest.mark.timeout(90)

TS = 1_700_000_000.5  # an explicit creation time (epoch seconds), 1700000000500 ms on the wire
TS_MS = 1_700_000_000_500

# One row per kind of job: (name, echomq keyword options, the same options as BullMQ takes them).
KINDS: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("std", {}, {}),
    ("custom", {"job_id": "custom-1"}, {"jobId": "custom-1"}),
    ("lifo", {"lifo": True}, {"lifo": True}),
    ("delayed", {"delay": 60}, {"delay": 60000}),
    ("prio", {"priority": 7}, {"priority": 7}),
    ("delayed-prio", {"delay": 30, "priority": 2}, {"delay": 30000, "priority": 2}),
    (
        "fixed",
        {"attempts": 3, "backoff": Backoff(type="fixed", delay=0.05)},
        {"attempts": 3, "backoff": {"type": "fixed", "delay": 50}},
    ),
    ("fixed-num", {"attempts": 2, "backoff": 0.03}, {"attempts": 2, "backoff": 30}),
    (
        "expo",
        {"attempts": 3, "backoff": {"type": "exponential", "delay": 0.04, "jitter": 0.5}},
        {"attempts": 3, "backoff": {"type": "exponential", "delay": 40, "jitter": 0.5}},
    ),
    ("roc-true", {"remove_on_complete": True}, {"removeOnComplete": True}),
    ("roc-count", {"remove_on_complete": 5}, {"removeOnComplete": 5}),
    (
        "roc-keep",
        {"remove_on_complete": KeepJobs(age=3600, count=10)},
        {"removeOnComplete": {"age": 3600, "count": 10}},
    ),
    ("rof", {"remove_on_fail": True, "attempts": 2}, {"removeOnFail": True, "attempts": 2}),
    (
        "rof-keep",
        {"remove_on_fail": KeepJobs(count=3, age=60, limit=5)},
        {"removeOnFail": {"count": 3, "age": 60, "limit": 5}},
    ),
    ("logs", {"keep_logs": 3}, {"keepLogs": 3}),
    ("st", {"stacktrace_limit": 2, "attempts": 3}, {"stackTraceLimit": 2, "attempts": 3}),
    ("size", {"size_limit": 1000}, {"sizeLimit": 1000}),
    ("ts", {"timestamp": TS}, {"timestamp": TS_MS}),
    (
        "zeros",
        {"priority": 0, "delay": 0, "attempts": 1, "lifo": False, "backoff": 0},
        {"priority": 0, "delay": 0, "attempts": 1, "lifo": False, "backoff": 0},
    ),
    (
        "all",
        {
            "job_id": "all-1",
            "priority": 3,
            "attempts": 2,
            "backoff": Backoff(type="exponential", delay=0.02),
            "remove_on_complete": KeepJobs(count=40),
            "remove_on_fail": 9,
            "keep_logs": 4,
            "stacktrace_limit": 1,
            "size_limit": 4096,
            "timestamp": TS,
        },
        {
            "jobId": "all-1",
            "priority": 3,
            "attempts": 2,
            "backoff": {"type": "exponential", "delay": 20},
            "removeOnComplete": {"count": 40},
            "removeOnFail": 9,
            "keepLogs": 4,
            "stackTraceLimit": 1,
            "sizeLimit": 4096,
            "timestamp": TS_MS,
        },
    ),
]
# The first N kinds are added one by one, the rest in one bulk call (add_bulk / addBulk).
N_SINGLE = 11
DELAYED_KINDS = {"delayed", "delayed-prio"}

# How a Node worker treats each kind in the processing tests.
BEHAVIOUR: dict[str, dict[str, Any]] = {
    "*": {"log": "hello", "progress": 42, "echo": True},
    "fixed": {"fail": "fixed boom", "failTimes": 2, "return": {"ok": "fixed"}},
    "fixed-num": {"fail": "num boom", "failTimes": 1, "return": "num"},
    "expo": {"fail": "expo boom"},
    "rof": {"fail": "rof boom"},
    "rof-keep": {"fail": "rof-keep boom"},
    "st": {"fail": "st boom"},
    "logs": {"logs": ["l1", "l2", "l3", "l4", "l5"], "return": 5},
    "size": {"progress": {"pct": 50, "s": "é/x"}, "return": None},
    "all": {"fail": "all boom", "failTimes": 1, "progressSteps": [1, {"p": 2}], "echo": True},
}
# Final outcomes (completed, or failed with no retry left) of the non-delayed kinds.
FINALS = len(KINDS) - len(DELAYED_KINDS)


def data_for(name: str) -> Any:
    return {
        "kind": name,
        "n": len(name),
        "nested": {"list": [1, "two", None, 2.5, True], "text": 'héllo / ✓ "q" \\ \u2028'},
    }


@pytest.fixture
async def peer(redis_url: str, queue_name: str) -> AsyncIterator[NodePeer]:
    assert nodepeer.node_available(), "node >= 20 is required for the interop tests"
    async with NodePeer(redis_url, queue_name) as p:
        yield p


@pytest.fixture
async def queue(redis_url: str, queue_name: str) -> AsyncIterator[Queue]:
    async with Queue(queue_name, connection=redis_url) as q:
        yield q


@pytest.fixture
async def twin(redis_url: str) -> AsyncIterator[tuple[Queue, NodePeer]]:
    """A second, empty queue seen from both sides (for side-by-side comparisons)."""
    name = f"q-{uuid4().hex[:12]}"
    async with NodePeer(redis_url, name) as p, Queue(name, connection=redis_url) as q:
        yield q, p


async def add_kinds_python(queue: Queue, client: AsyncRedis) -> list[str]:
    """Add every kind from echomq: single adds (Queue.add and echomq.add), then add_bulk."""
    ids: list[str] = []
    for index, (name, kw, _) in enumerate(KINDS[:N_SINGLE]):
        if index % 2:
            job = await echomq.add(queue.name, name, data_for(name), connection=client, **kw)
        else:
            job = await queue.add(name, data_for(name), **kw)
        ids.append(job.id)
    bulk = await queue.add_bulk([(name, data_for(name), kw) for name, kw, _ in KINDS[N_SINGLE:]])
    ids.extend(job.id for job in bulk)
    return ids


async def add_kinds_node(peer: NodePeer) -> list[str]:
    """Add every kind from Node: Queue.add one by one, then Queue.addBulk."""
    single, bulk = await peer.batch(
        [
            (
                "add",
                {
                    "jobs": [
                        {"name": n, "data": data_for(n), "opts": o} for n, _, o in KINDS[:N_SINGLE]
                    ]
                },
            ),
            (
                "add",
                {
                    "jobs": [
                        {"name": n, "data": data_for(n), "opts": o} for n, _, o in KINDS[N_SINGLE:]
                    ],
                    "bulk": True,
                },
            ),
        ]
    )
    return [str(i) for i in single + bulk]


async def node_jobs(peer: NodePeer, ids: list[str]) -> list[dict[str, Any] | None]:
    """Node's getJob for each id, in one Node process."""
    return await peer.batch([("getJob", {"id": i}) for i in ids])


async def node_states(peer: NodePeer, ids: list[str]) -> list[str]:
    return await peer.batch([("getJobState", {"id": i}) for i in ids])


# -- 1. jobs added from Python, processed and read by Node --------------------------------------


async def test_python_jobs_look_like_node_jobs_to_node(
    queue: Queue, peer: NodePeer, twin: tuple[Queue, NodePeer], redis: AsyncRedis
) -> None:
    """Node's getJob view of each Python-added kind equals that of the Node-added twin."""
    _, twin_peer = twin
    before = int(time.time() * 1000)
    py_ids = await add_kinds_python(queue, redis)
    after = int(time.time() * 1000)
    node_ids = await add_kinds_node(twin_peer)
    assert py_ids == node_ids
    assert py_ids[1] == "custom-1" and py_ids[-1] == "all-1"

    py_view, node_view_ = await asyncio.gather(
        node_jobs(peer, py_ids), node_jobs(twin_peer, node_ids)
    )
    for (name, _, opts), py, nd in zip(KINDS, py_view, node_view_):
        assert py is not None and nd is not None, name
        py_json, nd_json = py["json"], nd["json"]
        if "timestamp" not in opts:
            assert before <= py_json["timestamp"] <= after, name
            py_json, nd_json = without(py_json, "timestamp"), without(nd_json, "timestamp")
        assert diff(py_json, nd_json) == {}, name
        assert py["state"] == nd["state"], name
        # asJSON is the raw hash as Node would write it back: opts decoded equal, same data text.
        assert py["asJSON"]["data"] == nd["asJSON"]["data"], name
        assert py["asJSON"]["opts"] == nd["asJSON"]["opts"], name

    by_name = {name: v["json"] for (name, _, _), v in zip(KINDS, py_view)}  # type: ignore[index]
    assert by_name["std"]["opts"] == {"attempts": 0}
    assert by_name["std"]["attemptsMade"] == 0 and by_name["std"]["progress"] == 0
    assert by_name["delayed"]["delay"] == 60000 and by_name["delayed-prio"]["priority"] == 2
    assert by_name["fixed-num"]["opts"]["backoff"] == {"type": "fixed", "delay": 30}
    assert by_name["logs"]["opts"]["keepLogs"] == 3
    assert by_name["ts"]["timestamp"] == TS_MS
    assert [v["state"] for v in py_view] == [  # type: ignore[index]
        "delayed" if n in DELAYED_KINDS else "prioritized" if o.get("priority") else "waiting"
        for n, _, o in KINDS
    ]


async def test_python_jobs_processed_by_node_like_node_jobs(
    queue: Queue, peer: NodePeer, twin: tuple[Queue, NodePeer], redis: AsyncRedis
) -> None:
    """A Node worker runs Python-added jobs exactly as it runs the same jobs added by Node."""
    _, twin_peer = twin
    py_ids = await add_kinds_python(queue, redis)
    node_ids = await add_kinds_node(twin_peer)
    args = {"count": FINALS, "timeoutMs": 20000, "drainDelay": 1, "behaviour": BEHAVIOUR}
    py_report, nd_report = await asyncio.gather(peer.work(**args), twin_peer.work(**args))
    assert py_report["reason"] == "count", py_report
    assert nd_report["reason"] == "count", nd_report

    def runs(report: dict[str, Any]) -> list[tuple[str, str, Any, int, int]]:
        return sorted(
            (i["id"], i["name"], i["data"], i["attemptsMade"], i["priority"])
            for i in report["invocations"]
        )

    assert runs(py_report) == runs(nd_report)
    finals = sorted(
        (e["jobId"], e["event"], e.get("failedReason"), e.get("attemptsMade"))
        for e in py_report["events"]
    )
    assert finals == sorted(
        (e["jobId"], e["event"], e.get("failedReason"), e.get("attemptsMade"))
        for e in nd_report["events"]
    )

    py_after, nd_after = await asyncio.gather(
        node_jobs(peer, py_ids), node_jobs(twin_peer, node_ids)
    )
    for (name, _, _), py, nd in zip(KINDS, py_after, nd_after):
        if nd is None:
            assert py is None, name
            continue
        assert py is not None, name
        py_json = without(py["json"], *CLOCK_FIELDS, "stacktrace")
        nd_json = without(nd["json"], *CLOCK_FIELDS, "stacktrace")
        assert diff(py_json, nd_json) == {}, name
        assert len(py["json"]["stacktrace"]) == len(nd["json"]["stacktrace"]), name
        assert py["state"] == nd["state"], name

    logs = await peer.batch([("getLogs", {"id": i}) for i in py_ids])
    twin_logs = await twin_peer.batch([("getLogs", {"id": i}) for i in node_ids])
    assert logs == twin_logs
    by_name = dict(zip([k[0] for k in KINDS], py_after))
    assert by_name["roc-true"] is None and by_name["rof"] is None
    assert by_name["fixed"] is not None and by_name["fixed"]["json"]["attemptsMade"] == 3
    assert by_name["fixed"]["json"]["returnvalue"] == {"ok": "fixed"}
    assert by_name["expo"] is not None and by_name["expo"]["state"] == "failed"
    assert by_name["expo"]["json"]["attemptsMade"] == 3
    assert len(by_name["st"]["json"]["stacktrace"]) == 2  # type: ignore[index]
    assert len(by_name["all"]["json"]["stacktrace"]) == 1  # type: ignore[index]
    assert logs[[k[0] for k in KINDS].index("logs")] == {"logs": ["l3", "l4", "l5"], "count": 3}


async def test_node_worker_order_and_delay_for_python_jobs(
    queue: Queue, peer: NodePeer, redis: AsyncRedis
) -> None:
    """Node takes Python-added jobs in BullMQ order: lifo and FIFO wait, then by priority."""
    old = datetime(2020, 1, 1, tzinfo=timezone.utc)
    await queue.add("a", {"i": 1})
    await echomq.add(queue.name, "b", {"i": 2}, job_id="custom-x", connection=redis)
    await queue.add_bulk(
        [("c", {"i": 3}), ("d", {"i": 4}, {"priority": 2}), ("e", {"i": 5}, {"lifo": True})]
    )
    await queue.add("p1", {"i": 6}, priority=1)
    await queue.add("p3", {"i": 7}, priority=3)
    await queue.add("l", {"i": 8}, lifo=True)
    dl = await queue.add("dl", {"i": 9}, delay=0.8)
    dp = await queue.add("dp", {"i": 10}, delay=0.8, priority=1)
    await queue.add("ts", {"i": 11}, timestamp=old)

    report = await peer.work(
        count=11, timeoutMs=15000, drainDelay=1, behaviour={"*": {"echo": True}}
    )
    assert report["reason"] == "count", report
    runs = report["invocations"]
    assert [r["name"] for r in runs if r["id"] not in (dl.id, dp.id)] == [
        "l", "e", "a", "b", "c", "ts", "p1", "d", "p3",
    ]  # fmt: skip
    by_name = {r["name"]: r for r in runs}
    assert by_name["b"]["id"] == "custom-x"
    assert by_name["ts"]["timestamp"] == ms(old)
    assert [by_name[n]["data"] for n in "abcde"] == [{"i": i} for i in range(1, 6)]
    for name in ("dl", "dp"):
        run = by_name[name]
        assert run["opts"]["delay"] == 800
        assert run["delay"] == 0  # promotion resets the hash field
        assert run["processedOn"] >= run["timestamp"] + 800, run
    assert by_name["dp"]["priority"] == 1
    completed = {
        e["jobId"]: e["returnvalue"] for e in report["events"] if e["event"] == "completed"
    }
    assert completed[dl.id] == {"i": 9} and completed["custom-x"] == {"i": 2}


async def test_node_worker_honours_python_retry_options(queue: Queue, peer: NodePeer) -> None:
    """attempts + fixed / exponential (jitter) backoff and stacktrace_limit, as Node does them."""
    fixed = await queue.add("fixed", {"k": 1}, attempts=3, backoff=Backoff(type="fixed", delay=0.2))
    expo = await queue.add(
        "expo",
        {"k": 2},
        attempts=3,
        backoff=Backoff(type="exponential", delay=0.1, jitter=0.5),
        stacktrace_limit=1,
    )
    plain = await queue.add("plain", {"k": 3}, attempts=2)
    report = await peer.work(
        count=3,
        timeoutMs=15000,
        drainDelay=1,
        behaviour={
            "fixed": {"fail": "not yet", "failTimes": 2, "return": "third time"},
            "expo": {"fail": "never"},
            "plain": {"fail": "plain"},
        },
    )
    assert report["reason"] == "count", report

    def tries(job_id: str) -> list[dict[str, Any]]:
        return [i for i in report["invocations"] if i["id"] == job_id]

    fixed_runs = tries(fixed.id)
    assert [r["attemptsMade"] for r in fixed_runs] == [0, 1, 2]
    assert [r["attemptsStarted"] for r in fixed_runs] == [1, 2, 3]
    assert fixed_runs[0]["opts"]["backoff"] == {"type": "fixed", "delay": 200}
    for prev, nxt in zip(fixed_runs, fixed_runs[1:]):
        assert nxt["startedAt"] - prev["startedAt"] >= 200
    expo_runs = tries(expo.id)
    assert [r["attemptsMade"] for r in expo_runs] == [0, 1, 2]
    # jitter 0.5: the n-th retry waits at least 2**(n-1) * 100 * 0.5 ms.
    assert expo_runs[1]["startedAt"] - expo_runs[0]["startedAt"] >= 50
    assert expo_runs[2]["startedAt"] - expo_runs[1]["startedAt"] >= 100
    assert [r["attemptsMade"] for r in tries(plain.id)] == [0, 1]

    failed = [e for e in report["events"] if e["event"] == "failed"]
    assert [(e["attemptsMade"], e["final"]) for e in failed if e["jobId"] == expo.id] == [
        (1, False),
        (2, False),
        (3, True),
    ]
    fixed_job = await queue.get_job(fixed.id)
    assert fixed_job is not None
    assert (fixed_job.attempts_made, fixed_job.attempts_started) == (3, 3)
    assert fixed_job.return_value == "third time" and fixed_job.failed_reason == "not yet"
    assert len(fixed_job.stacktrace) == 2
    expo_job = await queue.get_job(expo.id)
    assert expo_job is not None and await expo_job.get_state() is JobState.FAILED
    assert (expo_job.attempts_made, expo_job.failed_reason) == (3, "never")
    assert len(expo_job.stacktrace) == 1


async def test_node_worker_honours_python_removal_and_keep_logs(
    queue: Queue, peer: NodePeer, redis: AsyncRedis
) -> None:
    keep1 = await queue.add("keep1", None, remove_on_complete=KeepJobs(age=3600, count=1))
    keep2 = [await queue.add("keep2", {"i": i}, remove_on_complete=2) for i in range(4)]
    gone = await queue.add("gone", None, remove_on_complete=True)
    fail_gone = await queue.add("failgone", None, remove_on_fail=True)
    fail_keep = await queue.add("failkeep", None, remove_on_fail=KeepJobs(count=5))
    logs = await queue.add("logs", None, keep_logs=2)
    report = await peer.work(
        count=9,
        timeoutMs=15000,
        drainDelay=1,
        behaviour={
            "*": {"return": 1},
            "failgone": {"fail": "x"},
            "failkeep": {"fail": "y"},
            "logs": {"logs": ["a", "b", "c", "d"], "return": 2},
        },
    )
    assert report["reason"] == "count", report
    key = f"bull:{queue.name}:"
    # keep2 (count 2): after the 4th, only the 3rd and 4th stayed.
    assert [await redis.exists(key + j.id) for j in keep2] == [0, 0, 1, 1]
    assert await redis.exists(key + gone.id) == 0
    # keep2 trimmed keep1 away; logs (no option) keeps everything.
    assert await redis.exists(key + keep1.id) == 0
    completed = await queue.get_jobs("completed", asc=True)
    assert [j.id for j in completed] == [keep2[2].id, keep2[3].id, logs.id]
    assert await queue.get_job(fail_gone.id) is None
    assert await redis.exists(key + fail_gone.id + ":logs") == 0
    assert [j.id for j in await queue.get_jobs("failed")] == [fail_keep.id]
    assert await queue.get_job_logs(logs.id) == (["c", "d"], 2)
    assert await peer.call("getLogs", id=logs.id) == {"logs": ["c", "d"], "count": 2}


# -- 2. jobs added from Node, read by echomq -----------------------------------------------------


async def assert_same_view(queue: Queue, peer: NodePeer, ids: list[str]) -> None:
    """echomq's get_job / get_state / get_job_logs agree with Node's for every id."""
    n = len(ids)
    node = await peer.batch(
        [("getJob", {"id": i}) for i in ids]
        + [("getLogs", {"id": i}) for i in ids]
        + [("getLogs", {"id": i, "start": 0, "end": 1, "asc": False}) for i in ids]
    )
    for job_id, nd, nd_logs, newest in zip(ids, node[:n], node[n : 2 * n], node[2 * n :]):
        job = await queue.get_job(job_id)
        if nd is None:
            assert job is None, job_id
            continue
        assert job is not None, job_id
        assert diff(node_view(job), node_subset(nd["json"])) == {}, job_id
        assert (await queue.get_state(job_id)).value == nd["state"], job_id
        assert (await job.get_state()).value == nd["state"], job_id
        logs, count = await queue.get_job_logs(job_id)
        assert {"logs": logs, "count": count} == nd_logs, job_id
        assert await queue.get_job_logs(job_id, 0, 1, asc=False) == (newest["logs"], count)


async def test_node_jobs_read_by_echomq(queue: Queue, peer: NodePeer, redis: AsyncRedis) -> None:
    """Every kind added by Node reads back in echomq with the same fields and options."""
    before = int(time.time() * 1000)
    ids = await add_kinds_node(peer)
    after = int(time.time() * 1000)
    for (name, kw, opts), job_id in zip(KINDS, ids):
        job = await queue.get_job(job_id)
        assert job is not None, name
        assert (job.id, job.name, job.data) == (job_id, name, data_for(name))
        # Node always stores attempts (0 by default), so it reads back set.
        assert job.options == JobOptions.build({"attempts": 0, **kw}), name
        assert job.delay == kw.get("delay", 0) and job.priority == kw.get("priority", 0), name
        assert job.attempts == kw.get("attempts", 0), name
        assert (job.attempts_made, job.attempts_started, job.progress) == (0, 0, 0), name
        assert (job.processed_on, job.finished_on, job.return_value) == (None, None, None), name
        assert job.failed_reason is None and job.stacktrace == [], name
        if "timestamp" in opts:
            assert ms(job.timestamp) == TS_MS
        else:
            assert before - 5 <= ms(job.timestamp) <= after + 5, name  # type: ignore[operator]
    module_job = await echomq.get_job(queue.name, ids[1], connection=redis)
    assert module_job is not None and module_job.options.job_id == "custom-1"
    assert await echomq.queue.get_state(queue.name, ids[3], connection=redis) is (JobState.DELAYED)
    await assert_same_view(queue, peer, ids)


async def test_node_jobs_processed_by_node_read_by_echomq(queue: Queue, peer: NodePeer) -> None:
    """After a Node worker ran them: attempts, times, results, errors, progress and logs agree."""
    ids = await add_kinds_node(peer)
    report = await peer.work(
        count=FINALS, timeoutMs=20000, drainDelay=1, name="nodeworker", behaviour=BEHAVIOUR
    )
    assert report["reason"] == "count", report
    await assert_same_view(queue, peer, ids)

    by_name = {name: await queue.get_job(i) for (name, _, _), i in zip(KINDS, ids)}
    fixed = by_name["fixed"]
    assert fixed is not None
    assert (fixed.attempts_made, fixed.attempts_started) == (3, 3)
    assert fixed.return_value == {"ok": "fixed"} and fixed.failed_reason == "fixed boom"
    assert fixed.processed_by == "nodeworker"
    assert fixed.processed_on is not None and fixed.finished_on is not None
    assert fixed.finished_on >= fixed.processed_on
    st = by_name["st"]
    assert st is not None and await st.get_state() is JobState.FAILED
    assert st.failed_reason == "st boom" and len(st.stacktrace) == 2
    assert "st boom" in st.stacktrace[-1]
    assert by_name["rof"] is None and by_name["roc-true"] is None
    size = by_name["size"]
    assert size is not None and size.progress == {"pct": 50, "s": "é/x"}
    assert size.return_value is None
    all_ = by_name["all"]
    assert all_ is not None and all_.progress == {"p": 2} and all_.return_value == data_for("all")
    std = by_name["std"]
    assert std is not None and std.progress == 42 and std.return_value == data_for("std")
    assert await queue.get_job_logs(ids[0]) == (["hello"], 1)
    logs_id = ids[[k[0] for k in KINDS].index("logs")]
    assert await queue.get_job_logs(logs_id) == (["l3", "l4", "l5"], 3)
    assert await queue.get_job_logs(logs_id, 0, 0, asc=False) == (["l5"], 3)


async def test_every_state_agrees(queue: Queue, peer: NodePeer) -> None:
    """get_state equals Node's getState for waiting, prioritized, delayed, active, completed,
    failed and unknown jobs."""
    done, bad = await peer.add_many([{"name": "ok"}, {"name": "bad"}])
    report = await peer.work(
        count=2, timeoutMs=10000, drainDelay=1, behaviour={"bad": {"fail": "x"}}
    )
    assert report["reason"] == "count", report
    slow = await peer.add("slow", {"s": 1})
    worker = await peer.start(
        "work", timeoutMs=20000, drainDelay=1, behaviour={"slow": {"hangForever": True}}
    )
    try:
        await worker.wait_for_event("started", slow)
        waiting, prio, delayed = await peer.add_many(
            [
                {"name": "w"},
                {"name": "p", "opts": {"priority": 4}},
                {"name": "d", "opts": {"delay": 60000}},
            ]
        )
        lifo = (await queue.add("wl", lifo=True)).id
        ids = [done, bad, slow, waiting, prio, delayed, lifo, "missing"]
        expected = [
            "completed", "failed", "active", "waiting", "prioritized", "delayed", "waiting",
            "unknown",
        ]  # fmt: skip
        assert await node_states(peer, ids) == expected
        assert [(await queue.get_state(i)).value for i in ids] == expected
        active = await queue.get_job(slow)
        assert active is not None and active.attempts_started == 1 and active.processed_on
        await assert_same_view(queue, peer, ids)
    finally:
        await worker.stop()


# -- 3. counts and listings ----------------------------------------------------------------------


async def test_counts_and_get_jobs_agree(queue: Queue, peer: NodePeer, redis: AsyncRedis) -> None:
    for i in range(3):
        await queue.add("ok", {"i": i})
    await queue.add_bulk([("bad", {"i": 10}), ("bad", {"i": 11}, {"attempts": 1})])
    report = await peer.work(
        count=5, timeoutMs=10000, drainDelay=1, behaviour={"bad": {"fail": "x"}}
    )
    assert report["reason"] == "count", report
    await queue.add("w1")
    await queue.add("w2", lifo=True)
    await queue.add("w3", job_id="custom-w")
    await peer.add_many(
        [
            {"name": "p1", "opts": {"priority": 5}},
            {"name": "p2", "opts": {"priority": 1}},
            {"name": "d1", "opts": {"delay": 50000}},
        ]
    )
    await queue.add("p3", priority=5)
    await queue.add("d2", delay=40)
    await queue.add("dp", delay=45, priority=2)

    states = ["waiting", "prioritized", "delayed", "completed", "failed", "active"]
    calls: list[tuple[str, dict[str, Any]]] = [("counts", {}), ("counts", {"types": states})]
    ranges = [(0, -1), (1, 2), (-2, -1)]
    listing = [(s, a, r) for s in states for a in (False, True) for r in ranges]
    listing.append((["completed", "failed"], False, (0, -1)))
    listing.append((["waiting", "prioritized", "delayed"], True, (0, 1)))
    calls += [
        (
            "getJobs",
            {"types": [s] if isinstance(s, str) else s, "start": r[0], "end": r[1], "asc": a},
        )
        for s, a, r in listing
    ]
    results = await peer.batch(calls)

    counts = await queue.get_job_counts()
    assert counts == results[0]
    assert counts == {
        "active": 0, "completed": 3, "delayed": 3, "failed": 2, "prioritized": 3, "waiting": 3,
        "waiting-children": 0,
    }  # fmt: skip
    assert await queue.get_job_counts(*states) == results[1]
    assert await echomq.queue.get_job_counts(queue.name, *states, connection=redis) == results[1]
    for (s, a, r), nd in zip(listing, results[2:]):
        jobs = await queue.get_jobs(s, r[0], r[1], asc=a)
        assert [(j.id, j.name) for j in jobs] == [(x["id"], x["name"]) for x in nd], (s, a, r)
    assert [x["name"] for x in results[2 + listing.index(("waiting", True, (0, -1)))]] == [
        "w2", "w1", "w3",
    ]  # fmt: skip
    assert await queue.count() == 9


# -- 4. pause / resume, clean, drain, obliterate across the two sides ---------------------------


async def stream_events(peer: NodePeer) -> list[dict[str, str]]:
    """The raw entries of the queue's events stream (fields only)."""
    return [fields for _, fields in await peer.call("xrange")]


async def test_pause_from_python_holds_node_worker(queue: Queue, peer: NodePeer) -> None:
    await queue.pause()
    assert await peer.call("isPaused") is True
    worker = await peer.start("work", count=1, timeoutMs=15000, drainDelay=1)
    await worker.wait_ready()
    job = await queue.add("held", {"x": 1})
    # A running Node worker takes a new job within milliseconds; give it a generous moment.
    await asyncio.sleep(0.7)
    assert [line for line in worker.lines if line.get("event") == "started"] == []
    assert await peer.call("getJobState", id=job.id) == "waiting"
    await queue.resume()
    await worker.wait_for_event("started", job.id)
    report = await worker.result(timeout=20)
    assert report["reason"] == "count"
    assert await queue.is_paused() is False
    assert await peer.call("isPaused") is False
    events = [e["event"] for e in await stream_events(peer)]
    assert events[:4] == ["paused", "added", "waiting", "resumed"]


async def test_pause_from_node_holds_echomq(queue: Queue, peer: NodePeer, redis_url: str) -> None:
    await peer.call("pause")
    assert await queue.is_paused() is True
    assert await echomq.queue.is_paused(queue.name, connection=redis_url) is True
    seen: list[str] = []
    done = asyncio.Event()

    async def process(job: echomq.Job) -> str:
        seen.append(job.id)
        done.set()
        return "ok"

    job = await peer.add("held", {"x": 2})
    async with echomq.Worker(queue.name, process, connection=redis_url, drain_delay=0.2):
        await asyncio.sleep(0.7)
        assert seen == []
        assert await queue.get_state(job) is JobState.WAITING
        await peer.call("resume")
        assert await queue.is_paused() is False
        await asyncio.wait_for(done.wait(), 10)
    assert seen == [job]
    # Both sides write the same pause / resume entries.
    py_queue_events = [e for e in await stream_events(peer) if e["event"] in ("paused", "resumed")]
    assert py_queue_events == [{"event": "paused"}, {"event": "resumed"}]
    await queue.pause()
    await queue.resume()
    entries = [e for e in await stream_events(peer) if e["event"] in ("paused", "resumed")]
    assert entries == [{"event": "paused"}, {"event": "resumed"}] * 2


async def test_clean_from_each_side(queue: Queue, peer: NodePeer, redis: AsyncRedis) -> None:
    ok = [(await queue.add("ok", {"i": i})).id for i in range(3)]
    bad = await peer.add_many([{"name": "bad"}, {"name": "bad"}])
    report = await peer.work(
        count=5, timeoutMs=10000, drainDelay=1, behaviour={"bad": {"fail": "x"}}
    )
    assert report["reason"] == "count", report
    waiting = [(await queue.add("w", {"i": i})).id for i in range(3)]

    assert await queue.clean(60, 0, "completed") == []
    assert sorted(await queue.clean(0, 0, "completed")) == sorted(ok)
    too_young, cleaned_ids = await peer.batch(
        [("clean", {"grace": 60000, "type": "failed"}), ("clean", {"grace": 0, "type": "failed"})]
    )
    assert too_young == [] and sorted(cleaned_ids) == sorted(bad)
    # limit 1 on a list: the oldest waiting job goes.
    assert await queue.clean(0, 1, "waiting") == [waiting[0]]

    gone = [*ok, *bad, waiting[0]]
    node_counts, *node_jobs_, raw, seen = await peer.batch(
        [("counts", {"types": ["completed", "failed", "waiting"]})]
        + [("getJob", {"id": i}) for i in gone]
        + [
            ("xrange", {}),
            ("events", {"lastId": "0", "untilEvent": "cleaned", "untilCount": 5}),
        ]
    )
    assert node_counts == {"completed": 0, "failed": 0, "waiting": 2}
    assert await queue.get_job_counts("completed", "failed", "waiting") == node_counts
    assert node_jobs_ == [None] * len(gone)
    for job_id in gone:
        assert await queue.get_job(job_id) is None
        assert await redis.exists(f"bull:{queue.name}:{job_id}") == 0
    # Empty cleans emit "cleaned" too (count 0), as Node's script does.
    counts = ["0", "3", "0", "2", "1"]
    assert [f for _, f in raw if f["event"] == "cleaned"] == [
        {"event": "cleaned", "count": c} for c in counts
    ]
    assert seen["reason"] == "until"
    assert [e["args"] for e in seen["events"] if e["event"] == "cleaned"] == [
        {"count": c} for c in counts
    ]


async def test_drain_from_each_side(queue: Queue, peer: NodePeer) -> None:
    await peer.add("done")
    report = await peer.work(count=1, timeoutMs=10000, drainDelay=1)
    assert report["reason"] == "count", report
    py = [
        (await queue.add("w")).id,
        (await queue.add("p", priority=2)).id,
        (await queue.add("d", delay=60)).id,
    ]
    nd = await peer.add_many(
        [
            {"name": "w", "opts": {"lifo": True}},
            {"name": "p", "opts": {"priority": 1}},
            {"name": "d", "opts": {"delay": 60000, "priority": 3}},
        ]
    )
    await queue.drain()
    ids = [py[0], py[1], nd[0], nd[1], py[2], nd[2]]
    counts, *rest = await peer.batch(
        [("counts", {"types": ["waiting", "prioritized", "delayed", "completed"]})]
        + [("getJobState", {"id": i}) for i in ids]
        + [("getJob", {"id": i}) for i in ids[:4]]
        + [("drain", {"delayed": True})]
    )
    assert counts == {"waiting": 0, "prioritized": 0, "delayed": 2, "completed": 1}
    assert rest[:6] == ["unknown"] * 4 + ["delayed"] * 2
    assert rest[6:10] == [None] * 4
    # After Node's drain(delayed=True):
    assert await queue.get_job_counts("waiting", "prioritized", "delayed", "completed") == {
        "waiting": 0, "prioritized": 0, "delayed": 0, "completed": 1,
    }  # fmt: skip
    assert await queue.get_job(py[2]) is None and await queue.get_job(nd[2]) is None


async def fill(queue: Queue, peer: NodePeer) -> None:
    """Jobs in completed, failed, waiting, prioritized and delayed, with logs; from both sides."""
    await queue.add("ok", {"i": 1}, keep_logs=5)
    await peer.add("bad", {"i": 2})
    report = await peer.work(
        count=2, timeoutMs=10000, drainDelay=1, behaviour={"*": {"log": "x"}, "bad": {"fail": "x"}}
    )
    assert report["reason"] == "count", report
    await queue.add("w", job_id="custom-w")
    await queue.add("p", priority=3)
    await peer.add_many([{"name": "d", "opts": {"delay": 60000}}, {"name": "w2"}])


async def queue_keys_left(redis: AsyncRedis, queue: Queue) -> list[bytes]:
    return sorted([k async for k in redis.scan_iter(match=f"bull:{queue.name}:*")])


async def test_obliterate_from_python_seen_by_node(
    queue: Queue, peer: NodePeer, redis: AsyncRedis
) -> None:
    await fill(queue, peer)
    assert await queue_keys_left(redis, queue) != []
    await queue.obliterate()
    # Nothing of the queue is left: no flows, limiter or deduplication keys were used.
    assert await queue_keys_left(redis, queue) == []
    counts, job, paused = await peer.batch(
        [("counts", {}), ("getJob", {"id": "custom-w"}), ("isPaused", {})]
    )
    assert set(counts.values()) == {0}, counts
    assert job is None
    assert paused is False  # the meta hash went too
    # (A Node Queue writes its meta hash (version, maxLenEvents) again when it starts.)
    assert await queue_keys_left(redis, queue) == [f"bull:{queue.name}:meta".encode()]


async def test_obliterate_from_node_seen_by_python(
    queue: Queue, peer: NodePeer, redis: AsyncRedis
) -> None:
    await fill(queue, peer)
    await peer.call("obliterate")
    counts = await queue.get_job_counts()
    assert set(counts.values()) == {0}, counts
    assert await queue.get_job("custom-w") is None and await queue.get_job("1") is None
    assert await queue.is_paused() is False
    assert await queue_keys_left(redis, queue) == []


async def test_obliterate_with_active_job_refused_on_both_sides(
    queue: Queue, peer: NodePeer
) -> None:
    slow = await peer.add("slow")
    await queue.add("w")
    worker = await peer.start(
        "work", timeoutMs=20000, drainDelay=1, behaviour={"*": {"hangForever": True}}
    )
    try:
        await worker.wait_for_event("started", slow)
        with pytest.raises(echomq.ActiveJobsError):
            await queue.obliterate()
        with pytest.raises(nodepeer.NodeCommandError, match="active"):
            await peer.call("obliterate")
        assert await queue.get_state(slow) is JobState.ACTIVE
        await queue.obliterate(force=True)
        counts, job = await peer.batch([("counts", {}), ("getJob", {"id": slow})])
        assert set(counts.values()) == {0} and job is None
    finally:
        await worker.stop()


# -- 5. events seen by Node's QueueEvents -------------------------------------------------------


async def add_event_sequence_python(queue: Queue) -> list[str]:
    ids = [
        (await queue.add("a", {"i": 1})).id,
        (await queue.add("c", {"i": 2}, job_id="c1")).id,
        (await queue.add("l", None, lifo=True)).id,
        (await queue.add("d-ts", None, delay=5, timestamp=TS)).id,
        (await queue.add("d", None, delay=60)).id,
        (await queue.add("p", None, priority=3)).id,
        (await queue.add("dp", None, delay=30, priority=1)).id,
    ]
    bulk = await queue.add_bulk([("b1", 1), ("b2", 2, {"delay": 1, "timestamp": TS})])
    ids += [j.id for j in bulk]
    ids.append((await queue.add("dup", {"again": True}, job_id="c1")).id)
    return ids


async def add_event_sequence_node(peer: NodePeer) -> list[str]:
    single, bulk, last = await peer.batch(
        [
            (
                "add",
                {
                    "jobs": [
                        {"name": "a", "data": {"i": 1}},
                        {"name": "c", "data": {"i": 2}, "opts": {"jobId": "c1"}},
                        {"name": "l", "data": None, "opts": {"lifo": True}},
                        {"name": "d-ts", "data": None, "opts": {"delay": 5000, "timestamp": TS_MS}},
                        {"name": "d", "data": None, "opts": {"delay": 60000}},
                        {"name": "p", "data": None, "opts": {"priority": 3}},
                        {"name": "dp", "data": None, "opts": {"delay": 30000, "priority": 1}},
                    ]
                },
            ),
            (
                "add",
                {
                    "bulk": True,
                    "jobs": [
                        {"name": "b1", "data": 1},
                        {"name": "b2", "data": 2, "opts": {"delay": 1000, "timestamp": TS_MS}},
                    ],
                },
            ),
            ("add", {"jobs": [{"name": "dup", "data": {"again": True}, "opts": {"jobId": "c1"}}]}),
        ]
    )
    return [str(i) for i in single + bulk + last]


async def test_add_events_match(queue: Queue, peer: NodePeer, twin: tuple[Queue, NodePeer]) -> None:
    """QueueEvents sees the same added / waiting / delayed / duplicated events for both sides."""
    twin_queue, twin_peer = twin
    py_ids = await add_event_sequence_python(queue)
    nd_ids = await add_event_sequence_node(twin_peer)
    assert py_ids == nd_ids and py_ids[-1] == "c1"
    args = {"lastId": "0", "untilEvent": "duplicated", "timeoutMs": 5000}
    py_seen, nd_seen = await asyncio.gather(
        peer.call("events", **args), twin_peer.call("events", **args)
    )
    assert py_seen["reason"] == nd_seen["reason"] == "until"
    assert py_seen["errors"] == nd_seen["errors"] == []

    async def normalised(q: Queue, seen: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        out = []
        for e in seen["events"]:
            args = dict(e["args"])
            if e["event"] == "delayed":
                job = await q.get_job(args["jobId"])
                assert job is not None
                # The due time is the job's timestamp plus its delay.
                assert args["delay"] == ms(job.timestamp) + round(job.delay * 1000), e
                args["delay"] = round(job.delay * 1000)
            out.append((e["event"], args))
        return out

    py_events = await normalised(queue, py_seen)
    assert py_events == await normalised(twin_queue, nd_seen)
    # A custom id consumes a number of the id counter too (Node INCRs it for every add).
    assert py_events == [
        ("added", {"jobId": "1", "name": "a"}),
        ("waiting", {"jobId": "1"}),
        ("added", {"jobId": "c1", "name": "c"}),
        ("waiting", {"jobId": "c1"}),
        ("added", {"jobId": "3", "name": "l"}),
        ("waiting", {"jobId": "3"}),
        ("added", {"jobId": "4", "name": "d-ts"}),
        ("delayed", {"jobId": "4", "delay": 5000}),
        ("added", {"jobId": "5", "name": "d"}),
        ("delayed", {"jobId": "5", "delay": 60000}),
        ("added", {"jobId": "6", "name": "p"}),
        ("waiting", {"jobId": "6"}),
        ("added", {"jobId": "7", "name": "dp"}),
        ("delayed", {"jobId": "7", "delay": 30000}),
        ("added", {"jobId": "8", "name": "b1"}),
        ("waiting", {"jobId": "8"}),
        ("added", {"jobId": "9", "name": "b2"}),
        ("delayed", {"jobId": "9", "delay": 1000}),
        ("duplicated", {"jobId": "c1"}),
    ]

    # The raw stream entries are equal too, except the due times of jobs stamped with "now".
    def comparable(entries: list[dict[str, str]]) -> list[dict[str, str]]:
        return [
            without(e, "delay") if e["event"] == "delayed" and e["jobId"] in ("5", "7") else e
            for e in entries
        ]

    # The duplicate add changed nothing: the first job's data stays, on both sides.
    for q in (queue, twin_queue):
        first = await q.get_job("c1")
        assert first is not None and (first.name, first.data) == ("c", {"i": 2})

    raw = await stream_events(peer)
    assert comparable(raw) == comparable(await stream_events(twin_peer))
    assert {"event": "delayed", "jobId": "4", "delay": str(TS_MS + 5000)} in raw
    assert {"event": "delayed", "jobId": "9", "delay": str(TS_MS + 1000)} in raw


async def test_counts_and_get_jobs_agree_with_legacy_paused_list(
    queue: Queue, peer: NodePeer, redis: AsyncRedis
) -> None:
    """Data a BullMQ v5 producer left behind: a job in the legacy ``paused`` list.

    Node 6.7 maps ``waiting`` to the ``wait`` key only; ``paused`` is its own type.
    """
    await queue.add("w1")
    await queue.add("w2")
    legacy = f"bull:{queue.name}:legacy-1"
    await redis.hset(
        legacy, mapping={"name": "old", "data": "{}", "opts": "{}", "timestamp": "1", "delay": "0"}
    )
    await redis.rpush(f"bull:{queue.name}:paused", "legacy-1")

    py = {
        "default": await queue.get_job_counts(),
        "typed": await queue.get_job_counts("waiting", "paused"),
        "waiting": [j.id for j in await queue.get_jobs("waiting")],
        "paused": [j.id for j in await queue.get_jobs("paused")],
        "all": [j.id for j in await queue.get_jobs()],
        "state": (await queue.get_state("legacy-1")).value,
    }
    default, typed, waiting, paused, all_, state = await peer.batch(
        [
            ("counts", {}),
            ("counts", {"types": ["waiting", "paused"]}),
            ("getJobs", {"types": ["waiting"]}),
            ("getJobs", {"types": ["paused"]}),
            ("getJobs", {}),
            ("getJobState", {"id": "legacy-1"}),
        ]
    )
    node = {
        "default": default,
        "typed": typed,
        "waiting": [j["id"] for j in waiting],
        "paused": [j["id"] for j in paused],
        "all": [j["id"] for j in all_],
        "state": state,
    }
    assert diff(py, node) == {}, diff(py, node)


async def test_counts_agree_with_legacy_wait_marker(
    queue: Queue, peer: NodePeer, redis: AsyncRedis
) -> None:
    """A v5 ``0:<delay>`` marker left at the tail of ``wait`` is not a job for Node's counts."""
    await queue.add("w1")
    await redis.rpush(f"bull:{queue.name}:wait", "0:0")
    py_counts = await queue.get_job_counts("waiting")
    py_ids = [j.id for j in await queue.get_jobs("waiting")]
    # Node's getCounts drops the marker (RPOP) while counting, so echomq is asked first.
    node_counts, node_jobs_ = await peer.batch(
        [("counts", {"types": ["waiting"]}), ("getJobs", {"types": ["waiting"]})]
    )
    assert py_ids == [j["id"] for j in node_jobs_] == ["1"]
    assert py_counts == node_counts == {"waiting": 1}


async def test_get_jobs_page_skips_ids_without_hash_like_node(
    queue: Queue, peer: NodePeer, redis: AsyncRedis
) -> None:
    """An id whose hash is gone is skipped and the page is filled up from further ids, as
    Node 6.7's getJobs script does (it backfills bounded ranges)."""
    for i in range(4):
        await queue.add("w", {"i": i})
    await redis.lpush(f"bull:{queue.name}:wait", "ghost")  # newest end, no job hash
    py_desc = [j.id for j in await queue.get_jobs("waiting", 0, 1)]
    py_asc = [j.id for j in await queue.get_jobs("waiting", 0, 1, asc=True)]
    node_desc, node_asc = await peer.batch(
        [
            ("getJobs", {"types": ["waiting"], "start": 0, "end": 1}),
            ("getJobs", {"types": ["waiting"], "start": 0, "end": 1, "asc": True}),
        ]
    )
    assert py_asc == [j["id"] for j in node_asc] == ["1", "2"]
    assert py_desc == [j["id"] for j in node_desc]
