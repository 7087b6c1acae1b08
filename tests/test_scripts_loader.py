"""The script registry (``echomq._ops.scripts``): loading, key-count checks, NOSCRIPT recovery.

The loader's rules: each file is read once, includes are inlined once and deterministically,
the SHA1 is of the final text, calls are EVALSHA with a reload on NOSCRIPT, and
:func:`~echomq._redis.run.ensure_loaded` makes a MULTI/EXEC safe after a flush. These tests flush
the script cache of the server the suite started (never another one).
"""

from __future__ import annotations

import hashlib
import re

import pytest
from redis import Redis as SyncRedis
from redis.asyncio import Redis
from redis.exceptions import NoScriptError

from echomq._keys import queue_keys
from echomq._ops import scripts
from echomq._redis.run import call_script, ensure_loaded
from echomq._redis.run_sync import call_script as call_script_sync
from echomq._redis.run_sync import ensure_loaded as ensure_loaded_sync

NAMES = scripts.all_script_names()
INCLUDE_LINE = re.compile(r'^--@include "([\w-]+)"', re.MULTILINE)


def _raw(name: str) -> str:
    return scripts._read(f"{name}.lua")


def _get_state_call(queue: str) -> tuple[scripts.Script, list[str], list[str]]:
    keys = queue_keys(queue)
    states = ["completed", "failed", "delayed", "prioritized", "active", "wait", "paused"]
    return (
        scripts.get("getState"),
        [*(keys.state(s) for s in states), keys.waiting_children],
        ["no-such-job"],
    )


def test_every_shipped_script_is_listed() -> None:
    assert "addJob" in NAMES
    assert "getState" in NAMES
    assert len(NAMES) >= 15
    assert sorted(NAMES) == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_script_is_prepared(name: str) -> None:
    script = scripts.get(name)
    assert script.name == name
    assert script.sha == hashlib.sha1(script.text.encode("utf-8")).hexdigest()
    assert "--@include" not in script.text  # every include inlined
    declared = {int(n) for n in re.findall(r"KEYS\[(\d+)\]", scripts._header(_raw(name)))}
    assert declared == set(range(1, script.numkeys + 1))
    assert script.numkeys >= 1
    assert scripts.get(name) is script  # prepared once per process


@pytest.mark.parametrize("name", NAMES)
def test_script_header_lists_keys_argv_and_returns(name: str) -> None:
    raw = _raw(name)
    assert raw.lstrip().startswith("--[[")
    header = scripts._header(raw)
    assert header
    assert re.search(r"^\s*KEYS\[1\]", header, re.MULTILINE)
    assert re.search(r"^\s*ARGV\[1\]", header, re.MULTILINE)
    assert "Returns" in header


@pytest.mark.parametrize("name", NAMES)
async def test_every_script_loads_on_the_server(redis: Redis, name: str) -> None:
    script = scripts.get(name)
    sha = await redis.script_load(script.text)
    assert (sha.decode() if isinstance(sha, bytes) else sha) == script.sha


@pytest.mark.parametrize("name", NAMES)
def test_includes_are_inlined_once_and_deterministically(name: str) -> None:
    raw = _raw(name)
    first = scripts._inline(raw, set())
    second = scripts._inline(raw, set())
    assert first == second
    assert first == scripts.get(name).text
    # each include's body appears exactly once
    for include in set(INCLUDE_LINE.findall(raw)):
        body = scripts._read(f"includes/{include}.lua")
        marker = next(line for line in body.splitlines() if line.startswith("local function"))
        assert first.count(marker) == 1, (include, marker)


def test_sha_is_stable_across_fresh_reads() -> None:
    before = {name: scripts.get(name).sha for name in NAMES}
    scripts.get.cache_clear()
    try:
        after = {name: scripts.get(name).sha for name in NAMES}
    finally:
        scripts.get.cache_clear()
    assert after == before


def test_a_body_using_an_undeclared_key_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    # The key count is the header's; a body (includes inlined) reaching past it is an error.
    text = '--[[\n  x\n\n  KEYS[1] wait\n\n  ARGV[1] id\n]]\nreturn redis.call("GET", KEYS[2])\n'
    monkeypatch.setattr(scripts, "_read", lambda name: text)
    scripts.get.cache_clear()
    try:
        with pytest.raises(AssertionError, match=r"uses KEYS\[2\], its header declares 1"):
            scripts.get("fake")
    finally:
        monkeypatch.undo()
        scripts.get.cache_clear()


def test_check_refuses_a_wrong_key_count() -> None:
    script = scripts.get("getState")
    assert script.numkeys == 8
    script.check(["k"] * 8)
    for count in (0, 7, 9):
        with pytest.raises(AssertionError, match=r"getState declares 8 KEYS, called with"):
            script.check(["k"] * count)


async def test_run_refuses_a_wrong_key_count_before_calling_redis(redis: Redis) -> None:
    script, keys, args = _get_state_call("q-wrong-count")
    with pytest.raises(AssertionError):
        await call_script(redis, script, keys[:-1], args)


@pytest.mark.parametrize("decoded", [False, True])
async def test_evalsha_after_script_flush_reloads(
    redis: Redis, redis_decoded: Redis, queue_name: str, decoded: bool
) -> None:
    client = redis_decoded if decoded else redis
    script, keys, args = _get_state_call(queue_name)
    await client.script_flush()
    assert await client.script_exists(script.sha) == [False]
    reply = await call_script(client, script, keys, args)
    assert (reply.decode() if isinstance(reply, bytes) else reply) == "unknown"
    assert await client.script_exists(script.sha) == [True]


def test_sync_evalsha_after_script_flush_reloads(sync_redis: SyncRedis, queue_name: str) -> None:
    script, keys, args = _get_state_call(queue_name)
    sync_redis.script_flush()
    assert sync_redis.script_exists(script.sha) == [False]
    assert call_script_sync(sync_redis, script, keys, args) == b"unknown"
    assert sync_redis.script_exists(script.sha) == [True]


async def test_pipeline_after_flush_fails_without_ensure_loaded(
    redis: Redis, queue_name: str
) -> None:
    # Why ensure_loaded exists: inside MULTI a missing script only surfaces at EXEC.
    script, keys, args = _get_state_call(queue_name)
    await redis.script_flush()
    with pytest.raises(NoScriptError):
        async with redis.pipeline(transaction=True) as pipe:
            script.queue(pipe, keys, args)
            await pipe.execute()


async def test_ensure_loaded_before_multi_after_flush(redis: Redis, queue_name: str) -> None:
    script, keys, args = _get_state_call(queue_name)
    add = scripts.get("addJob")
    await redis.script_flush()
    await ensure_loaded(redis, [script, add, script])
    assert await redis.script_exists(script.sha, add.sha) == [True, True]
    async with redis.pipeline(transaction=True) as pipe:
        script.queue(pipe, keys, args)
        script.queue(pipe, keys, ["other"])
        replies = await pipe.execute()
    assert replies == [b"unknown", b"unknown"]


def test_sync_ensure_loaded_before_multi_after_flush(
    sync_redis: SyncRedis, queue_name: str
) -> None:
    script, keys, args = _get_state_call(queue_name)
    sync_redis.script_flush()
    ensure_loaded_sync(sync_redis, [script])
    assert sync_redis.script_exists(script.sha) == [True]
    with sync_redis.pipeline(transaction=True) as pipe:
        script.queue(pipe, keys, args)
        assert pipe.execute() == [b"unknown"]


async def test_ensure_loaded_of_nothing_sends_nothing(redis: Redis) -> None:
    await ensure_loaded(redis, [])
    # port 1 has no server (and is never the developer's 6379): any command would fail
    ensure_loaded_sync(SyncRedis(host="127.0.0.1", port=1), [])


def test_queue_refuses_a_wrong_key_count() -> None:
    script = scripts.get("getState")
    with pytest.raises(AssertionError):
        script.queue(object(), ["only-one"], [])
