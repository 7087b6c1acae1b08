"""Flows from Python: FlowProducer, FlowJob, the ``parent=`` option and the failure policies,
against a real Redis (docs/protocol/scripts.md#script-addFlow, docs/flows.md).

Each refused call is checked to leave Redis byte for byte as it was (a key snapshot).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from redis import Redis as SyncRedis
from redis.asyncio import Redis

import echomq
import echomq.sync
from echomq import FlowJob, FlowProducer, Job, Worker
from echomq.errors import (
    InvalidOptionError,
    InvalidQueueNameError,
    ParentCannotBeReplacedError,
    ParentNotFoundError,
    ValidationError,
)
from helpers import snapshot, wait_for

FAST = {"drain_delay": 0.2, "stalled_interval": 5.0}


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def job_hash(r: Redis, key: str) -> dict[str, str]:
    return {_s(k): _s(v) for k, v in (await r.hgetall(key)).items()}


async def events_of(r: Redis, queue: str, prefix: str = "bull") -> list[dict[str, str]]:
    entries = await r.xrange(f"{prefix}:{queue}:events")
    return [{_s(k): _s(v) for k, v in fields.items()} for _, fields in entries]


async def state_of(r: Redis, queue: str, job_id: str, prefix: str = "bull") -> str:
    return await echomq.get_state(queue, job_id, connection=r, prefix=prefix)


async def reaches(
    r: Redis, queue: str, job_id: str, state: str, prefix: str = "bull", timeout: float = 10
) -> None:
    async def there() -> bool:
        return await state_of(r, queue, job_id, prefix) == state

    await wait_for(there, timeout=timeout, message=f"job {job_id} never became {state}")


def video_flow(queue: str, n: int = 3) -> FlowJob:
    return FlowJob(
        "publish",
        queue,
        {"video": "v1"},
        children=[FlowJob("transcode", queue, {"res": r}) for r in range(n)],
    )


async def test_add_stores_the_tree_parent_first(redis: Redis, queue_name: str) -> None:
    other = queue_name + "-b"
    tree = FlowJob(
        "root",
        queue_name,
        {"r": 1},
        priority=3,
        children=[
            FlowJob(
                "c1",
                other,
                {"c": 1},
                attempts=2,
                fail_parent_on_failure=True,
                children=[FlowJob("g1", queue_name)],
            ),
            FlowJob("c2", queue_name, job_id="cx", delay=5),
        ],
    )
    async with FlowProducer(connection=redis) as flows:
        node = await flows.add(tree)
    root = node.job
    c1, c2 = (child.job for child in node.children)
    g1 = node.children[0].children[0].job
    assert c2.id == "cx" and len(root.id) == 36  # generated ids are UUIDs, as in Node
    assert (c1.queue_name, g1.queue_name) == (other, queue_name)
    assert c1.parent_key == f"bull:{queue_name}:{root.id}"
    assert c1.parent is not None and c1.parent.id == root.id

    assert await state_of(redis, queue_name, root.id) == "waiting-children"
    assert await state_of(redis, other, c1.id) == "waiting-children"
    assert await state_of(redis, queue_name, "cx") == "delayed"
    assert await state_of(redis, queue_name, g1.id) == "waiting"

    h = await job_hash(redis, f"bull:{other}:{c1.id}")
    assert h["parentKey"] == f"bull:{queue_name}:{root.id}"
    assert json.loads(h["parent"]) == {
        "id": root.id,
        "queueKey": f"bull:{queue_name}",
        "fpof": True,
    }
    assert json.loads(h["opts"]) == {
        "attempts": 2,
        "fpof": True,
        "parent": {"id": root.id, "queue": f"bull:{queue_name}"},
    }
    root_hash = await job_hash(redis, f"bull:{queue_name}:{root.id}")
    assert "parentKey" not in root_hash and root_hash["priority"] == "3"
    deps = await redis.smembers(f"bull:{queue_name}:{root.id}:dependencies")
    assert {_s(d) for d in deps} == {f"bull:{other}:{c1.id}", f"bull:{queue_name}:cx"}
    assert await redis.get(f"bull:{queue_name}:id") == b"3"  # one INCR per node, as Node
    evs = [(e["event"], e["jobId"]) for e in await events_of(redis, queue_name)]
    assert evs == [
        ("added", root.id),
        ("waiting-children", root.id),
        ("added", "cx"),
        ("delayed", "cx"),
        ("added", g1.id),
        ("waiting", g1.id),
    ]


async def test_a_worker_runs_children_then_the_parent(redis: Redis, queue_name: str) -> None:
    async with FlowProducer(connection=redis) as flows:
        node = await flows.add(video_flow(queue_name, 4))
    order: list[str] = []
    seen: dict[str, Any] = {}

    async def process(job: Job) -> Any:
        order.append(job.name)
        if job.name == "publish":
            raw = await redis.hgetall(f"bull:{queue_name}:{job.id}:processed")
            seen.update({_s(k): json.loads(v) for k, v in raw.items()})
            return "published"
        return job.data["res"] * 10

    async with Worker(queue_name, process, connection=redis, concurrency=3, **FAST):
        await reaches(redis, queue_name, node.job.id, "completed")
    assert order[-1] == "publish" and order.count("transcode") == 4
    assert seen == {f"bull:{queue_name}:{c.job.id}": c.job.data["res"] * 10 for c in node.children}
    evs = await events_of(redis, queue_name)
    released = [e for e in evs if e["event"] == "waiting" and e["jobId"] == node.job.id]
    assert released == [{"event": "waiting", "jobId": node.job.id, "prev": "waiting-children"}]


async def test_parent_option_adds_a_child_to_an_existing_job(redis: Redis, queue_name: str) -> None:
    parent = await echomq.add(queue_name, "parent", {}, connection=redis)
    child = await echomq.add(
        queue_name + "-c",
        "child",
        {"x": 1},
        connection=redis,
        parent=parent,
        ignore_dependency_on_failure=True,
    )
    assert child.parent_key == f"bull:{queue_name}:{parent.id}"
    h = await job_hash(redis, f"bull:{queue_name}-c:{child.id}")
    assert json.loads(h["parent"]) == {
        "id": parent.id,
        "queueKey": f"bull:{queue_name}",
        "idof": True,
    }
    deps = await redis.smembers(f"bull:{queue_name}:{parent.id}:dependencies")
    assert deps == {f"bull:{queue_name}-c:{child.id}".encode()}
    # The parent's state is not changed by adding a child (as in Node).
    assert await state_of(redis, queue_name, parent.id) == "waiting"

    # The dict form, and a Queue.
    async with echomq.Queue(queue_name, connection=redis) as queue:
        other = await queue.add("c2", parent={"id": parent.id, "queue": f"bull:{queue_name}"})
    assert other.parent is not None and other.parent.queue_key == f"bull:{queue_name}"


async def test_parent_option_refuses_a_missing_parent_writing_nothing(
    redis: Redis, queue_name: str
) -> None:
    await echomq.add(queue_name, "seed", {}, connection=redis)
    before = await snapshot(redis, f"bull:{queue_name}*")
    with pytest.raises(ParentNotFoundError, match=f"bull:{queue_name}:nope does not exist"):
        await echomq.add(
            queue_name,
            "c",
            {},
            connection=redis,
            parent={"id": "nope", "queue": f"bull:{queue_name}"},
        )
    assert await snapshot(redis, f"bull:{queue_name}*") == before


@pytest.mark.parametrize(
    "parent",
    [
        {"id": "p"},
        {"id": "p", "queue": "noprefix"},
        {"id": "a:b", "queue": "bull:q"},
        {"id": "p", "queue": "bull:q", "extra": 1},
        "bull:q:p",
    ],
)
async def test_bad_parent_options_are_refused(redis: Redis, queue_name: str, parent: Any) -> None:
    before = await snapshot(redis, f"bull:{queue_name}*")
    with pytest.raises(InvalidOptionError, match="parent"):
        await echomq.add(queue_name, "c", {}, connection=redis, parent=parent)
    assert await snapshot(redis, f"bull:{queue_name}*") == before


def test_two_failure_policies_are_refused() -> None:
    with pytest.raises(InvalidOptionError, match="cannot be used together"):
        FlowJob("a", "q", fail_parent_on_failure=True, continue_parent_on_failure=True)
    with pytest.raises(InvalidOptionError, match="must be a bool"):
        FlowJob("a", "q", remove_dependency_on_failure="yes")  # type: ignore[typeddict-item]


async def test_refused_flows_write_nothing(redis: Redis, queue_name: str) -> None:
    async with FlowProducer(connection=redis) as flows:
        await flows.add(video_flow(queue_name))  # some state to compare against
        before = await snapshot(redis, f"bull:{queue_name}*")

        shared = FlowJob("same", queue_name)
        deep = FlowJob("leaf", queue_name)
        for level in range(1001):
            deep = FlowJob(f"n{level}", queue_name, children=[deep])
        bad: list[tuple[Any, type[Exception], str]] = [
            (FlowJob("p", queue_name, children=[shared, shared]), ValidationError, "twice"),
            (deep, ValidationError, "deeper than 1000"),
            (
                FlowJob(
                    "p",
                    queue_name,
                    children=[
                        FlowJob("a", queue_name, job_id="x"),
                        FlowJob("b", queue_name, job_id="x"),
                    ],
                ),
                ValidationError,
                "unique",
            ),
            (
                FlowJob(
                    "p",
                    queue_name,
                    children=[FlowJob("c", queue_name, parent={"id": "z", "queue": "bull:q"})],
                ),
                ValidationError,
                "only a flow's root",
            ),
            (
                FlowJob(
                    "p",
                    queue_name,
                    job_id="top",
                    parent={"id": "kid", "queue": f"bull:{queue_name}"},
                    children=[FlowJob("c", queue_name, job_id="kid")],
                ),
                ValidationError,
                "its own parent",
            ),
            (
                FlowJob("p", queue_name, children=[FlowJob("c", queue_name, job_id="12")]),
                ValidationError,
                "integer",
            ),
            (
                FlowJob("p", queue_name, children=[FlowJob("c", queue_name, object())]),
                ValidationError,
                "JSON",
            ),
            (
                FlowJob(
                    "p",
                    queue_name,
                    parent={"id": "missing", "queue": f"bull:{queue_name}"},
                    children=[FlowJob("c", queue_name)],
                ),
                ParentNotFoundError,
                "does not exist",
            ),
        ]
        for tree, error, message in bad:
            with pytest.raises(error, match=message):
                await flows.add(tree)
            assert await snapshot(redis, f"bull:{queue_name}*") == before, message
        # One bad tree in a bulk refuses every tree of it.
        with pytest.raises(ParentNotFoundError):
            await flows.add_bulk(
                [
                    video_flow(queue_name),
                    FlowJob("x", queue_name, parent={"id": "gone", "queue": f"bull:{queue_name}"}),
                ]
            )
        assert await snapshot(redis, f"bull:{queue_name}*") == before


def test_invalid_nodes_are_refused_when_built() -> None:
    with pytest.raises(InvalidQueueNameError):
        FlowJob("a", "bad:name")
    with pytest.raises(InvalidQueueNameError):
        FlowJob("p", "q", children=[FlowJob("a", "")])
    with pytest.raises(ValidationError, match="FlowJob"):
        FlowJob("p", "q", children=["not a node"])  # type: ignore[list-item]
    with pytest.raises(ValidationError, match="prefix"):
        FlowJob("p", "q", prefix="")
    with pytest.raises(InvalidOptionError, match="unknown job option"):
        FlowJob("p", "q", colour="red")  # type: ignore[call-arg]


async def test_duplicate_ids_follow_node(redis: Redis, queue_name: str) -> None:
    """An existing custom id is kept, a `duplicated` event written, and it is attached to the
    new parent: as processed when it completed (the parent may then run at once)."""
    done = await echomq.add(queue_name, "done", {}, connection=redis, job_id="done-1")

    async def ok(job: Job) -> str:
        return "v-" + job.id

    async with Worker(queue_name, ok, connection=redis, **FAST):
        await reaches(redis, queue_name, done.id, "completed")

    async with FlowProducer(connection=redis) as flows:
        node = await flows.add(
            FlowJob("p", queue_name, children=[FlowJob("again", queue_name, job_id="done-1")])
        )
    parent_id = node.job.id
    processed = await redis.hgetall(f"bull:{queue_name}:{parent_id}:processed")
    assert processed == {f"bull:{queue_name}:done-1".encode(): b'"v-done-1"'}
    assert await state_of(redis, queue_name, parent_id) == "waiting"  # released at once
    assert (await job_hash(redis, f"bull:{queue_name}:done-1"))["parentKey"] == (
        f"bull:{queue_name}:{parent_id}"
    )
    evs = await events_of(redis, queue_name)
    assert {"event": "duplicated", "jobId": "done-1"} in evs

    # The same id under yet another live parent is refused, writing nothing.
    other = await echomq.add(queue_name, "other", {}, connection=redis)
    before = await snapshot(redis, f"bull:{queue_name}*")
    async with FlowProducer(connection=redis) as flows:
        with pytest.raises(ParentCannotBeReplacedError, match="another parent"):
            await flows.add(
                FlowJob("p2", queue_name, children=[FlowJob("c", queue_name, job_id="done-1")])
            )
    with pytest.raises(ParentCannotBeReplacedError, match="another parent"):
        await echomq.add(queue_name, "c", {}, connection=redis, job_id="done-1", parent=other)
    assert await snapshot(redis, f"bull:{queue_name}*") == before


@pytest.mark.parametrize(
    ("policy", "parent_state", "ignored", "unsuccessful"),
    [
        ("fail_parent_on_failure", "failed", False, True),
        ("continue_parent_on_failure", "completed", True, False),
        ("ignore_dependency_on_failure", "completed", True, False),
        ("remove_dependency_on_failure", "completed", False, False),
    ],
)
async def test_failure_policies(
    redis: Redis,
    queue_name: str,
    policy: str,
    parent_state: str,
    ignored: bool,
    unsuccessful: bool,
) -> None:
    options: dict[str, Any] = {policy: True}
    tree = FlowJob(
        "parent",
        queue_name,
        children=[
            FlowJob("bad", queue_name, job_id="bad", **options),
            FlowJob("good", queue_name, job_id="good"),
        ],
    )
    async with FlowProducer(connection=redis) as flows:
        node = await flows.add(tree)
    ran: list[str] = []

    async def process(job: Job) -> str:
        ran.append(job.name)
        if job.name == "bad":
            raise RuntimeError("boom")
        if job.name == "parent" and policy == "continue_parent_on_failure":
            # Released while "good" may still be pending: it removes what it no longer needs.
            await redis.srem(f"bull:{queue_name}:{job.id}:dependencies", f"bull:{queue_name}:good")
        return "ok"

    async with Worker(queue_name, process, connection=redis, concurrency=1, **FAST):
        await reaches(redis, queue_name, node.job.id, parent_state)
    parent_key = f"bull:{queue_name}:{node.job.id}"
    assert bool(await redis.hlen(parent_key + ":failed")) is ignored
    assert bool(await redis.zcard(parent_key + ":unsuccessful")) is unsuccessful
    h = await job_hash(redis, parent_key)
    if policy == "fail_parent_on_failure":
        assert h["failedReason"] == f"child bull:{queue_name}:bad failed"
        assert "parent" not in ran  # failed without running its processor
    else:
        assert "parent" in ran


async def test_a_child_without_policy_keeps_its_parent_waiting(
    redis: Redis, queue_name: str
) -> None:
    async with FlowProducer(connection=redis) as flows:
        node = await flows.add(
            FlowJob("parent", queue_name, children=[FlowJob("bad", queue_name, job_id="bad")])
        )

    async def boom(job: Job) -> None:
        raise RuntimeError("boom")

    async with Worker(queue_name, boom, connection=redis, **FAST):
        await reaches(redis, queue_name, "bad", "failed")
    assert await state_of(redis, queue_name, node.job.id) == "waiting-children"


async def test_children_under_another_prefix(redis: Redis, queue_name: str) -> None:
    async with FlowProducer(connection=redis, prefix="pa") as flows:
        node = await flows.add(
            FlowJob("p", queue_name, children=[FlowJob("c", queue_name, prefix="pb")])
        )

        async def ok(job: Job) -> int:
            return 7

        async with Worker(queue_name, ok, connection=redis, prefix="pb", **FAST):
            await reaches(redis, queue_name, node.job.id, "waiting", prefix="pa")
        processed = await redis.hgetall(f"pa:{queue_name}:{node.job.id}:processed")
        assert processed == {f"pb:{queue_name}:{node.children[0].job.id}".encode(): b"7"}
        read = await flows.get_flow(node.job.id, queue_name)
    assert read is not None and read.children[0].job.queue_name == queue_name
    assert read.children[0].job.parent_key == f"pa:{queue_name}:{node.job.id}"


async def test_get_flow_reads_the_tree(redis: Redis, queue_name: str) -> None:
    tree = FlowJob(
        "a",
        queue_name,
        children=[
            FlowJob("b", queue_name, children=[FlowJob("d", queue_name + "-x")]),
            FlowJob("c", queue_name),
        ],
    )
    async with FlowProducer(connection=redis) as flows:
        added = await flows.add(tree)
        read = await flows.get_flow(added.job.id, queue_name)
        assert read is not None
        assert read.job.name == "a" and read.job.id == added.job.id
        assert sorted(c.job.name for c in read.children) == ["b", "c"]
        b = next(c for c in read.children if c.job.name == "b")
        assert [d.job.name for d in b.children] == ["d"]
        assert b.children[0].job.queue_name == queue_name + "-x"
        shallow = await flows.get_flow(added.job.id, queue_name, depth=2)
        assert shallow is not None
        assert sorted(c.job.name for c in shallow.children) == ["b", "c"]
        assert all(c.children == [] for c in shallow.children)
        assert await flows.get_flow("missing", queue_name) is None
        with pytest.raises(ValidationError, match="depth"):
            await flows.get_flow(added.job.id, queue_name, depth=0)
        with pytest.raises(ValidationError, match="max_children"):
            await flows.get_flow(added.job.id, queue_name, max_children=0)


async def test_add_bulk_adds_every_tree_in_one_call(redis: Redis, queue_name: str) -> None:
    async with FlowProducer(connection=redis) as flows:
        nodes = await flows.add_bulk([video_flow(queue_name, 2) for _ in range(5)])
        assert await flows.add_bulk([]) == []
    assert len(nodes) == 5 and all(len(n.children) == 2 for n in nodes)
    assert await redis.zcard(f"bull:{queue_name}:waiting-children") == 5
    assert await redis.llen(f"bull:{queue_name}:wait") == 10


def test_sync_flow_producer(sync_redis: SyncRedis, queue_name: str) -> None:
    with echomq.sync.FlowProducer(connection=sync_redis) as flows:
        node = flows.add(video_flow(queue_name, 2))
        assert isinstance(node.job, echomq.sync.Job)
        read = flows.get_flow(node.job.id, queue_name)
    assert read is not None and len(read.children) == 2
    assert echomq.sync.get_state(queue_name, node.job.id, connection=sync_redis) == (
        "waiting-children"
    )
    child = echomq.sync.add(queue_name, "late", {}, connection=sync_redis, parent=node.job)
    assert child.parent_key == f"bull:{queue_name}:{node.job.id}"


async def test_a_url_producer(redis_url: str, queue_name: str) -> None:
    async with FlowProducer(connection=redis_url) as flows:
        node = await flows.add(video_flow(queue_name, 1))
        assert node.job.queue_qualified_name == f"bull:{queue_name}"


async def test_a_parent_completing_with_pending_children_fails_as_in_node(
    redis: Redis, queue_name: str
) -> None:
    async with FlowProducer(connection=redis) as flows:
        node = await flows.add(
            FlowJob(
                "parent",
                queue_name,
                children=[
                    FlowJob("bad", queue_name, job_id="bad", continue_parent_on_failure=True),
                    FlowJob("slow", queue_name + "-slow", job_id="slow"),
                ],
            )
        )

    async def process(job: Job) -> str:
        if job.name == "bad":
            raise RuntimeError("boom")
        return "done"  # the parent returns while "slow" (no worker) is still pending

    async with Worker(queue_name, process, connection=redis, **FAST):
        await reaches(redis, queue_name, node.job.id, "failed")
    h = await job_hash(redis, f"bull:{queue_name}:{node.job.id}")
    assert h["failedReason"] == f"Job {node.job.id} has pending dependencies. moveToFinished"
    assert h["atm"] == "1"
    assert await redis.llen(f"bull:{queue_name}:active") == 0


async def test_a_parent_whose_child_failed_it_while_active_fails_unrecoverably(
    redis: Redis, queue_name: str
) -> None:
    children = queue_name + "-kids"
    parent = await echomq.add(queue_name, "parent", {}, connection=redis, attempts=3)
    started = asyncio.Event()
    child_failed = asyncio.Event()

    async def run_parent(job: Job) -> str:
        await echomq.add(
            children, "kid", {}, connection=redis, parent=job, fail_parent_on_failure=True
        )
        started.set()
        await child_failed.wait()
        return "too late"

    async def run_child(job: Job) -> None:
        raise RuntimeError("kid broke")

    async with Worker(queue_name, run_parent, connection=redis, **FAST):
        await asyncio.wait_for(started.wait(), 10)
        async with Worker(children, run_child, connection=redis, **FAST):

            async def kid_failed() -> bool:
                return bool(await redis.zcard(f"bull:{children}:failed"))

            await wait_for(kid_failed, timeout=10)
        child_failed.set()
        await reaches(redis, queue_name, parent.id, "failed")
    h = await job_hash(redis, f"bull:{queue_name}:{parent.id}")
    assert h["failedReason"] == (
        f"Cannot complete job {parent.id} because it has at least one failed child. moveToFinished"
    )
    assert h["atm"] == "1"  # unrecoverable: no retry despite attempts=3


async def test_a_flagless_child_removed_on_failure_releases_its_parent(
    redis: Redis, queue_name: str
) -> None:
    """As in Node: deleting the pending child (remove_on_fail=True) is a soft removal."""
    async with FlowProducer(connection=redis) as flows:
        node = await flows.add(
            FlowJob(
                "parent",
                queue_name,
                priority=5,
                children=[FlowJob("bad", queue_name + "-c", job_id="bad", remove_on_fail=True)],
            )
        )

    async def boom(job: Job) -> None:
        raise RuntimeError("boom")

    async with Worker(queue_name + "-c", boom, connection=redis, **FAST):
        await reaches(redis, queue_name, node.job.id, "waiting")
    assert not await redis.exists(f"bull:{queue_name}-c:bad")
    assert await redis.lrange(f"bull:{queue_name}:wait", 0, -1) == [node.job.id.encode()]
    evs = await events_of(redis, queue_name)
    assert evs[-1] == {"event": "waiting", "jobId": node.job.id, "prev": "waiting-children"}
