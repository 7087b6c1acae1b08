// Benchmark adapter for BullMQ for Node (the reference peer), pinned in package.json.
//
// Same roles and line protocol as the Python adapters (bench/peers/_common.py):
//   node bench/node/bullmq_peer.mjs <enqueue|worker|latency|version> --url ... --n ...
// Protocol lines start with "@@bench " and carry one JSON object. Timestamps come from
// process.hrtime.bigint(), i.e. CLOCK_MONOTONIC, the clock Python's time.monotonic_ns()
// reads, so the harness can mix producer and worker times.
// Flows: `enqueue --mode flow --n TREES --children C --batch B` (FlowProducer.addBulk, B trees
// per call) and `worker --flow`, with the same job names, data and return value as
// bench/peers/echomq_peer.py (see bench/peers/_common.py).
// Failing jobs (bench/failing_jobs.py, the failing phase): `enqueue --mode bulk|seq --attempts A` (no
// backoff) and `worker --fail-once`, whose processor throws on a job's first attempt, as the Python
// adapter's raises.
// Delayed jobs (the lateness phase): `enqueue --mode delayed --span S` (addBulk with a delay option,
// delayMs(i) as _common.py's delay_ms; reports due_ms) and `worker --delayed` (processor starts on the
// wall clock, performance.timeOrigin + performance.now(), all reported), as _common.py says.
// Many producers (bench/producers.py): `enqueue --mode concurrent --producers P [--auto-pipelining 1]`,
// --n adds shared by P concurrent async producers on one Queue, whose ioredis client has
// enableAutoPipelining when asked; the result carries cpu_s, the process CPU of the timed part.
// Idle: `idle --concurrency C --previous-ms P --samples N [--delay-ms D] [--idle-gap S]`, one
// cell of bench/idle_latency.py, the same steps as _common.py's run_idle_async.
import { readFileSync } from 'node:fs';
import { FlowProducer, Queue, QueueEvents, Worker } from 'bullmq';
import IORedis from 'ioredis';

const JOB_NAME = 'noop';
const PARENT_NAME = 'parent';
const CHILD_NAME = 'child';
const GRACE_MS = 300;
const IDLE_SETTLE_MS = 200; // as _common.py's IDLE_SETTLE_S
const IDLE_WAIT_MS = 20000; // as _common.py's IDLE_WAIT_S

function parseArgs(argv) {
  const opts = {
    role: argv[0], url: 'redis://127.0.0.1:6379/0', queue: 'bench', n: 1000, mode: 'seq',
    batch: 1000, concurrency: 1, timeout: 300, budget: 60, gap: 0.005, latency: false,
    children: 10, flow: false, attempts: 1, 'fail-once': false, every: 1.0, duration: 30, warmup: 2,
    span: 10, delayed: false,
    samples: 5, 'previous-ms': 0, 'delay-ms': 0, 'idle-gap': 0.5,
  };
  for (let k = 1; k < argv.length; k++) {
    const key = argv[k].replace(/^--/, '');
    if (['latency', 'uvloop', 'flow', 'fail-once', 'delayed'].includes(key)) { opts[key] = true; continue; }
    const value = argv[++k];
    opts[key] = typeof opts[key] === 'number' ? Number(value) : value;
  }
  return opts;
}

function emit(obj) { process.stdout.write('@@bench ' + JSON.stringify(obj) + '\n'); }
const nowNs = () => Number(process.hrtime.bigint());
// The wall clock in ms with sub-ms resolution (Date.now() has whole ms), as Python's time.time().
const wallMs = () => performance.timeOrigin + performance.now();
// Job i's delay in whole ms, as bench/peers/_common.py's delay_ms.
const delayMs = (i, n, spanMs) => Math.floor(((i * 0.6180339887498949) % 1) * spanMs);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// In native ESM BullMQ 6 wants a constructed client; each Queue/Worker/QueueEvents gets
// its own (BullMQ duplicates it where it needs a blocking connection).
function connection(url) {
  const u = new URL(url);
  const db = Number((u.pathname || '/0').slice(1) || 0);
  // maxRetriesPerRequest: null is what BullMQ requires for worker connections.
  return new IORedis({ host: u.hostname, port: Number(u.port || 6379), db, maxRetriesPerRequest: null });
}

// The i of a flow job: tree*(children+1) for the parent, +1+child for a child.
const flowIndex = (tree, child, children) => tree * (children + 1) + (child === null ? 0 : 1 + child);

function flowTree(o, tree) {
  const children = [];
  for (let k = 0; k < o.children; k++) {
    children.push({ name: CHILD_NAME, queueName: o.queue, data: { i: flowIndex(tree, k, o.children) } });
  }
  return { name: PARENT_NAME, queueName: o.queue, data: { i: flowIndex(tree, null, o.children) }, children };
}

async function enqueueFlows(o) {
  const conn = connection(o.url);
  const flows = new FlowProducer({ connection: conn });
  await flows.waitUntilReady();
  await flows.addBulk([flowTree(o, -1)]); // loads the scripts outside the timing
  await conn.flushdb(); // drop the warm-up tree (this Redis is private to the benchmark)
  const cpu0 = process.cpuUsage();
  const t0 = nowNs();
  for (let s = 0; s < o.n; s += o.batch) {
    const trees = [];
    for (let t = s; t < Math.min(o.n, s + o.batch); t++) trees.push(flowTree(o, t));
    await flows.addBulk(trees);
  }
  const t1 = nowNs();
  const cpu = process.cpuUsage(cpu0);
  await flows.close();
  emit({ result: { n: o.n, seconds: (t1 - t0) / 1e9, cpu_s: (cpu.user + cpu.system) / 1e6 } });
}

// --n adds split over --producers concurrent producers on one Queue (bench/producers.py).
async function enqueueConcurrent(o) {
  const u = new URL(o.url);
  const conn = new IORedis({
    host: u.hostname, port: Number(u.port || 6379), db: Number((u.pathname || '/0').slice(1) || 0),
    maxRetriesPerRequest: null, enableAutoPipelining: String(o['auto-pipelining'] || '0') === '1',
  });
  const queue = new Queue(o.queue, { connection: conn });
  await queue.waitUntilReady();
  await queue.add(JOB_NAME, { i: -1 }); // loads the scripts outside the timing
  await conn.flushdb(); // drop the warm-up job (this Redis is private to the benchmark)
  let next = 0;
  const producer = async () => {
    while (next < o.n) await queue.add(JOB_NAME, { i: next++ });
  };
  const cpu0 = process.cpuUsage();
  const t0 = nowNs();
  await Promise.all(Array.from({ length: Number(o.producers || 1) }, producer));
  const t1 = nowNs();
  const cpu = process.cpuUsage(cpu0);
  await queue.close();
  await conn.quit();
  emit({ result: { n: o.n, seconds: (t1 - t0) / 1e9, cpu_s: (cpu.user + cpu.system) / 1e6 } });
}

// --n delayed jobs in addBulk calls of --batch, each stamped just before its call (_common.DelayedAdds).
async function enqueueDelayed(o, queue) {
  const due = new Array(o.n);
  const t0 = nowNs();
  for (let s = 0; s < o.n; s += o.batch) {
    const jobs = [];
    const t = Math.floor(wallMs()); // whole ms, as the timestamp BullMQ gives the job
    for (let i = s; i < Math.min(o.n, s + o.batch); i++) {
      const delay = delayMs(i, o.n, o.span * 1000);
      due[i] = t + delay;
      jobs.push({ name: JOB_NAME, data: { i }, opts: { delay } });
    }
    await queue.addBulk(jobs);
  }
  const t1 = nowNs();
  await queue.close();
  emit({ result: { n: o.n, seconds: (t1 - t0) / 1e9, due_ms: due } });
}

async function enqueue(o) {
  if (o.mode === 'flow') return enqueueFlows(o);
  if (o.mode === 'concurrent') return enqueueConcurrent(o);
  const queue = new Queue(o.queue, { connection: connection(o.url) });
  await queue.waitUntilReady();
  await queue.getJobCounts(); // loads the scripts outside the timing
  if (o.mode === 'delayed') return enqueueDelayed(o, queue);
  const t0 = nowNs();
  if (o.mode === 'seq') {
    const opts = o.attempts > 1 ? { attempts: o.attempts } : undefined;
    for (let i = 0; i < o.n; i++) await queue.add(JOB_NAME, { i }, opts);
  } else {
    for (let s = 0; s < o.n; s += o.batch) {
      const jobs = [];
      for (let i = s; i < Math.min(o.n, s + o.batch); i++) {
        jobs.push(o.attempts > 1 ? { name: JOB_NAME, data: { i }, opts: { attempts: o.attempts } } : { name: JOB_NAME, data: { i } });
      }
      await queue.addBulk(jobs);
    }
  }
  const t1 = nowNs();
  await queue.close();
  emit({ result: { n: o.n, seconds: (t1 - t0) / 1e9 } });
}

async function worker(o) {
  const starts = new Map();
  const ends = new Map();
  let executions = 0;
  const duplicates = [];
  let first = null;
  let last = null;
  const failed = new Map(); // i -> failed attempts (--fail-once)
  let finish;
  const done = new Promise((resolve) => { finish = resolve; });
  process.stdin.on('end', () => finish()).resume();

  const clock = o.delayed ? () => Math.round(wallMs() * 1e6) : nowNs; // ns
  const w = new Worker(o.queue, async (job) => {
    const t = clock();
    const i = job.data.i;
    if (o['fail-once'] && job.attemptsMade === 0) {
      failed.set(i, (failed.get(i) || 0) + 1);
      if (first === null || t < first) first = t;
      throw new Error('failing the first attempt on purpose');
    }
    executions++;
    if (starts.has(i)) duplicates.push(i); else starts.set(i, t);
    if (first === null || t < first) first = t;
    if (last === null || t > last) last = t;
    if (!o.latency && starts.size >= o.n) finish();
    if (!o.flow) return null;
    if (!ends.has(i)) ends.set(i, nowNs());
    return 1;
  }, { connection: connection(o.url), concurrency: o.concurrency, autorun: false });
  await w.waitUntilReady();

  const cpu0 = process.cpuUsage();
  const ready = nowNs();
  emit({ ready: true });
  const running = w.run();
  const timer = setTimeout(() => { process.stderr.write('worker timed out\n'); finish(); }, o.timeout * 1000);
  await done;
  clearTimeout(timer);
  const stop = nowNs();
  const cpu = process.cpuUsage(cpu0);
  await sleep(GRACE_MS);
  await w.close();
  await running;

  const missing = [];
  for (let i = 0; i < o.n; i++) if (!starts.has(i)) missing.push(i);
  const result = {
    expected: o.n, executions, distinct: starts.size,
    duplicates: [...new Set(duplicates)].sort((a, b) => a - b).slice(0, 20),
    duplicate_count: duplicates.length,
    missing: missing.slice(0, 20), missing_count: missing.length,
    unexpected: [...starts.keys()].filter((i) => !(i >= 0 && i < o.n)).slice(0, 20),
    ready_ns: ready, first_ns: first, last_ns: last, stop_ns: stop,
    cpu_s: (cpu.user + cpu.system) / 1e6,
  };
  if (failed.size) {
    result.failed_attempts = [...failed.values()].reduce((a, b) => a + b, 0);
    result.failed_distinct = failed.size;
  }
  const byI = (m) => Object.fromEntries([...m].map(([k, v]) => [String(k), v]));
  if (o.latency || o.flow || o.delayed) result.starts = byI(starts);
  if (o.flow) result.ends = byI(ends);
  emit({ result });
}

async function latency(o) {
  const queue = new Queue(o.queue, { connection: connection(o.url) });
  const events = new QueueEvents(o.queue, { connection: connection(o.url) });
  await queue.waitUntilReady();
  await events.waitUntilReady();
  await queue.getJobCounts();
  const samples = [];
  const deadline = Date.now() + o.budget * 1000;
  for (let i = 0; i < o.n && Date.now() < deadline; i++) {
    const t0 = nowNs();
    const job = await queue.add(JOB_NAME, { i });
    let seen = true;
    try { await job.waitUntilFinished(events, 5000); } catch { seen = false; }
    samples.push([i, t0, seen ? nowNs() : null]);
    await sleep(o.gap * 1000);
  }
  await events.close();
  await queue.close();
  emit({ result: { samples } });
}

// The schedulers role (bench/benchlib/schedulers.py), as bench/peers/_common.py's
// SchedulerRecorder and drive_scheduler_run: --n every-schedulers of --every s, one worker,
// --warmup s unmeasured, then a --duration s window announced to the harness.
async function schedulers(o) {
  const queue = new Queue(o.queue, { connection: connection(o.url) });
  await queue.waitUntilReady();
  const t0 = nowNs();
  for (let k = 0; k < o.n; k++) {
    await queue.upsertJobScheduler(`s${k}`, { every: Math.round(o.every * 1000) }, { name: 'tick', data: { k } });
  }
  const upsertS = (nowNs() - t0) / 1e9;
  const runs = []; // [job id, scheduled ms, start ms]
  const w = new Worker(o.queue, async (job) => {
    const start = Date.now();
    const m = /^(repeat:.*):(\d+)$/.exec(job.id);
    runs.push([job.id, m ? Number(m[2]) : job.timestamp + (job.delay || 0), start]);
    return null;
  }, { connection: connection(o.url), concurrency: o.concurrency, autorun: false });
  await w.waitUntilReady();
  emit({ ready: true });
  const running = w.run();
  await sleep(o.warmup * 1000);
  const w0 = Date.now();
  const cpu0 = process.cpuUsage();
  emit({ window: 'start' });
  await sleep(o.duration * 1000);
  const w1 = Date.now();
  const cpu = process.cpuUsage(cpu0);
  emit({ window: 'end' });
  await w.close();
  await running;
  await queue.close();
  const seen = new Map();
  const slots = new Map();
  for (const [id, scheduled] of runs) {
    seen.set(id, (seen.get(id) || 0) + 1);
    if (seen.get(id) === 1) {
      const key = id.slice(0, id.lastIndexOf(':'));
      if (!slots.has(key)) slots.set(key, []);
      slots.get(key).push(scheduled);
    }
  }
  let doubled = 0;
  for (const times of slots.values()) {
    times.sort((a, b) => a - b);
    for (let k = 1; k < times.length; k++) if (times[k] - times[k - 1] < o.every * 1000) doubled++;
  }
  let dup = 0;
  for (const n of seen.values()) dup += n - 1;
  const late = runs.filter(([, , s]) => s >= w0 && s < w1).map(([, sch, s]) => Math.round((s - sch) * 10) / 10);
  emit({ result: {
    executions: runs.length, distinct: seen.size, duplicate_count: dup, doubled_slots: doubled,
    schedulers_seen: slots.size, window_s: (w1 - w0) / 1000, window_starts: late.length,
    lateness_ms: late, cpu_s: (cpu.user + cpu.system) / 1e6, upsert_s: upsertS,
  } });
}

// The idle role's processor starts and ends by i, with waits on them (as _common.py's IdleProbe).
function idleProbe() {
  const times = { start: new Map(), end: new Map() };
  const waiters = { start: new Map(), end: new Map() };
  const mark = (kind, i, t) => {
    if (!times[kind].has(i)) times[kind].set(i, t);
    const wake = waiters[kind].get(i);
    if (wake) { waiters[kind].delete(i); wake(); }
  };
  const probe = {
    times, executions: 0,
    async process(i, ms) {
      const t = nowNs();
      probe.executions++;
      mark('start', i, t);
      await sleep(ms);
      mark('end', i, nowNs());
    },
    wait(kind, i, ms) {
      if (times[kind].has(i)) return Promise.resolve(times[kind].get(i));
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => {
          waiters[kind].delete(i);
          reject(new Error(`job i=${i} did not ${kind} within ${ms / 1000} s`));
        }, ms);
        waiters[kind].set(i, () => { clearTimeout(timer); resolve(times[kind].get(i)); });
      });
    },
  };
  return probe;
}

// One cell of bench/idle_latency.py: a Worker with default options but concurrency (so the
// default 5 s drainDelay) and its producer in this process; the steps of run_idle_async.
async function idle(o) {
  const probe = idleProbe();
  const queue = new Queue(o.queue, { connection: connection(o.url) });
  await queue.waitUntilReady();
  const w = new Worker(o.queue, async (job) => {
    await probe.process(job.data.i, job.data.ms);
    return null;
  }, { connection: connection(o.url), concurrency: o.concurrency });
  const one = async (i, ms, delayMs) => {
    const t0 = nowNs();
    await queue.add(JOB_NAME, { i, ms }, delayMs ? { delay: delayMs } : undefined);
    const start = await probe.wait('start', i, IDLE_WAIT_MS + delayMs);
    await probe.wait('end', i, IDLE_WAIT_MS + ms);
    return Math.round((start - t0) / 1e3 - delayMs * 1e3) / 1e3; // ms, 3 decimals
  };
  const lags = [];
  const previous = [];
  let error = null;
  try {
    await one(-1, 0, 0); // warm-up: scripts loaded, connections open, worker polling
    await sleep(IDLE_SETTLE_MS);
    for (let s = 0; s < o.samples; s++) {
      previous.push(await one(2 * s, o['previous-ms'], 0));
      await sleep(o['idle-gap'] * 1000);
      lags.push(await one(2 * s + 1, 0, o['delay-ms']));
      await sleep(IDLE_SETTLE_MS);
    }
  } catch (err) {
    error = err.message;
  }
  await w.close();
  await queue.close();
  emit({ result: {
    lags_ms: lags, previous_lags_ms: previous, executions: probe.executions,
    distinct: probe.times.start.size, error,
  } });
}

function version() {
  const pkg = JSON.parse(readFileSync(new URL('./node_modules/bullmq/package.json', import.meta.url)));
  emit({ result: { version: pkg.version } });
}

const o = parseArgs(process.argv.slice(2));
const roles = { enqueue, worker, latency, version, schedulers, idle };
if (!roles[o.role]) {
  process.stderr.write(`unknown role ${o.role}\n`);
  process.exit(2);
}
await roles[o.role](o);
// stdout to a pipe is asynchronous in Node: exiting at once would cut a long result line.
await new Promise((resolve) => process.stdout.write('', resolve));
process.exit(0);
