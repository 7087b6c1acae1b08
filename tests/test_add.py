"""The exact Redis effects of adding jobs, against docs/protocol/scripts.md#script-addJob
(and the job-hash, options, keys and events pages it links).

Each test adds jobs to a fresh queue and reads the keys back: the job hash and the string form
of every field, the ``opts`` JSON, the ``id`` counter, the ``wait`` list, the ``delayed`` and
``prioritized`` scores, the marker, the meta hash and the events stream. Where the effect is
only visible on the wire (which XADDs carry MAXLEN, one MULTI/EXEC for a bulk add), the commands
are read with MONITOR on the server the suite started.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from redis.asyncio import Redis

import echomq
from echomq import Backoff, JobOptions, KeepJobs, Queue
from echomq import _ops as ops
from echomq._keys import queue_keys
from echomq.protocol.keys import QueueKeys
from helpers import monitored, snapshot

P32 = 2**32


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def now_ms() -> int:
    return int(time.time() * 1000)


async def job_hash(r: Redis, keys: QueueKeys, job_id: str) -> dict[str, str]:
    raw = await r.hgetall(keys.job(job_id))
    return {_s(k): _s(v) for k, v in raw.items()}


async def opts_of(r: Redis, keys: QueueKeys, job_id: str) -> dict[str, Any]:
    text = await r.hget(keys.job(job_id), "opts")
    assert text is not None
    value = json.loads(_s(text))
    assert isinstance(value, dict)
    return value


async def events(r: Redis, keys: QueueKeys) -> list[list[str]]:
    """Every events-stream entry as its flat [field, value, ...] list, in order."""
    out = []
    for _, entry in await r.xrange(keys.events):
        flat: list[str] = []
        for k, v in entry.items():
            flat += [_s(k), _s(v)]
        out.append(flat)
    return out


async def zset(r: Redis, key: str) -> list[tuple[str, float]]:
    return [(_s(m), s) for m, s in await r.zrange(key, 0, -1, withscores=True)]


async def lrange(r: Redis, key: str) -> list[str]:
    return [_s(v) for v in await r.lrange(key, 0, -1)]


@pytest.fixture
def keys(queue_name: str) -> QueueKeys:
    return queue_keys(queue_name)


@pytest.fixture
async def q(redis_decoded: Redis, queue_name: str) -> AsyncIterator[Queue]:
    async with Queue(queue_name, connection=redis_decoded) as queue:
        yield queue


# -- a standard add (7.1) --------------------------------------------------------------------


@pytest.mark.parametrize("decoded", [True, False], ids=["decode_responses", "bytes"])
async def test_standard_add_writes_exactly_the_protocol_keys(
    redis: Redis, redis_decoded: Redis, queue_name: str, keys: QueueKeys, decoded: bool
) -> None:
    client = redis_decoded if decoded else redis
    before = now_ms()
    job = await echomq.add(queue_name, "std", {"a": 1, "s": "é/x"}, connection=client)
    after = now_ms()

    assert job.id == "1"
    assert isinstance(job.id, str)
    assert job.name == "std"
    assert job.data == {"a": 1, "s": "é/x"}

    h = await job_hash(client, keys, "1")
    assert set(h) == {"name", "data", "opts", "timestamp", "delay", "priority"}
    assert h["name"] == "std"
    assert h["data"] == '{"a":1,"s":"é/x"}'  # compact JSON, UTF-8 kept as is
    assert json.loads(h["opts"]) == {"attempts": 0}
    assert before <= int(h["timestamp"]) <= after
    assert h["timestamp"] == str(int(h["timestamp"]))  # a base-10 integer string
    assert h["delay"] == "0"
    assert h["priority"] == "0"

    assert _s(await client.get(keys.id)) == "1"
    assert await lrange(client, keys.wait) == ["1"]
    assert await zset(client, keys.marker) == [("0", 0.0)]
    assert await events(client, keys) == [
        ["event", "added", "jobId", "1", "name", "std"],
        ["event", "waiting", "jobId", "1"],
    ]
    meta = {_s(k): _s(v) for k, v in (await client.hgetall(keys.meta)).items()}
    assert meta == {"opts.maxLenEvents": "10000"}
    # nothing else: no delayed, prioritized, pc, active, paused
    found = sorted([_s(k) async for k in client.scan_iter(match=f"{keys.base}*")])
    assert found == sorted([keys.job("1"), keys.id, keys.wait, keys.marker, keys.events, keys.meta])


async def test_add_without_data_stores_an_empty_object(
    redis_decoded: Redis, queue_name: str, keys: QueueKeys
) -> None:
    # Node stores JSON.stringify(data ?? {}) (docs/protocol/job-hash.md#fields): an add without
    # data gives "{}".
    job = await echomq.add(queue_name, "nodata", connection=redis_decoded)
    assert (await job_hash(redis_decoded, keys, job.id))["data"] == "{}"


async def test_explicit_null_data_is_stored_as_json_null(
    redis_decoded: Redis, queue_name: str, keys: QueueKeys
) -> None:
    job = await echomq.add(queue_name, "null", [None, 1.5, "x"], connection=redis_decoded)
    assert (await job_hash(redis_decoded, keys, job.id))["data"] == '[null,1.5,"x"]'


async def test_custom_timestamp_is_stored(q: Queue, redis_decoded: Redis, keys: QueueKeys) -> None:
    job = await q.add("ts", {}, timestamp=1_700_000_000.5)
    h = await job_hash(redis_decoded, keys, job.id)
    assert h["timestamp"] == "1700000000500"
    assert (await opts_of(redis_decoded, keys, job.id))["timestamp"] == 1700000000500


async def test_lifo_is_rpushed_to_the_served_end(
    q: Queue, redis_decoded: Redis, keys: QueueKeys
) -> None:
    a = await q.add("a")
    b = await q.add("b")
    c = await q.add("c", lifo=True)
    d = await q.add("d")
    # LPUSH a, LPUSH b, RPUSH c, LPUSH d: the tail (served first) is c
    assert await lrange(redis_decoded, keys.wait) == [d.id, b.id, a.id, c.id]
    assert (await opts_of(redis_decoded, keys, c.id))["lifo"] is True
    assert "lifo" not in await opts_of(redis_decoded, keys, a.id)


# -- opts JSON (2.6) -------------------------------------------------------------------------


async def test_opts_json_uses_node_names_and_milliseconds(
    q: Queue, redis_decoded: Redis, keys: QueueKeys
) -> None:
    job = await q.add(
        "all",
        {},
        job_id="custom-1",
        attempts=3,
        backoff={"type": "exponential", "delay": 1.5, "jitter": 0.5},
        remove_on_complete=True,
        remove_on_fail=KeepJobs(count=10, age=timedelta(hours=1), limit=5),
        keep_logs=20,
        stacktrace_limit=4,
        size_limit=1000,
        lifo=False,
        timestamp=1_800_000_000,
    )
    assert job.id == "custom-1"
    assert await opts_of(redis_decoded, keys, "custom-1") == {
        "jobId": "custom-1",
        "attempts": 3,
        "backoff": {"type": "exponential", "delay": 1500, "jitter": 0.5},
        "removeOnComplete": True,
        "removeOnFail": {"count": 10, "age": 3600, "limit": 5},
        "kl": 20,
        "stackTraceLimit": 4,
        "sizeLimit": 1000,
        "lifo": False,
        "timestamp": 1800000000000,
    }


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        pytest.param({}, {"attempts": 0}, id="plain"),
        pytest.param({"attempts": 1}, {"attempts": 1}, id="attempts"),
        pytest.param(
            {"backoff": 2}, {"attempts": 0, "backoff": {"type": "fixed", "delay": 2000}}, id="bo-n"
        ),
        pytest.param(
            {"backoff": Backoff(type="custom", delay=timedelta(milliseconds=250))},
            {"attempts": 0, "backoff": {"type": "custom", "delay": 250}},
            id="bo-obj",
        ),
        pytest.param(
            {"remove_on_complete": False}, {"attempts": 0, "removeOnComplete": False}, id="roc-f"
        ),
        pytest.param({"remove_on_complete": 5}, {"attempts": 0, "removeOnComplete": 5}, id="n"),
        pytest.param(
            {"remove_on_complete": KeepJobs(age=60)},
            {"attempts": 0, "removeOnComplete": {"age": 60}},
            id="roc-age",
        ),
        pytest.param(
            {"remove_on_fail": KeepJobs(count=0)},
            {"attempts": 0, "removeOnFail": {"count": 0}},
            id="rof-count",
        ),
        pytest.param({"keep_logs": 0}, {"attempts": 0, "kl": 0}, id="kl"),
        pytest.param(
            {"delay": timedelta(seconds=1.5)}, {"attempts": 0, "delay": 1500}, id="delay-td"
        ),
        pytest.param({"priority": 9}, {"attempts": 0, "priority": 9}, id="priority"),
    ],
)
async def test_opts_json_forms(
    q: Queue,
    redis_decoded: Redis,
    keys: QueueKeys,
    options: dict[str, Any],
    expected: dict[str, Any],
) -> None:
    job = await q.add("opts", {}, **options)
    assert await opts_of(redis_decoded, keys, job.id) == expected
    assert job.wire_options == expected


async def test_queue_defaults_are_merged_into_opts(redis_decoded: Redis, queue_name: str) -> None:
    keys = queue_keys(queue_name)
    defaults = JobOptions(attempts=5, remove_on_complete=100)
    async with Queue(queue_name, connection=redis_decoded, default_job_options=defaults) as q:
        plain = await q.add("d")
        override = await q.add("o", attempts=2)
    assert await opts_of(redis_decoded, keys, plain.id) == {"attempts": 5, "removeOnComplete": 100}
    assert await opts_of(redis_decoded, keys, override.id) == {
        "attempts": 2,
        "removeOnComplete": 100,
    }


# -- id counter (4) and duplicates (7.1 step 4) ----------------------------------------------


async def test_id_is_incremented_by_every_add(
    q: Queue, redis_decoded: Redis, keys: QueueKeys
) -> None:
    first = await q.add("a")
    custom = await q.add("b", job_id="my-id")
    duplicate = await q.add("c", job_id="my-id")
    delayed = await q.add("d", delay=60)
    prioritized = await q.add("e", priority=1)
    last = await q.add("f")
    assert [first.id, custom.id, duplicate.id, delayed.id, prioritized.id, last.id] == [
        "1",
        "my-id",
        "my-id",
        "4",
        "5",
        "6",
    ]
    assert await redis_decoded.get(keys.id) == "6"
    assert not await redis_decoded.exists(keys.job("2"))
    assert not await redis_decoded.exists(keys.job("3"))


async def test_duplicate_custom_id_changes_nothing_but_id_and_events(
    q: Queue, redis_decoded: Redis, keys: QueueKeys
) -> None:
    await q.add("orig", {"v": 1}, job_id="dup", priority=3)
    await q.add("other", {"v": 0})
    before = await snapshot(redis_decoded, keys.qualified + "*")
    events_before = await events(redis_decoded, keys)

    again = await q.add("new", {"v": 2}, job_id="dup", delay=30, lifo=True)

    assert again.id == "dup"
    after = await snapshot(redis_decoded, keys.qualified + "*")
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    assert changed == {keys.id.encode(), keys.events.encode()}
    assert await redis_decoded.get(keys.id) == "3"
    assert await events(redis_decoded, keys) == [
        *events_before,
        ["event", "duplicated", "jobId", "dup"],
    ]
    h = await job_hash(redis_decoded, keys, "dup")
    assert h["name"] == "orig"
    assert h["data"] == '{"v":1}'


async def test_bulk_duplicate_returns_the_existing_id(
    q: Queue, redis_decoded: Redis, keys: QueueKeys
) -> None:
    await q.add("orig", {"v": 1}, job_id="dup")
    jobs = await q.add_bulk([("a", {}), ("b", {}, {"job_id": "dup"}), ("c", {})])
    assert [j.id for j in jobs] == ["2", "dup", "4"]
    assert (await job_hash(redis_decoded, keys, "dup"))["name"] == "orig"
    assert await lrange(redis_decoded, keys.wait) == ["4", "2", "dup"]


# -- delayed (7.2, 5.1, 6) -------------------------------------------------------------------


async def test_delayed_scores_are_due_times_4096_plus_a_sequence(
    q: Queue, redis_decoded: Redis, keys: QueueKeys
) -> None:
    ts = now_ms() + 3_600_000  # an hour ahead, so nothing is due
    ts_s = ts / 1000
    a = await q.add("a", timestamp=ts_s, delay=5)
    b = await q.add("b", timestamp=ts_s, delay=5)  # same due ms
    c = await q.add("c", timestamp=ts_s + 0.001, delay=4.999)  # same due ms again
    d = await q.add("d", timestamp=ts_s, delay=2)  # earlier
    e = await q.add("e", timestamp=ts_s, delay=9, priority=4)  # delay wins over priority
    due = ts + 5000

    assert await zset(redis_decoded, keys.delayed) == [
        (d.id, float((ts + 2000) * 4096)),
        (a.id, float(due * 4096)),
        (b.id, float(due * 4096 + 1)),
        (c.id, float(due * 4096 + 2)),
        (e.id, float((ts + 9000) * 4096)),
    ]
    ha = await job_hash(redis_decoded, keys, a.id)
    assert ha["delay"] == "5000"
    assert ha["timestamp"] == str(ts)
    assert ha["priority"] == "0"
    he = await job_hash(redis_decoded, keys, e.id)
    assert (he["delay"], he["priority"]) == ("9000", "4")
    assert (await opts_of(redis_decoded, keys, a.id))["delay"] == 5000

    # the delay marker holds the earliest due time; no base marker, no wait, no prioritized
    assert await zset(redis_decoded, keys.marker) == [("1", float(ts + 2000))]
    assert await redis_decoded.llen(keys.wait) == 0
    assert await redis_decoded.zcard(keys.prioritized) == 0

    log = await events(redis_decoded, keys)
    assert log[:2] == [
        ["event", "added", "jobId", a.id, "name", "a"],
        ["event", "delayed", "jobId", a.id, "delay", str(due)],
    ]
    assert ["event", "delayed", "jobId", c.id, "delay", str(due)] in log
    assert ["event", "delayed", "jobId", d.id, "delay", str(ts + 2000)] in log
    assert not [entry for entry in log if entry[1] == "waiting"]
    assert len(log) == 10


async def test_delay_marker_tracks_the_earliest_delayed_job(
    q: Queue, redis_decoded: Redis, keys: QueueKeys
) -> None:
    ts = now_ms() + 3_600_000
    await q.add("late", timestamp=ts / 1000, delay=10)
    assert await zset(redis_decoded, keys.marker) == [("1", float(ts + 10_000))]
    await q.add("later", timestamp=ts / 1000, delay=20)
    assert await zset(redis_decoded, keys.marker) == [("1", float(ts + 10_000))]
    await q.add("early", timestamp=ts / 1000, delay=1)
    assert await zset(redis_decoded, keys.marker) == [("1", float(ts + 1000))]
    # a second job due in the same ms as the earliest: the marker is min score / 4096
    await q.add("early-too", timestamp=ts / 1000, delay=1)
    assert await zset(redis_decoded, keys.marker) == [("1", float(ts + 1000))]
    # a standard add adds the base marker beside the delay marker
    await q.add("now")
    assert await zset(redis_decoded, keys.marker) == [("0", 0.0), ("1", float(ts + 1000))]


# -- prioritized (7.3, 5.2) ------------------------------------------------------------------


async def test_prioritized_scores_are_priority_times_2_32_plus_counter(
    q: Queue, redis_decoded: Redis, keys: QueueKeys
) -> None:
    a = await q.add("a", priority=5)
    b = await q.add("b", priority=1)
    plain = await q.add("plain")
    c = await q.add("c", priority=5)
    top = await q.add("top", priority=2**21 - 1)

    assert await zset(redis_decoded, keys.prioritized) == [
        (b.id, float(1 * P32 + 2)),
        (a.id, float(5 * P32 + 1)),
        (c.id, float(5 * P32 + 3)),
        (top.id, float((2**21 - 1) * P32 + 4)),
    ]
    assert await redis_decoded.get(keys.pc) == "4"
    assert await lrange(redis_decoded, keys.wait) == [plain.id]
    assert (await job_hash(redis_decoded, keys, a.id))["priority"] == "5"
    assert await zset(redis_decoded, keys.marker) == [("0", 0.0)]
    assert (await events(redis_decoded, keys))[:2] == [
        ["event", "added", "jobId", a.id, "name", "a"],
        ["event", "waiting", "jobId", a.id],
    ]


# -- marker suppression (6) ------------------------------------------------------------------


async def test_no_marker_when_paused(q: Queue, redis_decoded: Redis, keys: QueueKeys) -> None:
    await q.pause()
    assert not await redis_decoded.exists(keys.marker)
    std = await q.add("std")
    pri = await q.add("pri", priority=2)
    assert not await redis_decoded.exists(keys.marker)
    assert await lrange(redis_decoded, keys.wait) == [std.id]
    assert [m for m, _ in await zset(redis_decoded, keys.prioritized)] == [pri.id]
    assert (await events(redis_decoded, keys))[-2:] == [
        ["event", "added", "jobId", pri.id, "name", "pri"],
        ["event", "waiting", "jobId", pri.id],
    ]
    await q.resume()
    assert await zset(redis_decoded, keys.marker) == [("0", 0.0)]


async def test_no_marker_when_global_concurrency_is_reached(
    q: Queue, redis_decoded: Redis, keys: QueueKeys
) -> None:
    await redis_decoded.hset(keys.meta, "concurrency", 1)
    await redis_decoded.lpush(keys.active, "busy")
    await q.add("std")
    assert not await redis_decoded.exists(keys.marker)
    await redis_decoded.lrem(keys.active, 0, "busy")
    await q.add("std")
    assert await zset(redis_decoded, keys.marker) == [("0", 0.0)]


# -- meta (3) --------------------------------------------------------------------------------


async def test_existing_max_len_events_is_kept(
    q: Queue, redis_decoded: Redis, keys: QueueKeys
) -> None:
    await redis_decoded.hset(keys.meta, "opts.maxLenEvents", 500)
    await q.add("a")
    assert await redis_decoded.hgetall(keys.meta) == {"opts.maxLenEvents": "500"}


# -- what is on the wire: MAXLEN and MULTI/EXEC ----------------------------------------------


def _xadds(commands: list[list[str]], events_key: str) -> list[list[str]]:
    return [c for c in commands if c[0].upper() == "XADD" and c[1] == events_key]


async def test_added_event_has_no_maxlen_and_the_others_do(
    q: Queue, redis_url: str, keys: QueueKeys
) -> None:
    async def action() -> None:
        await q.add("std")
        await q.add("late", delay=60)
        await q.add("pri", priority=1)
        await q.add("dup", job_id="dup")
        await q.add("dup", job_id="dup")

    xadds = _xadds(await monitored(redis_url, action, from_lua=True), keys.events)
    by_event = [(c[c.index("event") + 1], "MAXLEN" in (w.upper() for w in c)) for c in xadds]
    assert by_event == [
        ("added", False),
        ("waiting", True),
        ("added", False),
        ("delayed", True),
        ("added", False),
        ("waiting", True),
        ("added", False),
        ("waiting", True),
        ("duplicated", True),
    ]
    for command in xadds:
        if "MAXLEN" in command:
            assert command[command.index("MAXLEN") + 1 : command.index("MAXLEN") + 3] == [
                "~",
                "10000",
            ]


async def test_add_bulk_is_one_multi_exec(q: Queue, redis_url: str, keys: QueueKeys) -> None:
    jobs: list[echomq.Job] = []

    async def action() -> None:
        jobs.extend(await q.add_bulk([("a", {}), ("b", {}, {"delay": 60}), ("c", {})]))

    commands = [c[0].upper() for c in await monitored(redis_url, action, from_lua=False)]
    assert [j.id for j in jobs] == ["1", "2", "3"]
    start, end = commands.index("MULTI"), commands.index("EXEC")
    # a few jobs per script call (ops.add.BULK_CHUNK), all calls inside one MULTI/EXEC
    assert commands[start + 1 : end] == ["EVALSHA"]
    assert commands.count("MULTI") == 1


async def test_large_add_bulk_is_still_one_multi_exec(
    q: Queue, redis_url: str, keys: QueueKeys
) -> None:
    n = ops.add.BULK_CHUNK * 2 + 5
    jobs: list[echomq.Job] = []

    async def action() -> None:
        jobs.extend(await q.add_bulk([("j", {"i": i}) for i in range(n)]))

    commands = [c[0].upper() for c in await monitored(redis_url, action, from_lua=False)]
    assert [j.id for j in jobs] == [str(i) for i in range(1, n + 1)]
    start, end = commands.index("MULTI"), commands.index("EXEC")
    assert commands[start + 1 : end] == ["EVALSHA"] * 3
    assert commands.count("MULTI") == 1


# -- bulk add (returns jobs in order) --------------------------------------------------------


async def test_add_bulk_returns_the_jobs_in_order(
    redis: Redis, queue_name: str, keys: QueueKeys
) -> None:
    ts = now_ms() + 3_600_000
    jobs = await echomq.add_bulk(
        queue_name,
        [
            ("first", {"i": 1}),
            ("second", [2], {"job_id": "two", "attempts": 2}),
            ("third", "3", JobOptions(delay=10, timestamp=ts / 1000)),
            ("fourth", None, {"priority": 7}),
        ],
        connection=redis,
    )
    assert [(j.id, j.name, j.data) for j in jobs] == [
        ("1", "first", {"i": 1}),
        ("two", "second", [2]),
        ("3", "third", "3"),
        ("4", "fourth", None),
    ]
    assert [j.queue_name for j in jobs] == [queue_name] * 4
    assert _s(await redis.get(keys.id)) == "4"
    assert await lrange(redis, keys.wait) == ["two", "1"]
    assert await zset(redis, keys.delayed) == [("3", float((ts + 10_000) * 4096))]
    assert await zset(redis, keys.prioritized) == [("4", float(7 * P32 + 1))]
    assert json.loads(_s(await redis.hget(keys.job("two"), "opts"))) == {
        "jobId": "two",
        "attempts": 2,
    }
    assert [e[:4] for e in await events(redis, keys) if e[1] == "added"] == [
        ["event", "added", "jobId", "1"],
        ["event", "added", "jobId", "two"],
        ["event", "added", "jobId", "3"],
        ["event", "added", "jobId", "4"],
    ]


async def test_add_bulk_of_nothing_writes_nothing(
    redis: Redis, queue_name: str, keys: QueueKeys
) -> None:
    assert await echomq.add_bulk(queue_name, [], connection=redis) == []
    assert [k async for k in redis.scan_iter(match=f"{keys.base}*")] == []


async def test_returned_job_reads_back_equal(q: Queue, redis_decoded: Redis) -> None:
    added = await q.add("rt", {"x": [1, 2]}, priority=3, attempts=4, delay=timedelta(seconds=2))
    read = await q.get_job(added.id)
    assert read is not None
    assert (read.id, read.name, read.data) == (added.id, "rt", {"x": [1, 2]})
    assert (read.priority, read.delay, read.attempts) == (3, 2.0, 4)
    assert read.timestamp == added.timestamp
    assert read.wire_options == added.wire_options


@pytest.mark.parametrize(
    ("first", "second", "wire_name"),
    [
        pytest.param({"remove_on_complete": 1}, {"remove_on_complete": True}, "removeOnComplete"),
        pytest.param({"remove_on_complete": True}, {"remove_on_complete": 1}, "removeOnComplete"),
        pytest.param({"remove_on_fail": False}, {"remove_on_fail": 0}, "removeOnFail"),
        pytest.param({"remove_on_fail": 0}, {"remove_on_fail": False}, "removeOnFail"),
    ],
)
async def test_equal_but_different_option_values_are_stored_as_given(
    q: Queue,
    redis_decoded: Redis,
    keys: QueueKeys,
    first: dict[str, Any],
    second: dict[str, Any],
    wire_name: str,
) -> None:
    # True == 1 and False == 0 in Python, but removeOnComplete: 0 (keep none) and false (keep
    # all) mean opposite things to every worker; neither may be stored as the other.
    a = await q.add("a", {}, **first)
    b = await q.add("b", {}, **second)
    stored_a = (await opts_of(redis_decoded, keys, a.id))[wire_name]
    stored_b = (await opts_of(redis_decoded, keys, b.id))[wire_name]
    (value_a,) = first.values()
    (value_b,) = second.values()
    assert (type(stored_a), stored_a) == (type(value_a), value_a)
    assert (type(stored_b), stored_b) == (type(value_b), value_b)
