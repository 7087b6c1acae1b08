#!/usr/bin/env node
// A BullMQ worker running the fault suite's processor, for the Node baseline.
//
//   node node_worker.mjs '<json options>'
//
// Options: url, queue, name, concurrency, lockDuration (ms), stalledInterval (ms),
// maxStalledCount, drainDelay (s), runRetryDelay (ms), skipVersionCheck (BullMQ's option: no
// INFO at connect), ledger (path of the ledger file);
// url may carry a user and password (redis://user:pw@host:port/0), for an ACL user;
// instead of url, sentinels ([[host, port], ...]) with service (the monitored name), or
// cluster ([[host, port], ...], the startup nodes; the queue name then carries braces).
// The processor is the same as faultkit/proc.py: it appends "<job id> <pid> start <ms>" to the
// ledger (one write on an O_APPEND descriptor), sleeps data.ms, blocks the event loop
// data.block_ms (only on the first start with data.block_first), kills its own process for
// data.poison ("kill": SIGKILL, "exit": exit code 3), appends "finish" and returns the job id,
// or with data.fail_first throws on the first attempt (attemptsMade 0), after "finish".
// SIGTERM or SIGINT closes the worker gracefully (running jobs finish) and exits 0.
// Diagnostics go to stderr.

import fs from 'node:fs';
import { Worker } from 'bullmq';
import IORedis from 'ioredis';

const opts = JSON.parse(process.argv[2]);
const ledger = fs.openSync(opts.ledger, 'a');

function record(jobId, event) {
  fs.writeSync(ledger, `${jobId} ${process.pid} ${event} ${Date.now().toFixed(1)}\n`);
}

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms));

function blockFor(ms) {
  const until = Date.now() + ms;
  while (Date.now() < until) {
    // spin: nothing else runs on this event loop meanwhile
  }
}

async function processor(job) {
  const spec = job.data && typeof job.data === 'object' ? job.data : {};
  record(job.id, 'start');
  if (spec.poison === 'kill') process.kill(process.pid, 'SIGKILL');
  if (spec.poison === 'exit') process.exit(3);
  await sleep(Number(spec.ms ?? 0));
  const block = Number(spec.block_ms ?? 0);
  if (block && (!spec.block_first || job.attemptsStarted <= 1)) blockFor(block);
  record(job.id, 'finish');
  if (spec.fail_first && job.attemptsMade === 0) {
    throw new Error(`job ${job.id} fails its first attempt (fail_first)`);
  }
  return job.id;
}

function connection(o) {
  const nodes = list => list.map(([host, port]) => ({ host, port }));
  if (o.sentinels) {
    return { sentinels: nodes(o.sentinels), name: o.service, maxRetriesPerRequest: null };
  }
  if (o.cluster) {
    return new IORedis.Cluster(nodes(o.cluster), { redisOptions: { maxRetriesPerRequest: null } });
  }
  const u = new URL(o.url);
  const auth = {};
  if (u.username) auth.username = decodeURIComponent(u.username);
  if (u.password) auth.password = decodeURIComponent(u.password);
  return { host: u.hostname, port: Number(u.port), ...auth, maxRetriesPerRequest: null };
}

const worker = new Worker(opts.queue, processor, {
  connection: connection(opts),
  name: opts.name,
  concurrency: opts.concurrency ?? 1,
  lockDuration: opts.lockDuration,
  stalledInterval: opts.stalledInterval,
  maxStalledCount: opts.maxStalledCount ?? 1,
  drainDelay: opts.drainDelay ?? 1,
  runRetryDelay: opts.runRetryDelay ?? 500,
  skipVersionCheck: opts.skipVersionCheck ?? false,
  autorun: false,
});
worker.on('error', err => console.error(`worker error: ${err && err.message}`));
worker.on('failed', (job, err) => console.error(`job ${job && job.id} failed: ${err && err.message}`));
worker.on('stalled', jobId => console.error(`job ${jobId} stalled`));

let closing = false;
async function stop(signal) {
  if (closing) process.exit(128 + 15);
  closing = true;
  console.error(`received ${signal}: closing`);
  await worker.close();
  process.exit(0);
}
process.on('SIGTERM', () => stop('SIGTERM'));
process.on('SIGINT', () => stop('SIGINT'));

worker.run().catch(err => {
  console.error(`worker.run failed: ${err && err.stack}`);
  process.exit(1);
});
