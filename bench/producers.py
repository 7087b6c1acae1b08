#!/usr/bin/env python3
"""Many producers at once: adds from concurrent coroutines, echomq and BullMQ for Node.

    python3 bench/producers.py [--adds 20000] [--producers 1,10,200] [--repeats 3]
                               [--echomq LABEL=SRC ...] [--output FILE] [--no-setup]

Why: a web application enqueues from hundreds of concurrent requests, not from one loop. With
one round trip per add whatever the concurrency, echomq lost this workload to BullMQ for Node
(0.77x at 200 producers) while leading the drain benchmark.

Runs on the system Python with the standard library only, like bench/run.py, with the same
environments (bench/.venvs/echomq, bench/node/node_modules with BullMQ and ioredis pinned) and
its own redis-server on a free loopback port, flushed before every cell. A cell is one
variant and one producer count P: one adapter process makes ``--adds`` adds (job ``noop``,
data ``{"i": I}``) from P concurrent producers (``enqueue --mode concurrent``,
bench/peers/_common.py), after one unmeasured warm-up add. The variants:

- ``LABEL queue``: echomq, every producer awaiting ``Queue.add`` on one shared ``Queue``;
- ``LABEL module``: echomq, the module-level ``echomq.add(..., connection=client)`` on one
  shared ``redis.asyncio.Redis`` (the one-obvious-entry form a web application uses);
- ``node``: BullMQ's ``Queue.add`` on one shared ``Queue`` (ioredis, auto-pipelining off,
  its default);
- ``node+ap``: the same with ioredis ``enableAutoPipelining``.

Figures per cell: adds/s = adds / the timed part's wall time (in the adapter); producer CPU
µs/add (getrusage / ``process.cpuUsage`` over the timed part); Redis CPU µs/add (``INFO``
used_cpu_user + used_cpu_sys around the adapter process) and Redis commands per add. The
harness checks that the wait list holds exactly ``--adds`` jobs after each cell.

``--echomq LABEL=SRC`` (repeatable) runs echomq from the ``src`` directory SRC, put first on
``PYTHONPATH`` in bench/.venvs/echomq, so two checkouts compare in one sitting, e.g.
``--echomq before=/tmp/base/src --echomq after=src``; the default is this repository's
``src`` as ``echomq``. Each repeat runs every P's cells variant after variant, the variants'
order rotating from repeat to repeat, so drift on a shared machine hits them alike. Figures
are medians over ``--repeats``; ratios are taken within each repeat (against Node's cells of
the same repeat and P), then their median with min-max. Exit status 1 if a cell failed or a
check did not hold.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

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
from benchlib.producers import cell
from benchlib.redisproc import RedisServer
from benchlib.report import publish, table
from run import machine

NODE = PEERS[REFERENCE]


@dataclass(frozen=True)
class Variant:
    """One column: a peer and the adapter arguments that select its form of producing."""

    name: str
    peer: Peer
    args: tuple[str, ...]
    reference: bool = False  # a Node column, which the others are compared with


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--adds", type=int, default=20000, help="adds per cell (20000)")
    p.add_argument("--producers", default="1,10,200", help="concurrent producers (1,10,200)")
    p.add_argument("--repeats", type=int, default=3, help="repeats; figures are medians (3)")
    p.add_argument(
        "--echomq",
        type=echomq_peer,
        action="append",
        metavar="LABEL=SRC",
        help="an echomq checkout's src directory to run (repeatable; default echomq=src)",
    )
    p.add_argument("--apis", default="queue,module", help="echomq forms to run (queue,module)")
    p.add_argument("--redis-server", default="redis-server", help="redis-server binary")
    p.add_argument("--no-setup", action="store_true", help="do not create/refresh environments")
    p.add_argument("--output", type=Path, help="write FILE.md (tables) and FILE.json (all data)")
    opts = p.parse_args(argv)
    opts.argv = sys.argv[1:] if argv is None else argv
    try:
        opts.counts = [int(x) for x in opts.producers.split(",") if x.strip()]
    except ValueError as exc:
        p.error(f"--producers: {exc}")
    opts.api_list = [a for a in opts.apis.split(",") if a.strip()]
    if not set(opts.api_list) <= {"queue", "module"}:
        p.error("--apis takes queue and/or module")
    if opts.adds < 1 or opts.repeats < 1 or not opts.counts or min(opts.counts) < 1:
        p.error("need --adds >= 1, --repeats >= 1 and producer counts >= 1")
    opts.echomq = opts.echomq or [echomq_peer(f"echomq={REPO / 'src'}")]
    return opts


def variants(opts: argparse.Namespace) -> list[Variant]:
    out = [
        Variant(f"{peer.name} {api}", peer, ("--api", api))
        for peer in opts.echomq
        for api in opts.api_list
    ]
    out.append(Variant("node", NODE, (), reference=True))
    out.append(Variant("node+ap", NODE, ("--auto-pipelining", "1"), reference=True))
    return out


def run_cell(variant: Variant, redis: RedisServer, producers: int, opts: Any, log: Path) -> dict:
    """One adapter process making the adds (benchlib/producers.py, the producers phase's cell)."""
    return cell(variant.peer, redis, opts.adds, producers, variant.args, log)


def measure(
    opts: argparse.Namespace, columns: list[Variant], redis: RedisServer, log: Path
) -> list[dict[str, Any]]:
    """Every repeat: per producer count, each variant's cell (order rotating by repeat)."""
    repeats = []
    for r in range(opts.repeats):
        order = columns[r % len(columns) :] + columns[: r % len(columns)]
        by_p: dict[str, Any] = {}
        for count in opts.counts:
            row: dict[str, Any] = {}
            for variant in order:
                cell = row[variant.name] = run_cell(variant, redis, count, opts, log)
                if "error" in cell:
                    print(
                        f"  repeat {r + 1} P={count:<4} {variant.name:18} FAILED: {cell['error']}"
                    )
                    continue
                print(
                    f"  repeat {r + 1} P={count:<4} {variant.name:18} {cell['rate']:8,.0f} adds/s"
                    f"  producer {cell['producer_cpu_us_per_add']:5.1f} µs/add"
                    f"  Redis {cell['redis_cpu_us_per_add']:5.1f} µs/add"
                    f"  load {os.getloadavg()[0]:.1f}",
                    flush=True,
                )
            by_p[str(count)] = row
        repeats.append(by_p)
    return repeats


# -- the report ------------------------------------------------------------------------------

FIGURES: list[tuple[str, str, str]] = [
    ("adds/s", "rate", "{:,.0f}"),
    ("seconds", "seconds", "{:.2f}"),
    ("producer CPU µs/add", "producer_cpu_us_per_add", "{:.1f}"),
    ("Redis CPU µs/add", "redis_cpu_us_per_add", "{:.1f}"),
    ("of which in scripts", "script_us_per_add", "{:.1f}"),
    ("Redis commands/add, incl. in scripts", "redis_cmds_per_add", "{:.2f}"),
]
RATIOS: list[tuple[str, str]] = [
    ("adds/s", "rate"),
    ("producer CPU/add", "producer_cpu_us_per_add"),
    ("Redis CPU/add", "redis_cpu_us_per_add"),
]


def _median_range(values: list[float], form: str) -> str:
    text = form.format(statistics.median(values))
    if len(values) > 1:
        text += f" ({form.format(min(values))}–{form.format(max(values))})"
    return text


def render(data: dict[str, Any]) -> str:
    m = data["machine"]
    names = data["variants"]
    refs = data["references"]
    repeats = data["repeats"]
    out = [
        f"## Many producers: {data['adds']:,} adds from P concurrent producers on one queue; "
        f"median of {len(repeats)} repeats",
        "",
        f"Machine: {m['cpus']} CPUs ({m['cpu_model']}), {m['os']}; Redis {m['redis']}; "
        f"Python {m['python']}; Node {m['node']}. Load average (1 min) "
        f"{m['loadavg_start'][0]:.1f} at the start, {m['loadavg_end'][0]:.1f} at the end.",
        "",
        "Figures: median (min-max) of the repeats. node = BullMQ Queue.add, ioredis without "
        "auto-pipelining; node+ap = with enableAutoPipelining.",
    ]
    for count in data["counts"]:
        rows = []
        for title, key, form in FIGURES:
            row = [title]
            for name in names:
                cells = [rep[str(count)][name] for rep in repeats]
                values = [cell[key] for cell in cells if "error" not in cell]
                failed = len(cells) - len(values)
                text = _median_range(values, form) if values else "failed"
                row.append(text + (f" ({failed} failed)" if values and failed else ""))
            rows.append(row)
        out += ["", f"### P = {count}", "", table(["", *names], rows)]
        others = [n for n in names if n not in refs]
        ratio_rows = []
        for ref in refs:
            for title, key in RATIOS:
                row = [f"{title} / {ref}"]
                for name in others:
                    pairs = [(rep[str(count)][name], rep[str(count)][ref]) for rep in repeats]
                    values = [
                        a[key] / b[key] for a, b in pairs if "error" not in a and "error" not in b
                    ]
                    row.append(_median_range(values, "{:.2f}×") if values else "failed")
                ratio_rows.append(row)
        out += [
            "",
            "Against BullMQ for Node, same repeat (rates: higher is better, CPU: lower is better):",
            "",
            table(["", *others], ratio_rows),
        ]
        errors = sorted(
            {
                f"{name}: {cell['error']}"
                for rep in repeats
                for name, cell in rep[str(count)].items()
                if "error" in cell
            }
        )
        if errors:
            out += ["", "Failed cells:", "", *[f"- {e}" for e in errors]]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    columns = variants(opts)
    workdir = Path(tempfile.mkdtemp(prefix="echomq-producers-"))
    log = workdir / "producers.log"
    print(f"logs and redis dir: {workdir}", flush=True)
    if not opts.no_setup:
        for peer in (PEERS["echomq"], NODE):
            setup(peer, workdir / f"setup-{peer.name}.log")
    redis = RedisServer(workdir, opts.redis_server)
    redis.start()
    try:
        env = machine(redis) | {"loadavg_start": list(os.getloadavg())}
        peers = {v.peer.name: v.peer for v in columns}
        versions = {
            name: run_once(peer, "version", [], log, 60)["result"]["version"]
            for name, peer in peers.items()
        }
        print(
            f"redis-server {env['redis']} on port {redis.port}; {opts.adds} adds x "
            f"{opts.repeats} repeats; producers {opts.producers}; variants "
            + ", ".join(v.name for v in columns),
            flush=True,
        )
        t0 = time.monotonic()
        try:
            repeats = measure(opts, columns, redis, log)
        except (VerificationError, AdapterError) as exc:
            print(f"\nFAILED: {exc} (log: {log})", file=sys.stderr)
            return 1
        print(f"measured in {time.monotonic() - t0:.0f} s", flush=True)
    finally:
        redis.stop()
    env["loadavg_end"] = list(os.getloadavg())
    data = {
        "command": " ".join(["bench/producers.py", *opts.argv]),
        "machine": env,
        "versions": versions,
        "sources": {p.name: p.src for p in opts.echomq},
        "variants": [v.name for v in columns],
        "references": [v.name for v in columns if v.reference],
        "adds": opts.adds,
        "counts": opts.counts,
        "logs": str(workdir),
        "repeats": repeats,  # one {producers: {variant: cell}} per repeat
    }
    publish(render(data), data, opts.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
