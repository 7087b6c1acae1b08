"""Job schedulers shared with the real BullMQ 6.7.6 for Node.

A scheduler made by echomq runs under Node workers and the reverse, every and cron (with a time
zone); a mixed fleet keeps one scheduler going with no iteration doubled or lost; an upsert from
either side replaces the other's; and an echomq upsert writes what Node's writes.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from redis.asyncio import Redis

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import nodepeer
from nodepeer import NodePeer

from echomq import Job, Queue, Worker
from helpers import wait_for

pytestmark = pytest.mark.timeout(90)

FAST: dict[str, Any] = {"drain_delay": 0.2, "stalled_interval": 5.0}


@pytest.fixture
async def peer(redis_url: str, queue_name: str) -> AsyncIterator[NodePeer]:
    assert nodepeer.node_available(), "node >= 20 is required for the interop tests"
    async with NodePeer(redis_url, queue_name) as p:
        yield p


@pytest.fixture
async def twin(redis_url: str) -> AsyncIterator[NodePeer]:
    """A second, empty queue driven from Node."""
    async with NodePeer(redis_url, f"q-{uuid4().hex[:12]}") as p:
        yield p


def millis(job_id: str) -> int:
    return int(job_id.rsplit(":", 1)[1])


def steps(ids: list[str]) -> list[int]:
    ms = sorted(millis(i) for i in ids)
    return [b - a for a, b in zip(ms, ms[1:])]


async def upsert_from_node(
    peer: NodePeer, sid: str, repeat: dict[str, Any], **template: Any
) -> Any:
    return await peer.call("queueMethod", method="upsertJobScheduler", args=[sid, repeat, template])


async def run_python(redis: Redis, queue: str, enough: Callable[[list[Job]], bool]) -> list[Job]:
    seen: list[Job] = []

    async def record(job: Job) -> None:
        seen.append(job)

    async with Worker(queue, record, connection=redis, **FAST):
        await wait_for(lambda: asyncio.sleep(0, enough(seen)), timeout=20)
    return seen


async def test_python_every_scheduler_runs_under_node(
    redis: Redis, queue_name: str, peer: NodePeer
) -> None:
    async with Queue(queue_name, connection=redis) as queue:
        first = await queue.upsert_job_scheduler(
            "every", every=0.3, template={"name": "tick", "data": {"k": 1}, "opts": {"attempts": 2}}
        )
    assert first is not None
    report = await peer.work(count=4, drainDelay=1, timeoutMs=15000)
    assert [e for e in report["events"] if e["event"] == "error"] == []
    runs = report["invocations"][:4]
    assert runs[0]["id"] == first.id
    # the first iteration waits for the worker to start; the next ones keep the interval
    gaps = steps([r["id"] for r in runs])
    assert gaps[0] % 300 == 0 and gaps[1:] == [300, 300]
    assert [r["opts"]["repeat"]["count"] for r in runs] == [1, 2, 3, 4]
    assert all(r["name"] == "tick" and r["data"] == {"k": 1} for r in runs)
    assert all(r["opts"]["attempts"] == 2 for r in runs)


async def test_python_cron_scheduler_with_tz_runs_under_node(
    redis: Redis, queue_name: str, peer: NodePeer
) -> None:
    async with Queue(queue_name, connection=redis) as queue:
        await queue.upsert_job_scheduler("cron", pattern="* * * * * *", tz="Asia/Kolkata")
    report = await peer.work(count=3, drainDelay=1, timeoutMs=15000)
    assert [e for e in report["events"] if e["event"] == "error"] == []
    ids = [r["id"] for r in report["invocations"][:3]]
    assert all(millis(i) % 1000 == 0 for i in ids)
    assert steps(ids)[1:] == [1000]  # the first one waited for the worker to start


async def test_node_schedulers_run_under_python(
    redis: Redis, queue_name: str, peer: NodePeer
) -> None:
    await upsert_from_node(peer, "every", {"every": 300}, name="e", data={"x": 1})
    await upsert_from_node(peer, "cron", {"pattern": "* * * * * *", "tz": "America/New_York"})

    def enough(jobs: list[Job]) -> bool:
        kinds = Counter(job.repeat_job_key for job in jobs)
        return kinds["every"] >= 4 and kinds["cron"] >= 3

    seen = await run_python(redis, queue_name, enough)
    by: dict[str, list[str]] = {"every": [], "cron": []}
    for job in seen:
        assert job.repeat_job_key in by
        by[str(job.repeat_job_key)].append(job.id)
    assert len(by["cron"]) >= 3 and len(by["every"]) >= 4
    # after the first one (made before the worker started), one interval apart
    assert set(steps(by["every"])[1:]) == {300}
    assert set(steps(by["cron"])[1:]) == {1000}
    assert all(millis(i) % 1000 == 0 for i in by["cron"])
    assert all(j.data == {"x": 1} for j in seen if j.repeat_job_key == "every")
    # the next iterations Python made are the ones Node reads as its schedulers' state
    sched = await peer.call("queueMethod", method="getJobScheduler", args=["every"])
    assert sched["iterationCount"] >= len(by["every"])


@pytest.mark.parametrize("kind", ["every", "cron"])
async def test_a_mixed_fleet_neither_doubles_nor_loses_iterations(
    redis: Redis, queue_name: str, peer: NodePeer, kind: str
) -> None:
    ledger = f"ledger:{queue_name}"
    async with Queue(queue_name, connection=redis) as queue:
        if kind == "every":
            await queue.upsert_job_scheduler("mix", every=0.3)
            interval, node_runs = 300, 4
        else:
            await queue.upsert_job_scheduler("mix", pattern="* * * * * *", tz="Europe/Madrid")
            interval, node_runs = 1000, 2
        # Each side is busy a little longer than one interval per iteration (concurrency 1),
        # so the next iteration is often taken by the other side. Both stop gracefully (Node
        # after its runs, then Python), so every iteration taken is run.
        busy = interval / 1000 + 0.05
        node = await peer.start(
            "work",
            ledger=ledger,
            drainDelay=1,
            count=node_runs,
            timeoutMs=30000,
            behaviour={"*": {"sleepMs": int(busy * 1000)}},
        )

        async def record(job: Job) -> None:
            await redis.rpush(ledger, f"py:{queue_name}:{job.id}")
            await asyncio.sleep(busy)

        async with Worker(queue_name, record, connection=redis, concurrency=1, **FAST):
            await node.wait_ready()
            envelope = await node.result_envelope(40)
            await asyncio.sleep(2 * interval / 1000)
        assert envelope.get("ok") and envelope["result"]["reason"] == "count", envelope
    entries = [_s(e) for e in await redis.lrange(ledger, 0, -1)]
    ids = [e.split(":", 2)[2] for e in entries]
    assert Counter(ids).most_common(1)[0][1] == 1, "an iteration ran twice"
    # No iteration lost: every one made (ic counts them) either ran and completed, or is the
    # pending one left when the workers stopped (plus one a closing worker handed back).
    completed = {_s(m) for m in await redis.zrange(f"bull:{queue_name}:completed", 0, -1)}
    assert completed == set(ids)
    made = int(await redis.hget(f"bull:{queue_name}:repeat:mix", "ic") or 0)
    assert 1 <= made - len(ids) <= 2, (made, len(ids))
    # On the schedule: one interval apart, or a whole number of them when an iteration was
    # taken more than an interval late (missed runs are skipped, as in BullMQ).
    gaps = steps(ids)
    assert all(g > 0 and g % interval == 0 for g in gaps), gaps
    assert gaps.count(interval) >= len(gaps) - 1, gaps
    sides = Counter(e.split(":", 1)[0] for e in entries)
    assert sides["node"] == node_runs and sides["py"] >= 2, sides


async def test_upserts_from_either_side_replace_the_other(
    redis: Redis, queue_name: str, peer: NodePeer
) -> None:
    start = (int(time.time()) + 3600) * 1000
    async with Queue(queue_name, connection=redis) as queue:
        made = await queue.upsert_job_scheduler(
            "s", every=10, start_date=start / 1000, template={"data": {"v": 1}}
        )
        assert made is not None
        await upsert_from_node(peer, "s", {"every": 10000, "startDate": start}, data={"v": 2})
        delayed = [_s(m) for m in await redis.zrange(f"bull:{queue_name}:delayed", 0, -1)]
        assert delayed == [made.id]
        job = await queue.get_job(made.id)
        assert job is not None and job.data == {"v": 2}
        # and back: Python over the Node-made definition, now a cron scheduler
        again = await queue.upsert_job_scheduler("s", pattern="0 0 * * *", tz="UTC")
        assert again is not None
        delayed = [_s(m) for m in await redis.zrange(f"bull:{queue_name}:delayed", 0, -1)]
        assert delayed == [again.id]
    node_view = await peer.call("queueMethod", method="getJobScheduler", args=["s"])
    assert node_view["pattern"] == "0 0 * * *" and node_view["tz"] == "UTC"
    assert node_view["iterationCount"] == 1 and "every" not in node_view


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def _written(redis: Redis, queue: str) -> dict[str, Any]:
    """Every key of the queue (by suffix) with its content, clock fields masked."""
    out: dict[str, Any] = {}
    base = f"bull:{queue}:"
    async for raw in redis.scan_iter(match=base + "*"):
        key = raw.decode()
        suffix = key.removeprefix(base)
        kind = _s(await redis.type(key))
        if kind == "hash":
            raw_hash: Any = await redis.hgetall(key)
            h: dict[str, Any] = {_s(k): _s(v) for k, v in raw_hash.items()}
            if "opts" in h and "rjk" in h:  # an iteration job
                opts = json.loads(h["opts"])
                for clock in ("timestamp", "delay"):
                    opts.pop(clock, None)
                    h.pop(clock, None)
                h["opts"] = opts
            elif "opts" in h:
                h["opts"] = json.loads(h["opts"])
            out[suffix] = h
        elif kind == "zset":
            out[suffix] = [_s(m) for m in await redis.zrange(key, 0, -1)]
        elif kind == "stream":
            entries: Any = await redis.xrange(key)
            out[suffix] = [
                {_s(k): _s(v) for k, v in f.items() if k != b"delay"} for _, f in entries
            ]
        elif kind == "list":
            lst: Any = await redis.lrange(key, 0, -1)
            out[suffix] = [_s(m) for m in lst]
        else:
            out[suffix] = kind
    out.pop("meta", None)  # Node's Queue also records its version there
    out.pop("marker", None)  # scored by the due time
    return out


@pytest.mark.parametrize("kind", ["every", "cron"])
async def test_an_upsert_writes_what_node_writes(
    redis: Redis, queue_name: str, twin: NodePeer, kind: str
) -> None:
    start = (int(time.time()) // 60 + 120) * 60_000 + 1234
    end = start + 86_400_000
    if kind == "every":
        repeat: dict[str, Any] = {"every": 5000, "startDate": start, "endDate": end, "limit": 9}
        py: dict[str, Any] = {"every": 5, "start_date": start / 1000, "end_date": end / 1000}
    else:
        repeat = {
            "pattern": "0 */15 * * * *",
            "tz": "Australia/Sydney",
            "startDate": start,
            "endDate": end,
            "limit": 9,
        }
        py = {
            "pattern": "0 */15 * * * *",
            "tz": "Australia/Sydney",
            "start_date": start / 1000,
            "end_date": end / 1000,
        }
    template = {"name": "job", "data": {"a": [1, 2]}, "opts": {"attempts": 3, "priority": 4}}
    async with Queue(queue_name, connection=redis) as queue:
        await queue.upsert_job_scheduler(
            "sid",
            limit=9,
            template={"name": "job", "data": {"a": [1, 2]}, "opts": {"attempts": 3, "priority": 4}},
            **py,
        )
        # upserting the same definition again changes nothing but the clock
        await queue.upsert_job_scheduler(
            "sid",
            limit=9,
            template={"name": "job", "data": {"a": [1, 2]}, "opts": {"attempts": 3, "priority": 4}},
            **py,
        )
    await upsert_from_node(twin, "sid", repeat, **template)
    await upsert_from_node(twin, "sid", repeat, **template)
    ours = await _written(redis, queue_name)
    theirs = await _written(redis, twin.queue)
    assert ours == theirs
