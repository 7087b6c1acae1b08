#!/usr/bin/env python3
"""echomq's benchmark: echomq and its peers side by side, on one private Redis.

    python bench/run.py [--jobs 10000] [--repeats 3] [--peers a,b,c] [--output FILE] [--uvloop]
                        [--phases seq,bulk,latency,flow]
    python bench/run.py --phases cpu [--peers echomq,celery,rq,bullmq-node] [--repeats 1]
    python bench/run.py --phases scheduler --peers bullmq-node,echomq [--repeats 1]
    python bench/run.py --phases failing,producers,lateness [--peers ...] [--repeats 3]

Runs on the system Python with the standard library only. It builds each peer's
environment (bench/.venvs/<peer>, bench/node/node_modules), starts its own redis-server
on a free loopback port (no persistence), runs every phase (see benchlib/phases.py) for
every peer in every repeat, verifies that each job ran exactly once, and prints medians
over the repeats plus ratios against BullMQ for Node. Exit status 1 if any peer failed.

The flow phase (benchlib/flows.py) runs only for peers with a flow API (BullMQ for Node,
echomq); the others show n/a there. By default it adds --jobs / --flow-children trees
(1 000 trees of 1 parent + 10 children for the default 10 000 jobs), --flow-batch trees
per bulk flow call, and drains them with one worker at concurrency 50. It runs after the
other phases, repeat by repeat across the peers (their order rotating from one repeat to the
next), so load drift on the machine hits them alike; so do the phases below.

The scheduler phase (benchlib/schedulers.py) is not in the default list (it adds ~35 s per
peer and repeat): --phases scheduler runs --schedulers every-schedulers of --scheduler-every s
with one worker at concurrency 50 for --scheduler-duration s, for peers with job schedulers
(BullMQ for Node, echomq), repeat by repeat across the peers like the flow phase.

Three more phases are not in the default list either; each runs for every peer whose library
can express it, and the report says why the others could not:

* failing (benchlib/failing.py): --failing-jobs jobs (default --jobs) with 2 attempts and no
  backoff, drained by one worker at each --failing-concurrency (50) whose processor fails each
  job's first attempt; jobs/s, and every job must have failed once and succeeded once;
* producers (benchlib/producers.py): --adds adds (20 000) from each --producers count (10,200)
  of concurrent producers on one queue object, for libraries with an asyncio producer (BullMQ
  for Node twice: with and without ioredis auto-pipelining); adds/s, and the count in Redis;
* lateness (benchlib/lateness.py): --lateness-jobs delayed jobs (default --jobs), delays spread
  over --lateness-span s (10), added up front, run by one worker at --lateness-concurrency (50);
  p50/p99/max of processor start - due time.

Celery (``--peers ...,celery``) is a peer of its own, not in the default list.

Adapters speak a one-line JSON protocol: see bench/peers/_common.py.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib import cpu, report
from benchlib.failing import ATTEMPTS, failing
from benchlib.flows import CONCURRENCY, flow
from benchlib.lateness import lateness
from benchlib.peers import DEFAULT_PEERS, PEERS, REFERENCE, UVLOOP_PEER, Peer, run_once, setup
from benchlib.phases import EXTRA_PHASES, PHASES, VerificationError, one_repeat
from benchlib.producers import producers
from benchlib.redisproc import RedisServer
from benchlib.schedulers import CONCURRENCY as SCHEDULER_CONCURRENCY
from benchlib.schedulers import scheduler


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--jobs", type=int, default=10000, help="jobs per enqueue/drain run (10000)")
    p.add_argument("--repeats", type=int, default=3, help="repeats; figures are medians (3)")
    p.add_argument(
        "--peers",
        default=",".join(DEFAULT_PEERS),
        help=f"comma-separated, from: {', '.join(PEERS)} (default: {','.join(DEFAULT_PEERS)})",
    )
    p.add_argument("--uvloop", action="store_true", help="also run echomq on uvloop")
    p.add_argument("--output", type=Path, help="write FILE.md (table) and FILE.json (all data)")
    p.add_argument("--batch", type=int, default=1000, help="jobs per bulk-enqueue call (1000)")
    p.add_argument("--latency-samples", type=int, default=200, help="latency samples (200; 0=skip)")
    p.add_argument(
        "--latency-budget",
        type=float,
        default=45.0,
        help="max seconds of latency sampling per peer and repeat (45)",
    )
    p.add_argument(
        "--phases",
        default=",".join(PHASES),
        help=f"comma-separated phases to run, from: {', '.join(PHASES + EXTRA_PHASES)} "
        f"(default: {','.join(PHASES)})",
    )
    p.add_argument("--schedulers", type=int, default=1000, help="scheduler phase: schedulers")
    p.add_argument("--scheduler-every", type=float, default=1.0, help="their interval (1.0 s)")
    p.add_argument("--scheduler-duration", type=float, default=30.0, help="measured seconds (30)")
    p.add_argument(
        "--flows",
        type=int,
        default=None,
        help="flow phase: trees (default: --jobs / --flow-children, i.e. 1000)",
    )
    p.add_argument("--flow-children", type=int, default=10, help="children per tree (10)")
    p.add_argument("--flow-batch", type=int, default=100, help="trees per bulk flow call (100)")
    p.add_argument(
        "--failing-jobs", type=int, default=None, help="failing phase: jobs (default --jobs)"
    )
    p.add_argument(
        "--failing-concurrency", default="50", help="failing phase: worker concurrencies (50)"
    )
    p.add_argument("--adds", type=int, default=20000, help="producers phase: adds (20000)")
    p.add_argument(
        "--producers", default="10,200", help="producers phase: concurrent producers (10,200)"
    )
    p.add_argument(
        "--lateness-jobs", type=int, default=None, help="lateness phase: jobs (default --jobs)"
    )
    p.add_argument(
        "--lateness-span", type=float, default=10.0, help="lateness phase: delays over (10 s)"
    )
    p.add_argument(
        "--lateness-concurrency", type=int, default=50, help="lateness phase: concurrency (50)"
    )
    p.add_argument("--redis-server", default="redis-server", help="redis-server binary")
    p.add_argument("--no-setup", action="store_true", help="do not create/refresh environments")
    p.add_argument("--setup-only", action="store_true", help="only create the environments")
    cpu.add_arguments(p)
    opts = p.parse_args(argv)
    opts.argv = sys.argv[1:] if argv is None else argv
    phases = [x.strip() for x in opts.phases.split(",") if x.strip()]
    if "cpu" in phases:  # the cpu phase (benchlib/cpu.py) has peers of its own: it runs alone
        if phases != ["cpu"]:
            p.error("--phases cpu runs on its own; run the other phases separately")
        opts.phases = ["cpu"]
        return opts
    known = PHASES + EXTRA_PHASES
    unknown = [x for x in phases if x not in known]
    if unknown or not phases:
        p.error(f"--phases: unknown {unknown or 'empty'}; known: {', '.join(known)}")
    opts.phases = [x for x in known if x in phases]
    if opts.flows is None:
        opts.flows = max(1, opts.jobs // max(1, opts.flow_children))
    if opts.lateness_jobs is None:
        opts.lateness_jobs = opts.jobs
    if opts.failing_jobs is None:
        opts.failing_jobs = opts.jobs
    try:
        opts.failing_concurrencies = _ints(opts.failing_concurrency)
        opts.producer_counts = _ints(opts.producers)
    except ValueError as exc:
        p.error(f"--failing-concurrency / --producers: {exc}")
    return opts


def _ints(spec: str) -> list[int]:
    values = [int(x) for x in spec.split(",") if x.strip()]
    if not values or min(values) < 1:
        raise ValueError(f"want positive integers, got {spec!r}")
    return values


def select_peers(spec: str, uvloop: bool) -> list[Peer]:
    peers = []
    for raw in spec.split(","):
        name = raw.strip().replace("_", "-")
        if not name:
            continue
        if name == UVLOOP_PEER.name:
            peers.append(UVLOOP_PEER)
        elif name in PEERS:
            peers.append(PEERS[name])
        else:
            sys.exit(f"unknown peer {raw!r}; known: {', '.join(PEERS)}, {UVLOOP_PEER.name}")
    if uvloop and UVLOOP_PEER not in peers:
        peers.append(UVLOOP_PEER)
    return peers


def tool_version(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout.strip()
    except OSError:
        return "unavailable"


def machine(redis: RedisServer) -> dict[str, Any]:
    cpu = "unknown"
    try:
        for row in Path("/proc/cpuinfo").read_text().splitlines():
            if row.startswith("model name"):
                cpu = row.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu,
        "os": platform.platform(),
        "python": platform.python_version(),
        "node": tool_version(["node", "--version"]),
        "redis": redis.version(),
    }


def median_metrics(repeats: list[dict[str, Any]]) -> dict[str, Any]:
    """Median of every numeric leaf over the repeats (None where a phase was skipped)."""
    out: dict[str, Any] = {}
    keys = {k for r in repeats for k in r}
    for k in sorted(keys):
        vals = [r.get(k) for r in repeats]
        if any(isinstance(v, dict) for v in vals):
            out[k] = median_metrics([v for v in vals if isinstance(v, dict)])
        else:
            nums = [v for v in vals if isinstance(v, (int, float))]
            out[k] = statistics.median(nums) if nums else None
    return out


def _record_failure(entry: dict[str, Any], exc: Exception, log: Path) -> None:
    if isinstance(exc, VerificationError):
        entry["status"] = "FAILED"
        entry["error"] = str(exc)
        print("\n" + "!" * 78 + f"\n{exc}\n" + "!" * 78 + "\n", file=sys.stderr, flush=True)
        return
    entry["status"] = "error"
    entry["error"] = f"{type(exc).__name__}: {exc}"
    print(f"  {entry['peer']}: ERROR {entry['error']}", file=sys.stderr, flush=True)
    with open(log, "a") as f:
        traceback.print_exception(exc, file=f)


def run_peer(
    peer: Peer, redis: RedisServer, opts: argparse.Namespace, logdir: Path
) -> dict[str, Any]:
    """The version and every repeat of the seq, bulk and latency phases, for one peer."""
    log = logdir / f"{peer.name}.log"
    entry: dict[str, Any] = {"peer": peer.name, "flows": peer.flows, "repeats": [], "status": "ok"}
    entry["schedulers"] = peer.schedulers
    plain = set(opts.phases) - {"flow", *EXTRA_PHASES}
    try:
        entry["version"] = run_once(peer, "version", [], log, 120)["result"]["version"]
        for r in range(opts.repeats):
            if not plain:
                entry["repeats"].append({})
                continue
            t0 = time.monotonic()
            entry["repeats"].append(one_repeat(peer, redis, opts.jobs, opts, log, plain))
            print(
                f"  {peer.name}: repeat {r + 1}/{opts.repeats} done in "
                f"{time.monotonic() - t0:.1f}s",
                flush=True,
            )
    except Exception as exc:  # one broken peer must not stop the others
        _record_failure(entry, exc, log)
    return entry


#: The phases run repeat by repeat across the peers: name -> the phase for one peer and repeat.
ALTERNATING: dict[str, Any] = {
    "flow": lambda peer, redis, opts, log: flow(
        peer, redis, opts.flows, opts.flow_children, opts.flow_batch, log
    ),
    "scheduler": lambda peer, redis, opts, log: scheduler(
        peer,
        redis,
        opts.schedulers,
        opts.scheduler_every,
        opts.scheduler_duration,
        log,
    ),
    "failing": lambda peer, redis, opts, log: failing(
        peer, redis, opts.failing_jobs, opts.failing_concurrencies, opts.batch, log
    ),
    "producers": lambda peer, redis, opts, log: producers(
        peer, redis, opts.adds, opts.producer_counts, log
    ),
    "lateness": lambda peer, redis, opts, log: lateness(
        peer,
        redis,
        opts.lateness_jobs,
        opts.lateness_span,
        opts.lateness_concurrency,
        opts.batch,
        log,
    ),
}


def run_alternating(
    phase: str,
    pairs: list[tuple[Peer, dict[str, Any]]],
    redis: RedisServer,
    opts: argparse.Namespace,
    logdir: Path,
) -> None:
    """One phase, repeat by repeat across the peers (A B C, B C A, C A B, ...), so a change in
    the machine's load over the run hits every peer alike. A peer that cannot express the phase
    gets None (no flow API, no job schedulers) or ``{"skipped": why}``. A verification failure
    fails that phase and repeat (``{"failed": what}``, also in the entry's ``phase_failures``,
    and the exit status), not the peer's other phases; any other error fails the peer."""
    for r in range(opts.repeats):
        k = r % len(pairs) if pairs else 0
        for peer, entry in pairs[k:] + pairs[:k]:
            if entry["status"] != "ok" or len(entry["repeats"]) <= r:
                continue
            log = logdir / f"{peer.name}.log"
            t0 = time.monotonic()
            try:
                res = entry["repeats"][r][phase] = ALTERNATING[phase](peer, redis, opts, log)
            except VerificationError as exc:
                entry["repeats"][r][phase] = {"failed": str(exc)}
                entry.setdefault("phase_failures", []).append(f"repeat {r + 1}: {exc}")
                print("\n" + "!" * 78 + f"\n{exc}\n" + "!" * 78 + "\n", file=sys.stderr, flush=True)
                redis.flushall()
                continue
            except Exception as exc:
                _record_failure(entry, exc, log)
                continue
            if res is None:
                continue
            if "skipped" in res and len(res) == 1:
                if r == 0:
                    print(f"  {peer.name}: no {phase} phase: {res['skipped']}", flush=True)
                continue
            print(
                f"  {peer.name}: {phase} repeat {r + 1}/{opts.repeats} done in "
                f"{time.monotonic() - t0:.1f}s",
                flush=True,
            )


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    if opts.phases == ["cpu"]:
        workdir = Path(tempfile.mkdtemp(prefix="echomq-bench-cpu-"))
        print(f"logs and redis dir: {workdir}", flush=True)
        return cpu.main(opts, workdir)
    peers = select_peers(opts.peers, opts.uvloop)
    workdir = Path(tempfile.mkdtemp(prefix="echomq-bench-"))
    print(f"logs and redis dir: {workdir}", flush=True)
    usable = []
    setup_errors: dict[str, str] = {}
    for peer in peers:
        if opts.no_setup:
            usable.append(peer)
            continue
        print(f"setting up {peer.name}", flush=True)
        try:
            setup(peer, workdir / f"setup-{peer.name}.log")
            usable.append(peer)
        except Exception as exc:
            setup_errors[peer.name] = str(exc)
            print(f"  {peer.name}: setup failed: {exc}", file=sys.stderr, flush=True)
    if opts.setup_only:
        return 1 if setup_errors else 0

    load_start = os.getloadavg()
    redis = RedisServer(workdir, opts.redis_server)
    redis.start()
    try:
        env = machine(redis)
        print(
            f"redis-server {env['redis']} on port {redis.port}; {opts.jobs} jobs x "
            f"{opts.repeats} repeats; phases {','.join(opts.phases)}",
            flush=True,
        )
        results = [run_peer(p, redis, opts, workdir) for p in usable]
        for phase in ALTERNATING:
            if phase in opts.phases:
                run_alternating(phase, list(zip(usable, results)), redis, opts, workdir)
    finally:
        redis.stop()
    for entry in results:
        if any(entry["repeats"]):
            entry["median"] = median_metrics(entry["repeats"])
    for name, err in setup_errors.items():
        results.append({"peer": name, "status": "error", "error": f"setup: {err}", "repeats": []})

    data = {
        "command": " ".join(
            [Path(sys.argv[0]).as_posix(), *(sys.argv[1:] if argv is None else argv)]
        ),
        "jobs": opts.jobs,
        "repeats": opts.repeats,
        "batch": opts.batch,
        "latency_samples": opts.latency_samples,
        "phases": opts.phases,
        "flow": {
            "trees": opts.flows,
            "children": opts.flow_children,
            "batch": opts.flow_batch,
            "concurrency": CONCURRENCY,
        },
        "scheduler": {
            "schedulers": opts.schedulers,
            "every_s": opts.scheduler_every,
            "duration_s": opts.scheduler_duration,
            "concurrency": SCHEDULER_CONCURRENCY,
        },
        "failing": {
            "jobs": opts.failing_jobs,
            "attempts": ATTEMPTS,
            "concurrencies": opts.failing_concurrencies,
        },
        "producers": {"adds": opts.adds, "counts": opts.producer_counts},
        "lateness": {
            "jobs": opts.lateness_jobs,
            "span_s": opts.lateness_span,
            "concurrency": opts.lateness_concurrency,
        },
        "machine": env | {"loadavg_start": load_start, "loadavg_end": os.getloadavg()},
        "reference": REFERENCE,
        "results": results,
        "logs": str(workdir),
    }
    text = report.render(data)
    report.publish(text, data, opts.output)
    return 0 if all(r["status"] == "ok" and not r.get("phase_failures") for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
