"""Global limits (issue "Global limits on Queue, async and sync"): global concurrency, global and
manual rate limits, and the reads around them, on a real Redis.

Each setter writes the meta fields (or limiter key) BullMQ's Queue writes; refused arguments
write nothing (checked with a snapshot); the echomq worker honours limits set from Python; the
sync twins and the CLI act on the same keys.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from redis import Redis as SyncRedis
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

import echomq
import echomq.sync
from echomq import InvalidOptionError, Job, Queue, QueueMeta, RateLimit, Worker
from echomq.cli import main
from helpers import queue_key, snapshot, snapshot_sync, wait_for

MANUAL = b"9007199254740991"


# -- global concurrency ----------------------------------------------------------------------


async def test_global_concurrency_is_the_meta_field(redis: Redis, queue_name: str) -> None:
    async with Queue(queue_name, connection=redis) as q:
        assert await q.get_global_concurrency() is None
        assert await q.remove_global_concurrency() is False
        await q.set_global_concurrency(3)
        assert await redis.hgetall(queue_key(queue_name, "meta")) == {b"concurrency": b"3"}
        assert await q.get_global_concurrency() == 3
        await q.set_global_concurrency(1)
        assert await q.get_global_concurrency() == 1
        assert await q.remove_global_concurrency() is True
        assert await q.get_global_concurrency() is None
    assert not await redis.exists(queue_key(queue_name, "meta"))


async def test_module_functions_share_the_fields(redis: Redis, queue_name: str) -> None:
    await echomq.set_global_concurrency(queue_name, 2, connection=redis)
    await echomq.set_global_rate_limit(queue_name, 4, timedelta(milliseconds=250), connection=redis)
    assert await echomq.get_global_concurrency(queue_name, connection=redis) == 2
    assert await echomq.get_global_rate_limit(queue_name, connection=redis) == RateLimit(4, 0.25)
    raw = await redis.hmget(queue_key(queue_name, "meta"), "concurrency", "max", "duration")
    assert raw == [b"2", b"4", b"250"]
    assert await echomq.remove_global_rate_limit(queue_name, connection=redis) is True
    assert await echomq.remove_global_concurrency(queue_name, connection=redis) is True
    assert await echomq.get_meta(queue_name, connection=redis) == QueueMeta()


async def test_is_maxed_compares_active_with_the_global_concurrency(
    redis: Redis, queue_name: str
) -> None:
    active = f"bull:{queue_name}:active"
    async with Queue(queue_name, connection=redis) as q:
        await redis.lpush(active, "a", "b")
        assert await q.is_maxed() is False  # no global concurrency: never maxed
        await q.set_global_concurrency(3)
        assert await q.is_maxed() is False
        await redis.lpush(active, "c")
        assert await q.is_maxed() is True
        await q.set_global_concurrency(2)  # above the limit counts as maxed too
        assert await q.is_maxed() is True
        assert await echomq.is_maxed(queue_name, connection=redis) is True
        await q.remove_global_concurrency()
        assert await q.is_maxed() is False


# -- global rate limit -----------------------------------------------------------------------


async def test_global_rate_limit_is_stored_in_milliseconds(redis: Redis, queue_name: str) -> None:
    async with Queue(queue_name, connection=redis) as q:
        assert await q.get_global_rate_limit() is None
        assert await q.remove_global_rate_limit() is False
        await q.set_global_rate_limit(10, 1.5)
        assert await redis.hgetall(queue_key(queue_name, "meta")) == {
            b"max": b"10",
            b"duration": b"1500",
        }
        assert await q.get_global_rate_limit() == RateLimit(max=10, duration=1.5)
        await q.set_global_rate_limit(1, timedelta(minutes=1))
        assert await redis.hget(queue_key(queue_name, "meta"), "duration") == b"60000"
        await q.set_global_rate_limit(1, 0.0001)  # under a millisecond: the shortest window
        assert await redis.hget(queue_key(queue_name, "meta"), "duration") == b"1"
        assert await q.remove_global_rate_limit() is True
        assert await q.get_global_rate_limit() is None
    assert not await redis.exists(queue_key(queue_name, "meta"))


async def test_a_global_rate_limit_needs_both_fields(redis: Redis, queue_name: str) -> None:
    await redis.hset(queue_key(queue_name, "meta"), "max", "5")
    async with Queue(queue_name, connection=redis) as q:
        assert await q.get_global_rate_limit() is None
        meta = await q.get_meta()
        assert (meta.rate_limit_max, meta.rate_limit_duration, meta.rate_limit) == (5, None, None)
        assert await q.remove_global_rate_limit() is True


# -- the limiter key -------------------------------------------------------------------------


async def test_rate_limit_sets_the_limiter_key(redis: Redis, queue_name: str) -> None:
    async with Queue(queue_name, connection=redis) as q:
        assert await q.get_rate_limit_ttl() == 0.0
        await q.rate_limit(2)
        assert await redis.get(queue_key(queue_name, "limiter")) == MANUAL
        assert 1900 < await redis.pttl(queue_key(queue_name, "limiter")) <= 2000
        assert 1.9 < await q.get_rate_limit_ttl() <= 2.0
        await q.rate_limit(timedelta(milliseconds=300))
        assert 0 < await redis.pttl(queue_key(queue_name, "limiter")) <= 300
        assert await q.remove_rate_limit_key() is True
        assert await q.remove_rate_limit_key() is False
        assert await q.get_rate_limit_ttl() == 0.0


async def test_rate_limit_ttl_tests_the_count_against_max(redis: Redis, queue_name: str) -> None:
    # The window of a global limit of 1 with one job counted (what a fetch leaves).
    await redis.set(queue_key(queue_name, "limiter"), 1, px=2000)
    async with Queue(queue_name, connection=redis) as q:
        assert 1.9 < await q.get_rate_limit_ttl() <= 2.0  # no max anywhere: the raw TTL
        assert await q.get_rate_limit_ttl(2) == 0.0  # count 1 < 2: not limited
        assert 1.9 < await q.get_rate_limit_ttl(1) <= 2.0
        await q.set_global_rate_limit(1, 2)
        assert 1.9 < await q.get_rate_limit_ttl() <= 2.0
        await q.set_global_rate_limit(100, 2)
        assert await q.get_rate_limit_ttl() == 0.0
        assert 1.9 < await q.get_rate_limit_ttl(1) <= 2.0  # the argument beats meta max
        ttl = await echomq.get_rate_limit_ttl(queue_name, 1, connection=redis)
        assert 1.9 < ttl <= 2.0
        await redis.persist(queue_key(queue_name, "limiter"))  # a key without TTL limits nothing
        assert await q.get_rate_limit_ttl(1) == 0.0


# -- other reads -----------------------------------------------------------------------------


async def test_counts_per_priority(redis: Redis, queue_name: str) -> None:
    async with Queue(queue_name, connection=redis) as q:
        await q.add_bulk(
            [
                ("a", 1),
                ("b", 2),
                ("c", 3, {"priority": 1}),
                *[("d", i, {"priority": 5}) for i in range(3)],
                ("e", 4, {"priority": 6}),
                ("f", 5, {"priority": 5, "delay": 60}),  # delayed: not counted
            ]
        )
        counts = await q.get_counts_per_priority([5, 0, 1, 7, 5])
        assert counts == {5: 3, 0: 2, 1: 1, 7: 0}
        assert list(counts) == [5, 0, 1, 7]
        assert await q.get_counts_per_priority([]) == {}
        maximum = 2**21 - 1
        assert await echomq.get_counts_per_priority(queue_name, [6, maximum], connection=redis) == {
            6: 1,
            maximum: 0,
        }


async def test_get_meta_decodes_every_field(redis: Redis, queue_name: str) -> None:
    async with Queue(queue_name, connection=redis) as q:
        assert await q.get_meta() == QueueMeta(paused=False)
        await q.add("x", 1)  # the add script writes the events length default
        await q.pause()
        await q.set_global_concurrency(4)
        await q.set_global_rate_limit(9, 0.75)
        await redis.hset(queue_key(queue_name, "meta"), "version", "bullmq:6.7.0")
        meta = await q.get_meta()
    assert meta == QueueMeta(
        paused=True,
        concurrency=4,
        rate_limit_max=9,
        rate_limit_duration=0.75,
        max_len_events=10000,
        version="bullmq:6.7.0",
    )
    assert meta.rate_limit == RateLimit(9, 0.75)


async def test_get_meta_with_a_decoding_client(redis_decoded: Redis, queue_name: str) -> None:
    await echomq.set_global_concurrency(queue_name, 6, connection=redis_decoded)
    await echomq.rate_limit(queue_name, 1, connection=redis_decoded)
    meta = await echomq.get_meta(queue_name, connection=redis_decoded)
    assert meta.concurrency == 6 and not meta.paused
    assert await echomq.get_global_concurrency(queue_name, connection=redis_decoded) == 6
    assert 0 < await echomq.get_rate_limit_ttl(queue_name, connection=redis_decoded) <= 1


async def test_limits_on_a_cluster(redis_cluster: list[str], queue_name: str) -> None:
    # Multi-key reads (limiter + meta, meta + active) stay in the queue's slot.
    client = RedisCluster.from_url(redis_cluster[0], decode_responses=True)
    try:
        async with Queue(queue_name, connection=client, prefix="{bull-limits}") as q:
            await q.set_global_concurrency(2)
            await q.set_global_rate_limit(3, 1)
            await q.rate_limit(1)
            await q.add("p", 1, priority=2)
            assert await q.is_maxed() is False
            assert 0 < await q.get_rate_limit_ttl() <= 1
            assert await q.get_counts_per_priority([0, 2]) == {0: 0, 2: 1}
            meta = await q.get_meta()
            assert (meta.concurrency, meta.rate_limit) == (2, RateLimit(3, 1.0))
            await q.obliterate(force=True)
            await q.remove_rate_limit_key()
    finally:
        await client.aclose()


# -- validation: refused before anything is written ------------------------------------------

BAD_CALLS: list[tuple[str, Callable[[Queue], Any], str]] = [
    ("concurrency 0", lambda q: q.set_global_concurrency(0), "global concurrency must be"),
    ("concurrency -1", lambda q: q.set_global_concurrency(-1), "int >= 1, got -1"),
    ("concurrency float", lambda q: q.set_global_concurrency(2.5), "got 2.5"),  # type: ignore[arg-type]
    ("concurrency bool", lambda q: q.set_global_concurrency(True), "got True"),
    ("concurrency str", lambda q: q.set_global_concurrency("3"), "got '3'"),  # type: ignore[arg-type]
    ("rate max 0", lambda q: q.set_global_rate_limit(0, 1), "rate limit max must be"),
    ("rate max float", lambda q: q.set_global_rate_limit(1.5, 1), "got 1.5"),  # type: ignore[arg-type]
    ("rate duration 0", lambda q: q.set_global_rate_limit(1, 0), "rate limit duration must be"),
    ("rate duration <0", lambda q: q.set_global_rate_limit(1, -2), "positive duration"),
    ("rate duration td0", lambda q: q.set_global_rate_limit(1, timedelta(0)), "positive"),
    ("rate duration str", lambda q: q.set_global_rate_limit(1, "1"), "seconds"),  # type: ignore[arg-type]
    ("rate duration nan", lambda q: q.set_global_rate_limit(1, float("nan")), "finite"),
    ("manual 0", lambda q: q.rate_limit(0), "rate limit duration must be"),
    ("manual <0", lambda q: q.rate_limit(-0.5), "positive duration"),
    ("ttl max_jobs 0", lambda q: q.get_rate_limit_ttl(0), "max_jobs must be"),
    ("priority -1", lambda q: q.get_counts_per_priority([-1]), "between 0 and 2097151"),
    ("priority big", lambda q: q.get_counts_per_priority([2**21]), "got 2097152"),
    ("priority str", lambda q: q.get_counts_per_priority("1"), "must be ints"),  # type: ignore[arg-type]
]


@pytest.mark.parametrize(("call", "message"), [(c, m) for _, c, m in BAD_CALLS],
                         ids=[i for i, _, _ in BAD_CALLS])  # fmt: skip
async def test_bad_arguments_write_nothing(
    redis: Redis, queue_name: str, call: Callable[[Queue], Any], message: str
) -> None:
    await redis.hset(queue_key(queue_name, "meta"), mapping={"concurrency": "7", "max": "3"})
    await redis.set(queue_key(queue_name, "limiter"), 2)
    before = await snapshot(redis, f"bull:{queue_name}:*")
    async with Queue(queue_name, connection=redis) as q:
        with pytest.raises(InvalidOptionError, match=re.escape(message)):
            await call(q)
    assert await snapshot(redis, f"bull:{queue_name}:*") == before


def test_sync_bad_arguments_write_nothing(sync_redis: SyncRedis, queue_name: str) -> None:
    sync_redis.hset(queue_key(queue_name, "meta"), "concurrency", "7")
    before = snapshot_sync(sync_redis, f"bull:{queue_name}:*")
    with pytest.raises(InvalidOptionError, match="global concurrency must be an int >= 1"):
        echomq.sync.set_global_concurrency(queue_name, 0, connection=sync_redis)
    with echomq.sync.Queue(queue_name, connection=sync_redis) as q:
        with pytest.raises(InvalidOptionError, match="rate limit duration must be"):
            q.set_global_rate_limit(5, 0)
        with pytest.raises(InvalidOptionError, match="rate limit max must be"):
            q.set_global_rate_limit(0, 5)
    assert snapshot_sync(sync_redis, f"bull:{queue_name}:*") == before


# -- the sync twins --------------------------------------------------------------------------


def test_sync_queue_sets_and_reads_the_same_keys(sync_redis: SyncRedis, queue_name: str) -> None:
    with echomq.sync.Queue(queue_name, connection=sync_redis) as q:
        q.set_global_concurrency(2)
        q.set_global_rate_limit(3, 0.5)
        q.rate_limit(1)
        assert sync_redis.hgetall(queue_key(queue_name, "meta")) == {
            b"concurrency": b"2",
            b"max": b"3",
            b"duration": b"500",
        }
        assert sync_redis.get(queue_key(queue_name, "limiter")) == MANUAL
        assert q.get_global_concurrency() == 2
        assert q.get_global_rate_limit() == RateLimit(3, 0.5)
        # A manual rate limit holds MAX_SAFE_INTEGER, above any max: limited.
        assert 0.9 < q.get_rate_limit_ttl() <= 1.0
        assert q.is_maxed() is False
        assert q.get_meta() == QueueMeta(concurrency=2, rate_limit_max=3, rate_limit_duration=0.5)
        assert q.get_counts_per_priority([0]) == {0: 0}
        assert q.remove_rate_limit_key() is True
        assert q.remove_global_rate_limit() is True
        assert q.remove_global_concurrency() is True
    assert echomq.sync.get_meta(queue_name, connection=sync_redis) == QueueMeta()
    echomq.sync.set_global_concurrency(queue_name, 1, connection=sync_redis)
    assert echomq.sync.get_global_concurrency(queue_name, connection=sync_redis) == 1
    assert echomq.sync.is_maxed(queue_name, connection=sync_redis) is False


# -- the echomq worker honours limits set from Python ----------------------------------------


async def test_global_concurrency_holds_a_worker_of_concurrency_5(
    redis: Redis, queue_name: str
) -> None:
    n = 6
    running = 0
    peak = 0
    maxed_seen: list[bool] = []
    async with Queue(queue_name, connection=redis) as q:
        await q.set_global_concurrency(1)

        async def process(job: Job) -> None:
            nonlocal running, peak
            running += 1
            peak = max(peak, running)
            maxed_seen.append(await q.is_maxed())
            await asyncio.sleep(0.05)
            running -= 1

        await q.add_bulk([("j", i) for i in range(n)])
        async with Worker(queue_name, process, connection=redis, concurrency=5, drain_delay=0.2):

            async def done() -> bool:
                return (await q.get_job_counts("completed"))["completed"] == n

            await wait_for(done, timeout=15)
    assert peak == 1
    assert maxed_seen == [True] * n


async def test_global_rate_limit_holds_a_worker(redis: Redis, queue_name: str) -> None:
    n = 6
    starts: list[float] = []
    async with Queue(queue_name, connection=redis) as q:
        await q.set_global_rate_limit(2, 0.5)

        async def process(job: Job) -> None:
            starts.append(time.monotonic())

        await q.add_bulk([("j", i) for i in range(n)])
        async with Worker(queue_name, process, connection=redis, concurrency=5, drain_delay=0.2):

            async def done() -> bool:
                return (await q.get_job_counts("completed"))["completed"] == n

            await wait_for(done, timeout=15)
    starts.sort()
    # The first window opens with the first job: its third job waits for the next window,
    # and three windows are needed in all.
    assert starts[2] - starts[0] >= 0.45
    assert starts[-1] - starts[0] >= 0.95


async def test_removing_the_global_concurrency_releases_waiting_workers(
    redis: Redis, queue_name: str
) -> None:
    release = asyncio.Event()
    started: list[str] = []
    async with Queue(queue_name, connection=redis) as q:
        await q.set_global_concurrency(1)

        async def process(job: Job) -> None:
            started.append(job.id)
            if job.name == "hold":
                await release.wait()

        await q.add("hold", 0)
        async with Worker(queue_name, process, connection=redis, concurrency=3, drain_delay=0.2):
            await wait_for(lambda: started, timeout=5)
            await q.add_bulk([("free", i) for i in range(2)])
            await asyncio.sleep(0.4)
            assert len(started) == 1  # maxed: the others wait
            assert await q.remove_global_concurrency() is True
            await wait_for(lambda: len(started) == 3, timeout=5)
            release.set()


# -- the CLI ---------------------------------------------------------------------------------


def test_cli_limits_show_set_and_clear(
    redis_url: str, queue_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = ["--url", redis_url]
    assert main(["queue", queue_name, "limits", *url]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^global concurrency\s+none$", out, re.M)
    assert re.search(r"^global rate limit\s+none$", out, re.M)

    args = ["queue", queue_name, "limits", "--concurrency", "3", "--rate", "100/60", *url]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert re.search(r"^global concurrency\s+3 \(0 active\)$", out, re.M)
    assert re.search(r"^global rate limit\s+100 jobs per 60s$", out, re.M)
    assert echomq.sync.get_global_rate_limit(queue_name, connection=redis_url) == RateLimit(
        100, 60.0
    )

    assert main(["queue", queue_name, "limits", "--json", *url]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["concurrency"] == 3 and shown["maxed"] is False
    assert shown["rate_limit"] == {"max": 100, "duration": 60.0}

    assert main(["queue", queue_name, "limits", "--clear", *url]) == 0
    assert "global concurrency  none" in capsys.readouterr().out
    assert echomq.sync.get_meta(queue_name, connection=redis_url) == QueueMeta()


@pytest.mark.parametrize(
    "bad",
    [
        ["--rate", "100"],
        ["--rate", "0/1"],
        ["--rate", "5/0"],
        ["--rate", "x/y"],
        ["--concurrency", "0"],
        ["--concurrency", "2", "--rate", "1/-1"],
        ["--clear", "--concurrency", "2"],
    ],
)
def test_cli_limits_refuses_bad_values(
    redis_url: str, queue_name: str, bad: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    client = SyncRedis.from_url(redis_url)
    try:
        client.hset(queue_key(queue_name, "meta"), "concurrency", "9")
        before = snapshot_sync(client, f"bull:{queue_name}:*")
        assert main(["queue", queue_name, "limits", *bad, "--url", redis_url]) == 2
        assert capsys.readouterr().err
        assert snapshot_sync(client, f"bull:{queue_name}:*") == before
    finally:
        client.close()


async def test_get_job_state_reads_the_state_only(
    redis: Redis, sync_redis: SyncRedis, queue_name: str
) -> None:
    async with echomq.Queue(queue_name, connection=redis) as queue:
        job = await queue.add("n", {}, delay=60)
        assert await queue.get_job_state(job.id) == echomq.JobState.DELAYED
        assert await queue.get_job_state("missing") == echomq.JobState.UNKNOWN
    with echomq.sync.Queue(queue_name, connection=sync_redis) as sync_queue:
        assert sync_queue.get_job_state(job.id) == echomq.JobState.DELAYED
