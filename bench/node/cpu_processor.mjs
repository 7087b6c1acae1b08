// The cpu phase's sandboxed processor for BullMQ for Node (run in a worker thread).
//
// The same job as bench/peers/cpu_jobs.py: integer arithmetic until `ms` milliseconds of
// wall time have passed, then one O_APPEND line "<i> <start_ns> <end_ns>" (hrtime, i.e.
// CLOCK_MONOTONIC, the clock of Python's time.monotonic_ns()) to ECHOMQ_BENCH_CPU_LOG.
import { appendFileSync } from 'node:fs';

export default async function burn(job) {
  const start = process.hrtime.bigint();
  const deadline = start + BigInt(Math.round(job.data.ms * 1e6));
  let acc = 0;
  let n = 0;
  for (;;) {
    for (let k = 0; k < 200; k++) acc = (acc * 31 + k + n) % 1000003;
    n++;
    if (process.hrtime.bigint() >= deadline) break;
  }
  const end = process.hrtime.bigint();
  appendFileSync(process.env.ECHOMQ_BENCH_CPU_LOG, `${job.data.i} ${start} ${end}\n`);
  return acc;
}
