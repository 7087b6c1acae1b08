// The cpu phase's adapter for BullMQ for Node: sandboxed processors in worker threads.
//
//   node bench/node/bullmq_cpu.mjs --url URL --n 2000 --ms 20 --workers 2
//
// Adds n jobs (addBulk, untimed), then runs one Worker whose processor is the file
// cpu_processor.mjs with useWorkerThreads and concurrency `workers` (BullMQ's sandboxed
// processors: each job runs in a worker thread of a pool of `workers`), waits until every job
// has logged its run, and prints one "@@bench" result line (see bench/peers/cpu_peer.py).
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Queue, Worker } from 'bullmq';
import IORedis from 'ioredis';

const opts = { url: 'redis://127.0.0.1:6379/0', n: 2000, ms: 20, workers: 2, timeout: 600 };
const argv = process.argv.slice(2);
for (let k = 0; k < argv.length; k += 2) {
  const key = argv[k].replace(/^--/, '');
  opts[key] = typeof opts[key] === 'number' ? Number(argv[k + 1]) : argv[k + 1];
}
const dir = mkdtempSync(join(tmpdir(), 'cpu-bullmq-'));
const log = join(dir, 'runs.log');
process.env.ECHOMQ_BENCH_CPU_LOG = log;
// A pipe takes writes asynchronously: exit only once the (long) result line is flushed.
const emit = obj =>
  new Promise(resolve => process.stdout.write('@@bench ' + JSON.stringify(obj) + '\n', resolve));
const lines = () => {
  try { return readFileSync(log, 'utf8').split('\n').filter(Boolean); } catch { return []; }
};

const connection = new IORedis(opts.url, { maxRetriesPerRequest: null });
const queue = new Queue('cpu', { connection });
for (let s = 0; s < opts.n; s += 1000) {
  const jobs = [];
  for (let i = s; i < Math.min(opts.n, s + 1000); i++) {
    jobs.push({ name: 'burn', data: { i, ms: opts.ms } });
  }
  await queue.addBulk(jobs);
}
const ready = process.hrtime.bigint();
const processor = join(dirname(fileURLToPath(import.meta.url)), 'cpu_processor.mjs');
const worker = new Worker('cpu', processor, {
  connection: new IORedis(opts.url, { maxRetriesPerRequest: null }),
  concurrency: opts.workers,
  useWorkerThreads: true,
});
const deadline = Date.now() + opts.timeout * 1000;
while (lines().length < opts.n && Date.now() < deadline) {
  await new Promise(r => setTimeout(r, 50));
}
await worker.close();
await queue.close();
await connection.quit();
const runs = lines().map(row => row.split(' ').map(Number));
rmSync(dir, { recursive: true, force: true });
await emit({ result: { ready_ns: Number(ready), runs } });
process.exit(0);
