"""The job and getter scripts driven directly through the loader, on a sync client.

Covers what the async API tests do not: the declared key counts, ``run_sync``, and replies
read from a client with ``decode_responses=True``.
"""

from __future__ import annotations

import pytest
from redis import Redis

from echomq import JobOptions
from echomq import _ops as ops
from echomq._keys import queue_keys
from echomq._ops import scripts
from echomq._redis.run_sync import run_op as run_op_sync

NEW_SCRIPTS = {
    "addLog": 2,
    "changeDelay": 5,
    "changePriority": 7,
    "getState": 8,
    "pause": 7,
    "promote": 9,
    "reprocessJob": 9,
    "updateData": 1,
    "updateProgress": 3,
}


@pytest.mark.parametrize(("name", "numkeys"), sorted(NEW_SCRIPTS.items()))
def test_header_declares_keys(name: str, numkeys: int) -> None:
    script = scripts.get(name)
    assert script.numkeys == numkeys
    assert "--@include" not in script.text
    with pytest.raises(AssertionError, match="declares"):
        script.check(["k"] * (numkeys + 1))


@pytest.mark.parametrize("decode", [False, True])
def test_scripts_on_a_sync_client(redis_url: str, queue_name: str, decode: bool) -> None:
    keys = queue_keys(queue_name)
    client = Redis.from_url(redis_url, decode_responses=decode)
    try:
        prepared = ops.prepare_job("n", {"a": 1}, JobOptions())
        job_id = run_op_sync(client, ops.add_job(keys, prepared))
        assert run_op_sync(client, ops.get_state(keys, job_id)) == "waiting"
        assert run_op_sync(client, ops.get_state(keys, "missing")) == "unknown"
        assert run_op_sync(client, ops.add_log(keys, job_id, "a", 1)) == 1
        assert run_op_sync(client, ops.add_log(keys, job_id, "b", 1)) == 1
        assert run_op_sync(client, ops.get_logs(keys, job_id)) == (["b"], 1)
        run_op_sync(client, ops.update_progress(keys, job_id, 3))
        run_op_sync(client, ops.change_priority(keys, job_id, 2))
        assert run_op_sync(client, ops.get_state(keys, job_id)) == "prioritized"
        assert run_op_sync(client, ops.get_counts(keys, ["prioritized", "waiting"])) == {
            "prioritized": 1,
            "waiting": 0,
        }
        assert run_op_sync(client, ops.get_ranges(keys, ["prioritized"])) == [job_id]
        (h,) = run_op_sync(client, ops.get_job_hashes(keys, [job_id]))
        assert h is not None and h["progress"] == "3" and h["priority"] == "2"
        assert run_op_sync(client, ops.pause_queue(keys, True)) == 0
        assert run_op_sync(client, ops.is_paused(keys)) is True
        assert run_op_sync(client, ops.pause_queue(keys, False)) == 0
        assert run_op_sync(client, ops.is_paused(keys)) is False
    finally:
        client.close()


def test_resume_reports_legacy_entries_left(redis_url: str, queue_name: str) -> None:
    keys = queue_keys(queue_name)
    client = Redis.from_url(redis_url)
    try:
        client.rpush(keys.paused, *range(7003))
        client.lpush(keys.wait, "w")
        assert run_op_sync(client, ops.pause_queue(keys, False)) == 3
        assert run_op_sync(client, ops.pause_queue(keys, False, emit=False)) == 0
        assert client.llen(keys.wait) == 7004
        assert client.xlen(keys.events) == 1
    finally:
        client.close()
