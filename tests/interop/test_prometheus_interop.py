"""``Queue.export_prometheus_metrics`` against BullMQ 6.7.6's ``exportPrometheusMetrics``.

The same queue (jobs in every counted state; metrics keys written by a Node worker and then a
Python worker, both with metrics on) is exported by both sides; both texts are parsed with
``prometheus_client.parser`` and must hold the same families, samples, labels and values.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis

if str(Path(__file__).resolve().parent) not in sys.path:  # works with or without __init__.py
    sys.path.insert(0, str(Path(__file__).resolve().parent))

import nodepeer
from nodepeer import NodePeer

import echomq
from echomq import FlowJob, FlowProducer, Job, Queue, Worker
from helpers import wait_for

pytestmark = pytest.mark.timeout(90)

NODE_FAST: dict[str, Any] = {"drainDelay": 1, "lockDuration": 5000, "stalledInterval": 5000}
FAST: dict[str, Any] = {"drain_delay": 0.2, "stalled_interval": 1.0}

Parsed = tuple[dict[str, tuple[str, str]], dict[tuple[str, frozenset[tuple[str, str]]], float]]


@pytest.fixture
async def peer(redis_url: str, queue_name: str) -> AsyncIterator[NodePeer]:
    assert nodepeer.node_available(), "node >= 20 is required for the interop tests"
    async with NodePeer(redis_url, queue_name) as p:
        yield p


def parse(text: str) -> Parsed:
    """Family -> (type, help), and (sample name, labels) -> value."""
    families: dict[str, tuple[str, str]] = {}
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(text):
        families[family.name] = (family.type, family.documentation)
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return families, samples


async def fill(redis: Redis, peer: NodePeer) -> None:
    """Finished jobs counted by both sides' metrics, and one job in each other state."""
    q = peer.queue
    await echomq.add_bulk(q, [("ok", {}), ("ok", {}), ("bad", {})], connection=redis)
    report = await peer.call(
        "work",
        count=3,
        metrics={"maxDataPoints": 60},
        behaviour={"bad": {"fail": "no"}},
        **NODE_FAST,
    )
    assert report["finals"] == 3
    await echomq.add_bulk(q, [("ok", {}), ("bad", {})], connection=redis)

    async def run(job: Job) -> None:
        if job.name == "bad":
            raise RuntimeError("no")

    async with Worker(q, run, connection=redis, metrics_max_data_points=60, **FAST):

        async def finished() -> bool:
            counts = await echomq.get_job_counts(q, "completed", "failed", connection=redis)
            return counts == {"completed": 3, "failed": 2}

        await wait_for(finished, timeout=10)
    async with Queue(q, connection=redis) as queue:
        await queue.add("later", {}, delay=60)
        await queue.add("urgent", {}, priority=2)
        await queue.add("plain", {})
        await queue.add("plain", {})
    async with FlowProducer(connection=redis) as flows:
        await flows.add(FlowJob("parent", q, {}, children=[FlowJob("child", q + "-kids", {})]))
    taker = Worker(q, None, connection=redis)
    assert await taker.get_next_job("tok", block=False) is not None  # one active
    await taker.close()


async def test_python_export_parses_like_node(redis: Redis, peer: NodePeer) -> None:
    await fill(redis, peer)
    node_text = await peer.call("queueMethod", method="exportPrometheusMetrics", args=[])
    async with Queue(peer.queue, connection=redis) as q:
        py_text = await q.export_prometheus_metrics()
    node, py = parse(node_text), parse(py_text)
    assert py == node
    _, samples = py
    name = peer.queue
    by_state = {dict(lbl)["state"]: v for (n, lbl), v in samples.items() if n == "bullmq_job_count"}
    assert by_state == {
        "active": 1,
        "completed": 3,
        "delayed": 1,
        "failed": 2,
        "prioritized": 1,
        "waiting": 1,
        "waiting-children": 1,
    }
    assert samples[("bullmq_job_completed_total", frozenset({("queue", name)}))] == 3
    assert samples[("bullmq_job_failed_total", frozenset({("queue", name)}))] == 2


async def test_global_labels_parse_like_node(redis: Redis, peer: NodePeer) -> None:
    await echomq.add(peer.queue, "x", {}, connection=redis)
    glob = {"env": "prod", "region": 'eu "west"\\1\nb'}
    node_text = await peer.call("queueMethod", method="exportPrometheusMetrics", args=[glob])
    async with Queue(peer.queue, connection=redis) as q:
        py_text = await q.export_prometheus_metrics(glob)
    node, py = parse(node_text), parse(py_text)
    assert py == node
    assert py[1], "no samples"
    assert all(dict(lbl)["region"] == glob["region"] for _, lbl in py[1])
