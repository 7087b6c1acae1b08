"""Bad input is refused with a specific echomq exception before anything is written.

Every refused call is wrapped in :func:`refused`: it takes a :func:`helpers.snapshot` of the whole
database (which already holds jobs of the queue, so "unchanged" means something), checks the
exception class, that it is an ``echomq.ValidationError`` and a ``ValueError``, that its message
names the field or value and what is allowed, and that Redis is byte-for-byte the same afterwards
(docs/protocol/keys.md#job-ids, docs/protocol/options.md#validation). The rule: options are
validated before anything is written, and an error names the field, the value and what is allowed.
"""

from __future__ import annotations

import math
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

import pytest
from redis.asyncio import Redis

import echomq
from echomq import (
    InvalidJobIdError,
    InvalidOptionError,
    InvalidQueueNameError,
    Job,
    PayloadError,
    Queue,
    ValidationError,
)
from echomq._keys import queue_keys
from helpers import snapshot


async def refused(
    redis: Redis,
    call: Callable[[], Awaitable[Any]],
    exc_type: type[ValidationError],
    *patterns: str,
) -> ValidationError:
    """Run ``call``; assert it raised ``exc_type`` matching ``patterns`` and wrote nothing."""
    before = await snapshot(redis)
    assert before, "the database should hold the seeded queue"
    with pytest.raises(exc_type) as info:
        await call()
    error = info.value
    assert isinstance(error, echomq.ValidationError)
    assert isinstance(error, echomq.EchoMQError)
    assert isinstance(error, ValueError)
    message = str(error)
    for pattern in patterns:
        assert re.search(pattern, message), f"{pattern!r} not in {message!r}"
    assert await snapshot(redis) == before
    return error


@pytest.fixture
async def seeded(redis: Redis, queue_name: str) -> AsyncIterator[Queue]:
    """A queue that already holds a waiting, a delayed, a prioritized and a custom-id job.

    The database (of the server this suite started) is flushed first, so every snapshot is
    small and holds exactly this queue.
    """
    await redis.flushdb()
    async with Queue(queue_name, connection=redis) as q:
        await q.add("waiting", {"n": 1})
        await q.add("delayed", {"n": 2}, delay=60)
        await q.add("prioritized", {"n": 3}, priority=7)
        await q.add("custom", {"n": 4}, job_id="existing")
        yield q


# Each case: (keyword options, data, expected class, patterns the message must match).
OPTION_CASES: list[Any] = [
    # custom job ids (docs/protocol/keys.md#job-ids)
    pytest.param({"job_id": "123"}, {}, InvalidJobIdError, r"'123'", r"integer", id="id-int"),
    pytest.param({"job_id": "-1"}, {}, InvalidJobIdError, r"'-1'", r"integer", id="id-negative"),
    pytest.param({"job_id": "0"}, {}, InvalidJobIdError, r"'0'", r"integer", id="id-zero"),
    pytest.param({"job_id": "a:b"}, {}, InvalidJobIdError, r"'a:b'", r"':'", id="id-colon"),
    pytest.param({"job_id": "de:x"}, {}, InvalidJobIdError, r"'de:x'", r"':'", id="id-dedup"),
    pytest.param({"job_id": ""}, {}, InvalidJobIdError, r"job_id", r"empty", id="id-empty"),
    pytest.param({"job_id": 7}, {}, InvalidJobIdError, r"job_id", r"str", r"7", id="id-int-type"),
    pytest.param({"job_id": None}, {}, InvalidJobIdError, r"job_id", r"str", id="id-none"),
    *(
        pytest.param(
            {"job_id": suffix},
            {},
            InvalidJobIdError,
            rf"'{suffix}'",
            r"queue key",
            id=f"id-{suffix}",
        )
        for suffix in (
            "wait",
            "meta",
            "events",
            "completed",
            "failed",
            "delayed",
            "prioritized",
            "active",
            "paused",
            "id",
            "pc",
            "marker",
            "stalled",
            "stalled-check",
            "limiter",
            "repeat",
            "waiting-children",
            "metrics",
            "de",
            "dn",
        )
    ),
    # priority: an int in 0 .. 2**21-1
    pytest.param({"priority": -1}, {}, InvalidOptionError, r"priority", r"2097151", r"-1"),
    pytest.param({"priority": 2**21}, {}, InvalidOptionError, r"priority", r"2097151", r"2097152"),
    pytest.param({"priority": 1.5}, {}, InvalidOptionError, r"priority", r"int", r"1\.5"),
    pytest.param({"priority": True}, {}, InvalidOptionError, r"priority", r"int", r"True"),
    pytest.param({"priority": "3"}, {}, InvalidOptionError, r"priority", r"int", r"'3'"),
    # delay: a non-negative, finite duration
    pytest.param({"delay": -1}, {}, InvalidOptionError, r"delay", r"negative", r"-1"),
    pytest.param(
        {"delay": timedelta(seconds=-1)}, {}, InvalidOptionError, r"delay", r"negative", id="td"
    ),
    pytest.param({"delay": math.nan}, {}, InvalidOptionError, r"delay", r"finite", r"nan"),
    pytest.param({"delay": math.inf}, {}, InvalidOptionError, r"delay", r"finite", r"inf"),
    pytest.param({"delay": "5"}, {}, InvalidOptionError, r"delay", r"seconds", r"timedelta"),
    # payload size: UTF-8 bytes of the JSON text ("ééééé" is 7 chars, 12 bytes)
    pytest.param(
        {"size_limit": 11}, "ééééé", PayloadError, r"12 bytes", r"size_limit=11", id="size"
    ),
    pytest.param({"size_limit": 0}, {}, InvalidOptionError, r"size_limit", r">= 1", r"0"),
    # backoff
    pytest.param(
        {"backoff": {"type": "fixed", "delay": 1, "jitter": 1.5}},
        {},
        InvalidOptionError,
        r"backoff\.jitter",
        r"between 0 and 1",
        r"1\.5",
        id="jitter>1",
    ),
    pytest.param(
        {"backoff": {"type": "fixed", "delay": 1, "jitter": -0.1}},
        {},
        InvalidOptionError,
        r"backoff\.jitter",
        r"between 0 and 1",
        id="jitter<0",
    ),
    pytest.param(
        {"backoff": {"type": "fixed", "delay": 1, "factor": 2}},
        {},
        InvalidOptionError,
        r"backoff",
        r"factor",
        # what is allowed: the message must list the accepted keys
        r"type",
        r"jitter",
        id="backoff-unknown-key",
    ),
    pytest.param(
        {"backoff": {"type": "fixed", "delay": -1}},
        {},
        InvalidOptionError,
        r"backoff\.delay",
        r"negative",
        r"-1",
        id="backoff-negative-delay",
    ),
    pytest.param(
        {"backoff": -5}, {}, InvalidOptionError, r"backoff\.delay", r"negative", id="backoff-neg"
    ),
    pytest.param(
        {"backoff": "fast"}, {}, InvalidOptionError, r"backoff", r"'fast'", id="backoff-str"
    ),
    pytest.param(
        {"backoff": {"type": "", "delay": 1}},
        {},
        InvalidOptionError,
        r"backoff\.type",
        r"non-empty",
        id="backoff-type",
    ),
    # retention: True, False, a count >= 0 or a KeepJobs
    pytest.param(
        {"remove_on_complete": -1}, {}, InvalidOptionError, r"remove_on_complete", r">= 0", r"-1"
    ),
    pytest.param({"remove_on_fail": -3}, {}, InvalidOptionError, r"remove_on_fail", r"-3"),
    pytest.param(
        {"remove_on_complete": 1.5},
        {},
        InvalidOptionError,
        r"remove_on_complete",
        r"1\.5",
        # what is allowed: bool, a count, or KeepJobs, not just "an int"
        r"KeepJobs",
        id="retention-float",
    ),
    pytest.param(
        {"remove_on_fail": {"count": 5}},
        {},
        InvalidOptionError,
        r"remove_on_fail",
        r"KeepJobs",
        id="retention-dict",
    ),
    # unknown option names (Node's spelling, or typos)
    pytest.param(
        {"jobId": "x"}, {}, InvalidOptionError, r"jobId", r"allowed", r"job_id", id="unknown-jobId"
    ),
    pytest.param(
        {"removeOnComplete": True},
        {},
        InvalidOptionError,
        r"removeOnComplete",
        r"remove_on_complete",
        id="unknown-camel",
    ),
    pytest.param(
        {"priorty": 1}, {}, InvalidOptionError, r"priorty", r"priority", id="unknown-typo"
    ),
    # other options
    pytest.param({"attempts": -1}, {}, InvalidOptionError, r"attempts", r">= 0", r"-1"),
    pytest.param({"attempts": 2.0}, {}, InvalidOptionError, r"attempts", r"int"),
    pytest.param({"lifo": "yes"}, {}, InvalidOptionError, r"lifo", r"bool", r"'yes'"),
    pytest.param({"keep_logs": -1}, {}, InvalidOptionError, r"keep_logs", r">= 0"),
    pytest.param({"stacktrace_limit": -1}, {}, InvalidOptionError, r"stacktrace_limit", r">= 0"),
    pytest.param({"timestamp": -1}, {}, InvalidOptionError, r"timestamp", r"epoch"),
    pytest.param({"timestamp": "now"}, {}, InvalidOptionError, r"timestamp", r"datetime"),
]

DATA_CASES: list[Any] = [
    pytest.param({1, 2}, r"set", id="set"),
    pytest.param(object(), r"object", id="object"),
    pytest.param(math.nan, r"float", id="nan"),
    pytest.param(math.inf, r"float", id="inf"),
    pytest.param({"deep": [1, -math.inf]}, r"float", id="nested-inf"),
    pytest.param({(1, 2): "tuple key"}, r"tuple", id="tuple-key"),
    pytest.param(b"bytes", r"bytes", id="bytes"),
]

QUEUE_NAME_CASES: list[Any] = [
    pytest.param("a:b", r"'a:b'", r"':'", r"without colons", id="colon"),
    pytest.param("", r"queue name", r"empty", id="empty"),
    pytest.param(42, r"queue name", r"str", id="not-str"),
]


# -- echomq.add ------------------------------------------------------------------------------


@pytest.mark.parametrize(("options", "data", "exc_type", "patterns"), [
    pytest.param(*p.values[:3], p.values[3:], id=p.id, marks=p.marks) for p in OPTION_CASES
])  # fmt: skip
async def test_add_refuses_bad_options(
    redis: Redis,
    seeded: Queue,
    options: dict[str, Any],
    data: Any,
    exc_type: type[ValidationError],
    patterns: tuple[str, ...],
) -> None:
    await refused(
        redis,
        lambda: echomq.add(seeded.name, "job", data, connection=redis, **options),
        exc_type,
        *patterns,
    )


@pytest.mark.parametrize(("data", "pattern"), DATA_CASES)
async def test_add_refuses_data_that_is_not_json(
    redis: Redis, seeded: Queue, data: Any, pattern: str
) -> None:
    await refused(
        redis,
        lambda: echomq.add(seeded.name, "job", data, connection=redis),
        PayloadError,
        r"job data",
        r"JSON",
        pattern,
    )


@pytest.mark.parametrize(("name", *[f"p{i}" for i in range(3)]), [
    pytest.param(*p.values, *([""] * (4 - len(p.values))), id=p.id) for p in QUEUE_NAME_CASES
])  # fmt: skip
async def test_add_refuses_bad_queue_names(
    redis: Redis, seeded: Queue, name: Any, p0: str, p1: str, p2: str
) -> None:
    await refused(
        redis,
        lambda: echomq.add(name, "job", {}, connection=redis),
        InvalidQueueNameError,
        *(p for p in (p0, p1, p2) if p),
    )


async def test_add_refuses_an_empty_prefix(redis: Redis, seeded: Queue) -> None:
    await refused(
        redis,
        lambda: echomq.add(seeded.name, "job", {}, connection=redis, prefix=""),
        InvalidQueueNameError,
        r"prefix",
        r"non-empty",
    )


async def test_add_refuses_a_job_name_that_is_not_a_str(redis: Redis, seeded: Queue) -> None:
    await refused(
        redis,
        lambda: echomq.add(seeded.name, 5, {}, connection=redis),  # type: ignore[arg-type]
        ValidationError,
        r"name",
        r"str",
    )


async def test_add_refuses_a_connection_that_is_not_a_client(redis: Redis, seeded: Queue) -> None:
    await refused(
        redis,
        lambda: echomq.add(seeded.name, "job", {}, connection="localhost:6379"),
        ValidationError,
        r"redis://",
    )


# -- the boundaries are accepted (so the refusals above are for the stated reason) -----------


@pytest.mark.parametrize(
    ("options", "data"),
    [
        pytest.param({"job_id": "0123"}, {}, id="id-leading-zero"),
        pytest.param({"job_id": "+1"}, {}, id="id-plus"),
        pytest.param({"job_id": "-0"}, {}, id="id-minus-zero"),
        pytest.param({"job_id": "waiting"}, {}, id="id-not-a-suffix"),
        pytest.param({"priority": 0}, {}, id="priority-0"),
        pytest.param({"priority": 2**21 - 1}, {}, id="priority-max"),
        pytest.param({"delay": 0}, {}, id="delay-0"),
        pytest.param({"size_limit": 12}, "ééééé", id="size-exact"),
        pytest.param({"backoff": {"type": "exponential", "delay": 0, "jitter": 1}}, {}, id="bo"),
        pytest.param({"remove_on_complete": 0}, {}, id="retention-0"),
        pytest.param({"remove_on_fail": False}, {}, id="retention-false"),
    ],
)
async def test_add_accepts_the_boundaries(
    redis: Redis, seeded: Queue, options: dict[str, Any], data: Any
) -> None:
    before = await snapshot(redis)
    job = await echomq.add(seeded.name, "job", data, connection=redis, **options)
    assert isinstance(job, Job)
    if "job_id" in options:
        assert job.id == options["job_id"]
    assert await snapshot(redis) != before
    assert await redis.exists(queue_keys(seeded.name).job(job.id)) == 1


# -- echomq.add_bulk: one bad item, nothing written -----------------------------------------


BULK_CASES: list[Any] = [
    pytest.param(
        [("a", {"n": 1}), ("b", {1, 2}), ("c", {"n": 3})], PayloadError, r"JSON", id="data-middle"
    ),
    pytest.param(
        [("a", {}), ("b", {}), ("c", {}, {"priority": -1})],
        InvalidOptionError,
        r"priority",
        id="priority-last",
    ),
    pytest.param(
        [("a", {}, {"job_id": "wait"}), ("b", {})], InvalidJobIdError, r"'wait'", id="id-first"
    ),
    pytest.param([("a", {}), ("b", {}, {"job_id": "42"})], InvalidJobIdError, r"'42'", id="id-int"),
    pytest.param(
        [("a", {}), ("b", {}, {"jobId": "x"})], InvalidOptionError, r"jobId", id="unknown-option"
    ),
    pytest.param(
        [("a", {}), ("b", {}, {"delay": -2})], InvalidOptionError, r"delay", id="negative-delay"
    ),
    pytest.param(
        [("a", {}), ("b", "ééééé", {"size_limit": 3})], PayloadError, r"size_limit", id="size"
    ),
    pytest.param([("a", {}), ("b",)], ValidationError, r"item 1", id="short-item"),
    pytest.param([("a", {}), ["b", {}]], ValidationError, r"item 1", id="list-item"),
    pytest.param(
        [("a", {}), ("b", {}, {"backoff": {"type": "fixed", "delay": 1, "jitter": 2}})],
        InvalidOptionError,
        r"jitter",
        id="jitter",
    ),
]


@pytest.mark.parametrize(("items", "exc_type", "pattern"), BULK_CASES)
async def test_add_bulk_writes_nothing_when_one_item_is_bad(
    redis: Redis,
    seeded: Queue,
    items: list[Any],
    exc_type: type[ValidationError],
    pattern: str,
) -> None:
    await refused(
        redis,
        lambda: echomq.add_bulk(seeded.name, items, connection=redis),
        exc_type,
        pattern,
    )


@pytest.mark.parametrize(("items", "exc_type", "pattern"), BULK_CASES)
async def test_queue_add_bulk_writes_nothing_when_one_item_is_bad(
    redis: Redis,
    seeded: Queue,
    items: list[Any],
    exc_type: type[ValidationError],
    pattern: str,
) -> None:
    await refused(redis, lambda: seeded.add_bulk(items), exc_type, pattern)


async def test_add_bulk_refuses_a_bad_queue_name(redis: Redis, seeded: Queue) -> None:
    await refused(
        redis,
        lambda: echomq.add_bulk("x:y", [("a", {})], connection=redis),
        InvalidQueueNameError,
        r"'x:y'",
    )


async def test_add_bulk_with_valid_items_writes_them_all(redis: Redis, seeded: Queue) -> None:
    # The counterpart of the refusals: the same items without the bad one all land.
    jobs = await echomq.add_bulk(seeded.name, [("a", {"n": 1}), ("c", {"n": 3})], connection=redis)
    keys = queue_keys(seeded.name)
    assert [await redis.exists(keys.job(j.id)) for j in jobs] == [1, 1]


# -- Queue.add and the Queue constructor ----------------------------------------------------


@pytest.mark.parametrize(("options", "data", "exc_type", "patterns"), [
    pytest.param(*p.values[:3], p.values[3:], id=p.id, marks=p.marks) for p in OPTION_CASES
])  # fmt: skip
async def test_queue_add_refuses_bad_options(
    redis: Redis,
    seeded: Queue,
    options: dict[str, Any],
    data: Any,
    exc_type: type[ValidationError],
    patterns: tuple[str, ...],
) -> None:
    await refused(redis, lambda: seeded.add("job", data, **options), exc_type, *patterns)


@pytest.mark.parametrize(("data", "pattern"), DATA_CASES)
async def test_queue_add_refuses_data_that_is_not_json(
    redis: Redis, seeded: Queue, data: Any, pattern: str
) -> None:
    await refused(redis, lambda: seeded.add("job", data), PayloadError, r"JSON", pattern)


async def test_queue_defaults_do_not_hide_a_bad_per_call_option(
    redis: Redis, queue_name: str, seeded: Queue
) -> None:
    async with Queue(
        seeded.name, connection=redis, default_job_options={"priority": 5, "attempts": 3}
    ) as q:
        await refused(redis, lambda: q.add("job", {}, priority=-1), InvalidOptionError, r"-1")
        await refused(
            redis, lambda: q.add("job", {}, job_id="events"), InvalidJobIdError, r"'events'"
        )


async def test_queue_default_job_id_is_checked_when_adding(redis: Redis, seeded: Queue) -> None:
    async with Queue(seeded.name, connection=redis, default_job_options={"job_id": "meta"}) as q:
        await refused(redis, lambda: q.add("job", {}), InvalidJobIdError, r"'meta'", r"queue key")


async def test_queue_default_size_limit_applies(redis: Redis, seeded: Queue) -> None:
    async with Queue(seeded.name, connection=redis, default_job_options={"size_limit": 4}) as q:
        await refused(redis, lambda: q.add("job", "12345"), PayloadError, r"size_limit=4")


@pytest.mark.parametrize(
    ("kwargs", "exc_type", "pattern"),
    [
        pytest.param({"name": "a:b"}, InvalidQueueNameError, r"':'", id="name-colon"),
        pytest.param({"name": ""}, InvalidQueueNameError, r"empty", id="name-empty"),
        pytest.param(
            {"default_job_options": {"priority": 2**21}},
            InvalidOptionError,
            r"priority",
            id="default-priority",
        ),
        pytest.param(
            {"default_job_options": {"jobId": "x"}}, InvalidOptionError, r"jobId", id="default-key"
        ),
        pytest.param(
            {"default_job_options": "fast"}, InvalidOptionError, r"'fast'", id="default-type"
        ),
    ],
)
async def test_queue_constructor_refuses_bad_input(
    redis: Redis,
    seeded: Queue,
    kwargs: dict[str, Any],
    exc_type: type[ValidationError],
    pattern: str,
) -> None:
    kwargs = {"name": seeded.name, **kwargs}

    async def build() -> None:
        q = Queue(kwargs.pop("name"), connection=redis, **kwargs)
        await q.aclose()

    await refused(redis, build, exc_type, pattern)


# -- other write operations ------------------------------------------------------------------


@pytest.mark.parametrize(
    "operation",
    ["pause", "resume", "drain", "obliterate", "promote_jobs", "retry_jobs"],
)
@pytest.mark.parametrize("bad_name", ["a:b", ""])
async def test_queue_wide_writes_refuse_bad_queue_names(
    redis: Redis, seeded: Queue, operation: str, bad_name: str
) -> None:
    function = getattr(echomq, operation)
    await refused(
        redis, lambda: function(bad_name, connection=redis), InvalidQueueNameError, r"queue name"
    )


@pytest.mark.parametrize(
    ("call", "exc_type", "patterns"),
    [
        pytest.param(
            lambda n, r: echomq.clean(n, -1, connection=r),
            InvalidOptionError,
            (r"grace", r"negative"),
            id="clean-grace",
        ),
        pytest.param(
            lambda n, r: echomq.clean(n, 10, state="bogus", connection=r),
            ValidationError,
            (r"'bogus'", r"completed"),
            id="clean-state",
        ),
        pytest.param(
            lambda n, r: echomq.clean(n, 10, limit=-1, connection=r),
            InvalidOptionError,
            (r"limit", r">= 0"),
            id="clean-limit",
        ),
        pytest.param(
            lambda n, r: echomq.retry_jobs(n, state="waiting", connection=r),
            ValidationError,
            (r"'waiting'", r"failed"),
            id="retry-state",
        ),
        pytest.param(
            lambda n, r: echomq.promote_jobs(n, 0, connection=r),
            InvalidOptionError,
            (r"count", r">= 1"),
            id="promote-count",
        ),
        pytest.param(
            lambda n, r: echomq.trim_events(n, -1, connection=r),
            ValidationError,
            (r"max_len", r">= 0"),
            id="trim-negative",
        ),
        pytest.param(
            lambda n, r: echomq.remove(n, "", connection=r),
            ValidationError,
            (r"job_id", r"non-empty"),
            id="remove-empty-id",
        ),
    ],
)
async def test_other_writes_refuse_bad_arguments(
    redis: Redis,
    seeded: Queue,
    call: Callable[[str, Redis], Awaitable[Any]],
    exc_type: type[ValidationError],
    patterns: tuple[str, ...],
) -> None:
    await refused(redis, lambda: call(seeded.name, redis), exc_type, *patterns)


@pytest.mark.parametrize(
    ("method", "args", "exc_type", "patterns"),
    [
        pytest.param("update_data", ({1},), PayloadError, (r"JSON", r"set"), id="data-set"),
        pytest.param("update_data", (math.nan,), PayloadError, (r"JSON", r"float"), id="data-nan"),
        pytest.param(
            "update_progress", (math.inf,), PayloadError, (r"progress", r"float"), id="progress"
        ),
        pytest.param(
            "update_progress", ("50%",), ValidationError, (r"progress", r"number"), id="prog-str"
        ),
        pytest.param(
            "change_priority", (-1,), ValidationError, (r"priority", r"2097151"), id="prio"
        ),
        pytest.param(
            "change_priority", (2.5,), ValidationError, (r"priority", r"int"), id="prio-float"
        ),
        pytest.param(
            "change_delay", (-1,), InvalidOptionError, (r"delay", r"negative"), id="delay"
        ),
        pytest.param("log", (5,), ValidationError, (r"log line", r"str"), id="log-int"),
    ],
)
async def test_job_writes_refuse_bad_arguments(
    redis: Redis,
    seeded: Queue,
    method: str,
    args: tuple[Any, ...],
    exc_type: type[ValidationError],
    patterns: tuple[str, ...],
) -> None:
    job = await seeded.get_job("existing")
    assert job is not None
    await refused(redis, lambda: getattr(job, method)(*args), exc_type, *patterns)
