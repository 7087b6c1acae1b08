#!/usr/bin/env python3
"""How late an idle worker starts a new job: echomq and BullMQ for Node side by side.

    python3 bench/idle_latency.py [--samples 5] [--output FILE] [--no-setup]
                                  [--concurrency 1,5,50] [--previous-ms 0,50,300]
                                  [--delay-ms 300] [--limit-ms 1000]

Why: an idle echomq worker at concurrency >= 2 once started a newly added job a whole
``drain_delay`` (5 s) late, because of how it had waited after its previous job. This matrix
makes such a wait show up next to BullMQ's figure for the same steps.

Runs on the system Python with the standard library only, like bench/run.py, with the same
environments (bench/.venvs/echomq, the working tree installed; bench/node/node_modules, BullMQ
pinned in bench/node/package.json) and its own redis-server on a free loopback port.

One cell = one concurrency C and one previous-job time P. One adapter process (role ``idle``,
see bench/peers/_common.py) holds both the worker (the library's defaults except
``concurrency=C``: drain delay 5 s) and the producer, so one clock times both. After an
unmeasured warm-up job, each sample adds a "previous" job whose processor sleeps P ms, waits
until it has returned, stays idle 0.5 s (``--idle-gap``), then adds a second job (0 ms); the
figure is the time from just before that ``add`` call to its processor's start. The delayed
rows (``--delay-ms``, 0 to skip) add the second job with that delay after a previous job of
50 ms; their figure is the lateness: processor start - (time before the add + delay).
Tables show the p50 and the max over ``--samples`` samples. Peers alternate cell by cell (and
which goes first alternates too), so drift on the machine hits both alike; Redis is flushed
before every cell. Exit status 1 if a cell failed or any echomq sample exceeded ``--limit-ms``.
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

from benchlib.peers import PEERS, REFERENCE, AdapterError, Peer, run_once, setup
from benchlib.redisproc import RedisServer
from benchlib.report import publish, table
from peers._common import IDLE_SETTLE_S, IDLE_WAIT_S
from run import machine

ECHOMQ = PEERS["echomq"]
NODE = PEERS[REFERENCE]
DELAYED_PREVIOUS_MS = 50.0  # the previous job before a delayed one


@dataclass(frozen=True)
class Cell:
    concurrency: int
    previous_ms: float
    delay_ms: float = 0.0

    @property
    def queue(self) -> str:
        return f"idle-c{self.concurrency}-p{self.previous_ms:g}-d{self.delay_ms:g}"

    def label(self) -> str:
        return f"c={self.concurrency} previous {self.previous_ms:g} ms" + (
            f", delayed {self.delay_ms:g} ms" if self.delay_ms else ""
        )


def _numbers(kind: type, text: str) -> list[Any]:
    return [kind(x) for x in text.split(",") if x.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--samples", type=int, default=5, help="samples per cell and peer (5)")
    p.add_argument("--concurrency", default="1,5,50", help="worker concurrencies (1,5,50)")
    p.add_argument("--previous-ms", default="0,50,300", help="previous job times (0,50,300)")
    p.add_argument(
        "--delay-ms",
        type=float,
        default=300.0,
        help=f"delayed rows: the second job's delay, after a {DELAYED_PREVIOUS_MS:g} ms "
        "previous job (300; 0 = no delayed rows)",
    )
    p.add_argument("--idle-gap", type=float, default=0.5, help="idle seconds before the add (0.5)")
    p.add_argument(
        "--limit-ms", type=float, default=1000.0, help="fail if an echomq sample is later (1000)"
    )
    p.add_argument("--redis-server", default="redis-server", help="redis-server binary")
    p.add_argument("--no-setup", action="store_true", help="do not create/refresh environments")
    p.add_argument("--output", type=Path, help="write FILE.md (table) and FILE.json (all data)")
    opts = p.parse_args(argv)
    opts.argv = sys.argv[1:] if argv is None else argv
    try:
        opts.concurrencies = _numbers(int, opts.concurrency)
        opts.previous = _numbers(float, opts.previous_ms)
    except ValueError as exc:
        p.error(f"--concurrency / --previous-ms: {exc}")
    if opts.samples < 1 or not opts.concurrencies:
        p.error("need --samples >= 1 and at least one --concurrency")
    return opts


def cells(opts: argparse.Namespace) -> list[Cell]:
    """Row order: by concurrency, the previous-job times, then the delayed row."""
    out = []
    for c in opts.concurrencies:
        out += [Cell(c, p) for p in opts.previous]
        if opts.delay_ms:
            out.append(Cell(c, DELAYED_PREVIOUS_MS, opts.delay_ms))
    return out


def run_cell(
    peer: Peer, redis: RedisServer, cell: Cell, opts: argparse.Namespace, log: Path
) -> dict[str, Any]:
    """One adapter process for one cell; the lags with their p50 and max, or ``error``."""
    redis.flushall()
    args = ["--url", redis.url, "--queue", cell.queue]
    args += ["--concurrency", str(cell.concurrency), "--samples", str(opts.samples)]
    args += ["--previous-ms", f"{cell.previous_ms:g}", "--delay-ms", f"{cell.delay_ms:g}"]
    args += ["--idle-gap", f"{opts.idle_gap:g}"]
    # each sample takes a few seconds at worst unless a wait times out, which ends the run
    timeout = 60 + IDLE_WAIT_S + opts.samples * (10 + cell.previous_ms / 1000)
    t0 = time.monotonic()
    try:
        msg = run_once(peer, "idle", args, log, timeout)
    except AdapterError as exc:
        return {"error": str(exc)}
    if "result" not in msg:
        return {"error": f"no result: {msg}"}
    res = dict(msg["result"], seconds=round(time.monotonic() - t0, 2))
    lags = res["lags_ms"]
    expected = 1 + 2 * len(res["previous_lags_ms"])  # warm-up + previous and second jobs
    if not res.get("error") and (res["executions"] != expected or res["distinct"] != expected):
        res["error"] = f"{res['executions']} executions of {res['distinct']} jobs, not {expected}"
    if lags:
        res["p50_ms"] = statistics.median(lags)
        res["max_ms"] = max(lags)
    return res


def _ms(value: float) -> str:
    """Two decimals for the usual few ms, fewer for the outliers."""
    if abs(value) < 10:
        return f"{value:.2f}"
    return f"{value:.1f}" if abs(value) < 1000 else f"{value:,.0f}"


def _figure(res: dict[str, Any]) -> str:
    if res.get("error") or "p50_ms" not in res:
        return "error"
    return f"{_ms(res['p50_ms'])} / {_ms(res['max_ms'])}"


def render(data: dict[str, Any]) -> str:
    m = data["machine"]
    v = data["versions"]
    delay = data["delay_ms"]
    out = [
        f"## Idle-worker latency: echomq {v[ECHOMQ.name]} and BullMQ for Node {v[NODE.name]}, "
        f"{data['samples']} samples per cell",
        "",
        f"Machine: {m['cpus']} CPUs ({m['cpu_model']}), {m['os']}; Redis {m['redis']}; "
        f"Python {m['python']}; Node {m['node']}. Load average (1 min) "
        f"{m['loadavg_start'][0]:.1f} at the start, {m['loadavg_end'][0]:.1f} at the end.",
        "",
        "One process per cell and peer runs the worker (defaults but concurrency, so a 5 s "
        "drain delay) and the producer. Each sample: add a previous job that runs for the "
        f"given time, wait until it has returned, stay idle {data['idle_gap_s']:g} s, add a "
        "second job; figure = just before that add -> its processor start, in ms, "
        f"p50 / max over the samples (then {data['settle_s']:g} s of quiet before the next "
        "sample; one unmeasured warm-up job first).",
    ]
    if delay:
        out[-1] += (
            f" Delayed rows: the second job is added with a delay of {delay / 1000:g} s; "
            "figure = its lateness, processor start - (time before the add + delay)."
        )
    out.append("")
    rows = []
    for row in data["cells"]:
        e, n = row[ECHOMQ.name], row[NODE.name]
        ratio = "-"
        if "p50_ms" in e and "p50_ms" in n and n["p50_ms"] > 0:
            ratio = f"{e['p50_ms'] / n['p50_ms']:.2f}×"
        kind = f"delayed job (delay {row['delay_ms'] / 1000:g} s)" if row["delay_ms"] else "job"
        rows.append(
            [
                str(row["concurrency"]),
                f"{row['previous_ms']:g} ms",
                kind,
                _figure(e),
                _figure(n),
                ratio,
            ]
        )
    out.append(
        table(
            [
                "concurrency",
                "previous job takes",
                "then added",
                "echomq p50 / max ms",
                "BullMQ for Node p50 / max ms",
                "p50 echomq / Node",
            ],
            rows,
        )
    )
    late = [
        f"- {Cell(r['concurrency'], r['previous_ms'], r['delay_ms']).label()}: "
        f"echomq max {r[ECHOMQ.name]['max_ms']:,.1f} ms "
        f"(BullMQ for Node max {r[NODE.name].get('max_ms', float('nan')):,.1f} ms)"
        for r in data["cells"]
        if r[ECHOMQ.name].get("max_ms", 0) > data["limit_ms"]
    ]
    if late:
        out += ["", f"### echomq samples over {data['limit_ms']:g} ms", "", *late]
    failed = [
        f"- {Cell(r['concurrency'], r['previous_ms'], r['delay_ms']).label()}, {peer}: "
        f"{r[peer]['error']}"
        for r in data["cells"]
        for peer in (ECHOMQ.name, NODE.name)
        if r[peer].get("error")
    ]
    if failed:
        out += ["", "### Failures", "", *failed]
    return "\n".join(out) + "\n"


def measure(opts: argparse.Namespace, redis: RedisServer, log: Path) -> list[dict[str, Any]]:
    rows = []
    order = [ECHOMQ, NODE]
    for k, cell in enumerate(cells(opts)):
        row: dict[str, Any] = {
            "concurrency": cell.concurrency,
            "previous_ms": cell.previous_ms,
            "delay_ms": cell.delay_ms,
        }
        for peer in order if k % 2 == 0 else order[::-1]:
            row[peer.name] = run_cell(peer, redis, cell, opts, log)
        rows.append(row)
        print(
            f"  {cell.label():38} echomq {_figure(row[ECHOMQ.name]):>15}   "
            f"bullmq-node {_figure(row[NODE.name]):>15}  (p50 / max ms)",
            flush=True,
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    workdir = Path(tempfile.mkdtemp(prefix="echomq-idle-"))
    log = workdir / "idle_latency.log"
    print(f"logs and redis dir: {workdir}", flush=True)
    if not opts.no_setup:
        for peer in (ECHOMQ, NODE):
            setup(peer, workdir / f"setup-{peer.name}.log")
    redis = RedisServer(workdir, opts.redis_server)
    redis.start()
    try:
        env = machine(redis) | {"loadavg_start": list(os.getloadavg())}
        versions = {
            p.name: run_once(p, "version", [], log, 60)["result"]["version"] for p in (ECHOMQ, NODE)
        }
        rows = measure(opts, redis, log)
    finally:
        redis.stop()
    env["loadavg_end"] = list(os.getloadavg())
    data = {
        "command": " ".join(["bench/idle_latency.py", *opts.argv]),
        "machine": env,
        "versions": versions,
        "samples": opts.samples,
        "idle_gap_s": opts.idle_gap,
        "settle_s": IDLE_SETTLE_S,
        "delay_ms": opts.delay_ms,
        "limit_ms": opts.limit_ms,
        "logs": str(workdir),
        "cells": rows,
    }
    publish(render(data), data, opts.output)
    bad = any(
        r[p.name].get("error") or r[ECHOMQ.name].get("max_ms", 0) > opts.limit_ms
        for r in rows
        for p in (ECHOMQ, NODE)
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
