"""Deduplication on add against the real BullMQ 6.7.6 for Node (docs/dedup.md).

Every mode added from Python is seen by Node's ``Queue.getDeduplicationJobId`` (and honoured by
Node's adds), every mode added from Node is seen by echomq's getter and adds, and the same
sequence of adds done by Node on one queue and by echomq on another leaves the same keys,
fields, expiries and events (timestamps and stream ids aside; counter ids need no mapping, as
both queues start at 1). The Node side runs through ``tests/interop/node/driver.mjs``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from redis.asyncio import Redis

if str(Path(__file__).resolve().parent) not in sys.path:  # works with or without __init__.py
    sys.path.insert(0, str(Path(__file__).resolve().parent))

from nodepeer import NodePeer

from echomq import Deduplication, FlowJob, FlowProducer, JobOptions, Queue

pytestmark = pytest.mark.timeout(120)

#: One row per mode: (name, echomq options, the same options as BullMQ takes them).
MODES: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("simple", {"deduplication": Deduplication("simple")}, {"deduplication": {"id": "simple"}}),
    (
        "throttle",
        {"deduplication": Deduplication("throttle", ttl=60)},
        {"deduplication": {"id": "throttle", "ttl": 60000}},
    ),
    (
        "extend",
        {"deduplication": Deduplication("extend", ttl=60, extend=True)},
        {"deduplication": {"id": "extend", "ttl": 60000, "extend": True}},
    ),
    (
        "debounce",
        {"delay": 30, "deduplication": Deduplication("deb", ttl=60, extend=True, replace=True)},
        {
            "delay": 30000,
            "deduplication": {"id": "deb", "ttl": 60000, "extend": True, "replace": True},
        },
    ),
    (
        "replace",
        {"delay": 30, "deduplication": Deduplication("rep", ttl=60, replace=True)},
        {"delay": 30000, "deduplication": {"id": "rep", "ttl": 60000, "replace": True}},
    ),
    (
        "keep",
        {"deduplication": Deduplication("keep", ttl=5, keep_last_if_active=True)},
        {"deduplication": {"id": "keep", "ttl": 5000, "keepLastIfActive": True}},
    ),
]


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[Redis]:
    r = Redis.from_url(redis_url, decode_responses=True)
    try:
        yield r
    finally:
        await r.aclose()


def _name() -> str:
    return f"dd-{uuid4().hex[:10]}"


async def dump(r: Redis, queue: str) -> dict[str, Any]:
    """Every key of ``queue`` without clock values: hashes (JSON fields decoded), lists, sets
    without scores, strings with whether and roughly how long they expire, events without
    stream ids and due times."""
    base = f"bull:{queue}:"
    out: dict[str, Any] = {}
    async for key in r.scan_iter(match=base + "*", count=1000):
        suffix = key[len(base) :]
        kind = await r.type(key)
        value: Any
        if kind == "hash":
            h = await r.hgetall(key)
            if suffix == "meta":
                h.pop("version", None)
            value = {
                k: json.loads(v) if k in ("opts", "data") else v
                for k, v in h.items()
                if k != "timestamp"
            }
        elif kind == "list":
            value = await r.lrange(key, 0, -1)
        elif kind == "zset":
            value = await r.zrange(key, 0, -1)
        elif kind == "stream":
            entries: Any = await r.xrange(key)
            value = [{k: "due" if k == "delay" else v for k, v in e.items()} for _, e in entries]
        elif kind == "string":
            pttl = await r.pttl(key)
            value = (await r.get(key), "no ttl" if pttl == -1 else round(pttl / 10000))
        else:
            value = kind
        out[suffix] = value
    return out


async def make_active(r: Redis, queue: str, job_id: str) -> None:
    """Move a waiting job to `active` by hand, as a worker taking it would (no lock needed)."""
    await r.lrem(f"bull:{queue}:wait", 0, job_id)
    await r.lpush(f"bull:{queue}:active", job_id)


async def test_the_same_adds_leave_the_same_redis_state(redis_url: str, client: Redis) -> None:
    node_queue, py_queue = _name(), _name()
    for queue in (node_queue, py_queue):  # a stale key: an owner that is gone
        await client.set(f"bull:{queue}:de:stale", "gone")
    node_jobs: list[dict[str, Any]] = []
    py_jobs: list[tuple[str, Any, dict[str, Any]]] = []
    for name, py_opts, node_opts in MODES:
        for n in (1, 2):
            node_jobs.append({"name": name, "data": {"n": n}, "opts": node_opts})
            py_jobs.append((name, {"n": n}, py_opts))
    node_jobs.append({"name": "stale", "data": 1, "opts": {"deduplication": {"id": "stale"}}})
    py_jobs.append(("stale", 1, {"deduplication": Deduplication("stale")}))

    async with NodePeer(redis_url, node_queue) as peer, Queue(py_queue, connection=client) as q:
        node_ids = await peer.add_many(node_jobs)
        py_added = [await q.add(name, data, **opts) for name, data, opts in py_jobs]
        assert [j.id for j in py_added] == node_ids
        assert [j.deduplicated for j in py_added] == [
            False, True,  # simple
            False, True,  # throttle
            False, True,  # extend
            False, False,  # debounce: the delayed owner is replaced
            False, False,  # replace
            False, True,  # keep (owner waiting)
            False,  # stale key taken over
        ]  # fmt: skip
        # keepLastIfActive with an active owner, then bulk adds, on both sides
        keep_owner = node_ids[10]
        await make_active(client, node_queue, keep_owner)
        await make_active(client, py_queue, keep_owner)
        keep = next(m for m in MODES if m[0] == "keep")
        bulk_node: list[dict[str, Any]] = [
            {"name": "k", "data": {"n": 3}, "opts": keep[2]},
            {"name": "k", "data": {"n": 4}, "opts": keep[2]},
            {"name": "b", "data": {"n": 5}, "opts": {"deduplication": {"id": "bulk"}}},
            {"name": "b", "data": {"n": 6}, "opts": {"deduplication": {"id": "bulk"}}},
        ]
        node_ids += await peer.add_many(bulk_node, bulk=True)
        bulk = await q.add_bulk(
            [(j["name"], j["data"], JobOptions.from_wire({"de": j["opts"]["deduplication"]}))
             for j in bulk_node]
        )  # fmt: skip
        assert [j.id for j in bulk] == node_ids[-4:]
        assert [j.deduplicated for j in bulk] == [True, True, False, True]

    node_state, py_state = await dump(client, node_queue), await dump(client, py_queue)
    assert py_state == node_state
    # what the comparison covered
    assert py_state["de:keep"] == (keep_owner, "no ttl")
    kept = py_state["dn:keep"]
    assert kept["data"] == {"n": 4} and kept["jid"] not in py_state  # the id it will be added as
    assert int(kept["jid"]) == int(py_state["id"][0]) - 2
    assert [e["event"] for e in py_state["events"]].count("deduplicated") == 9
    assert "de:stale" in py_state and py_state["de:stale"][0] != "gone"


@pytest.mark.parametrize("mode", [m[0] for m in MODES])
async def test_python_dedups_are_seen_by_node(redis_url: str, client: Redis, mode: str) -> None:
    name, py_opts, node_opts = next(m for m in MODES if m[0] == mode)
    dedup_id = node_opts["deduplication"]["id"]
    queue = _name()
    async with NodePeer(redis_url, queue) as peer, Queue(queue, connection=client) as q:
        first = await q.add(name, {"n": 1}, **py_opts)
        seen = await peer.call("queueMethod", method="getDeduplicationJobId", args=[dedup_id])
        assert seen == first.id
        again = await peer.add(name, {"n": 2}, node_opts)
        if mode in ("debounce", "replace"):  # Node replaced the delayed Python job
            assert again != first.id
            assert await q.get_deduplication_job_id(dedup_id) == again
            assert await client.exists(f"bull:{queue}:{first.id}") == 0
        else:
            assert again == first.id
        job = await peer.get_job(str(again))
        assert job is not None and job["json"]["deduplicationId"] == dedup_id


@pytest.mark.parametrize("mode", [m[0] for m in MODES])
async def test_node_dedups_are_seen_by_python(redis_url: str, client: Redis, mode: str) -> None:
    name, py_opts, node_opts = next(m for m in MODES if m[0] == mode)
    dedup_id = node_opts["deduplication"]["id"]
    queue = _name()
    async with NodePeer(redis_url, queue) as peer, Queue(queue, connection=client) as q:
        first = await peer.add(name, {"n": 1}, node_opts)
        assert await q.get_deduplication_job_id(dedup_id) == first
        again = await q.add(name, {"n": 2}, **py_opts)
        if mode in ("debounce", "replace"):
            assert not again.deduplicated and again.id != first
            seen = await peer.call("queueMethod", method="getDeduplicationJobId", args=[dedup_id])
            assert seen == again.id
        else:
            assert again.deduplicated and again.id == first and again.data == {"n": 1}
        # Node's removeDeduplicationKey and echomq's agree on what they delete
        assert await q.remove_deduplication_key(dedup_id) is True
        gone = await peer.call("queueMethod", method="getDeduplicationJobId", args=[dedup_id])
        assert gone is None


async def test_a_flow_root_deduplicates_against_node_adds_and_flows(
    redis_url: str, client: Redis
) -> None:
    queue = _name()
    async with NodePeer(redis_url, queue) as peer, FlowProducer(connection=client) as producer:
        first = await peer.add("n", {"n": 1}, {"deduplication": {"id": "fr"}})
        node = await producer.add(FlowJob("r", queue, {"n": 2}, deduplication=Deduplication("fr")))
        assert node.job.deduplicated and node.job.id == first
        await peer.call("queueMethod", method="removeDeduplicationKey", args=["fr"])
        node = await producer.add(FlowJob("r", queue, {"n": 3}, deduplication=Deduplication("fr")))
        assert not node.job.deduplicated
        flow = {
            "name": "r",
            "queueName": queue,
            "data": {},
            "opts": {"deduplication": {"id": "fr"}},
        }
        await peer.call("addFlow", flow=flow)
        seen = await peer.call("queueMethod", method="getDeduplicationJobId", args=["fr"])
        assert seen == node.job.id  # Node's flow root was deduplicated against the Python one
        assert await client.llen(f"bull:{queue}:wait") == 2
