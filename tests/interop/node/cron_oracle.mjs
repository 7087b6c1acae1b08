#!/usr/bin/env node
// Cron oracle for tests/test_cron.py: answers a batch of next-run-time questions with BullMQ
// 6.7.6's own default repeat strategy (cron-parser 5.10.4 underneath), in one process.
//
//   node cron_oracle.mjs < batch.json > answers.json
//
// Input:  {"cases": [[pattern, afterMs, tz|null, startMs|null, endMs|null, n], ...]}
// Output: {"answers": [{"next": [ms|null, ...]} | {"error": "message"}, ...]} in case order.
//
// Each case asks for n successive iterations the way a scheduler runs: the first from
// afterMs, each later one from the previous result (a worker taking the iteration on time,
// so BullMQ's "now" = prevMillis). As in upsertJobScheduler, a time before "now" is raised to
// "now". A null ends the chain (no next time). An exception (bad pattern or zone) is an
// "error". tz null means the zone of this process (set TZ in its environment).

import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);
// Deep path on purpose: the strategy is not exported from bullmq's entry point.
const { defaultRepeatStrategy } = require(
  path.join(here, '..', '..', 'node_modules', 'bullmq', 'dist', 'cjs', 'classes', 'job-scheduler.js'),
);

function answer([pattern, after, tz, start, end, n]) {
  const opts = { pattern };
  if (tz !== null) opts.tz = tz;
  if (start !== null) opts.startDate = start;
  if (end !== null) opts.endDate = end;
  const next = [];
  let now = after;
  try {
    for (let i = 0; i < n; i++) {
      let millis = defaultRepeatStrategy(now, opts);
      if (millis === undefined) {
        next.push(null);
        break;
      }
      if (millis < now) millis = now;
      next.push(millis);
      now = millis;
    }
  } catch (err) {
    return { error: String(err && err.message ? err.message : err) };
  }
  return { next };
}

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const batch = JSON.parse(Buffer.concat(chunks).toString('utf8'));
process.stdout.write(JSON.stringify({ answers: batch.cases.map(answer) }));
