"""OpenTelemetry with the real Python SDK and an in-memory exporter: producer and consumer
spans, their parent/child relation, attributes, failures and retries, and the ``tm``/``omc``
options as BullMQ stores them."""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode
from redis import Redis as SyncRedis
from redis.asyncio import Redis

import echomq
from echomq import Job, JobOptions, JobTelemetry, Queue, Worker
from echomq.errors import InvalidOptionError
from echomq.telemetry import Telemetry
from helpers import spans_named, wait_for

FAST: dict[str, Any] = {"drain_delay": 0.2, "stalled_interval": 5.0}


async def opts_of(redis: Redis, queue: str, job_id: str) -> dict[str, Any]:
    raw = await redis.hget(f"bull:{queue}:{job_id}", "opts")
    assert raw is not None
    opts: dict[str, Any] = json.loads(raw)
    return opts


async def test_add_makes_a_producer_span_and_stores_its_context_in_tm(
    redis: Redis, queue_name: str, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    async with Queue(queue_name, connection=redis, telemetry=provider) as queue:
        job = await queue.add("mail", {"to": "a"})
    [span] = spans_named(exporter, f"add {queue_name}.mail")
    assert span.kind is SpanKind.PRODUCER
    assert span.attributes is not None
    assert span.attributes["bullmq.queue.name"] == queue_name
    assert span.attributes["bullmq.queue.operation"] == "add"
    assert span.attributes["bullmq.job.id"] == job.id
    assert span.attributes["bullmq.job.name"] == "mail"
    opts = await opts_of(redis, queue_name, job.id)
    assert isinstance(opts["tm"], str)  # JSON text, as a Node worker JSON.parses it
    carrier = json.loads(opts["tm"])
    ctx = span.get_span_context()
    assert ctx is not None
    flags = f"{int(ctx.trace_flags):02x}"
    assert carrier["traceparent"] == f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-{flags}"
    assert "omc" not in opts


async def test_worker_span_is_a_child_of_the_producer_span(
    redis: Redis, queue_name: str, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    seen: list[int] = []

    async def work(job: Job) -> str:
        seen.append(trace.get_current_span().get_span_context().span_id)
        return "ok"

    async with Queue(queue_name, connection=redis, telemetry=provider) as queue:
        job = await queue.add("mail", {})
        async with Worker(
            queue_name, work, connection=redis, telemetry=provider.get_tracer("t"), **FAST
        ):
            await wait_for(lambda: spans_named(exporter, f"process {queue_name}"), timeout=10)
    [add] = spans_named(exporter, f"add {queue_name}.mail")
    [process] = spans_named(exporter, f"process {queue_name}")
    assert process.kind is SpanKind.CONSUMER
    assert process.context.trace_id == add.context.trace_id
    assert process.parent is not None and process.parent.span_id == add.context.span_id
    assert seen == [process.context.span_id]  # the processor runs inside the span
    assert process.attributes is not None
    assert process.attributes["bullmq.queue.name"] == queue_name
    assert process.attributes["bullmq.job.id"] == job.id
    assert process.attributes["bullmq.job.name"] == "mail"
    assert process.attributes["echomq.job.attempt"] == 1
    [complete] = spans_named(exporter, f"complete {queue_name}")
    assert complete.parent is not None and complete.parent.span_id == process.context.span_id


async def test_jobs_added_by_a_processor_continue_the_trace(
    redis: Redis, queue_name: str, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    async with Queue(queue_name, connection=redis, telemetry=provider) as queue:

        async def work(job: Job) -> None:
            if job.name == "first":
                await queue.add("second", {})

        await queue.add("first", {})
        async with Worker(queue_name, work, connection=redis, telemetry=provider, **FAST):
            await wait_for(
                lambda: len(spans_named(exporter, f"process {queue_name}")) == 2, timeout=10
            )
    [first] = spans_named(exporter, f"add {queue_name}.first")
    [second] = spans_named(exporter, f"add {queue_name}.second")
    processes = spans_named(exporter, f"process {queue_name}")
    assert {s.context.trace_id for s in [first, second, *processes]} == {first.context.trace_id}
    first_process = next(
        s for s in processes if s.parent and s.parent.span_id == first.context.span_id
    )
    assert second.parent is not None and second.parent.span_id == first_process.context.span_id


async def test_sync_processor_runs_inside_the_span(
    redis: Redis, queue_name: str, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    seen: list[int] = []

    def work(job: echomq.sync.Job) -> None:
        seen.append(trace.get_current_span().get_span_context().span_id)

    async with Queue(queue_name, connection=redis, telemetry=provider) as queue:
        await queue.add("s", {})
        async with Worker(queue_name, work, connection=redis, telemetry=provider, **FAST):
            await wait_for(lambda: spans_named(exporter, f"process {queue_name}"), timeout=10)
    [process] = spans_named(exporter, f"process {queue_name}")
    assert seen == [process.context.span_id]


async def test_failures_and_retries_are_recorded(
    redis: Redis, queue_name: str, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    async def boom(job: Job) -> None:
        raise ValueError(f"boom {job.attempts_made}")

    async with Queue(queue_name, connection=redis, telemetry=provider) as queue:
        await queue.add("x", {}, attempts=2)
        async with Worker(queue_name, boom, connection=redis, telemetry=provider, **FAST):
            await wait_for(lambda: spans_named(exporter, f"fail {queue_name}"), timeout=10)
    processes = sorted(
        spans_named(exporter, f"process {queue_name}"), key=lambda s: s.start_time or 0
    )
    assert len(processes) == 2
    [add] = spans_named(exporter, f"add {queue_name}.x")
    for process in processes:  # both attempts continue the producer's trace
        assert process.parent is not None and process.parent.span_id == add.context.span_id
    assert [p.attributes and p.attributes["echomq.job.attempt"] for p in processes] == [1, 2]
    [retry] = spans_named(exporter, f"retry {queue_name}")
    [fail] = spans_named(exporter, f"fail {queue_name}")
    assert retry.parent is not None and retry.parent.span_id == processes[0].context.span_id
    assert fail.parent is not None and fail.parent.span_id == processes[1].context.span_id
    for span, message in [(processes[0], "boom 0"), (retry, "boom 0"), (fail, "boom 1")]:
        [event] = [e for e in span.events if e.name == "exception"]
        assert event.attributes is not None
        assert event.attributes["exception.type"] == "ValueError"
        assert event.attributes["exception.message"] == message
    assert fail.status.status_code is StatusCode.ERROR
    assert processes[1].status.status_code is StatusCode.ERROR
    assert processes[0].status.status_code is StatusCode.UNSET  # it was retried
    assert processes[1].attributes is not None
    assert processes[1].attributes["bullmq.job.attempts.made"] == 1


async def test_add_bulk_span_and_per_job_options(
    redis: Redis, queue_name: str, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    async with Queue(queue_name, connection=redis, telemetry=provider) as queue:
        a, b, c = await queue.add_bulk(
            [
                ("a", {}),
                ("b", {}, {"telemetry": {"omit_context": True}}),
                ("c", {}, JobOptions(telemetry=JobTelemetry(metadata='{"k":"v"}'))),
            ]
        )
    [span] = spans_named(exporter, f"addBulk {queue_name}")
    assert span.kind is SpanKind.PRODUCER
    assert span.attributes is not None
    assert span.attributes["bullmq.job.bulk.count"] == 3
    assert list(span.attributes["bullmq.job.bulk.names"]) == ["a", "b", "c"]  # type: ignore[arg-type]
    tm = json.loads((await opts_of(redis, queue_name, a.id))["tm"])
    assert tm["traceparent"].split("-")[2] == f"{span.context.span_id:016x}"
    b_opts = await opts_of(redis, queue_name, b.id)
    assert b_opts["omc"] is True and "tm" not in b_opts
    assert (await opts_of(redis, queue_name, c.id))["tm"] == '{"k":"v"}'


async def test_omit_context_on_add_and_from_wire(
    redis: Redis, queue_name: str, provider: TracerProvider
) -> None:
    async with Queue(queue_name, connection=redis, telemetry=provider) as queue:
        job = await queue.add("x", {}, telemetry={"omit_context": True})
    assert await opts_of(redis, queue_name, job.id) == {"attempts": 0, "omc": True}
    assert job.options.telemetry == JobTelemetry(omit_context=True)
    assert JobOptions.from_wire({"tm": 5, "omc": "yes"}).telemetry is echomq.UNSET


async def test_no_telemetry_writes_no_context(redis: Redis, queue_name: str) -> None:
    async with Queue(queue_name, connection=redis) as queue:
        job = await queue.add("x", {})
    assert "tm" not in await opts_of(redis, queue_name, job.id)


def test_invalid_values_are_refused() -> None:
    with pytest.raises(TypeError, match="Tracer or TracerProvider"):
        Telemetry.coerce("tracer")
    with pytest.raises(InvalidOptionError, match="telemetry.metadata"):
        JobTelemetry(metadata={"traceparent": "x"})  # type: ignore[arg-type]
    with pytest.raises(InvalidOptionError, match="unknown keys"):
        JobOptions(telemetry={"omitContext": True})  # type: ignore[arg-type]


def test_a_missing_extra_names_the_pip_command(
    monkeypatch: pytest.MonkeyPatch, provider: TracerProvider
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    with pytest.raises(ImportError, match=r"pip install 'echomq\[otel\]'"):
        Telemetry.coerce(provider)


def test_the_sync_queue_makes_the_same_spans(
    redis_url: str, queue_name: str, provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    client = SyncRedis.from_url(redis_url)
    try:
        with echomq.sync.Queue(queue_name, connection=client, telemetry=provider) as queue:
            job = queue.add("s", {})
        [span] = spans_named(exporter, f"add {queue_name}.s")
        raw = client.hget(f"bull:{queue_name}:{job.id}", "opts")
        assert isinstance(raw, bytes)
        tm = json.loads(json.loads(raw)["tm"])
        assert tm["traceparent"].split("-")[1] == f"{span.context.trace_id:032x}"
    finally:
        client.close()
