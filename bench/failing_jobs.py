#!/usr/bin/env python3
"""Jobs that fail once, then succeed: echomq and BullMQ for Node side by side.

    python3 bench/failing_jobs.py [--jobs 5000] [--concurrency 10,50] [--repeats 3]
                                  [--echomq LABEL=SRC ...] [--output FILE] [--no-setup]

Why: a production queue sees failures every day, and the drain benchmark has none. A failed
attempt once cost echomq's worker about twenty times a successful one (its traceback formatted
twice, with Python 3.11's caret anchors), which brought this workload to parity with Node.

Runs on the system Python with the standard library only, like bench/run.py, with the same
environments (bench/.venvs/echomq, bench/node/node_modules with BullMQ pinned) and its own
redis-server on a free loopback port, flushed before every cell. A cell is one peer, one
concurrency and one workload:

- ``fail-once``: ``--jobs`` jobs added in bulk with ``attempts=2`` and no backoff; one worker
  process at that concurrency whose processor raises on a job's first attempt and returns on
  its second (``worker --fail-once``, bench/peers/_common.py);
- ``succeed``: the same jobs (``attempts=2``) and worker, every attempt returning at once: the
  baseline a failed attempt is compared with.

Figures per cell: jobs/s = (jobs - 1) / (first attempt's start -> the last job's successful
start), in the worker; worker CPU µs/job (getrusage / ``process.cpuUsage`` from ready to the
last job done); Redis CPU µs/job (``INFO`` used_cpu_user + used_cpu_sys around the worker
process) and script calls and script µs per job (``INFO commandstats``, evalsha). A failed
attempt's worker CPU = fail-once's CPU per job - succeed's (each job fails exactly once), and
is also given as a multiple of a successful attempt (succeed's CPU per job). The harness
checks that every job completed once and failed once.

``--echomq LABEL=SRC`` (repeatable) runs echomq from the ``src`` directory SRC, put first on
``PYTHONPATH`` in bench/.venvs/echomq, so two checkouts compare in one sitting, e.g. ``--echomq
before=/tmp/base/src --echomq after=src``; the default is this repository's ``src`` as
``echomq``. Every repeat runs each concurrency's cells peer after peer, the pair of workloads
back to back, and the peers' order rotates from repeat to repeat, so drift on a shared machine
hits them alike. Figures are medians over ``--repeats``; ratios are taken within each repeat
(against Node's cell of the same repeat), then their median with min-max. Exit status 1 if a
cell failed or a check did not hold.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from benchlib.failing import ATTEMPTS, cell
from benchlib.peers import (
    PEERS,
    REFERENCE,
    REPO,
    AdapterError,
    Peer,
    echomq_peer,
    run_once,
    setup,
)
from benchlib.phases import VerificationError
from benchlib.redisproc import RedisServer
from benchlib.report import publish, table
from run import machine

NODE = PEERS[REFERENCE]
WORKLOADS = ("succeed", "fail-once")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--jobs", type=int, default=5000, help="jobs per cell (5000)")
    p.add_argument("--concurrency", default="10,50", help="worker concurrencies (10,50)")
    p.add_argument("--repeats", type=int, default=3, help="repeats; figures are medians (3)")
    p.add_argument(
        "--echomq",
        type=echomq_peer,
        action="append",
        metavar="LABEL=SRC",
        help="an echomq checkout's src directory to run (repeatable; default echomq=src)",
    )
    p.add_argument("--batch", type=int, default=1000, help="jobs per bulk add (1000)")
    p.add_argument("--redis-server", default="redis-server", help="redis-server binary")
    p.add_argument("--no-setup", action="store_true", help="do not create/refresh environments")
    p.add_argument("--output", type=Path, help="write FILE.md (tables) and FILE.json (all data)")
    opts = p.parse_args(argv)
    opts.argv = sys.argv[1:] if argv is None else argv
    try:
        opts.concurrencies = [int(x) for x in opts.concurrency.split(",") if x.strip()]
    except ValueError as exc:
        p.error(f"--concurrency: {exc}")
    if opts.jobs < 2 or opts.repeats < 1 or not opts.concurrencies:
        p.error("need --jobs >= 2, --repeats >= 1 and at least one --concurrency")
    opts.echomq = opts.echomq or [echomq_peer(f"echomq={REPO / 'src'}")]
    return opts


def run_cell(
    peer: Peer, redis: RedisServer, workload: str, concurrency: int, opts: Any, log: Path
) -> dict[str, Any]:
    """Add the jobs, drain them with one worker process, check and measure
    (benchlib/failing.py, the failing phase's cell)."""
    queue = f"failing-{workload}-c{concurrency}"
    fail_once = workload == "fail-once"
    res = cell(peer, redis, queue, opts.jobs, concurrency, fail_once, opts.batch, log)
    if "skipped" in res:
        raise AdapterError(f"{peer.name}: {res['skipped']}")
    return res


def derived(cells: dict[str, dict[str, Any]]) -> dict[str, float]:
    """A failed attempt's worker CPU, from one peer's pair of cells in one repeat."""
    ok, failing = cells["succeed"], cells["fail-once"]
    extra = failing["worker_cpu_us_per_job"] - ok["worker_cpu_us_per_job"]
    return {
        "failed_attempt_cpu_us": extra,
        "failed_per_successful": extra / ok["worker_cpu_us_per_job"],
    }


def measure(
    opts: argparse.Namespace, peers: list[Peer], redis: RedisServer, log: Path
) -> list[dict[str, Any]]:
    """Every repeat: per concurrency, each peer's two cells (order rotating by repeat)."""
    repeats = []
    for r in range(opts.repeats):
        order = peers[r % len(peers) :] + peers[: r % len(peers)]
        by_c: dict[str, Any] = {}
        for c in opts.concurrencies:
            row: dict[str, Any] = {}
            for peer in order:
                t0 = time.monotonic()
                cells = {w: run_cell(peer, redis, w, c, opts, log) for w in WORKLOADS}
                row[peer.name] = cells | derived(cells)
                print(
                    f"  repeat {r + 1} c={c:<3} {peer.name:12} "
                    f"succeed {cells['succeed']['rate']:7,.0f}/s  "
                    f"fail-once {cells['fail-once']['rate']:7,.0f}/s  "
                    f"failed attempt {row[peer.name]['failed_per_successful']:5.2f}x "
                    f"a successful one  ({time.monotonic() - t0:.0f} s)",
                    flush=True,
                )
            by_c[str(c)] = row
        repeats.append(by_c)
    return repeats


# -- the report ------------------------------------------------------------------------------

Figure = tuple[str, tuple[str, ...], str]
FIGURES: list[Figure] = [
    ("succeed jobs/s", ("succeed", "rate"), "{:,.0f}"),
    ("fail-once jobs/s", ("fail-once", "rate"), "{:,.0f}"),
    ("worker CPU µs/job, succeed", ("succeed", "worker_cpu_us_per_job"), "{:.0f}"),
    ("worker CPU µs/job, fail-once", ("fail-once", "worker_cpu_us_per_job"), "{:.0f}"),
    ("failed attempt, worker CPU µs", ("failed_attempt_cpu_us",), "{:.0f}"),
    ("failed attempt / successful", ("failed_per_successful",), "{:.2f}×"),
    ("Redis CPU µs/job, succeed", ("succeed", "redis_cpu_us_per_job"), "{:.1f}"),
    ("Redis CPU µs/job, fail-once", ("fail-once", "redis_cpu_us_per_job"), "{:.1f}"),
    ("script calls/job, fail-once", ("fail-once", "script_calls_per_job"), "{:.2f}"),
    ("script µs/job, fail-once", ("fail-once", "script_us_per_job"), "{:.1f}"),
]
#: Ratios against Node's cell of the same repeat: (title, path, higher is better).
RATIOS: list[tuple[str, tuple[str, ...]]] = [
    ("fail-once jobs/s", ("fail-once", "rate")),
    ("worker CPU/job, fail-once", ("fail-once", "worker_cpu_us_per_job")),
    ("Redis CPU/job, fail-once", ("fail-once", "redis_cpu_us_per_job")),
    ("succeed jobs/s", ("succeed", "rate")),
    ("Redis CPU/job, succeed", ("succeed", "redis_cpu_us_per_job")),
]


def _at(cell: dict[str, Any], path: tuple[str, ...]) -> float:
    node: Any = cell
    for key in path:
        node = node[key]
    return float(node)


def _median_range(values: list[float], form: str) -> str:
    text = form.format(statistics.median(values))
    if len(values) > 1:
        text += f" ({form.format(min(values))}–{form.format(max(values))})"
    return text


def render(data: dict[str, Any]) -> str:
    m = data["machine"]
    peers = data["peers"]
    out = [
        f"## Failing jobs: {data['jobs']:,} jobs, attempts={ATTEMPTS}, no backoff; median of "
        f"{len(data['repeats'])} repeats",
        "",
        f"Machine: {m['cpus']} CPUs ({m['cpu_model']}), {m['os']}; Redis {m['redis']}; "
        f"Python {m['python']}; Node {m['node']}. Load average (1 min) "
        f"{m['loadavg_start'][0]:.1f} at the start, {m['loadavg_end'][0]:.1f} at the end.",
        "",
        "fail-once: each job's first attempt raises, its second returns; succeed: the same "
        "jobs, every attempt returns. A failed attempt = fail-once's worker CPU per job - "
        "succeed's; '/ successful' divides it by succeed's. Figures: median (min-max) of "
        "the repeats.",
    ]
    for c in data["concurrencies"]:
        rows = []
        for title, path, form in FIGURES:
            row = [title]
            for peer in peers:
                row.append(
                    _median_range([_at(rep[str(c)][peer], path) for rep in data["repeats"]], form)
                )
            rows.append(row)
        out += ["", f"### Concurrency {c}", "", table(["", *peers], rows)]
        others = [p for p in peers if p != NODE.name]
        if NODE.name in peers and others:
            ratio_rows = []
            for title, path in RATIOS:
                row = [title]
                for peer in others:
                    values = [
                        _at(rep[str(c)][peer], path) / _at(rep[str(c)][NODE.name], path)
                        for rep in data["repeats"]
                    ]
                    row.append(_median_range(values, "{:.2f}×"))
                ratio_rows.append(row)
            out += [
                "",
                "Against BullMQ for Node, same repeat (peer / Node; rates: higher is better, "
                "CPU: lower is better):",
                "",
                table(["", *others], ratio_rows),
            ]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    peers: list[Peer] = [*opts.echomq, NODE]
    workdir = Path(tempfile.mkdtemp(prefix="echomq-failing-"))
    log = workdir / "failing_jobs.log"
    print(f"logs and redis dir: {workdir}", flush=True)
    if not opts.no_setup:
        for peer in (PEERS["echomq"], NODE):
            setup(peer, workdir / f"setup-{peer.name}.log")
    redis = RedisServer(workdir, opts.redis_server)
    redis.start()
    try:
        env = machine(redis) | {"loadavg_start": list(os.getloadavg())}
        versions = {p.name: run_once(p, "version", [], log, 60)["result"]["version"] for p in peers}
        print(
            f"redis-server {env['redis']} on port {redis.port}; {opts.jobs} jobs x "
            f"{opts.repeats} repeats; concurrency {opts.concurrency}; peers "
            + ", ".join(p.name for p in peers),
            flush=True,
        )
        try:
            repeats = measure(opts, peers, redis, log)
        except (VerificationError, AdapterError) as exc:
            print(f"\nFAILED: {exc} (log: {log})", file=sys.stderr)
            return 1
    finally:
        redis.stop()
    env["loadavg_end"] = list(os.getloadavg())
    data = {
        "command": " ".join(["bench/failing_jobs.py", *opts.argv]),
        "machine": env,
        "versions": versions,
        "sources": {p.name: getattr(p, "src", None) for p in peers},
        "peers": [p.name for p in peers],
        "jobs": opts.jobs,
        "concurrencies": opts.concurrencies,
        "logs": str(workdir),
        "repeats": repeats,  # one {concurrency: {peer: cells}} per repeat
    }
    publish(render(data), data, opts.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
