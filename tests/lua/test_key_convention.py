"""The script-key convention: a script declares every key of its queue in KEYS.

Only keys named by data (job keys, dedup keys, scheduler hashes, and the keys of another queue
named by a job reference) are built inside a script, and only by the helpers of
``lua/includes/job_keys.lua``, from a declared prefix key ``P:Q:``. So no script text outside
that helper may concatenate a key name: checked statically on each script's final text (includes
inlined by the loader), with the helper's own text taken out. The declared layouts of
``protocol/keys.py`` must match the script headers, name by name.
"""

from __future__ import annotations

import re

import pytest
from redis import Redis

from echomq import JobOptions
from echomq import _ops as ops
from echomq._keys import queue_keys
from echomq._ops import scripts
from echomq._ops import worker as wops
from echomq._redis.run_sync import run_op as run_op_sync
from echomq.protocol.keys import RESERVED_SUFFIXES, SCRIPT_KEY_LAYOUTS

NAMES = scripts.all_script_names()
HELPER = scripts._read("includes/job_keys.lua").rstrip("\n")

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"' + r"|'(?:[^'\\]|\\.)*'")
_COMMENT = re.compile(r"--\[\[.*?\]\]|--[^\n]*", re.DOTALL)
# `.. "<literal>"` whose literal names a queue key, a job part (":lock"), or a per-id key family
_KEY_LITERAL = re.compile(r'\.\.\s*"([^"]*)"')
# concatenating onto a prefix / base key ("P:Q:", however named) or a declared key
_ONTO_PREFIX = re.compile(r"(?:\b(?:prefix|base|pb|\w+_base)\b|\.prefix\b|KEYS\[\d+\])\s*\.\.")


def _key_literal(text: str) -> bool:
    return (
        text in RESERVED_SUFFIXES - {""}
        or text.startswith(":")
        or text.split(":")[0] in ("de", "dn", "repeat", "metrics", "waiting-children")
    )


def _code(name: str) -> str:
    """The script's final text without the key helper and without comments."""
    text = scripts.get(name).text
    if HELPER in text:
        text = text.replace(HELPER, "")
    return _COMMENT.sub("", text)


def key_building(code: str) -> list[str]:
    """The concatenations in ``code`` that build a key name."""
    found = [m.group(0) for m in _KEY_LITERAL.finditer(code) if _key_literal(m.group(1))]
    found += [m.group(0) for m in _ONTO_PREFIX.finditer(_STRING.sub('""', code))]
    return found


@pytest.mark.parametrize("name", NAMES)
def test_script_builds_no_key_outside_the_helper(name: str) -> None:
    assert key_building(_code(name)) == []


def test_the_check_catches_queue_keys_built_from_a_base() -> None:
    # What addJob did before the convention: every queue key derived from KEYS[1].
    before = (
        'local base = KEYS[1]\nlocal k_meta, k_id = base .. "meta", base .. "id"\n'
        'redis.call("SET", job_key .. ":lock", "t")\nredis.call("DEL", base .. "de:" .. d)\n'
    )
    assert len(key_building(before)) == 7
    assert key_building('local k = "a" .. "b"\nlocal x = q.wait') == []


def test_the_helper_is_the_only_place_keys_are_built() -> None:
    assert key_building(_COMMENT.sub("", HELPER))  # the check would see the helper itself
    for name in NAMES:
        text = scripts.get(name).text
        if "job_hash_key(" in text or "job_part_key(" in text:
            assert HELPER in text, name


@pytest.mark.parametrize("name", NAMES)
def test_no_prefix_key_in_argv(name: str) -> None:
    header = scripts._header(scripts._read(f"{name}.lua"))
    assert not re.search(r"^\s*ARGV\[[^]]*\][^\n]*(?:base key|\"P:Q:\")", header, re.MULTILINE)


def _header_keys(name: str) -> list[str]:
    header = scripts._header(scripts._read(f"{name}.lua"))
    return [m.group(1) for m in re.finditer(r"^\s*KEYS\[\d+\]\s+(\S+)", header, re.MULTILINE)]


@pytest.mark.parametrize("name", sorted(SCRIPT_KEY_LAYOUTS))
def test_declared_layout_matches_the_header(name: str) -> None:
    keys = queue_keys("q", "{p}")
    declared = keys.script_keys[name]
    assert scripts.get(name).numkeys == len(declared)
    names = _header_keys(name)
    assert names[0] == "prefix" and declared[0] == keys.base
    assert [k.removeprefix(keys.base) for k in declared[1:]] == names[1:]


@pytest.mark.parametrize("name", NAMES)
def test_a_script_taking_the_prefix_key_has_a_declared_layout(name: str) -> None:
    # KEYS[1] "prefix" <=> the script's KEYS come from QueueKeys.script_keys.
    assert (_header_keys(name)[:1] == ["prefix"]) == (name in SCRIPT_KEY_LAYOUTS)


@pytest.mark.parametrize("name", sorted(SCRIPT_KEY_LAYOUTS))
def test_layout_is_built_once_per_queue(name: str) -> None:
    keys = queue_keys("q", "{p}")
    assert keys.script_keys[name] is keys.script_keys[name]
    assert isinstance(keys.script_keys[name], tuple)


@pytest.mark.parametrize("same_queue", [True, False])
def test_a_child_releases_its_parent_in_its_own_or_another_queue(
    redis_url: str, queue_name: str, same_queue: bool
) -> None:
    # The parent's queue keys are the declared ones when it shares the child's queue, else
    # derived by queue_keys_for from the parent reference.
    parent_keys = queue_keys(queue_name)
    child_keys = parent_keys if same_queue else queue_keys(queue_name + "-children")
    client = Redis.from_url(redis_url, decode_responses=True)
    try:
        parent = run_op_sync(
            client, ops.add_job(parent_keys, ops.prepare_job("p", {}, JobOptions()))
        )
        client.lrem(parent_keys.wait, 0, parent)
        client.zadd(parent_keys.waiting_children, {parent: 1})
        job = ops.prepare_job("c", {}, JobOptions())
        child = run_op_sync(client, ops.add_job(child_keys, job, (parent_keys, parent)))
        params = wops.FetchParams("t:", 30_000)
        got = run_op_sync(client, wops.finish_and_fetch(child_keys, [], 1, 1, params, ops.now_ms()))
        assert [j.id for j in got.jobs] == [child]
        done = wops.finish_item(wops.COMPLETE, child, "t:1", '"ok"')
        reply = wops.finish_and_fetch(child_keys, [done], 0, 2, params, ops.now_ms())
        assert run_op_sync(client, reply).codes == [0]
        assert client.lrange(parent_keys.wait, 0, -1) == [parent]
        assert client.zcard(parent_keys.waiting_children) == 0
        processed = client.hgetall(parent_keys.job(parent) + ":processed")
        assert processed == {child_keys.job(child): '"ok"'}
        events = [e[1] for e in client.xrange(parent_keys.events)]
        assert {"event": "waiting", "jobId": parent, "prev": "waiting-children"} in events
    finally:
        client.close()
