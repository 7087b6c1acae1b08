"""The cpu phase: CPU-bound jobs drained by two worker processes (issue 13).

    python3 bench/run.py --phases cpu [--peers echomq,celery,rq,bullmq-node] [--repeats 1]
                         [--cpu-jobs 2000] [--cpu-ms 20] [--cpu-workers 2]

On a flushed Redis, for each peer: ``--cpu-jobs`` jobs, each ``--cpu-ms`` milliseconds of
pure-Python work (a JavaScript loop for Node), are enqueued (untimed), then drained by
``--cpu-workers`` processes (threads for Node):

* echomq: ``Worker(processes=2, concurrency=3)``, a sync processor in a pool of child
  processes, one job kept ready for the next free child;
* celery: ``celery worker --pool prefork --concurrency 2`` on the Redis broker;
* rq: two rq workers (burst mode; each forks a work horse per job);
* bullmq-node: a sandboxed processor file with ``useWorkerThreads`` and concurrency 2.

Each job records its own start and end (CLOCK_MONOTONIC) in a log file, so the figures come
from the jobs themselves, not from the library:

* **elapsed** = last job end - first job start;
* **jobs/s** = jobs / elapsed, and **% of ideal**: the ideal is ``workers * 1000 / ms``
  (100 jobs/s for 2 workers and 20 ms jobs);
* **overhead ms/job** = ``workers * elapsed / jobs`` - the mean measured job time: how long a
  worker slot was busy per job beyond the job's own work (fetch, dispatch, IPC, recording,
  idle gaps);
* **start-up s** = first job start - the moment the workers were started.

Every job must have run exactly once. The machine's other load counts: with 2 cores and
anything else running, no peer can reach the ideal; the report gives the load average.
Celery runs only in this phase (its environment: bench/requirements/celery.txt).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from .peers import BENCH, DEFAULT_PEERS, PEERS, Peer, setup
from .phases import VerificationError
from .redisproc import RedisServer
from .report import publish

CPU_PEERS: dict[str, Peer] = {
    "echomq": Peer("echomq", "python", "echomq", "cpu_peer.py", installs_repo=True),
    "celery": Peer("celery", "python", "celery", "cpu_peer.py"),
    "rq": Peer("rq", "python", PEERS["rq"].venv, "cpu_peer.py"),
    "bullmq-node": Peer("bullmq-node", "node"),
}
PREFIX = "@@bench "


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The cpu phase's options of bench/run.py."""
    p.add_argument("--cpu-jobs", type=int, default=2000, help="cpu phase: jobs (2000)")
    p.add_argument("--cpu-ms", type=float, default=20.0, help="cpu phase: ms of work per job (20)")
    p.add_argument("--cpu-workers", type=int, default=2, help="cpu phase: worker processes (2)")


def _command(peer: Peer, opts: argparse.Namespace, url: str) -> list[str]:
    args = ["--url", url, "--n", str(opts.cpu_jobs), "--ms", str(opts.cpu_ms)]
    args += ["--workers", str(opts.cpu_workers)]
    if peer.kind == "node":
        return ["node", str(BENCH / "node" / "bullmq_cpu.mjs"), *args]
    return [str(peer.python), str(BENCH / "peers" / "cpu_peer.py"), peer.name, *args]


def run_peer(peer: Peer, redis: RedisServer, opts: argparse.Namespace, log: Path) -> dict[str, Any]:
    """One drain of the cpu workload by ``peer``; its figures."""
    redis.flushall()
    cmd = _command(peer, opts, redis.url)
    with open(log, "ab") as err:
        err.write(("\n$ " + " ".join(cmd) + "\n").encode())
        err.flush()
        done = subprocess.run(
            cmd, stdout=subprocess.PIPE, stderr=err, cwd=BENCH.parent, timeout=1800, check=False
        )
    result = None
    for raw in done.stdout.decode(errors="replace").splitlines():
        if raw.startswith(PREFIX):
            result = json.loads(raw[len(PREFIX) :]).get("result")
    if done.returncode != 0 or result is None:
        raise RuntimeError(f"{peer.name} cpu: exit {done.returncode} (log: {log})")
    return figures(peer, result, opts)


def figures(peer: Peer, result: dict[str, Any], opts: argparse.Namespace) -> dict[str, Any]:
    runs = result["runs"]
    ids = [r[0] for r in runs]
    n = opts.cpu_jobs
    missing = n - len(set(ids))
    duplicates = len(ids) - len(set(ids))
    if missing or duplicates or set(ids) != set(range(n)):
        raise VerificationError(
            f"VERIFICATION FAILED for {peer.name} (cpu): {missing} missing, "
            f"{duplicates} duplicate runs"
        )
    first = min(r[1] for r in runs)
    last = max(r[2] for r in runs)
    elapsed = (last - first) / 1e9
    work_ms = statistics.fmean((r[2] - r[1]) / 1e6 for r in runs)
    jobs_s = n / elapsed
    ideal = opts.cpu_workers * 1000 / opts.cpu_ms
    return {
        "elapsed_s": elapsed,
        "jobs_s": jobs_s,
        "ideal_fraction": jobs_s / ideal,
        "job_ms": work_ms,
        "overhead_ms": opts.cpu_workers * elapsed * 1000 / n - work_ms,
        "startup_s": (first - result["ready_ns"]) / 1e9,
    }


def render(data: dict[str, Any]) -> str:
    o = data["options"]
    ideal = o["workers"] * 1000 / o["ms"]
    rows = [
        f"## cpu: {o['jobs']} jobs of {o['ms']:g} ms pure-Python work, {o['workers']} worker "
        f"processes (ideal {ideal:g} jobs/s)",
        "",
        f"Command: `{data['command']}`; {data['machine']}; load average "
        f"{data['loadavg_start'][0]:.2f} at the start, {data['loadavg_end'][0]:.2f} at the end.",
        "",
        "| peer | jobs/s | % of ideal | overhead ms/job | measured job ms | start-up s |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for entry in data["results"]:
        m = entry.get("median")
        if entry["status"] != "ok" or not m:
            rows.append(f"| {entry['peer']} | {entry['status']}: {entry.get('error', '')} |||||")
            continue
        rows.append(
            f"| {entry['peer']} | {m['jobs_s']:.1f} | {100 * m['ideal_fraction']:.1f} % | "
            f"{m['overhead_ms']:.2f} | {m['job_ms']:.2f} | {m['startup_s']:.2f} |"
        )
    return "\n".join(rows) + "\n"


def main(opts: argparse.Namespace, workdir: Path) -> int:
    """Run the cpu phase alone (``--phases cpu``): set up, drain, report."""
    names = [x.strip() for x in opts.peers.split(",") if x.strip()]
    if set(names) == set(DEFAULT_PEERS) or not names:  # run.py's default: all the cpu peers
        names = list(CPU_PEERS)
    unknown = [x for x in names if x not in CPU_PEERS]
    if unknown:
        raise SystemExit(f"cpu phase: unknown peers {unknown}; known: {', '.join(CPU_PEERS)}")
    peers = [CPU_PEERS[x] for x in names]
    results: list[dict[str, Any]] = []
    for peer in peers:
        if not opts.no_setup:
            print(f"setting up {peer.name}", flush=True)
            setup(peer, workdir / f"setup-{peer.name}.log")
    load_start = os.getloadavg()
    redis = RedisServer(workdir, opts.redis_server)
    redis.start()
    machine = f"{os.cpu_count()} CPUs, redis-server {redis.version()}"
    try:
        for peer in peers:
            entry: dict[str, Any] = {"peer": peer.name, "status": "ok", "repeats": []}
            results.append(entry)
            for r in range(opts.repeats):
                t0 = time.monotonic()
                try:
                    entry["repeats"].append(
                        run_peer(peer, redis, opts, workdir / f"cpu-{peer.name}.log")
                    )
                except Exception as exc:  # one broken peer must not stop the others
                    entry["status"] = "FAILED" if isinstance(exc, VerificationError) else "error"
                    entry["error"] = str(exc)
                    break
                print(
                    f"  {peer.name}: cpu repeat {r + 1}/{opts.repeats} done in "
                    f"{time.monotonic() - t0:.1f}s",
                    flush=True,
                )
            if entry["repeats"]:
                keys = entry["repeats"][0]
                entry["median"] = {
                    k: statistics.median(x[k] for x in entry["repeats"]) for k in keys
                }
    finally:
        redis.stop()
    data = {
        "command": "python3 bench/run.py " + " ".join(opts.argv),
        "options": {"jobs": opts.cpu_jobs, "ms": opts.cpu_ms, "workers": opts.cpu_workers},
        "machine": machine,
        "loadavg_start": load_start,
        "loadavg_end": os.getloadavg(),
        "results": results,
        "logs": str(workdir),
    }
    text = render(data)
    publish(text, data, opts.output)
    return 0 if all(e["status"] == "ok" for e in results) else 1
