"""Deduplication on add against a real Redis (docs/dedup.md, docs/protocol/scripts.md#step-dedup).

Each mode is checked by its Redis effects (the ``de:<id>`` key and its expiry, the job hash's
``deid``, the events and which of them carry MAXLEN), by what ``add`` returns (the owner, with
``deduplicated`` set), and keepLastIfActive with a real Worker. Invalid options are refused
before anything is written (snapshot). The guide's examples are run as programs.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest
from redis import Redis as SyncRedis
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

import echomq
import echomq.sync
from echomq import Deduplication, FlowJob, FlowProducer, InvalidOptionError, Job, Queue, Worker
from echomq._keys import queue_keys
from echomq.options import WorkerOptionsDict
from echomq.protocol.keys import QueueKeys
from helpers import snapshot, wait_for
from test_add import monitored

FAST: WorkerOptionsDict = {"drain_delay": 0.2, "stalled_interval": 5.0}
DOC = Path(__file__).resolve().parents[1] / "docs" / "dedup.md"


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def events(r: Redis, keys: QueueKeys) -> list[dict[str, str]]:
    entries: Any = await r.xrange(keys.events)
    return [{_s(k): _s(v) for k, v in e.items()} for _, e in entries]


async def deduplicated_events(r: Redis, keys: QueueKeys) -> list[dict[str, str]]:
    return [e for e in await events(r, keys) if e["event"] == "deduplicated"]


@pytest.fixture
def keys(queue_name: str) -> QueueKeys:
    return queue_keys(queue_name)


@pytest.fixture
async def q(redis: Redis, queue_name: str) -> AsyncIterator[Queue]:
    async with Queue(queue_name, connection=redis) as queue:
        yield queue


# -- simple mode ------------------------------------------------------------------------------


async def test_simple_mode_returns_the_owner_until_it_finishes(
    q: Queue, redis: Redis, keys: QueueKeys
) -> None:
    first = await q.add("a", {"v": 1}, deduplication=Deduplication("s"))
    assert first.deduplicated is False and first.deduplication_id == "s"
    again = await q.add("a", {"v": 2}, deduplication={"id": "s"})
    assert again.deduplicated is True
    assert (again.id, again.data, again.deduplication_id) == (first.id, {"v": 1}, "s")
    assert await redis.get(keys.dedup("s")) == first.id.encode()
    assert await redis.pttl(keys.dedup("s")) == -1
    h = {_s(k): _s(v) for k, v in (await redis.hgetall(keys.job(first.id))).items()}
    assert h["deid"] == "s"
    assert json.loads(h["opts"]) == {"attempts": 0, "de": {"id": "s"}}
    # the ignored add still took an id from the counter, as in BullMQ
    assert await redis.get(keys.id) == b"2"
    assert await deduplicated_events(redis, keys) == [
        {
            "event": "deduplicated",
            "jobId": first.id,
            "deduplicationId": "s",
            "deduplicatedJobId": "2",
        }
    ]
    assert await q.get_job_counts("waiting") == {"waiting": 1}

    async def done(job: Job) -> None:
        return None

    async with Worker(q.name, done, connection=redis, **FAST):
        await wait_for(lambda: _zcard(redis, keys.completed, 1), timeout=10)
    assert await redis.exists(keys.dedup("s")) == 0
    third = await q.add("a", {"v": 3}, deduplication=Deduplication("s"))
    assert third.deduplicated is False and third.id == "3"


async def _zcard(r: Redis, key: str, n: int) -> bool:
    return bool(await r.zcard(key) >= n)


async def test_the_deduplicated_event_has_maxlen_and_the_replace_removed_event_not(
    q: Queue, redis_url: str, keys: QueueKeys
) -> None:
    debounce = Deduplication("d", ttl=5, extend=True, replace=True)

    async def action() -> None:
        await q.add("a", deduplication=Deduplication("s"))
        await q.add("a", deduplication=Deduplication("s"))
        await q.add("a", delay=60, deduplication=debounce)
        await q.add("a", delay=60, deduplication=debounce)

    xadds = [
        c
        for c in await monitored(redis_url, action, from_lua=True)
        if c[0].upper() == "XADD" and c[1] == keys.events
    ]
    by_event = [(c[c.index("event") + 1], "MAXLEN" in (w.upper() for w in c)) for c in xadds]
    assert by_event == [
        ("added", False),
        ("waiting", True),
        ("deduplicated", True),
        ("added", False),
        ("delayed", True),
        ("removed", False),
        ("deduplicated", True),
        ("added", False),
        ("delayed", True),
    ]


# -- throttle and extend ----------------------------------------------------------------------


async def test_throttle_mode_keeps_the_window_for_ttl(
    q: Queue, redis: Redis, keys: QueueKeys
) -> None:
    throttle = Deduplication("t", ttl=0.3)
    first = await q.add("a", deduplication=throttle)
    assert 0 < await redis.pttl(keys.dedup("t")) <= 300
    second = await q.add("a", deduplication=throttle)
    assert second.deduplicated and second.id == first.id
    await wait_for(lambda: _gone(redis, keys.dedup("t")), timeout=5)
    third = await q.add("a", deduplication=throttle)
    assert not third.deduplicated and third.id != first.id


async def _gone(r: Redis, key: str) -> bool:
    return not await r.exists(key)


async def test_a_throttle_window_outlives_its_finished_owner(
    q: Queue, redis: Redis, keys: QueueKeys
) -> None:
    first = await q.add("a", deduplication=Deduplication("t", ttl=30))

    async def done(job: Job) -> None:
        return None

    async with Worker(q.name, done, connection=redis, **FAST):
        await wait_for(lambda: _zcard(redis, keys.completed, 1), timeout=10)
    assert await redis.get(keys.dedup("t")) == first.id.encode()
    again = await q.add("a", deduplication=Deduplication("t", ttl=30))
    assert again.deduplicated and again.id == first.id
    assert str(await again.get_state()) == "completed"


async def test_extend_restarts_the_window_on_each_deduplicated_add(
    q: Queue, redis: Redis, keys: QueueKeys
) -> None:
    extend = Deduplication("e", ttl=10, extend=True)
    first = await q.add("a", deduplication=extend)
    await redis.pexpire(keys.dedup("e"), 100)
    again = await q.add("a", deduplication=extend)
    assert again.deduplicated and again.id == first.id
    assert await redis.pttl(keys.dedup("e")) > 9000
    assert [e["jobId"] for e in await deduplicated_events(redis, keys)] == [first.id]


async def test_without_extend_a_deduplicated_add_leaves_the_ttl(
    q: Queue, redis: Redis, keys: QueueKeys
) -> None:
    await q.add("a", deduplication=Deduplication("n", ttl=10))
    await redis.pexpire(keys.dedup("n"), 2000)
    assert (await q.add("a", deduplication=Deduplication("n", ttl=10))).deduplicated
    assert await redis.pttl(keys.dedup("n")) <= 2000


# -- debounce (replace) -----------------------------------------------------------------------


async def test_debounce_replaces_a_delayed_owner(q: Queue, redis: Redis, keys: QueueKeys) -> None:
    debounce = Deduplication("deb", ttl=2, extend=True, replace=True)
    first = await q.add("a", {"v": 1}, delay=5, deduplication=debounce)
    await redis.rpush(keys.logs(first.id), "a line")
    await redis.pexpire(keys.dedup("deb"), 100)
    second = await q.add("a", {"v": 2}, delay=5, deduplication=debounce)
    assert second.deduplicated is False and second.id != first.id and second.data == {"v": 2}
    assert await redis.exists(keys.job(first.id), keys.logs(first.id)) == 0
    assert [j.id for j in await q.get_delayed()] == [second.id]
    assert await redis.get(keys.dedup("deb")) == second.id.encode()
    assert await redis.pttl(keys.dedup("deb")) > 1500  # extend: the ttl starts again
    assert [e for e in await events(redis, keys) if e["event"] in ("removed", "deduplicated")] == [
        {"event": "removed", "jobId": first.id, "prev": "delayed"},
        {
            "event": "deduplicated",
            "jobId": second.id,
            "deduplicationId": "deb",
            "deduplicatedJobId": first.id,
        },
    ]


async def test_replace_without_extend_keeps_the_remaining_window(
    q: Queue, redis: Redis, keys: QueueKeys
) -> None:
    replace = Deduplication("r", ttl=10, replace=True)
    await q.add("a", delay=5, deduplication=replace)
    await redis.pexpire(keys.dedup("r"), 3000)
    second = await q.add("a", delay=5, deduplication=replace)
    assert not second.deduplicated
    assert 0 < await redis.pttl(keys.dedup("r")) <= 3000


async def test_replace_does_not_touch_an_owner_that_is_not_delayed(
    q: Queue, redis: Redis, keys: QueueKeys
) -> None:
    debounce = Deduplication("w", ttl=10, extend=True, replace=True)
    first = await q.add("a", {"v": 1}, deduplication=debounce)  # no delay: waiting
    before = await redis.pttl(keys.dedup("w"))
    second = await q.add("a", {"v": 2}, delay=5, deduplication=debounce)
    assert second.deduplicated and second.id == first.id and second.data == {"v": 1}
    assert await deduplicated_events(redis, keys) == []
    assert await redis.pttl(keys.dedup("w")) <= before


# -- keepLastIfActive -------------------------------------------------------------------------


async def test_keep_last_if_active_adds_the_latest_kept_add_when_the_owner_finishes(
    q: Queue, redis: Redis, keys: QueueKeys
) -> None:
    keep = Deduplication("k", ttl=0.05, keep_last_if_active=True)
    release = asyncio.Event()
    seen: list[int] = []

    async def slow(job: Job) -> int:
        seen.append(job.data["v"])
        if job.data["v"] == 1:
            await release.wait()
        return int(job.data["v"])

    async with Worker(q.name, slow, connection=redis, **FAST):
        first = await q.add("a", {"v": 1}, deduplication=keep)
        assert await redis.pttl(keys.dedup("k")) == -1  # ttl is ignored
        await wait_for(lambda: seen == [1], timeout=10)
        second = await q.add("a", {"v": 2}, deduplication=keep)
        third = await q.add("b", {"v": 3}, deduplication=keep)
        assert (second.deduplicated, third.deduplicated) == (True, True)
        assert second.id == third.id == first.id and third.data == {"v": 1}
        kept = {_s(k): _s(v) for k, v in (await redis.hgetall(f"{keys.base}dn:k")).items()}
        assert kept["name"] == "b" and json.loads(kept["data"]) == {"v": 3}
        assert kept["jid"] == "3"
        assert [
            (e["jobId"], e["deduplicatedJobId"]) for e in await deduplicated_events(redis, keys)
        ] == [
            (first.id, "2"),
            (first.id, "3"),
        ]
        release.set()
        await wait_for(lambda: _zcard(redis, keys.completed, 2), timeout=10)
    assert seen == [1, 3]
    assert await redis.exists(f"{keys.base}dn:k", keys.dedup("k")) == 0
    assert (await q.get_job("3")) is not None
    assert [j.return_value for j in await q.get_completed()] == [3, 1]


async def test_keep_last_if_active_deduplicates_against_a_waiting_owner(
    q: Queue, redis: Redis, keys: QueueKeys
) -> None:
    keep = Deduplication("kw", keep_last_if_active=True)
    first = await q.add("a", deduplication=keep)
    again = await q.add("a", deduplication=keep)
    assert again.deduplicated and again.id == first.id
    assert await redis.exists(f"{keys.base}dn:kw") == 0


async def test_a_stale_key_does_not_block_adds(q: Queue, redis: Redis, keys: QueueKeys) -> None:
    await redis.set(keys.dedup("st"), "gone-job")  # no expiry, and no such job
    job = await q.add("a", deduplication=Deduplication("st"))
    assert not job.deduplicated
    assert await redis.get(keys.dedup("st")) == job.id.encode()


# -- bulk, flows, getters ---------------------------------------------------------------------


async def test_add_bulk_flags_each_item(q: Queue, redis: Redis, keys: QueueKeys) -> None:
    owner = await q.add("a", {"v": 0}, deduplication=Deduplication("b1"))
    jobs = await q.add_bulk(
        [
            ("a", {"v": 1}, {"deduplication": {"id": "b1"}}),
            ("a", {"v": 2}),
            ("a", {"v": 3}, {"deduplication": Deduplication("b2")}),
            ("a", {"v": 4}, {"deduplication": Deduplication("b2")}),
        ]
    )
    assert [j.deduplicated for j in jobs] == [True, False, False, True]
    assert jobs[0].id == owner.id and jobs[0].data == {"v": 0}
    assert jobs[3].id == jobs[2].id and jobs[3].data == {"v": 3}
    one = await echomq.add_bulk(
        q.name, [("a", None, {"deduplication": {"id": "b2"}})], connection=redis
    )
    assert one[0].deduplicated and one[0].id == jobs[2].id


async def test_a_flow_root_without_children_may_be_deduplicated(
    redis: Redis, queue_name: str, keys: QueueKeys
) -> None:
    async with FlowProducer(connection=redis) as producer:
        root = FlowJob("r", queue_name, {"v": 1}, deduplication=Deduplication("f"))
        first = await producer.add(root)
        again = await producer.add(FlowJob("r", queue_name, {"v": 2}, deduplication={"id": "f"}))
    assert first.job.deduplicated is False and again.job.deduplicated is True
    assert again.job.id == first.job.id and again.job.data == {"v": 1}
    assert await redis.get(keys.dedup("f")) == first.job.id.encode()
    assert await redis.hget(keys.job(first.job.id), "deid") == b"f"
    assert await redis.lrange(keys.wait, 0, -1) == [first.job.id.encode()]


async def test_getters_and_removal(q: Queue, redis: Redis, keys: QueueKeys) -> None:
    assert await q.get_deduplication_job_id("g") is None
    job = await q.add("a", deduplication=Deduplication("g"))
    assert await q.get_deduplication_job_id("g") == job.id
    assert await echomq.get_deduplication_job_id(q.name, "g", connection=redis) == job.id
    assert await q.remove_deduplication_key("g") is True
    assert await q.remove_deduplication_key("g") is False
    assert await q.get_deduplication_job_id("g") is None
    assert await redis.exists(keys.job(job.id)) == 1  # the owner is not touched
    again = await q.add("a", deduplication=Deduplication("g"))
    assert not again.deduplicated
    assert await echomq.remove_deduplication_key(q.name, "g", connection=redis) is True


async def test_removing_the_owner_closes_the_window(
    q: Queue, redis: Redis, keys: QueueKeys
) -> None:
    job = await q.add("a", deduplication=Deduplication("rm"))
    assert await q.remove(job.id)
    assert await q.get_deduplication_job_id("rm") is None


def test_the_sync_api(sync_redis: SyncRedis, queue_name: str) -> None:
    with echomq.sync.Queue(queue_name, connection=sync_redis) as queue:
        first = queue.add("a", deduplication=Deduplication("sy"))
        again = queue.add("a", deduplication=Deduplication("sy"))
        assert again.deduplicated and again.id == first.id
        assert queue.get_deduplication_job_id("sy") == first.id
        assert queue.remove_deduplication_key("sy") is True
    assert echomq.sync.get_deduplication_job_id(queue_name, "sy", connection=sync_redis) is None


async def test_every_mode_on_a_cluster(redis_cluster: list[str]) -> None:
    # The dedup keys are built from the queue's prefix key: the same slot, no CROSSSLOT.
    client = RedisCluster.from_url(redis_cluster[0], decode_responses=True)
    try:
        async with Queue(f"{{dd-{uuid4().hex[:8]}}}", connection=client) as queue:
            for dedup, delay in [
                (Deduplication("s"), 0),
                (Deduplication("t", ttl=30, extend=True), 0),
                (Deduplication("d", ttl=30, extend=True, replace=True), 5),
                (Deduplication("k", keep_last_if_active=True), 0),
            ]:
                first = await queue.add("a", delay=delay, deduplication=dedup)
                again = await queue.add("a", delay=delay, deduplication=dedup)
                assert again.deduplicated == (not dedup.replace), dedup
                owner = again.id if dedup.replace else first.id
                assert await queue.get_deduplication_job_id(dedup.id) == owner
                assert await queue.remove_deduplication_key(dedup.id)
    finally:
        await client.aclose()


# -- validation -------------------------------------------------------------------------------


BAD: list[Any] = [
    {"id": ""},
    {"id": 5},
    {"id": "x", "ttl": 0},
    {"id": "x", "ttl": -1},
    {"id": "x", "ttl": 0.0001},
    {"id": "x", "ttl": "1"},
    {"id": "x", "extend": "yes"},
    {"id": "x", "keepLastIfActive": True},
    {"ttl": 1},
    "x",
]


@pytest.mark.parametrize("bad", BAD)
async def test_bad_options_are_refused_before_anything_is_written(
    q: Queue, redis: Redis, keys: QueueKeys, bad: Any
) -> None:
    await q.add("a")
    before = await snapshot(redis, keys.qualified + "*")
    with pytest.raises(InvalidOptionError):
        await q.add("a", deduplication=bad)
    with pytest.raises(InvalidOptionError):
        await q.add_bulk([("a", {}), ("a", {}, {"deduplication": bad})])
    assert await snapshot(redis, keys.qualified + "*") == before


async def test_deduplication_with_a_parent_or_in_a_flow_tree_is_refused(
    q: Queue, redis: Redis, keys: QueueKeys
) -> None:
    parent = await q.add("p")
    before = await snapshot(redis, keys.qualified + "*")
    dedup = Deduplication("x")
    with pytest.raises(InvalidOptionError, match="parent"):
        await q.add("c", parent=parent, deduplication=dedup)
    async with FlowProducer(connection=redis) as producer:
        with_children = FlowJob("r", q.name, deduplication=dedup, children=[FlowJob("c", q.name)])
        as_child = FlowJob("r", q.name, children=[FlowJob("c", q.name, deduplication=dedup)])
        for flow in (with_children, as_child):
            with pytest.raises(InvalidOptionError, match="root without children"):
                await producer.add(flow)
        with pytest.raises(InvalidOptionError, match="parent"):
            await producer.add(FlowJob("r", q.name, parent=parent, deduplication=dedup))
    assert await snapshot(redis, keys.qualified + "*") == before


def test_the_option_model() -> None:
    assert Deduplication("a", ttl=1.5).ttl_ms == 1500
    with pytest.raises(TypeError):
        Deduplication("a", 1.5)  # type: ignore[call-arg]
    with pytest.raises(InvalidOptionError, match="unknown keys"):
        Deduplication.coerce({"id": "a", "reschedule": True})


# -- the guide --------------------------------------------------------------------------------


def test_the_guide_examples_run(redis_url: str, tmp_path: Path, queue_name: str) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    expected = [
        ["True True", "True"],
        ["True True", "False True"],
        ["['hello'] True"],
        ["[1, 3]"],
    ]
    assert len(blocks) == len(expected)
    # As a reader runs them: Redis comes from the connection rule (ECHOMQ_REDIS_URL here).
    env = {**os.environ, "ECHOMQ_REDIS_URL": redis_url}
    for index, (block, lines) in enumerate(zip(blocks, expected)):
        code = block
        names = re.findall(r'Queue\("([\w-]+)"', code)
        assert names, f"example {index} no longer names a queue"
        for name in set(names):
            code = code.replace(f'"{name}"', repr(f"{queue_name}-{name}"))
        path = tmp_path / f"example_{index}.py"
        path.write_text(code)
        done = subprocess.run(
            [sys.executable, str(path)], env=env, capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == lines, index
