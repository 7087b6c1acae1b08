"""Custom events across runtimes: echomq's ``QueueEventsProducer`` publishes, a real BullMQ 6.7
``QueueEvents`` (Node) receives the event under its name with the fields as its argument; Node's
``QueueEventsProducer.publishEvent`` publishes, echomq's ``QueueEvents`` delivers an
``Unknown`` with the same name and fields (docs/protocol/events.md#custom-events).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import nodepeer
import pytest
from nodepeer import NodePeer

from echomq import QueueEvents, QueueEventsProducer, Unknown

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
async def peer(redis_url: str, queue_name: str) -> AsyncIterator[NodePeer]:
    assert nodepeer.node_available(), "node >= 20 is required for the interop tests"
    async with NodePeer(redis_url, queue_name) as p:
        yield p


async def test_python_publishes_node_queue_events_receives(
    peer: NodePeer, redis_url: str, queue_name: str
) -> None:
    node = await peer.start(
        "events", lastId="$", untilEvent="report-ready", untilCount=2, timeoutMs=20000
    )
    await node.wait_ready()
    async with QueueEventsProducer(queue_name, connection=redis_url) as producer:
        first = await producer.publish_event(
            "report-ready", {"url": "s3://r/1", "pages": 12, "final": True}
        )
        second = await producer.publish_event("report-ready", {"jobId": "42", "ratio": 0.25})
    report = await node.result(30)
    assert report["reason"] == "until" and report["errors"] == []
    got = [(e["event"], e["args"], e["id"]) for e in report["events"]]
    assert got == [
        ("report-ready", {"url": "s3://r/1", "pages": "12", "final": "true"}, first),
        ("report-ready", {"jobId": "42", "ratio": "0.25"}, second),
    ]


async def test_node_publishes_python_queue_events_receives(
    peer: NodePeer, redis_url: str, queue_name: str
) -> None:
    async with QueueEvents(queue_name, connection=redis_url, block=0.2) as events:
        stream = events.__aiter__()
        await peer.call(
            "publishEvent",
            eventName="report-ready",
            fields={"url": "s3://r/2", "pages": 3, "final": False},
        )
        await peer.call("publishEvent", eventName="ping", maxEvents=50)
        first = await asyncio.wait_for(stream.__anext__(), 10)
        second = await asyncio.wait_for(stream.__anext__(), 10)
    assert isinstance(first, Unknown) and isinstance(second, Unknown)
    assert (first.name, dict(first.fields)) == (
        "report-ready",
        {"url": "s3://r/2", "pages": "3", "final": "false"},
    )
    assert (second.name, dict(second.fields)) == ("ping", {})
