"""Self-test of the Node interop harness (BullMQ 6.7.6 only, no echomq).

Needs a ``redis_url`` fixture (provided by tests/conftest.py) and
``tests/node_modules`` (``npm ci --prefix tests``).
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

if str(Path(__file__).resolve().parent) not in sys.path:  # works with or without __init__.py
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import nodepeer
from nodepeer import NodeCommandError, NodeModulesMissing, NodePeer, NodePeerError


@pytest.fixture
async def peer(redis_url: str) -> AsyncIterator[NodePeer]:
    assert nodepeer.node_available(), "node >= 20 is required for the interop tests"
    async with NodePeer(redis_url, f"nodepeer-{uuid.uuid4().hex[:10]}") as p:
        yield p
        await p.call("obliterate", force=True)


async def test_add_then_work_in_order(peer: NodePeer) -> None:
    ids = await peer.add_many(
        [
            {"name": "double", "data": {"n": 1}},
            {"name": "double", "data": {"n": 2}},
            {"name": "other", "data": {"n": 3}, "opts": {"attempts": 2}},
        ]
    )
    assert ids == ["1", "2", "3"]
    assert await peer.counts("wait", "completed") == {"wait": 3, "completed": 0}

    report = await peer.work(
        count=3,
        timeoutMs=10000,
        behaviour={
            "double": {"echo": True},
            "*": {"fail": "first try fails", "failTimes": 1, "return": "third"},
        },
    )
    assert report["reason"] == "count"
    assert report["closed"] is True
    assert [i["id"] for i in report["invocations"]] == ["1", "2", "3", "3"]
    assert [i["attemptsMade"] for i in report["invocations"]] == [0, 0, 0, 1]
    assert report["invocations"][0]["data"] == {"n": 1}
    completed = [e for e in report["events"] if e["event"] == "completed"]
    assert [(e["jobId"], e["returnvalue"]) for e in completed] == [
        ("1", {"n": 1}),
        ("2", {"n": 2}),
        ("3", "third"),
    ]
    failed = [e for e in report["events"] if e["event"] == "failed"]
    assert [(e["jobId"], e["failedReason"], e["final"]) for e in failed] == [
        ("3", "first try fails", False)
    ]

    counts = await peer.counts()
    assert counts["completed"] == 3
    assert counts["waiting"] == 0 and counts["active"] == 0 and counts["failed"] == 0

    job = await peer.get_job("3")
    assert job is not None
    assert job["state"] == "completed"
    assert job["json"]["returnvalue"] == "third"
    assert job["json"]["attemptsMade"] == 2
    assert job["asJSON"]["returnvalue"] == '"third"'
    state, done = await peer.batch(
        [("getJobState", {"id": "1"}), ("counts", {"types": ["completed"]})]
    )
    assert (state, done) == ("completed", {"completed": 3})
    assert await peer.call("getJobs", types=["completed"], asc=True) == [
        {"id": "1", "name": "double"},
        {"id": "2", "name": "double"},
        {"id": "3", "name": "other"},
    ]


async def test_long_running_worker_and_events(peer: NodePeer) -> None:
    events = await peer.start("events", lastId="$", untilEvent="completed", untilJobId="1")
    await events.wait_ready()
    worker = await peer.start(
        "work", count=1, timeoutMs=10000, name="harness", behaviour={"*": {"progress": 42}}
    )
    await worker.wait_ready()
    workers = await peer.call("getWorkers")
    assert any(str(w["rawname"]).endswith(":w:harness") for w in workers)

    job_id = await peer.add("job", {"x": 1})
    started = await worker.wait_for_event("started", job_id)
    assert started["name"] == "job"
    report = await worker.result(timeout=20)
    assert [e["event"] for e in report["events"]] == ["completed"]

    stream = await events.result(timeout=20)
    assert stream["reason"] == "until"
    names = [e["event"] for e in stream["events"]]
    assert names[:5] == ["added", "waiting", "active", "progress", "completed"]
    progress = stream["events"][3]["args"]
    assert progress == {"jobId": "1", "data": 42}

    raw = await peer.call("xrange")
    assert raw[0][1] == {"event": "added", "jobId": "1", "name": "job"}


async def test_crash_and_errors(peer: NodePeer) -> None:
    await peer.add("crash", 1)
    proc = await peer.start(
        "work", timeoutMs=10000, lockDuration=1000, behaviour={"*": {"exitProcessMidJob": True}}
    )
    await proc.wait_for_event("started", "1")
    assert await proc.wait(timeout=10) == 137
    with pytest.raises(NodePeerError, match="without a result"):
        await proc.result()
    job = await peer.get_job("1")
    assert job is not None and job["state"] == "active"

    with pytest.raises(NodeCommandError) as info:
        await peer.call("jobMethod", id="nope", method="remove")
    assert info.value.name == "NotFound"
    with pytest.raises(NodeCommandError, match="unknown command"):
        await peer.call("noSuchCommand")


async def test_missing_node_modules_is_loud(
    peer: NodePeer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nodepeer, "NODE_MODULES", tmp_path / "node_modules")
    with pytest.raises(NodeModulesMissing, match="npm ci --prefix tests"):
        await peer.call("counts")
