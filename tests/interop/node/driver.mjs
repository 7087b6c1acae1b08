#!/usr/bin/env node
// Command-line driver around the public API of bullmq (pinned to 6.7.6 in
// tests/package.json). It is the "real BullMQ" side of echomq's interop tests.
//
//   node driver.mjs <command> [json-args]      (json-args default: read from stdin)
//
// Every stdout line is one JSON object. The last one is the result envelope:
//   {"ok": true, "result": ...}   or   {"ok": false, "error": msg, "name": errName, "stack": ...}
// Long-running commands (work, events) also print progress lines before it,
// each of the form {"event": "<kind>", ...}. The process exits 0 whenever it
// manages to print an envelope (the crash simulation exits 137 without one).
// Anything else written with console.log goes to stderr so stdout stays clean.

import {
  Queue, Worker, QueueEvents, QueueEventsProducer, FlowProducer, Job, UnrecoverableError,
  WaitingChildrenError,
} from 'bullmq';
import IORedis from 'ioredis';

console.log = (...a) => console.error(...a);
console.info = (...a) => console.error(...a);

// ---------------------------------------------------------------- output ---

let finished = false;

function writeLine(obj) {
  process.stdout.write(JSON.stringify(obj, jsonReplacer) + '\n');
}

function jsonReplacer(_key, value) {
  if (typeof value === 'bigint') return value.toString();
  if (value instanceof Error) return { name: value.name, message: value.message };
  return value;
}

function emitProgress(obj) {
  if (!finished) writeLine(obj);
}

function finish(envelope, code = 0) {
  if (finished) return;
  finished = true;
  process.stdout.write(JSON.stringify(envelope, jsonReplacer) + '\n', () => process.exit(code));
  // If the write callback never fires (broken pipe), still leave.
  setTimeout(() => process.exit(code), 2000).unref();
}

function errorEnvelope(err) {
  if (err instanceof Error) {
    return { ok: false, error: err.message, name: err.name, stack: err.stack };
  }
  return { ok: false, error: String(err), name: 'Error', stack: null };
}

process.on('uncaughtException', err => finish(errorEnvelope(err)));
process.on('unhandledRejection', err => finish(errorEnvelope(err)));

// ----------------------------------------------------------------- input ---

async function readArgs() {
  if (process.argv.length > 3 && process.argv[3] !== '-') {
    return JSON.parse(process.argv[3]);
  }
  if (process.stdin.isTTY) return {};
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  const text = Buffer.concat(chunks).toString('utf8').trim();
  return text ? JSON.parse(text) : {};
}

function connectionFromUrl(url) {
  const u = new URL(url || 'redis://127.0.0.1:6379');
  if (u.protocol !== 'redis:') throw new Error(`unsupported redis url scheme: ${u.protocol}`);
  const opts = {
    host: u.hostname || '127.0.0.1',
    port: u.port ? Number(u.port) : 6379,
    maxRetriesPerRequest: null,
  };
  const db = u.pathname && u.pathname.length > 1 ? Number(u.pathname.slice(1)) : 0;
  if (db) opts.db = db;
  if (u.username) opts.username = decodeURIComponent(u.username);
  if (u.password) opts.password = decodeURIComponent(u.password);
  return opts;
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

async function withDeadline(promise, ms) {
  let timer;
  const deadline = new Promise(resolve => {
    timer = setTimeout(() => resolve('__deadline__'), ms);
  });
  try {
    return await Promise.race([promise.then(() => 'done', () => 'done'), deadline]);
  } finally {
    clearTimeout(timer);
  }
}

// ----------------------------------------------------------- job summary ---

// Top-level undefined -> null, so every documented key is present in the JSON.
function nullify(obj) {
  const out = {};
  for (const [k, v] of Object.entries(obj)) out[k] = v === undefined ? null : v;
  return out;
}

// The job's fields as the Node client decoded them (data, opts, returnvalue,
// progress and stacktrace are real JSON values, not strings).
function jobFields(job) {
  return nullify({
    id: job.id,
    name: job.name,
    data: job.data,
    opts: job.opts,
    progress: job.progress,
    delay: job.delay,
    timestamp: job.timestamp,
    attemptsMade: job.attemptsMade,
    attemptsStarted: job.attemptsStarted,
    stalledCounter: job.stalledCounter,
    failedReason: job.failedReason,
    stacktrace: job.stacktrace,
    returnvalue: job.returnvalue,
    finishedOn: job.finishedOn,
    processedOn: job.processedOn,
    priority: job.priority,
    parentKey: job.parentKey,
    parent: job.parent,
    repeatJobKey: job.repeatJobKey,
    deduplicationId: job.deduplicationId,
    deferredFailure: job.deferredFailure,
    processedBy: job.processedBy,
  });
}

function serialize(value) {
  if (value instanceof Job) return jobFields(value);
  if (Array.isArray(value)) return value.map(serialize);
  return value;
}

// --------------------------------------------------------------- helpers ---

function makeQueue(args, extra = {}) {
  if (!args.queue) throw new Error('missing "queue" argument');
  const opts = {
    connection: connectionFromUrl(args.url),
    prefix: args.prefix ?? 'bull',
    ...extra,
  };
  if (args.defaultJobOptions) opts.defaultJobOptions = args.defaultJobOptions;
  if (args.queueOpts) Object.assign(opts, args.queueOpts);
  return new Queue(args.queue, opts);
}

async function withQueue(args, fn) {
  const queue = makeQueue(args);
  queue.on('error', () => {});
  try {
    await queue.waitUntilReady();
    return await fn(queue);
  } finally {
    await withDeadline(queue.close(), 3000);
  }
}

async function rawClient(args) {
  const client = new IORedis(connectionFromUrl(args.url));
  client.on('error', () => {});
  return client;
}

function fieldsToObject(flat) {
  const obj = {};
  for (let i = 0; i + 1 < flat.length; i += 2) obj[flat[i]] = flat[i + 1];
  return obj;
}

function eventsKey(args) {
  return `${args.prefix ?? 'bull'}:${args.queue}:events`;
}

// -------------------------------------------------------------- commands ---

const commands = {};

commands.add = args =>
  withQueue(args, async queue => {
    const specs = args.jobs ?? [];
    const norm = specs.map(j => ({ name: j.name ?? 'default', data: j.data, opts: j.opts ?? {} }));
    if (args.bulk) {
      const jobs = await queue.addBulk(norm);
      return jobs.map(j => j.id);
    }
    const ids = [];
    for (const j of norm) {
      const job = await queue.add(j.name, j.data, j.opts);
      ids.push(job.id);
    }
    return ids;
  });

commands.getJob = args =>
  withQueue(args, async queue => {
    const job = await queue.getJob(String(args.id));
    if (!job) return null;
    return { json: jobFields(job), asJSON: job.asJSON(), state: await job.getState() };
  });

commands.getJobState = args => withQueue(args, queue => queue.getJobState(String(args.id)));

commands.getJobs = args =>
  withQueue(args, async queue => {
    const jobs = await queue.getJobs(args.types, args.start ?? 0, args.end ?? -1, args.asc ?? false);
    return jobs.filter(Boolean).map(j => ({ id: j.id, name: j.name }));
  });

commands.counts = args => withQueue(args, queue => queue.getJobCounts(...(args.types ?? [])));

commands.pause = args => withQueue(args, async queue => { await queue.pause(); return null; });
commands.resume = args => withQueue(args, async queue => { await queue.resume(); return null; });
commands.isPaused = args => withQueue(args, queue => queue.isPaused());
commands.drain = args =>
  withQueue(args, async queue => { await queue.drain(args.delayed ?? false); return null; });
commands.clean = args =>
  withQueue(args, queue => queue.clean(args.grace ?? 0, args.limit ?? 0, args.type ?? 'completed'));
commands.obliterate = args =>
  withQueue(args, async queue => {
    const opts = { force: args.force ?? false };
    if (args.count !== undefined) opts.count = args.count;
    await queue.obliterate(opts);
    return null;
  });
commands.remove = args =>
  withQueue(args, queue =>
    queue.remove(String(args.id), { removeChildren: args.removeChildren ?? true }),
  );
commands.retryJobs = args =>
  withQueue(args, async queue => {
    const opts = { state: args.state ?? 'failed' };
    if (args.count !== undefined) opts.count = args.count;
    if (args.timestamp !== undefined) opts.timestamp = args.timestamp;
    await queue.retryJobs(opts);
    return null;
  });
commands.promoteJobs = args =>
  withQueue(args, async queue => {
    await queue.promoteJobs(args.count !== undefined ? { count: args.count } : {});
    return null;
  });
commands.getWorkers = args =>
  withQueue(args, async queue => {
    const workers = await queue.getWorkers();
    return workers.map(w => ({ ...w, name: w.name ?? null, rawname: w.rawname ?? null }));
  });
commands.getLogs = args =>
  withQueue(args, queue =>
    queue.getJobLogs(String(args.id), args.start ?? 0, args.end ?? -1, args.asc ?? true),
  );
commands.rateLimit = args =>
  withQueue(args, async queue => { await queue.rateLimit(args.ms); return null; });
commands.setGlobalConcurrency = args =>
  withQueue(args, queue => queue.setGlobalConcurrency(args.n));
commands.getMeta = args => withQueue(args, queue => queue.getMeta());

// Escape hatches: call any Queue / Job method by name with positional args.
commands.queueMethod = args =>
  withQueue(args, async queue => {
    const fn = queue[args.method];
    if (typeof fn !== 'function') throw new Error(`Queue has no method ${args.method}`);
    return serialize(await fn.apply(queue, args.args ?? []));
  });

commands.jobMethod = args =>
  withQueue(args, async queue => {
    const job = await queue.getJob(String(args.id));
    if (!job) {
      const err = new Error(`job ${args.id} not found`);
      err.name = 'NotFound';
      throw err;
    }
    const fn = job[args.method];
    if (typeof fn !== 'function') throw new Error(`Job has no method ${args.method}`);
    return serialize(await fn.apply(job, args.args ?? []));
  });

commands.addFlow = async args => {
  const producer = new FlowProducer({
    connection: connectionFromUrl(args.url),
    prefix: args.prefix ?? 'bull',
  });
  producer.on('error', () => {});
  try {
    const summarize = node => ({
      id: node.job.id,
      name: node.job.name,
      queueName: node.job.queueName,
      children: (node.children ?? []).map(summarize),
    });
    if (Array.isArray(args.flows)) {
      const nodes = await producer.addBulk(args.flows);
      return nodes.map(summarize);
    }
    return summarize(await producer.add(args.flow, args.opts));
  } finally {
    await withDeadline(producer.close(), 3000);
  }
};

// FlowProducer.getFlow: the tree read back, each node with the job's decoded fields.
// args: id, queueName (defaults to args.queue), depth, maxChildren, prefix.
commands.getFlow = async args => {
  const producer = new FlowProducer({
    connection: connectionFromUrl(args.url),
    prefix: args.prefix ?? 'bull',
  });
  producer.on('error', () => {});
  try {
    const opts = { id: String(args.id), queueName: args.queueName ?? args.queue };
    if (args.nodePrefix !== undefined) opts.prefix = args.nodePrefix;
    if (args.depth !== undefined) opts.depth = args.depth;
    if (args.maxChildren !== undefined) opts.maxChildren = args.maxChildren;
    const tree = await producer.getFlow(opts);
    const convert = node =>
      node && node.job
        ? {
            job: { ...jobFields(node.job), queueName: node.job.queueName },
            children: (node.children ?? []).map(convert),
          }
        : null;
    return convert(tree);
  } finally {
    await withDeadline(producer.close(), 3000);
  }
};

commands.xrange = async args => {
  const client = await rawClient(args);
  try {
    const cmd = [eventsKey(args), args.start ?? '-', args.end ?? '+'];
    if (args.count !== undefined) cmd.push('COUNT', args.count);
    const entries = await client.xrange(...cmd);
    return entries.map(([id, flat]) => [id, fieldsToObject(flat)]);
  } finally {
    client.disconnect();
  }
};

// QueueEventsProducer.publishEvent({eventName, ...args.fields}, args.maxEvents).
commands.publishEvent = async args => {
  const producer = new QueueEventsProducer(args.queue, {
    connection: connectionFromUrl(args.url),
    prefix: args.prefix ?? 'bull',
  });
  producer.on('error', () => {});
  try {
    const payload = { eventName: args.eventName, ...(args.fields ?? {}) };
    await producer.publishEvent(payload, ...(args.maxEvents === undefined ? [] : [args.maxEvents]));
    return null;
  } finally {
    await withDeadline(producer.close(), 3000);
  }
};

commands.waitUntilFinished = async args => {
  const queueEvents = new QueueEvents(args.queue, {
    connection: connectionFromUrl(args.url),
    prefix: args.prefix ?? 'bull',
  });
  queueEvents.on('error', () => {});
  try {
    await queueEvents.waitUntilReady();
    return await withQueue(args, async queue => {
      const job = await queue.getJob(String(args.id));
      if (!job) {
        const err = new Error(`job ${args.id} not found`);
        err.name = 'NotFound';
        throw err;
      }
      try {
        const value = await job.waitUntilFinished(queueEvents, args.timeoutMs ?? 10000);
        return { returnvalue: value };
      } catch (err) {
        if (/timed out before finishing/.test(err.message)) throw err;
        return { failed: err.message };
      }
    });
  } finally {
    await withDeadline(queueEvents.close(), 3000);
  }
};

// --- work -----------------------------------------------------------------
// Flow behaviours (per job name, as the others): childrenValues / ignoredFailures record
// job.getChildrenValues() / getIgnoredChildrenFailures() in the invocation;
// returnChildrenValues returns the former; step {queue, prefix, name, count, ids, data, opts}
// runs the step-job pattern (add children under the job, moveToWaitingChildren, throw
// WaitingChildrenError; on the next run return the children's values). args.ledger: see below.


commands.work = async args => {
  const behaviour = args.behaviour ?? {};
  const invocations = [];
  const events = [];
  const t0 = Date.now();
  let finals = 0;
  let stopResolve;
  const stopped = new Promise(resolve => { stopResolve = resolve; });
  const stop = reason => stopResolve(reason);

  const behaviourFor = job => behaviour[job.name] ?? behaviour['*'] ?? {};
  // args.ledger: a list key; every processor start RPUSHes "node:<queue>:<job id>" to it.
  const ledger = args.ledger ? await rawClient(args) : null;
  const stepQueues = {};
  const stepQueue = (name, prefix) => {
    const k = `${prefix}:${name}`;
    if (!stepQueues[k]) {
      stepQueues[k] = makeQueue({ url: args.url, queue: name, prefix });
      stepQueues[k].on('error', () => {});
    }
    return stepQueues[k];
  };

  const processor = async (job, token) => {
    const b = behaviourFor(job);
    invocations.push(nullify({
      id: job.id,
      name: job.name,
      data: job.data,
      opts: job.opts,
      attemptsMade: job.attemptsMade,
      attemptsStarted: job.attemptsStarted,
      stalledCounter: job.stalledCounter,
      processedOn: job.processedOn,
      timestamp: job.timestamp,
      priority: job.priority,
      delay: job.delay,
      startedAt: Date.now(),
    }));
    if (ledger) await ledger.rpush(args.ledger, `node:${args.queue}:${job.id}`);
    writeLine({ event: 'started', jobId: job.id, name: job.name, attemptsMade: job.attemptsMade });
    const invocation = invocations[invocations.length - 1];
    if (b.childrenValues) invocation.childrenValues = await job.getChildrenValues();
    if (b.ignoredFailures) invocation.ignoredFailures = await job.getIgnoredChildrenFailures();
    if (b.step) {
      // The step-job pattern: on the first run add children under this job, then park it in
      // waiting-children; on the run after they finished, return their values.
      const values = await job.getChildrenValues();
      if (Object.keys(values).length === 0) {
        const s = b.step;
        const q = stepQueue(s.queue ?? args.queue, s.prefix ?? args.prefix ?? 'bull');
        for (let i = 0; i < (s.count ?? 1); i++) {
          const childOpts = { ...(s.opts ?? {}), parent: { id: job.id, queue: job.queueQualifiedName } };
          if (s.ids) childOpts.jobId = s.ids[i];
          await q.add(s.name ?? 'step-child', { i, ...(s.data ?? {}) }, childOpts);
        }
        const moved = await job.moveToWaitingChildren(token);
        invocation.moved = moved;
        if (moved) throw new WaitingChildrenError();
        return await job.getChildrenValues();
      }
      return values;
    }

    if (b.log !== undefined) await job.log(String(b.log));
    for (const line of b.logs ?? []) await job.log(String(line));
    if (b.progress !== undefined) await job.updateProgress(b.progress);
    for (const p of b.progressSteps ?? []) await job.updateProgress(p);
    if (b.updateData !== undefined) await job.updateData(b.updateData);
    if (b.sleepMs) await sleep(b.sleepMs);
    if (b.exitProcessMidJob) {
      // Simulated crash: leave the job active with its lock held, no cleanup.
      process.stdout.write('', () => process.exit(137));
      await new Promise(() => {});
    }
    if (b.hangForever) await new Promise(() => {});
    if (b.rateLimitMs !== undefined && job.attemptsStarted <= (b.rateLimitTimes ?? 1)) {
      await worker.rateLimit(b.rateLimitMs);
      throw Worker.RateLimitError();
    }
    if (b.unrecoverable !== undefined) throw new UnrecoverableError(String(b.unrecoverable));
    if (b.fail !== undefined) {
      const times = b.failTimes ?? Infinity;
      if (job.attemptsMade < times) throw new Error(String(b.fail));
    }
    if (b.returnChildrenValues) return await job.getChildrenValues();
    if (b.echo) return job.data;
    return b.return;
  };

  const opts = {
    connection: connectionFromUrl(args.url),
    prefix: args.prefix ?? 'bull',
    concurrency: args.concurrency ?? 1,
  };
  for (const k of [
    'lockDuration', 'stalledInterval', 'maxStalledCount', 'drainDelay', 'name', 'limiter',
    'removeOnComplete', 'removeOnFail', 'lockRenewTime', 'maxStartedAttempts', 'skipStalledCheck',
    'skipLockRenewal', 'metrics', 'settings', 'runRetryDelay', 'maximumRateLimitDelay',
  ]) {
    if (args[k] !== undefined) opts[k] = args[k];
  }
  if (args.workerOpts) Object.assign(opts, args.workerOpts);
  opts.autorun = false;

  const worker = new Worker(args.queue, processor, opts);
  const record = (event, extra) => {
    const entry = nullify({ event, t: Date.now() - t0, ...extra });
    events.push(entry);
    return entry;
  };

  worker.on('completed', (job, returnvalue) => {
    record('completed', { jobId: job.id, name: job.name, returnvalue });
    emitProgress({ event: 'completed', jobId: job.id });
    finals += 1;
    if (args.count !== undefined && finals >= args.count) stop('count');
  });
  worker.on('failed', (job, err) => {
    const final = Boolean(job && job.finishedOn);
    record('failed', {
      jobId: job ? job.id : null,
      name: job ? job.name : null,
      failedReason: err ? err.message : null,
      errorName: err ? err.name : null,
      attemptsMade: job ? job.attemptsMade : null,
      final,
    });
    emitProgress({ event: 'failed', jobId: job ? job.id : null, final });
    if (final) {
      finals += 1;
      if (args.count !== undefined && finals >= args.count) stop('count');
    }
  });
  worker.on('stalled', jobId => {
    record('stalled', { jobId });
    emitProgress({ event: 'stalled', jobId });
  });
  worker.on('error', err => {
    record('error', { message: err ? err.message : String(err), name: err ? err.name : null });
  });
  worker.on('drained', () => {
    if (args.untilDrained) stop('drained');
  });

  process.on('SIGTERM', () => stop('signal'));
  process.on('SIGINT', () => stop('signal'));
  const timer = setTimeout(() => stop('timeout'), args.timeoutMs ?? 30000);

  const running = worker.run().catch(err => {
    record('error', { message: err.message, name: err.name });
    stop('error');
  });
  await worker.waitUntilReady();
  emitProgress({ event: 'ready' });
  if (args.count === 0) stop('count');

  const reason = await stopped;
  clearTimeout(timer);
  let closed;
  if (reason === 'timeout' || reason === 'signal') {
    closed = (await withDeadline(worker.close(true), 5000)) === 'done';
  } else {
    closed = (await withDeadline(worker.close(), args.closeTimeoutMs ?? 5000)) === 'done';
    if (!closed) closed = (await withDeadline(worker.close(true), 3000)) === 'done';
  }
  await withDeadline(running, 1000);
  if (ledger) ledger.disconnect();
  for (const q of Object.values(stepQueues)) await withDeadline(q.close(), 3000);
  return {
    reason,
    timedOut: reason === 'timeout',
    closed,
    finals,
    invocations,
    events,
  };
};

// --- events ----------------------------------------------------------------

function matchesUntil(args, name, eventArgs) {
  if (!args.untilEvent || name !== args.untilEvent) return false;
  if (args.untilJobId === undefined || args.untilJobId === null) return true;
  return eventArgs && String(eventArgs.jobId) === String(args.untilJobId);
}

async function resolveLastId(args) {
  const lastId = args.lastId ?? '0';
  if (lastId !== '$') return lastId;
  // "$" is resolved to the stream's current last id now, so that the "ready"
  // line means: everything added after this point will be seen.
  const client = await rawClient(args);
  try {
    const last = await client.xrevrange(eventsKey(args), '+', '-', 'COUNT', 1);
    return last.length ? last[0][0] : '0';
  } finally {
    client.disconnect();
  }
}

commands.events = async args => {
  const lastId = await resolveLastId(args);
  const untilCount = args.untilCount ?? 1;
  let matched = 0;
  let stopResolve;
  const stopped = new Promise(resolve => { stopResolve = resolve; });
  process.on('SIGTERM', () => stopResolve('signal'));
  process.on('SIGINT', () => stopResolve('signal'));
  const timer = setTimeout(() => stopResolve('timeout'), args.timeoutMs ?? 10000);

  if (args.raw) {
    const client = await rawClient(args);
    const entries = [];
    let cursor = lastId;
    let reason = null;
    stopped.then(r => { reason = reason ?? r; });
    emitProgress({ event: 'ready', lastId });
    try {
      while (reason === null) {
        const reply = await client.xread('BLOCK', 200, 'STREAMS', eventsKey(args), cursor);
        if (!reply) continue;
        for (const [id, flat] of reply[0][1]) {
          cursor = id;
          const fields = fieldsToObject(flat);
          entries.push([id, fields]);
          emitProgress({ event: 'entry', id, fields });
          if (matchesUntil(args, fields.event, fields) && ++matched >= untilCount) {
            reason = reason ?? 'until';
            break;
          }
        }
      }
    } finally {
      clearTimeout(timer);
      client.disconnect();
    }
    return { reason, timedOut: reason === 'timeout', lastId: cursor, entries };
  }

  const queueEvents = new QueueEvents(args.queue, {
    connection: connectionFromUrl(args.url),
    prefix: args.prefix ?? 'bull',
    lastEventId: lastId,
    autorun: false,
  });
  const emitted = [];
  let lastSeen = lastId;
  // Record every event exactly once: QueueEvents emits both "<event>" and
  // "<event>:<jobId>"; only the former is kept.
  const originalEmit = queueEvents.emit.bind(queueEvents);
  queueEvents.emit = (name, ...rest) => {
    if (typeof name === 'string' && !name.startsWith('ioredis:') && name !== 'error') {
      const first = rest[0];
      const isPerJob =
        first && typeof first === 'object' && first.jobId !== undefined &&
        name.endsWith(`:${first.jobId}`) && name.length > String(first.jobId).length + 1;
      if (!isPerJob) {
        let eventArgs;
        let id;
        if (name === 'drained') {
          eventArgs = {};
          id = first;
        } else {
          eventArgs = first;
          id = rest[1];
        }
        if (typeof id === 'string') {
          lastSeen = id;
          emitted.push({ event: name, args: eventArgs, id });
          emitProgress({ event: 'emitted', name, args: eventArgs, id });
          if (matchesUntil(args, name, eventArgs) && ++matched >= untilCount) stopResolve('until');
        }
      }
    }
    return originalEmit(name, ...rest);
  };
  const errors = [];
  queueEvents.on('error', err => errors.push(err ? err.message : String(err)));
  const running = queueEvents.run().catch(err => errors.push(err.message));
  await queueEvents.waitUntilReady();
  emitProgress({ event: 'ready', lastId });
  const reason = await stopped;
  clearTimeout(timer);
  await withDeadline(queueEvents.close(), 3000);
  await withDeadline(running, 1000);
  return { reason, timedOut: reason === 'timeout', lastId: lastSeen, events: emitted, errors };
};

// Several commands in one process (saves ~0.5 s of Node start-up per call).
// args.calls: [{command, args}], each sub-args object inherits url/queue/prefix.
// Result: one envelope per call, in order; a failing call does not stop the rest
// unless stopOnError is true.
commands.batch = async args => {
  const out = [];
  for (const call of args.calls ?? []) {
    const fn = commands[call.command];
    if (!fn || call.command === 'batch') {
      out.push({ ok: false, error: `unknown command ${JSON.stringify(call.command)}`, name: 'UsageError', stack: null });
    } else {
      const subArgs = { url: args.url, queue: args.queue, prefix: args.prefix, ...(call.args ?? {}) };
      try {
        const result = await fn(subArgs);
        out.push({ ok: true, result: result === undefined ? null : result });
      } catch (err) {
        out.push(errorEnvelope(err));
      }
    }
    if (args.stopOnError && !out[out.length - 1].ok) break;
  }
  return out;
};

commands.version = async () => {
  const { createRequire } = await import('node:module');
  const require = createRequire(import.meta.url);
  return {
    bullmq: require('bullmq/package.json').version,
    ioredis: require('ioredis/package.json').version,
    node: process.version,
  };
};

// ------------------------------------------------------------------ main ---

async function main() {
  const command = process.argv[2];
  const fn = commands[command];
  if (!fn) {
    finish({
      ok: false,
      error: `unknown command ${JSON.stringify(command)}; known: ${Object.keys(commands).join(', ')}`,
      name: 'UsageError',
      stack: null,
    });
    return;
  }
  try {
    const args = await readArgs();
    const result = await fn(args);
    finish({ ok: true, result: result === undefined ? null : result });
  } catch (err) {
    finish(errorEnvelope(err));
  }
}

main();
