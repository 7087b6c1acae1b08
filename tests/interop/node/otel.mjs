#!/usr/bin/env node
// The Node side of echomq's OpenTelemetry interop test: BullMQ 6.7 with the real bullmq-otel
// telemetry, a W3C propagator and an in-memory span exporter.
//
//   node otel.mjs add  '{"url": ..., "prefix": ..., "queue": ..., "name": ..., "data": ...}'
//   node otel.mjs work '{"url": ..., "prefix": ..., "queue": ..., "count": N}'
//
// It prints one JSON line: {"ok": true, "result": {...}} with the job (add) and the spans the
// process finished, or {"ok": false, "error": ...}.

import { Queue, Worker } from 'bullmq';
import { BullMQOtel } from 'bullmq-otel';
import IORedis from 'ioredis';
import { propagation, trace } from '@opentelemetry/api';
import { W3CTraceContextPropagator } from '@opentelemetry/core';
import {
  BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor,
} from '@opentelemetry/sdk-trace-base';

console.log = (...a) => console.error(...a);

const exporter = new InMemorySpanExporter();
const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] });
trace.setGlobalTracerProvider(provider);
propagation.setGlobalPropagator(new W3CTraceContextPropagator());

function spans() {
  return exporter.getFinishedSpans().map(s => ({
    name: s.name,
    kind: s.kind,
    traceId: s.spanContext().traceId,
    spanId: s.spanContext().spanId,
    parentSpanId: s.parentSpanContext ? s.parentSpanContext.spanId : null,
    attributes: s.attributes,
  }));
}

function connection(url) {
  const u = new URL(url);
  return new IORedis({
    host: u.hostname, port: Number(u.port), maxRetriesPerRequest: null,
  });
}

async function add(args) {
  const conn = connection(args.url);
  const queue = new Queue(args.queue, { connection: conn, prefix: args.prefix, telemetry: new BullMQOtel() });
  const job = await queue.add(args.name, args.data ?? {});
  await queue.close();
  await conn.quit();
  return { jobId: job.id, spans: spans() };
}

async function work(args) {
  const conn = connection(args.url);
  let done = 0;
  let release;
  const finished = new Promise(resolve => { release = resolve; });
  const worker = new Worker(args.queue, async job => ({ seen: job.name }), {
    connection: conn, prefix: args.prefix, telemetry: new BullMQOtel(), drainDelay: 1,
  });
  worker.on('completed', () => { done += 1; if (done >= args.count) release(); });
  const timer = setTimeout(() => release(), 20000);
  await finished;
  clearTimeout(timer);
  await worker.close();
  await conn.quit();
  return { completed: done, spans: spans() };
}

const commands = { add, work };
const [command, raw] = process.argv.slice(2);
try {
  const result = await commands[command](JSON.parse(raw));
  process.stdout.write(JSON.stringify({ ok: true, result }) + '\n', () => process.exit(0));
} catch (err) {
  process.stdout.write(JSON.stringify({ ok: false, error: String(err && err.stack || err) }) + '\n',
    () => process.exit(1));
}
