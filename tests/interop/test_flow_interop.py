"""Flows across the two runtimes: echomq and the real BullMQ 6.7.6 for Node.

A flow written by one side is run, read and failed by the other; Node and Python workers
share one flow; both FlowProducers leave the same keys and events for the same tree; and
a crash during a flow loses no child and releases the parent once. The Node side runs
through ``tests/interop/node/driver.mjs`` (``npm ci --prefix tests``).

Ledgers of processor runs live in keys outside every queue (``ledger:*``, ``rec:*``), so
they count runs cut short by a crash too.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from redis.asyncio import Redis

if str(Path(__file__).resolve().parent) not in sys.path:  # works with or without __init__.py
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import nodepeer
from nodepeer import NodePeer

import echomq
from _procs import WorkerProcs, runs
from echomq import FlowJob, FlowProducer, Job, JobNode, WaitingChildrenError, Worker
from helpers import queue_key, wait_for

pytestmark = pytest.mark.timeout(60)

STALLED_REASON = "job stalled more than allowable limit"
FAST: dict[str, Any] = {"drain_delay": 0.2, "lock_duration": 1.0, "stalled_interval": 0.3}
NODE_FAST: dict[str, Any] = {"drainDelay": 1, "lockDuration": 1000, "stalledInterval": 300}

PeerFactory = Callable[..., NodePeer]


# -- fixtures and small helpers ----------------------------------------------------------------


def fresh_queue() -> str:
    return f"q-{uuid4().hex[:12]}"


@pytest.fixture
async def peers(redis_url: str) -> AsyncIterator[PeerFactory]:
    """``peers(queue, prefix="bull")``: a NodePeer on that queue; each is closed after the test."""
    assert nodepeer.node_available(), "node >= 20 is required for the interop tests"
    made: list[NodePeer] = []

    def make(queue: str, prefix: str = "bull") -> NodePeer:
        peer = NodePeer(redis_url, queue, prefix)
        made.append(peer)
        return peer

    try:
        yield make
    finally:
        for peer in made:
            await peer.aclose()


@pytest.fixture
def procs(tmp_path: Path, redis_url: str) -> Iterator[WorkerProcs]:
    with WorkerProcs(tmp_path, redis_url) as group:
        yield group


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def hash_of(r: Redis, key: str) -> dict[str, str]:
    raw: dict[Any, Any] = await r.hgetall(key)
    return {_s(k): _s(v) for k, v in raw.items()}


async def events_of(r: Redis, queue: str) -> list[dict[str, str]]:
    entries: Any = await r.xrange(f"bull:{queue}:events")
    return [{_s(k): _s(v) for k, v in f.items()} for _, f in entries]


async def state_of(r: Redis, queue: str, job_id: str) -> str:
    return str(await echomq.get_state(queue, job_id, connection=r))


async def reaches(r: Redis, queue: str, job_id: str, state: str, timeout: float = 12) -> None:
    async def there() -> bool:
        return await state_of(r, queue, job_id) == state

    await wait_for(there, timeout=timeout, message=f"{queue}:{job_id} never became {state}")


async def reaches_final(r: Redis, queue: str, job_id: str, timeout: float = 12) -> None:
    async def final() -> bool:
        return await state_of(r, queue, job_id) in ("completed", "failed")

    await wait_for(final, timeout=timeout, message=f"{queue}:{job_id} never finished")


async def ledger(r: Redis, key: str) -> list[str]:
    return [_s(v) for v in await r.lrange(key, 0, -1)]


def releases(events: list[dict[str, str]], job_id: str) -> list[dict[str, str]]:
    """The `waiting` events that released ``job_id`` from waiting-children."""
    return [
        e
        for e in events
        if e["event"] == "waiting" and e.get("jobId") == job_id and e.get("prev") is not None
    ]


# -- comparing what the two sides left -------------------------------------------------------

CLOCK_HASH_FIELDS = {"timestamp", "processedOn", "finishedOn", "pb"}


JSON_FIELDS = {"opts", "parent", "data"}


async def dump_queue(r: Redis, queue: str, rename: Callable[[str], str]) -> dict[str, Any]:
    """Every key of ``queue``, renamed, with clock values replaced by checks against the jobs'
    own timestamps."""
    raw: dict[str, Any] = {}
    kinds: dict[str, str] = {}
    async for k in r.scan_iter(match=f"bull:{queue}:*", count=1000):
        key = _s(k)
        kind = _s(await r.type(key))
        kinds[key] = kind
        if kind == "hash":
            raw[key] = await hash_of(r, key)
        elif kind == "set":
            raw[key] = sorted(_s(m) for m in await r.smembers(key))
        elif kind == "zset":
            scored: list[Any] = await r.zrange(key, 0, -1, withscores=True)
            raw[key] = [(_s(m), int(score)) for m, score in scored]
        elif kind == "list":
            raw[key] = [_s(m) for m in await r.lrange(key, 0, -1)]
        elif kind == "stream":
            raw[key] = await events_of(r, queue)
        else:
            raw[key] = _s(await r.get(key))

    def due(job_id: str) -> int | None:
        """When the job was due when it was added (None: it has been deleted since)."""
        h = raw.get(f"bull:{queue}:{job_id}")
        return None if h is None else int(h["timestamp"]) + int(h["delay"])

    out: dict[str, Any] = {}
    for key, value in raw.items():
        suffix = key[len(f"bull:{queue}:") :]
        if suffix == "stalled-check":  # a worker's clock
            continue
        if suffix in ("completed", "failed"):  # scored by finishedOn
            value = [m for m, _ in value]
        elif suffix == "delayed":
            for member, score in value:
                assert score // 4096 == due(member), (key, member)
            value = [(m, s % 4096) for m, s in value]
        elif suffix == "waiting-children":
            for member, score in value:
                assert score == int(raw[f"bull:{queue}:{member}"]["timestamp"]), (key, member)
            value = [m for m, _ in value]
        elif suffix == "marker":
            # "1" holds the earliest due time it was told of (it may outlive that job)
            delayed = raw.get(f"bull:{queue}:delayed", [])
            first = min((d for m, _ in delayed if (d := due(m)) is not None), default=None)
            value = [(m, "due" if m == "1" and first in (s, None) else s) for m, s in value]
        elif suffix == "meta":  # a Node Queue object records its version here when it starts
            value = {k: v for k, v in value.items() if k != "version"}
        elif suffix == "events":
            value = [
                {
                    k: ("due" if k == "delay" and due(e["jobId"]) in (int(v), None) else v)
                    for k, v in e.items()
                }
                for e in value
            ]
        elif kinds[key] == "hash" and "timestamp" in value:
            value = {
                k: json.loads(rename(v)) if k in JSON_FIELDS else v
                for k, v in value.items()
                if k not in CLOCK_HASH_FIELDS
            }
        renamed = json.loads(rename(json.dumps(value)))
        out[rename(key)] = sorted(renamed) if kinds[key] == "set" else renamed
    return out


async def comparable_hash(
    r: Redis, queue: str, job_id: str, rename: dict[str, str]
) -> dict[str, Any]:
    """A job hash of a side's run with the clocks taken out and names renamed (old -> new)."""
    h = await hash_of(r, queue_key(queue, job_id))
    out: dict[str, Any] = {}
    for k, v in h.items():
        if k in CLOCK_HASH_FIELDS:
            continue
        for old, new in rename.items():
            v = v.replace(old, new)
        if k == "stacktrace":
            out[k] = len(json.loads(v))
        elif k in JSON_FIELDS or k == "returnvalue":
            out[k] = json.loads(v)
        else:
            out[k] = v
    return out


def flow_events(events: list[dict[str, str]], rename: dict[str, str]) -> list[dict[str, str]]:
    """A queue's job events with every field (job ids renamed), less `drained` and clocks."""
    out = []
    for e in events:
        if e["event"] == "drained" or "jobId" not in e:
            continue
        fields = {k: v for k, v in e.items() if k != "delay"}
        for old, new in rename.items():
            fields = {k: v.replace(old, new) for k, v in fields.items()}
        out.append(fields)
    return out


def per_job(events: list[dict[str, str]]) -> dict[str, list[dict[str, str]]]:
    out: dict[str, list[dict[str, str]]] = {}
    for e in events:
        out.setdefault(e["jobId"], []).append(e)
    return out


# -- trees: one neutral description, built by either side ---------------------------------------

Spec = dict[str, Any]  # {"name", "q" (a queue label), "data", "opts" (BullMQ form), "children"}

PY_OPTION = {
    "jobId": "job_id",
    "priority": "priority",
    "attempts": "attempts",
    "lifo": "lifo",
    "removeOnComplete": "remove_on_complete",
    "failParentOnFailure": "fail_parent_on_failure",
    "continueParentOnFailure": "continue_parent_on_failure",
    "ignoreDependencyOnFailure": "ignore_dependency_on_failure",
    "removeDependencyOnFailure": "remove_dependency_on_failure",
}


def node_flow(spec: Spec, queues: dict[str, str]) -> dict[str, Any]:
    """The spec as BullMQ's FlowProducer takes it."""
    flow: dict[str, Any] = {
        "name": spec["name"],
        "queueName": queues[spec["q"]],
        "data": spec.get("data", {}),
        "opts": spec.get("opts", {}),
    }
    if spec.get("children"):
        flow["children"] = [node_flow(c, queues) for c in spec["children"]]
    return flow


def py_flow(spec: Spec, queues: dict[str, str]) -> FlowJob:
    """The spec as an echomq FlowJob (durations in seconds)."""
    options: dict[str, Any] = {}
    for name, value in spec.get("opts", {}).items():
        if name == "delay":
            options["delay"] = value / 1000
        else:
            options[PY_OPTION[name]] = value
    children = [py_flow(c, queues) for c in spec.get("children", [])]
    return FlowJob(
        spec["name"], queues[spec["q"]], spec.get("data", {}), children=children, **options
    )


def py_ids(node: JobNode) -> list[str]:
    """Ids of a tree, depth first in spec order."""
    return [node.job.id] + [i for c in node.children for i in py_ids(c)]


def node_ids(summary: dict[str, Any]) -> list[str]:
    return [str(summary["id"])] + [i for c in summary["children"] for i in node_ids(c)]


def tree_of_py(node: JobNode) -> dict[str, Any]:
    """A tree read by echomq, normalised (children sorted by id)."""
    job = node.job
    return {
        "id": job.id,
        "name": job.name,
        "queue": job.queue_name,
        "data": job.data,
        "returnvalue": job.return_value,
        "parentKey": job.parent_key,
        "parent": None if job.parent is None else [job.parent.id, job.parent.queue_key],
        "failedReason": job.failed_reason,
        "attemptsMade": job.attempts_made,
        "priority": job.priority,
        "delay": round(job.delay * 1000),
        "children": sorted((tree_of_py(c) for c in node.children), key=lambda t: t["id"]),
    }


def tree_of_node(node: dict[str, Any]) -> dict[str, Any]:
    """A tree read by BullMQ's getFlow (driver ``getFlow``), normalised like tree_of_py."""
    job = node["job"]
    parent = job["parent"]
    return {
        "id": str(job["id"]),
        "name": job["name"],
        "queue": job["queueName"],
        "data": job["data"],
        "returnvalue": job["returnvalue"],
        "parentKey": job["parentKey"],
        "parent": None if parent is None else [parent["id"], parent["queueKey"]],
        "failedReason": job["failedReason"],
        "attemptsMade": job["attemptsMade"],
        "priority": job["priority"],
        "delay": job["delay"],
        "children": sorted((tree_of_node(c) for c in node["children"]), key=lambda t: t["id"]),
    }


def shape(tree: dict[str, Any]) -> tuple[Any, ...]:
    """Ids, names, queues and nesting only."""
    kids = tuple(sorted(shape(c) for c in tree["children"]))
    return (tree["id"], tree["name"], tree["queue"], kids)


def summary_shape(summary: dict[str, Any]) -> tuple[Any, ...]:
    kids = tuple(sorted(summary_shape(c) for c in summary["children"]))
    return (str(summary["id"]), summary["name"], summary["queueName"], kids)


def added_shape(node: JobNode) -> tuple[Any, ...]:
    kids = tuple(sorted(added_shape(c) for c in node.children))
    return (node.job.id, node.job.name, node.job.queue_name, kids)


async def children_values_from_redis(r: Redis, parent_key: str) -> dict[str, Any]:
    """What each child of ``parent_key`` returned, read from the children's own hashes."""
    out: dict[str, Any] = {}
    for child in await r.hkeys(parent_key + ":processed"):
        out[_s(child)] = json.loads(_s(await r.hget(_s(child), "returnvalue")))
    return out


# The three-level, two-queue tree of the first tests: R(A) -> c1(A) -> g1(B), g2(A); c2(B).
THREE_LEVELS: Spec = {
    "name": "R",
    "q": "A",
    "data": {"v": "R"},
    "children": [
        {
            "name": "c1",
            "q": "A",
            "data": {"v": "c1"},
            "children": [
                {"name": "g1", "q": "B", "data": {"v": "g1"}},
                {"name": "g2", "q": "A", "data": {"v": "g2"}},
            ],
        },
        {"name": "c2", "q": "B", "data": {"v": "c2"}},
    ],
}
PARENTS = {"R", "c1"}
# Node processors: parents return their children's values, leaves their data.
NODE_THREE_LEVELS = {
    "R": {"returnChildrenValues": True, "childrenValues": True},
    "c1": {"returnChildrenValues": True, "childrenValues": True},
    "*": {"echo": True},
}


def expected_values(ids: dict[str, str], queues: dict[str, str]) -> dict[str, Any]:
    """What R and c1 of THREE_LEVELS must read as their children's values."""
    a, b = queues["A"], queues["B"]
    c1 = {queue_key(b, ids["g1"]): {"v": "g1"}, queue_key(a, ids["g2"]): {"v": "g2"}}
    r = {queue_key(a, ids["c1"]): c1, queue_key(b, ids["c2"]): {"v": "c2"}}
    return {"R": r, "c1": c1}


# -- 1. a Python flow run by Node workers --------------------------------------------------------


async def test_python_flow_run_by_node_workers_and_read_by_node(
    peers: PeerFactory, redis: Redis
) -> None:
    """Node workers run a three-level, two-queue flow echomq added; Node's processors,
    getChildrenValues, getDependencies and getFlow read what echomq wrote."""
    queues = {"A": fresh_queue(), "B": fresh_queue()}
    peer_a, peer_b = peers(queues["A"]), peers(queues["B"])
    async with FlowProducer(connection=redis) as flows:
        added = await flows.add(py_flow(THREE_LEVELS, queues))
        ids = dict(zip(["R", "c1", "g1", "g2", "c2"], py_ids(added)))
        node_a = await peer_a.start("work", count=3, behaviour=NODE_THREE_LEVELS, **NODE_FAST)
        node_b = await peer_b.start("work", count=2, behaviour=NODE_THREE_LEVELS, **NODE_FAST)
        report_a, report_b = await node_a.result(30), await node_b.result(30)
        py_read = await flows.get_flow(ids["R"], queues["A"])
    assert report_a["reason"] == report_b["reason"] == "count", (report_a, report_b)
    expected = expected_values(ids, queues)

    # Inside the Node processors: the parents ran last and read what Python's flow recorded.
    runs_a = [(i["name"], i.get("childrenValues")) for i in report_a["invocations"]]
    assert [name for name, _ in runs_a][-2:] == ["c1", "R"]
    assert {n: v for n, v in runs_a if n in PARENTS} == expected
    assert sorted(i["name"] for i in report_b["invocations"]) == ["c2", "g1"]

    # Afterwards, through Node's getFlow, Job.getChildrenValues and getDependencies.
    root_read, r_values, c1_values, r_deps = await peer_a.batch(
        [
            ("getFlow", {"id": ids["R"]}),
            ("jobMethod", {"id": ids["R"], "method": "getChildrenValues"}),
            ("jobMethod", {"id": ids["c1"], "method": "getChildrenValues"}),
            ("jobMethod", {"id": ids["R"], "method": "getDependencies"}),
        ]
    )
    assert (r_values, c1_values) == (expected["R"], expected["c1"])
    assert r_deps == {"processed": expected["R"], "unprocessed": [], "failed": [], "ignored": {}}
    node_tree = tree_of_node(root_read)
    assert shape(node_tree) == added_shape(added)
    assert py_read is not None and tree_of_py(py_read) == node_tree
    assert node_tree["returnvalue"] == expected["R"]
    for name, job_id in ids.items():
        assert await state_of(redis, queues["A" if name in {"R", "c1", "g2"} else "B"], job_id) == (
            "completed"
        )
    assert len(releases(await events_of(redis, queues["A"]), ids["R"])) == 1


# -- 2. a Node flow run by Python workers ------------------------------------------------------


async def test_node_flow_run_by_python_workers_and_read_by_both(
    peers: PeerFactory, redis: Redis
) -> None:
    """Python workers run the same flow added by BullMQ; the parents' processors see their
    children's values, and echomq's get_flow equals Node's getFlow."""
    queues = {"A": fresh_queue(), "B": fresh_queue()}
    peer_a = peers(queues["A"])
    summary = await peer_a.call("addFlow", flow=node_flow(THREE_LEVELS, queues))
    ids = dict(zip(["R", "c1", "g1", "g2", "c2"], node_ids(summary)))
    seen: dict[str, Any] = {}
    order: list[str] = []

    async def process(job: Job) -> Any:
        order.append(job.name)
        if job.name in PARENTS:
            seen[job.name] = await job.get_children_values()
            return seen[job.name]
        return job.data

    async with (
        Worker(queues["A"], process, connection=redis, **FAST),
        Worker(queues["B"], process, connection=redis, **FAST),
    ):
        await reaches(redis, queues["A"], ids["R"], "completed")
    expected = expected_values(ids, queues)
    assert seen == expected
    assert order.index("R") == 4 and order.index("c1") > max(order.index("g1"), order.index("g2"))

    async with FlowProducer(connection=redis) as flows:
        py_read = await flows.get_flow(ids["R"], queues["A"])
        py_shallow = [await flows.get_flow(ids["R"], queues["A"], depth=d) for d in (1, 2)]
    reads: list[tuple[str, dict[str, Any]]] = [
        ("getFlow", {"id": ids["R"]}),
        *(("getFlow", {"id": ids["R"], "depth": d}) for d in (0, 1, 2)),
    ]
    node_read, node_unbounded, *node_shallow = await peer_a.batch(reads)
    assert py_read is not None and None not in py_shallow
    assert tree_of_py(py_read) == tree_of_node(node_read) == tree_of_node(node_unbounded)
    assert shape(tree_of_py(py_read)) == summary_shape(summary)
    assert tree_of_py(py_read)["returnvalue"] == expected["R"]
    # getFlow's `depth` counts the levels read including the job itself (1: the job alone;
    # Node's 0, read above, has no bound and is refused by echomq): the same d reads the same.
    for py_tree, node_tree in zip(py_shallow, node_shallow):
        assert py_tree is not None and tree_of_py(py_tree) == tree_of_node(node_tree)
    first, second = py_shallow
    assert first is not None and second is not None
    assert tree_of_py(first)["children"] == []
    assert [c["children"] for c in tree_of_py(second)["children"]] == [[], []]
    assert (
        await children_values_from_redis(redis, queue_key(queues["A"], ids["R"])) == expected["R"]
    )


async def test_flows_across_prefixes_run_by_the_other_side(
    peers: PeerFactory, redis: Redis
) -> None:
    """A parent under one prefix and its child under another: echomq's flow run by Node
    workers, and BullMQ's run by Python workers; both getFlow read the same tree."""
    qa, qb = fresh_queue(), fresh_queue()
    # echomq adds, Node runs.
    async with FlowProducer(connection=redis, prefix="pa") as flows:
        added = await flows.add(
            FlowJob("top", qa, {"v": 1}, children=[FlowJob("kid", qb, {"v": 2}, prefix="pb")])
        )
    top, kid = added.job.id, added.children[0].job.id
    kid_report = await peers(qb, "pb").work(count=1, behaviour={"*": {"echo": True}}, **NODE_FAST)
    top_report = await peers(qa, "pa").work(
        count=1, behaviour={"*": {"returnChildrenValues": True}}, **NODE_FAST
    )
    assert [i["id"] for i in kid_report["invocations"]] == [kid]
    assert [i["id"] for i in top_report["invocations"]] == [top]
    assert json.loads(await redis.hget(f"pa:{qa}:{top}", "returnvalue") or b"null") == {
        f"pb:{qb}:{kid}": {"v": 2}
    }

    # BullMQ adds (the child names its own prefix), Python runs.
    flow = {
        "name": "top",
        "queueName": qa,
        "data": {"v": 3},
        "children": [{"name": "kid", "queueName": qb, "prefix": "pb", "data": {"v": 4}}],
    }
    summary = await peers(qa, "pa").call("addFlow", flow=flow)
    node_top, node_kid = str(summary["id"]), str(summary["children"][0]["id"])

    async def process(job: Job) -> Any:
        return await job.get_children_values() if job.name == "top" else job.data

    async with (
        Worker(qb, process, connection=redis, prefix="pb", **FAST),
        Worker(qa, process, connection=redis, prefix="pa", **FAST),
    ):

        async def done() -> bool:
            return await redis.zscore(f"pa:{qa}:completed", node_top) is not None

        await wait_for(done, timeout=10, message="the parent never completed")
    assert json.loads(await redis.hget(f"pa:{qa}:{node_top}", "returnvalue") or b"null") == {
        f"pb:{qb}:{node_kid}": {"v": 4}
    }

    async with FlowProducer(connection=redis, prefix="pa") as flows:
        for job_id in (top, node_top):
            ours = await flows.get_flow(job_id, qa)
            theirs = await peers(qa, "pa").call("getFlow", id=job_id)
            assert ours is not None and tree_of_py(ours) == tree_of_node(theirs)
            assert [c.job.parent_key for c in ours.children] == [f"pa:{qa}:{job_id}"]


# -- 3. a mixed fleet on the same flows ----------------------------------------------------------

MIXED: Spec = {
    "name": "root",
    "q": "A",
    "children": [
        {
            "name": "mid",
            "q": "B",
            "children": [
                {"name": "leaf", "q": "A", "data": {"leaf": 1}},
                {"name": "leaf", "q": "B", "data": {"leaf": 2}},
            ],
        },
        {
            "name": "mid",
            "q": "A",
            "children": [
                {"name": "leaf", "q": "B", "data": {"leaf": 3}},
                {"name": "leaf", "q": "A", "data": {"leaf": 4}},
            ],
        },
        {"name": "leaf", "q": "B", "data": {"leaf": 5}},
    ],
}


async def test_mixed_fleet_runs_every_flow_job_once_parents_last(
    peers: PeerFactory, redis: Redis
) -> None:
    """Node and Python workers on both queues of 16 flows (half added by each side): every
    job runs once, each parent after all its children, with all their values."""
    queues = {"A": fresh_queue(), "B": fresh_queue()}
    book = f"ledger:{queues['A']}"
    behaviour = {
        "root": {"returnChildrenValues": True},
        "mid": {"returnChildrenValues": True},
        "leaf": {"echo": True, "sleepMs": 5},
    }
    node_workers = [
        await peers(queues[q]).start(
            "work",
            concurrency=3,
            ledger=book,
            behaviour=behaviour,
            timeoutMs=60000,
            **NODE_FAST,
        )
        for q in ("A", "B")
    ]
    for node in node_workers:
        await node.wait_ready()

    async def process(job: Job) -> Any:
        await redis.rpush(book, f"py:{job.queue_name}:{job.id}")
        if job.name == "leaf":
            await asyncio.sleep(0.005)
            return job.data
        return await job.get_children_values()

    n_flows = 8
    specs = [{**MIXED, "data": {"flow": i}} for i in range(2 * n_flows)]
    async with (
        Worker(queues["A"], process, connection=redis, concurrency=3, **FAST),
        Worker(queues["B"], process, connection=redis, concurrency=3, **FAST),
        FlowProducer(connection=redis) as flows,
    ):
        py_roots = await flows.add_bulk([py_flow(s, queues) for s in specs[:n_flows]])
        node_roots = await peers(queues["A"]).call(
            "addFlow", flows=[node_flow(s, queues) for s in specs[n_flows:]]
        )
        roots = [n.job.id for n in py_roots] + [str(s["id"]) for s in node_roots]

        async def all_done() -> bool:
            return all([await r_done(root) for root in roots])

        async def r_done(root: str) -> bool:
            return await redis.zscore(f"bull:{queues['A']}:completed", root) is not None

        await wait_for(all_done, timeout=30, message="not every root completed")
        reports = [await node.stop() for node in node_workers]

    per_flow = 8
    total = 2 * n_flows * per_flow
    completed = sum([await redis.zcard(f"bull:{q}:completed") for q in queues.values()])
    assert completed == total
    assert sum([await redis.zcard(f"bull:{q}:failed") for q in queues.values()]) == 0
    entries = await ledger(redis, book)
    runs_per_job = Counter(e.split(":", 1)[1] for e in entries)
    assert len(runs_per_job) == total and set(runs_per_job.values()) == {1}, runs_per_job
    sides = Counter(e.split(":", 1)[0] for e in entries)
    assert sides["py"] and sides["node"], sides
    assert sum(len(r["invocations"]) for r in reports) == sides["node"]

    position = {e.split(":", 1)[1]: i for i, e in enumerate(entries)}
    parents: dict[str, list[str]] = {q: [] for q in queues.values()}
    for q in queues.values():
        for job_id in [_s(i) for i in await redis.zrange(f"bull:{q}:completed", 0, -1)]:
            parent_key = queue_key(q, job_id)
            values = await children_values_from_redis(redis, parent_key)
            if not values:
                continue
            parents[q].append(job_id)
            child_positions = [position[k.split(":", 1)[1]] for k in values]
            assert position[f"{q}:{job_id}"] > max(child_positions), parent_key
            assert json.loads((await hash_of(redis, parent_key))["returnvalue"]) == values
            name = (await hash_of(redis, parent_key))["name"]
            assert len(values) == {"root": 3, "mid": 2}[name], parent_key
    assert sum(len(ids) for ids in parents.values()) == 2 * n_flows * 3
    for q in queues.values():
        evs = await events_of(redis, q)
        done = Counter(e["jobId"] for e in evs if e["event"] == "completed")
        assert set(done.values()) == {1}
        released = Counter(
            e["jobId"] for e in evs if e["event"] == "waiting" and e.get("prev") is not None
        )
        assert released == Counter(parents[q]), q  # each parent released once, nothing else


# -- 4. the failure policies, across the two sides --------------------------------------------

POLICIES: list[str | None] = [
    None,
    "failParentOnFailure",
    "continueParentOnFailure",
    "ignoreDependencyOnFailure",
    "removeDependencyOnFailure",
]


def policy_flow(queue: str, policy: str | None) -> FlowJob:
    opts: dict[str, Any] = {} if policy is None else {policy: True}
    spec: Spec = {
        "name": "parent",
        "q": "A",
        "children": [
            {"name": "good", "q": "A", "opts": {"jobId": "good"}},
            {"name": "bad", "q": "A", "opts": {"jobId": "bad", **opts}},
        ],
    }
    return py_flow(spec, {"A": queue})


def policy_outcome(queue: str, policy: str | None) -> dict[str, Any]:
    """What the parent must look like once `good` completed and `bad` failed."""
    good, bad = queue_key(queue, "good"), queue_key(queue, "bad")
    deps: dict[str, Any] = {
        "processed": {good: "ok"},
        "unprocessed": [],
        "failed": [],
        "ignored": {},
    }
    state, reason, ran = "completed", None, True
    if policy is None:
        state, ran = "waiting-children", False
        deps["unprocessed"] = [bad]
    elif policy == "failParentOnFailure":
        state, reason, ran = "failed", f"child {bad} failed", False
        deps["failed"] = [bad]
    elif policy in ("continueParentOnFailure", "ignoreDependencyOnFailure"):
        deps["ignored"] = {bad: "boom"}
    return {"state": state, "failedReason": reason, "ran": ran, "deps": deps}


async def policy_run_by_python(
    peers: PeerFactory, redis: Redis, policy: str | None
) -> tuple[str, str]:
    """A Python worker runs the policy flow; Node reads the parent. Returns (queue, parent)."""
    queue = fresh_queue()
    async with FlowProducer(connection=redis) as flows:
        parent_id = (await flows.add(policy_flow(queue, policy))).job.id
    ran: list[str] = []
    ignored_seen: list[dict[str, str]] = []

    async def process(job: Job) -> str:
        ran.append(job.name)
        if job.name == "bad":
            raise RuntimeError("boom")
        if job.name == "parent":
            ignored_seen.append(await job.get_ignored_children_failures())
        return "ok"

    want = policy_outcome(queue, policy)
    async with Worker(queue, process, connection=redis, **FAST):
        if policy is None:
            await reaches(redis, queue, "bad", "failed")
        else:
            await reaches(redis, queue, parent_id, want["state"])
    assert ran[:2] == ["good", "bad"] and ("parent" in ran) is want["ran"]
    if want["ran"]:
        assert ignored_seen == [want["deps"]["ignored"]]

    got, deps, ignored, counts = await peers(queue).batch(
        [
            ("getJob", {"id": parent_id}),
            ("jobMethod", {"id": parent_id, "method": "getDependencies"}),
            ("jobMethod", {"id": parent_id, "method": "getIgnoredChildrenFailures"}),
            ("jobMethod", {"id": parent_id, "method": "getDependenciesCount"}),
        ]
    )
    assert got["state"] == want["state"]
    assert got["json"]["failedReason"] == want["failedReason"]
    assert got["json"]["deferredFailure"] is None
    assert deps == want["deps"]
    assert ignored == want["deps"]["ignored"]
    assert counts == {k: len(v) for k, v in want["deps"].items()}
    return queue, parent_id


async def policy_run_by_node(
    peers: PeerFactory, redis: Redis, policy: str | None
) -> tuple[str, str]:
    """A Node worker runs the policy flow; Python reads the parent. Returns (queue, parent)."""
    queue = fresh_queue()
    async with FlowProducer(connection=redis) as flows:
        parent_id = (await flows.add(policy_flow(queue, policy))).job.id
    want = policy_outcome(queue, policy)
    behaviour = {
        "bad": {"fail": "boom"},
        "good": {"return": "ok"},
        "parent": {"ignoredFailures": True, "return": "ok"},
    }
    report = await peers(queue).work(
        count=2 if policy is None else 3, behaviour=behaviour, timeoutMs=15000, **NODE_FAST
    )
    assert report["reason"] == "count", report
    names = [i["name"] for i in report["invocations"]]
    assert names[:2] == ["good", "bad"] and ("parent" in names) is want["ran"]
    if want["ran"]:
        assert report["invocations"][2]["ignoredFailures"] == want["deps"]["ignored"]

    job = await echomq.get_job(queue, parent_id, connection=redis)
    assert job is not None
    assert await job.get_state() == want["state"]
    assert job.failed_reason == want["failedReason"] and job.deferred_failure is None
    deps = await job.get_dependencies()
    assert {
        "processed": deps.processed,
        "unprocessed": deps.unprocessed,
        "failed": deps.failed,
        "ignored": deps.ignored,
    } == want["deps"]
    assert await job.get_ignored_children_failures() == want["deps"]["ignored"]
    counts = await job.get_dependencies_count()
    assert (counts.processed, counts.unprocessed, counts.failed, counts.ignored) == tuple(
        len(want["deps"][k]) for k in ("processed", "unprocessed", "failed", "ignored")
    )
    return queue, parent_id


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: p or "none")
async def test_failure_policy_across_runtimes(
    peers: PeerFactory, redis: Redis, policy: str | None
) -> None:
    """Each policy applied by a Python worker and read by Node, then applied by a Node worker
    and read by Python: the same outcome, job hashes and events on both sides."""
    py_q, py_parent = await policy_run_by_python(peers, redis, policy)
    node_q, node_parent = await policy_run_by_node(peers, redis, policy)
    for job in ("good", "bad", "parent"):
        ours = await comparable_hash(
            redis, py_q, job if job != "parent" else py_parent, {py_parent: "P", py_q: "Q"}
        )
        theirs = await comparable_hash(
            redis, node_q, job if job != "parent" else node_parent, {node_parent: "P", node_q: "Q"}
        )
        assert ours == theirs, (job, ours, theirs)
    py_events = flow_events(await events_of(redis, py_q), {py_parent: "P", py_q: "Q"})
    node_events = flow_events(await events_of(redis, node_q), {node_parent: "P", node_q: "Q"})
    assert py_events == node_events


async def test_stalled_child_fails_its_parent_like_node(
    peers: PeerFactory, procs: WorkerProcs, redis: Redis
) -> None:
    """A child (fail_parent_on_failure) of a crashed worker, failed by the stalled checker
    (maxStalledCount 0), fails its parent: on Python workers exactly as on Node workers."""
    py_q, node_q = fresh_queue(), fresh_queue()
    parents: dict[str, str] = {}
    async with FlowProducer(connection=redis) as flows:
        for q in (py_q, node_q):
            tree = FlowJob(
                "parent",
                q,
                children=[FlowJob("c", q, {"sleep": 30}, job_id="c", fail_parent_on_failure=True)],
            )
            parents[q] = (await flows.add(tree)).job.id

    # Python: a CLI worker dies holding the child; another, busy with nothing, recovers.
    crashed = procs.start(py_q)

    async def child_ran() -> bool:
        return any(job_id == "c" for job_id, _ in await runs(redis, py_q))

    await wait_for(child_ran, timeout=15, message="the child never started")
    crashed.kill()
    ran: list[str] = []

    async def record(job: Job) -> None:
        ran.append(job.name)

    async with Worker(py_q, record, connection=redis, max_stalled_count=0, **FAST):
        await reaches(redis, py_q, parents[py_q], "failed")
    assert ran == []

    # Node: the same with a Node worker crashing and a Node worker recovering.
    peer = peers(node_q)
    dead = await peer.start("work", behaviour={"*": {"exitProcessMidJob": True}}, **NODE_FAST)
    assert await dead.wait(20) == 137
    report = await peer.work(count=2, maxStalledCount=0, behaviour={}, **NODE_FAST)
    assert report["invocations"] == [], "Node ran a job it must fail without running"

    for q in (py_q, node_q):
        parent = await hash_of(redis, queue_key(q, parents[q]))
        child = await hash_of(redis, queue_key(q, "c"))
        assert parent["failedReason"] == f"child {queue_key(q, 'c')} failed", q
        assert child["failedReason"] == STALLED_REASON, q
        assert "defa" not in parent and "defa" not in child
        assert await redis.zrange(queue_key(q, parents[q]) + ":unsuccessful", 0, -1) == [
            queue_key(q, "c").encode()
        ]
    for job_id in ("P", "c"):
        ours, theirs = [
            await comparable_hash(
                redis, q, parents[q] if job_id == "P" else job_id, {parents[q]: "P", q: "Q"}
            )
            for q in (py_q, node_q)
        ]
        assert ours == theirs, (job_id, ours, theirs)
    py_events = flow_events(await events_of(redis, py_q), {parents[py_q]: "P", py_q: "Q"})
    node_events = flow_events(await events_of(redis, node_q), {parents[node_q]: "P", node_q: "Q"})
    assert py_events == node_events
    assert {"event": "waiting", "jobId": "P", "prev": "waiting-children"} in py_events


# -- more flow paths, side by side ---------------------------------------------------------------

RELEASES: list[Spec] = [
    {
        "name": "r1",
        "q": "A",
        "opts": {"jobId": "r1", "priority": 7},
        "children": [
            {"name": "k", "q": "A", "opts": {"jobId": "k1"}},
        ],
    },
    {
        "name": "r2",
        "q": "A",
        "opts": {"jobId": "r2", "delay": 300},
        "children": [
            {"name": "k", "q": "A", "opts": {"jobId": "k2"}},
        ],
    },
    {
        "name": "r3",
        "q": "A",
        "opts": {"jobId": "r3"},
        "children": [
            {"name": "bad", "q": "A", "opts": {"jobId": "b3", "continueParentOnFailure": True}},
            {"name": "k", "q": "C", "opts": {"jobId": "k3"}},
        ],
    },
    {
        "name": "r4",
        "q": "A",
        "opts": {"jobId": "r4"},
        "children": [
            {"name": "k", "q": "A", "opts": {"jobId": "k4", "removeOnComplete": True}},
        ],
    },
    {
        "name": "r5",
        "q": "A",
        "opts": {"jobId": "r5"},
        "children": [
            {"name": "flaky", "q": "A", "opts": {"jobId": "k5", "attempts": 2}},
        ],
    },
]
RELEASE_JOBS = ["r1", "k1", "r2", "k2", "r3", "b3", "r4", "r5", "k5"]


async def test_parent_release_paths_match_node(peers: PeerFactory, redis: Redis) -> None:
    """Python and Node workers run the same flows (a prioritized and a delayed parent, a
    continue-on-failure parent whose other child is still pending, a child removed on
    completion, a child retried): the same hashes, states, children records and events."""
    sides = {side: {"A": fresh_queue(), "C": fresh_queue()} for side in ("py", "node")}
    async with FlowProducer(connection=redis) as flows:
        for queues in sides.values():
            await flows.add_bulk([py_flow(spec, queues) for spec in RELEASES])

    async def process(job: Job) -> Any:
        if job.name == "bad":
            raise RuntimeError("boom")
        if job.name == "flaky" and job.attempts_made == 0:
            raise RuntimeError("flaky")
        return f"{job.name}-ok"

    py_a = sides["py"]["A"]
    async with Worker(py_a, process, connection=redis, **FAST):
        for root in ("r1", "r2", "r3", "r4", "r5"):
            await reaches_final(redis, py_a, root)
    behaviour = {
        "bad": {"fail": "boom"},
        "flaky": {"fail": "flaky", "failTimes": 1, "return": "flaky-ok"},
        "r1": {"return": "r1-ok"},
        "r2": {"return": "r2-ok"},
        "r3": {"return": "r3-ok"},
        "r4": {"return": "r4-ok"},
        "r5": {"return": "r5-ok"},
        "k": {"return": "k-ok"},
    }
    report = await peers(sides["node"]["A"]).work(count=10, behaviour=behaviour, **NODE_FAST)
    assert report["reason"] == "count", report

    for job_id in RELEASE_JOBS:
        views = [
            await comparable_hash(redis, queues["A"], job_id, {queues["A"]: "A", queues["C"]: "C"})
            for queues in sides.values()
        ]
        assert views[0] == views[1], (job_id, views)
    for queues in sides.values():
        a = queues["A"]
        assert await redis.exists(queue_key(a, "k4")) == 0
        assert await redis.hgetall(queue_key(a, "r4") + ":processed") == {
            queue_key(a, "k4").encode(): b'"k-ok"'
        }
        assert (await hash_of(redis, queue_key(a, "r3")))["failedReason"] == (
            "Job r3 has pending dependencies. moveToFinished"
        )
    py_events = flow_events(await events_of(redis, sides["py"]["A"]), {py_a: "Q"})
    node_events = flow_events(await events_of(redis, sides["node"]["A"]), {sides["node"]["A"]: "Q"})
    # Compared per job: a Python worker (concurrency 1) whose parent completion is refused
    # (-4) takes its next job in the same finishAndFetch call, before recording the failure
    # that replaces the completion; a Node worker records the failure first (reported).
    assert per_job(py_events) == per_job(node_events)
    assert sorted(map(str, py_events)) == sorted(map(str, node_events))


# A parent released to `delayed` by a continue-on-failure child, then failed by a
# fail-parent child (concurrency 1); and a parent that is running when its fail-parent child
# fails, so that its completion is refused (-9) (concurrency 2).
LATE_FAILURES: dict[str, tuple[Spec, int]] = {
    "delayed": (
        {
            "name": "P",
            "q": "A",
            "opts": {"jobId": "P", "delay": 5000},
            "children": [
                {"name": "bad", "q": "A", "opts": {"jobId": "c1", "continueParentOnFailure": True}},
                {"name": "bad", "q": "A", "opts": {"jobId": "c2", "failParentOnFailure": True}},
            ],
        },
        1,
    ),
    "active": (
        {
            "name": "P-slow",
            "q": "A",
            "opts": {"jobId": "P"},
            "children": [
                {"name": "bad", "q": "A", "opts": {"jobId": "c1", "continueParentOnFailure": True}},
                {
                    "name": "bad-slow",
                    "q": "A",
                    "opts": {"jobId": "c2", "failParentOnFailure": True},
                },
            ],
        },
        2,
    ),
}


@pytest.mark.parametrize("case", sorted(LATE_FAILURES))
async def test_late_child_failures_match_node(peers: PeerFactory, redis: Redis, case: str) -> None:
    """A fail-parent child failing after its parent was released (to delayed, or running)
    has the same effect on Python workers as on Node workers."""
    spec, concurrency = LATE_FAILURES[case]
    py_q, node_q = fresh_queue(), fresh_queue()
    async with FlowProducer(connection=redis) as flows:
        for q in (py_q, node_q):
            await flows.add(py_flow(spec, {"A": q}))

    async def process(job: Job) -> str:
        if job.name.endswith("-slow"):
            await asyncio.sleep(0.15 if job.name == "bad-slow" else 0.6)
        if job.name.startswith("bad"):
            raise RuntimeError("boom")
        return "ok"

    async with Worker(py_q, process, connection=redis, concurrency=concurrency, **FAST):
        await reaches(redis, py_q, "P", "failed")
    behaviour = {
        "bad": {"fail": "boom"},
        "bad-slow": {"sleepMs": 150, "fail": "boom"},
        "P-slow": {"sleepMs": 600, "return": "ok"},
        "P": {"return": "ok"},
    }
    report = await peers(node_q).work(
        count=3, concurrency=concurrency, behaviour=behaviour, **NODE_FAST
    )
    assert report["reason"] == "count", report
    for job_id in ("P", "c1", "c2"):
        ours, theirs = [await comparable_hash(redis, q, job_id, {q: "Q"}) for q in (py_q, node_q)]
        assert ours == theirs, (job_id, ours, theirs)
    for q in (py_q, node_q):
        for part in ("failed", "unsuccessful", "processed", "dependencies"):
            assert await redis.type(queue_key(q, "P") + ":" + part) == (
                await redis.type(queue_key(py_q, "P") + ":" + part)
            )
    reason = (await hash_of(redis, queue_key(py_q, "P")))["failedReason"]
    if case == "delayed":
        assert reason == f"child {queue_key(py_q, 'c2')} failed"
    else:
        assert (
            reason
            == "Cannot complete job P because it has at least one failed child. moveToFinished"
        )
    py_events = flow_events(await events_of(redis, py_q), {py_q: "Q"})
    node_events = flow_events(await events_of(redis, node_q), {node_q: "Q"})
    assert per_job(py_events) == per_job(node_events)
    parent_path = [(e["event"], e.get("prev")) for e in per_job(py_events)["P"]]
    if case == "delayed":  # released to delayed by c1, then to wait by c2's failure
        assert parent_path[2:5] == [("delayed", None), ("waiting", "waiting-children")] + [
            ("active", "waiting")
        ]
    else:  # ran, and its completion was refused
        assert ("failed", "active") in parent_path and ("completed", "active") not in parent_path


async def test_fail_parent_child_failing_while_its_parent_waits_matches_node(
    peers: PeerFactory, redis: Redis
) -> None:
    """A parent released by a continue-on-failure child waits in another queue when its
    fail-parent child fails: it only gets `defa`, and is failed without running when taken."""
    spec: Spec = {
        "name": "P",
        "q": "B",
        "opts": {"jobId": "P"},
        "children": [
            {"name": "bad", "q": "A", "opts": {"jobId": "c1", "continueParentOnFailure": True}},
            {"name": "bad", "q": "A", "opts": {"jobId": "c2", "failParentOnFailure": True}},
        ],
    }
    sides = {side: {"A": fresh_queue(), "B": fresh_queue()} for side in ("py", "node")}
    async with FlowProducer(connection=redis) as flows:
        for queues in sides.values():
            await flows.add(py_flow(spec, queues))
    ran: list[str] = []

    async def process(job: Job) -> str:
        ran.append(job.name)
        raise RuntimeError("boom")

    py = sides["py"]
    async with Worker(py["A"], process, connection=redis, **FAST):
        await reaches(redis, py["A"], "c2", "failed")
    assert await state_of(redis, py["B"], "P") == "waiting"
    async with Worker(py["B"], process, connection=redis, **FAST):
        await reaches(redis, py["B"], "P", "failed")
    assert ran == ["bad", "bad"]

    node = sides["node"]
    children = await peers(node["A"]).work(count=2, behaviour={"*": {"fail": "boom"}}, **NODE_FAST)
    assert children["reason"] == "count", children
    assert (await hash_of(redis, queue_key(node["B"], "P")))[
        "defa"
    ] == f"child {queue_key(node['A'], 'c2')} failed"
    parent = await peers(node["B"]).work(count=1, behaviour={"*": {"fail": "ran"}}, **NODE_FAST)
    assert parent["invocations"] == []

    for label, job_id in (("B", "P"), ("A", "c1"), ("A", "c2")):
        ours, theirs = [
            await comparable_hash(
                redis, queues[label], job_id, {queues["A"]: "QA", queues["B"]: "QB"}
            )
            for queues in sides.values()
        ]
        assert ours == theirs, (job_id, ours, theirs)
    assert (await hash_of(redis, queue_key(py["B"], "P")))["failedReason"] == (
        f"child {queue_key(py['A'], 'c2')} failed"
    )
    for label in ("A", "B"):
        py_events, node_events = [
            flow_events(
                await events_of(redis, queues[label]), {queues["A"]: "QA", queues["B"]: "QB"}
            )
            for queues in sides.values()
        ]
        assert py_events == node_events, label


async def test_unlinking_children_matches_node(peers: PeerFactory, redis: Redis) -> None:
    """removeChildDependency then removeUnprocessedChildren, called from Python on one flow and
    from Node on the same flow elsewhere, leave the same keys and events."""
    spec: Spec = {
        "name": "P",
        "q": "A",
        "opts": {"jobId": "P", "priority": 4},
        "children": [
            {"name": "a", "q": "A", "opts": {"jobId": "a"}},
            {
                "name": "b",
                "q": "A",
                "opts": {"jobId": "b"},
                "children": [{"name": "g", "q": "A", "opts": {"jobId": "g"}}],
            },
            {"name": "c", "q": "A", "opts": {"jobId": "c", "delay": 60000}},
        ],
    }
    py_q, node_q = fresh_queue(), fresh_queue()
    async with FlowProducer(connection=redis) as flows:
        for q in (py_q, node_q):
            await flows.add(py_flow(spec, {"A": q}))

    child = await echomq.get_job(py_q, "a", connection=redis)
    parent = await echomq.get_job(py_q, "P", connection=redis)
    assert child is not None and parent is not None
    assert await child.remove_child_dependency() is True
    await parent.remove_unprocessed_children()
    removed, _ = await peers(node_q).batch(
        [
            ("jobMethod", {"id": "a", "method": "removeChildDependency"}),
            ("jobMethod", {"id": "P", "method": "removeUnprocessedChildren"}),
        ]
    )
    assert removed is True

    py_keys = await dump_queue(redis, py_q, lambda t: t.replace(py_q, "Q"))
    node_keys = await dump_queue(redis, node_q, lambda t: t.replace(node_q, "Q"))
    # Both walk the parent's dependencies SET in Redis' order, which depends on the member
    # names (so on the queue name): events are compared per job.
    py_events, node_events = py_keys.pop("bull:Q:events"), node_keys.pop("bull:Q:events")
    assert per_job(py_events) == per_job(node_events)
    assert py_keys == node_keys
    assert sorted(py_keys) == sorted(
        f"bull:Q:{k}" for k in ("P", "a", "id", "marker", "meta", "wait")
    )
    assert py_keys["bull:Q:wait"] == ["a", "P"]  # the released parent went to the front


async def test_retrying_finished_children_relinks_them_like_node(
    peers: PeerFactory, redis: Redis
) -> None:
    """A completed, an ignored-failed and a fail-parent child retried from Python on one run
    of a flow, and from Node on another: both go back to their parent's dependencies alike."""
    spec: Spec = {
        "name": "P",
        "q": "A",
        "opts": {"jobId": "P"},
        "children": [
            {"name": "ok", "q": "A", "opts": {"jobId": "c"}},
            {"name": "bad", "q": "A", "opts": {"jobId": "d", "ignoreDependencyOnFailure": True}},
            {"name": "bad", "q": "A", "opts": {"jobId": "e", "failParentOnFailure": True}},
        ],
    }
    py_q, node_q = fresh_queue(), fresh_queue()

    async def process(job: Job) -> str:
        if job.name == "bad":
            raise RuntimeError("boom")
        return "ok"

    async with FlowProducer(connection=redis) as flows:
        for q in (py_q, node_q):
            await flows.add(py_flow(spec, {"A": q}))
            async with Worker(q, process, connection=redis, **FAST):
                await reaches(redis, q, "P", "failed")
    for job_id in ("c", "d", "e"):
        job = await echomq.get_job(py_q, job_id, connection=redis)
        assert job is not None
        await job.retry(await job.get_state())
    await peers(node_q).batch(
        [
            ("jobMethod", {"id": job_id, "method": "retry", "args": [state]})
            for job_id, state in (("c", "completed"), ("d", "failed"), ("e", "failed"))
        ]
    )
    py_keys = await dump_queue(redis, py_q, lambda t: t.replace(py_q, "Q"))
    node_keys = await dump_queue(redis, node_q, lambda t: t.replace(node_q, "Q"))
    assert py_keys == node_keys
    assert py_keys["bull:Q:P:dependencies"] == ["bull:Q:c", "bull:Q:d", "bull:Q:e"]
    for part in ("processed", "failed", "unsuccessful"):
        assert f"bull:Q:P:{part}" not in py_keys
    assert await state_of(redis, py_q, "P") == "failed"  # the parent is not moved back


# -- 5. moveToWaitingChildren from both sides -------------------------------------------------


def step_events(events: list[dict[str, str]], job_id: str) -> list[tuple[str, str]]:
    return [(e["event"], e.get("prev", "")) for e in events if e.get("jobId") == job_id]


async def test_step_jobs_wait_for_children_across_runtimes(
    peers: PeerFactory, redis: Redis
) -> None:
    """A Node processor adds children (run by Python) and moves itself to waiting-children;
    a Python processor does the same with children run by Node. Both parents run again once,
    see the other side's values, and leave the same events."""
    node_a, py_b = fresh_queue(), fresh_queue()  # Node parent, Python children
    py_a, node_b = fresh_queue(), fresh_queue()  # Python parent, Node children

    # Node parent, Python children.
    node_parent = await echomq.add(node_a, "step", {}, connection=redis)
    step = {"queue": py_b, "name": "kid", "count": 2, "ids": ["k0", "k1"]}
    node = await peers(node_a).start(
        "work", count=1, behaviour={"step": {"step": step}}, **NODE_FAST
    )

    async def kid(job: Job) -> Any:
        return job.data["i"] * 10

    # The children run only once their parent waits, so that it does wait (the pattern also
    # works when they are done first: moveToWaitingChildren then returns false).
    await reaches(redis, node_a, node_parent.id, "waiting-children")
    async with Worker(py_b, kid, connection=redis, **FAST):
        report = await node.result(30)
    assert report["reason"] == "count", report
    values = {queue_key(py_b, "k0"): 0, queue_key(py_b, "k1"): 10}
    assert [i.get("moved") for i in report["invocations"]] == [True, None]
    node_parent_hash = await hash_of(redis, queue_key(node_a, node_parent.id))
    assert json.loads(node_parent_hash["returnvalue"]) == values
    assert await node_parent.get_children_values() == values

    # Python parent, Node children.
    py_parent_id = await peers(py_a).add("step", {})
    moved: list[bool] = []

    async def stepper(job: Job) -> Any:
        got = await job.get_children_values()
        if not got:
            for i in range(2):
                await echomq.add(
                    node_b, "kid", {"i": i}, connection=redis, job_id=f"k{i}", parent=job
                )
            moved.append(await job.move_to_waiting_children())
            if moved[-1]:
                raise WaitingChildrenError()
        return got

    async with Worker(py_a, stepper, connection=redis, **FAST):
        await reaches(redis, py_a, py_parent_id, "waiting-children")
        kids_report = await peers(node_b).work(
            count=2, behaviour={"kid": {"echo": True}}, **NODE_FAST
        )
        await reaches(redis, py_a, py_parent_id, "completed")
    assert kids_report["reason"] == "count"
    assert moved == [True]
    got = await peers(py_a).get_job(py_parent_id)
    assert got is not None
    assert got["json"]["returnvalue"] == {
        queue_key(node_b, "k0"): {"i": 0},
        queue_key(node_b, "k1"): {"i": 1},
    }
    node_values = await peers(py_a).call("jobMethod", id=py_parent_id, method="getChildrenValues")
    assert node_values == got["json"]["returnvalue"]

    node_seq = step_events(await events_of(redis, node_a), node_parent.id)
    py_seq = step_events(await events_of(redis, py_a), py_parent_id)
    assert (
        node_seq
        == py_seq
        == [
            ("added", ""),
            ("waiting", ""),
            ("active", "waiting"),
            ("waiting-children", "active"),
            ("waiting", "waiting-children"),
            ("active", "waiting"),
            ("completed", "active"),
        ]
    )


# -- 6. the same flow added by each FlowProducer -------------------------------------------------

DIFF_SPEC: Spec = {
    "name": "root",
    "q": "A",
    "data": {"r": 1},
    "opts": {"priority": 3},
    "children": [
        {
            "name": "mid",
            "q": "B",
            "data": {"m": [1, 2]},
            "opts": {"failParentOnFailure": True, "attempts": 2},
            "children": [
                {"name": "g", "q": "A", "data": None, "opts": {"ignoreDependencyOnFailure": True}},
                {
                    "name": "h",
                    "q": "B",
                    "data": {"h": "x"},
                    "opts": {"jobId": "h-1", "continueParentOnFailure": True, "delay": 60000},
                },
            ],
        },
        {
            "name": "later",
            "q": "A",
            "data": {},
            "opts": {"delay": 45000, "removeDependencyOnFailure": True},
        },
        {"name": "prio", "q": "A", "data": {"p": True}, "opts": {"priority": 5, "jobId": "p-1"}},
        {"name": "plain", "q": "B", "data": "s", "opts": {"lifo": True}},
        {
            "name": "delayed-prio",
            "q": "B",
            "data": [1],
            "opts": {"priority": 2, "delay": 30000, "attempts": 3},
        },
    ],
}


async def test_same_flow_from_node_and_python_producers_leaves_the_same_keys(
    peers: PeerFactory, redis: Redis
) -> None:
    """One tree (delays, priorities, custom ids, every failure flag, two queues) added by
    BullMQ's FlowProducer and by echomq's: every key, field, member and event is the same."""
    node_q = {"A": fresh_queue(), "B": fresh_queue()}
    py_q = {"A": fresh_queue(), "B": fresh_queue()}
    summary = await peers(node_q["A"]).call("addFlow", flow=node_flow(DIFF_SPEC, node_q))
    async with FlowProducer(connection=redis) as flows:
        added = await flows.add(py_flow(DIFF_SPEC, py_q))
    n_ids, p_ids = node_ids(summary), py_ids(added)
    assert (
        [i for i in n_ids if len(i) != 36] == [i for i in p_ids if len(i) != 36] == ["h-1", "p-1"]
    )

    def renamer(ids: list[str], queues: dict[str, str]) -> Callable[[str], str]:
        table = {job_id: f"N{i}" for i, job_id in enumerate(ids) if len(job_id) == 36}
        table.update({name: f"Q{label}" for label, name in queues.items()})

        def rename(text: str) -> str:
            for old, new in table.items():
                text = text.replace(old, new)
            return text

        return rename

    node_rename, py_rename = renamer(n_ids, node_q), renamer(p_ids, py_q)
    for label in ("A", "B"):
        node_keys = await dump_queue(redis, node_q[label], node_rename)
        py_keys = await dump_queue(redis, py_q[label], py_rename)
        assert sorted(py_keys) == sorted(node_keys), label
        for key in node_keys:
            assert py_keys[key] == node_keys[key], (key, py_keys[key], node_keys[key])
    # Each membership stated plainly, on the Python side (the comparison above covers Node).
    root, mid, g, _h, later, _p, plain, dp = p_ids
    a, b = py_q["A"], py_q["B"]
    assert await redis.zrange(f"bull:{a}:waiting-children", 0, -1) == [root.encode()]
    assert await redis.zrange(f"bull:{b}:waiting-children", 0, -1) == [mid.encode()]
    assert await redis.lrange(f"bull:{a}:wait", 0, -1) == [g.encode()]
    assert await redis.lrange(f"bull:{b}:wait", 0, -1) == [plain.encode()]
    assert await redis.zrange(f"bull:{a}:prioritized", 0, -1) == [b"p-1"]
    assert set(await redis.zrange(f"bull:{b}:delayed", 0, -1)) == {b"h-1", dp.encode()}
    assert await redis.zrange(f"bull:{a}:delayed", 0, -1) == [later.encode()]
    assert await redis.smembers(queue_key(a, root) + ":dependencies") == {
        queue_key(b, mid).encode(),
        queue_key(a, later).encode(),
        queue_key(a, "p-1").encode(),
        queue_key(b, plain).encode(),
        queue_key(b, dp).encode(),
    }


# -- 7. a crash during a flow -----------------------------------------------------------------


async def test_sigkill_during_a_flow_loses_no_child_and_releases_the_parent_once(
    procs: WorkerProcs, redis: Redis
) -> None:
    """A CLI worker is SIGKILLed holding children; another finishes the flow: each child
    completes once, the parent is released once and runs once, last."""
    queue = fresh_queue()
    n = 6
    tree = FlowJob(
        "parent",
        queue,
        {"value": "parent-done"},
        children=[FlowJob("child", queue, {"sleep": 0.8}, job_id=f"c{i}") for i in range(n)],
    )
    async with FlowProducer(connection=redis) as flows:
        parent_id = (await flows.add(tree)).job.id
    first = procs.start(queue, concurrency=3)

    async def three_running() -> bool:
        return len(await runs(redis, queue)) >= 3

    await wait_for(three_running, timeout=15, message="the first worker never took 3 children")
    first.kill()
    held = {_s(i) for i in await redis.lrange(f"bull:{queue}:active", 0, -1)}
    assert held, "the kill left no child active"
    second = procs.start(queue, concurrency=3)
    await reaches(redis, queue, parent_id, "completed", timeout=20)
    second.terminate()

    children = [f"c{i}" for i in range(n)]
    processed = await redis.hgetall(queue_key(queue, parent_id) + ":processed")
    assert {_s(k): json.loads(v) for k, v in processed.items()} == {
        queue_key(queue, c): c for c in children
    }
    completed = {_s(i) for i in await redis.zrange(f"bull:{queue}:completed", 0, -1)}
    assert completed == {*children, parent_id}
    assert await redis.zcard(f"bull:{queue}:failed") == 0
    evs = await events_of(redis, queue)
    done = Counter(e["jobId"] for e in evs if e["event"] == "completed")
    assert done == Counter({**dict.fromkeys(children, 1), parent_id: 1})
    for c in children:
        assert (await hash_of(redis, queue_key(queue, c)))["atm"] == "1"

    entries = await runs(redis, queue)
    order = [job_id for job_id, _ in entries]
    assert order.count(parent_id) == 1 and order[-1] == parent_id
    assert set(order) == {*children, parent_id}
    assert all(order.count(c) == (2 if c in held else 1) for c in children), (order, held)
    pids = {pid for _, pid in entries}
    assert pids == {first.pid, second.pid}
    parent = await hash_of(redis, queue_key(queue, parent_id))
    finished = [int((await hash_of(redis, queue_key(queue, c)))["finishedOn"]) for c in children]
    assert int(parent["processedOn"]) >= max(finished)
    assert releases(evs, parent_id) == [
        {"event": "waiting", "jobId": parent_id, "prev": "waiting-children"}
    ]
