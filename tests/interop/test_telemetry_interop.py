"""Traces cross between Node and Python: BullMQ 6.7 with the real ``bullmq-otel`` (and the W3C
propagator, an in-memory exporter) on one side, echomq with the Python SDK on the other."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import nodepeer
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from redis.asyncio import Redis

from echomq import Job, Queue, Worker
from helpers import spans_named, wait_for

SCRIPT = Path(__file__).resolve().parent / "node" / "otel.mjs"
#: BullMQ's SpanKind numbers (those of @opentelemetry/api).
NODE_PRODUCER, NODE_CONSUMER = 3, 4


async def node_otel(command: str, args: dict[str, Any]) -> dict[str, Any]:
    """Run tests/interop/node/otel.mjs and return its result."""
    binary = nodepeer.node_binary()
    assert binary is not None
    proc = await asyncio.create_subprocess_exec(
        binary,
        str(SCRIPT),
        command,
        json.dumps(args),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), timeout=40)
    lines = out.decode().strip().splitlines()
    assert lines, err.decode()
    envelope: dict[str, Any] = json.loads(lines[-1])
    assert envelope["ok"], envelope.get("error") or err.decode()
    result: dict[str, Any] = envelope["result"]
    return result


async def node_add(redis_url: str, queue: str, name: str) -> tuple[str, dict[str, Any]]:
    """A Node producer with bullmq-otel adds one job: its id, and the ``add`` span."""
    added = await node_otel(
        "add", {"url": redis_url, "prefix": "bull", "queue": queue, "name": name, "data": {}}
    )
    [span] = [s for s in added["spans"] if s["name"] == f"add {queue}.{name}"]
    return str(added["jobId"]), span


async def node_work(redis_url: str, queue: str, count: int) -> list[dict[str, Any]]:
    """A Node worker with bullmq-otel runs ``count`` jobs: its ``process`` spans."""
    worked = await node_otel(
        "work", {"url": redis_url, "prefix": "bull", "queue": queue, "count": count}
    )
    assert worked["completed"] == count
    return [s for s in worked["spans"] if s["name"] == f"process {queue}"]


async def test_a_node_producer_trace_continues_in_a_python_worker(
    redis: Redis,
    redis_url: str,
    queue_name: str,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
) -> None:
    job_id, node_add_span = await node_add(redis_url, queue_name, "n2p")
    assert node_add_span["kind"] == NODE_PRODUCER
    raw = await redis.hget(f"bull:{queue_name}:{job_id}", "opts")
    assert raw is not None
    assert isinstance(json.loads(raw)["tm"], str)  # bullmq-otel stores JSON text

    async def work(job: Job) -> str:
        return "ok"

    async with Worker(queue_name, work, connection=redis, telemetry=provider, drain_delay=0.2):
        await wait_for(lambda: spans_named(exporter, f"process {queue_name}"), timeout=10)
    [process] = spans_named(exporter, f"process {queue_name}")
    assert process.kind is SpanKind.CONSUMER
    assert process.context is not None and process.parent is not None
    assert f"{process.context.trace_id:032x}" == node_add_span["traceId"]
    assert f"{process.parent.span_id:016x}" == node_add_span["spanId"]
    assert process.parent.is_remote
    assert process.attributes is not None
    assert process.attributes["bullmq.job.id"] == job_id


async def test_a_python_producer_trace_continues_in_a_node_worker(
    redis: Redis,
    redis_url: str,
    queue_name: str,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
) -> None:
    async with Queue(queue_name, connection=redis, telemetry=provider) as queue:
        job = await queue.add("p2n", {"x": 1})
        await queue.add_bulk([("p2n-bulk", {})])
    [add] = spans_named(exporter, f"add {queue_name}.p2n")
    [bulk] = spans_named(exporter, f"addBulk {queue_name}")
    assert add.context is not None and bulk.context is not None
    processes = await node_work(redis_url, queue_name, 2)
    assert len(processes) == 2
    by_job = {s["attributes"]["bullmq.job.id"]: s for s in processes}
    node_process = by_job[job.id]
    assert node_process["kind"] == NODE_CONSUMER
    assert node_process["traceId"] == f"{add.context.trace_id:032x}"
    assert node_process["parentSpanId"] == f"{add.context.span_id:016x}"
    [other] = [s for s in processes if s is not node_process]
    assert other["traceId"] == f"{bulk.context.trace_id:032x}"
    assert other["parentSpanId"] == f"{bulk.context.span_id:016x}"


async def test_a_node_python_node_chain_is_one_trace(
    redis: Redis,
    redis_url: str,
    queue_name: str,
    provider: TracerProvider,
    exporter: InMemorySpanExporter,
) -> None:
    """Node adds A; a Python worker runs A and, inside it, adds B; a Node worker runs B."""
    first, second = f"{queue_name}-a", f"{queue_name}-b"
    _, node_add_span = await node_add(redis_url, first, "step1")

    async with Queue(second, connection=redis, telemetry=provider) as follow_up:

        async def work(job: Job) -> str:
            await follow_up.add("step2", {"from": job.id})
            return "ok"

        async with Worker(first, work, connection=redis, telemetry=provider, drain_delay=0.2):
            await wait_for(lambda: spans_named(exporter, f"process {first}"), timeout=10)
    [process] = spans_named(exporter, f"process {first}")
    [python_add] = spans_named(exporter, f"add {second}.step2")
    [node_process] = await node_work(redis_url, second, 1)

    assert process.context is not None and process.parent is not None
    assert python_add.context is not None and python_add.parent is not None
    trace = node_add_span["traceId"]
    # One trace id from the Node producer to the Node worker, through Python.
    assert f"{process.context.trace_id:032x}" == trace
    assert f"{python_add.context.trace_id:032x}" == trace
    assert node_process["traceId"] == trace
    # And each span's parent is the one before it.
    assert f"{process.parent.span_id:016x}" == node_add_span["spanId"]
    assert python_add.parent.span_id == process.context.span_id
    assert node_process["parentSpanId"] == f"{python_add.context.span_id:016x}"
