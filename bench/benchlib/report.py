"""Markdown tables of the medians, and ratios against the reference peer.

One table (plus its ratios) for the plain phases (seq, bulk, latency), one for the flow
phase and one for the scheduler phase, each only when one of its phases ran; peers without a
flow API (or job schedulers) show n/a there.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

Column = tuple[str, tuple[str, ...], str, bool]

# (column title, path into the median dict, format, higher_is_better)
COLUMNS: list[Column] = [
    ("seq enqueue /s", ("enqueue_seq", "rate"), "{:,.0f}", True),
    ("bulk enqueue /s", ("enqueue_bulk", "rate"), "{:,.0f}", True),
    ("drain c=1 /s", ("drain_c1", "rate"), "{:,.0f}", True),
    ("drain c=50 /s", ("drain_c50", "rate"), "{:,.0f}", True),
    ("start p50 ms", ("latency", "start_p50_ms"), "{:.2f}", False),
    ("start p99 ms", ("latency", "start_p99_ms"), "{:.2f}", False),
    ("result p50 ms", ("latency", "result_p50_ms"), "{:.2f}", False),
    ("result p99 ms", ("latency", "result_p99_ms"), "{:.2f}", False),
    ("Redis CPU µs/job c=1", ("drain_c1", "redis_cpu_us_per_job"), "{:.1f}", False),
    ("Redis CPU µs/job c=50", ("drain_c50", "redis_cpu_us_per_job"), "{:.1f}", False),
    ("Redis cmds/job c=1", ("drain_c1", "redis_cmds_per_job"), "{:.1f}", False),
    ("Redis cmds/job c=50", ("drain_c50", "redis_cmds_per_job"), "{:.1f}", False),
    ("worker CPU µs/job c=1", ("drain_c1", "client_cpu_us_per_job"), "{:.0f}", False),
    ("worker CPU µs/job c=50", ("drain_c50", "client_cpu_us_per_job"), "{:.0f}", False),
]
PLAIN_PHASES = ("seq", "bulk", "latency")

# Per job = per parent or child: a tree of 1 + C jobs costs (1 + C) times these.
FLOW_COLUMNS: list[Column] = [
    ("flows added /s", ("flow", "enqueue", "flows_per_s"), "{:,.0f}", True),
    ("flow jobs added /s", ("flow", "enqueue", "jobs_per_s"), "{:,.0f}", True),
    ("flow jobs drained /s", ("flow", "drain", "rate"), "{:,.0f}", True),
    ("Redis CPU µs/job add", ("flow", "enqueue", "redis_cpu_us_per_job"), "{:.1f}", False),
    ("Redis CPU µs/job drain", ("flow", "drain", "redis_cpu_us_per_job"), "{:.1f}", False),
    ("Redis cmds/job add", ("flow", "enqueue", "redis_cmds_per_job"), "{:.2f}", False),
    ("Redis cmds/job drain", ("flow", "drain", "redis_cmds_per_job"), "{:.2f}", False),
    ("producer CPU µs/job", ("flow", "enqueue", "client_cpu_us_per_job"), "{:.0f}", False),
    ("worker CPU µs/job", ("flow", "drain", "client_cpu_us_per_job"), "{:.0f}", False),
    ("parent release p50 ms", ("flow", "drain", "release_p50_ms"), "{:.2f}", False),
]

SCHEDULER_COLUMNS: list[Column] = [
    ("iterations /s", ("scheduler", "iterations_per_s"), "{:,.0f}", True),
    ("of ideal", ("scheduler", "of_ideal"), "{:.1%}", True),
    ("lateness p50 ms", ("scheduler", "lateness_p50_ms"), "{:.1f}", False),
    ("lateness p99 ms", ("scheduler", "lateness_p99_ms"), "{:.1f}", False),
    ("Redis CPU µs/iteration", ("scheduler", "redis_cpu_us_per_iteration"), "{:.1f}", False),
    ("Redis cmds/iteration", ("scheduler", "redis_cmds_per_iteration"), "{:.2f}", False),
    ("worker CPU µs/iteration", ("scheduler", "worker_cpu_us_per_iteration"), "{:.0f}", False),
]


def _get(entry: dict[str, Any], path: tuple[str, ...]) -> float | None:
    node: Any = entry.get("median")
    for key in path:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node if isinstance(node, (int, float)) else None


def table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _tables(
    results: list[dict[str, Any]],
    ref: dict[str, Any] | None,
    reference: str,
    columns: list[Column],
    missing: Any,
    ratio_note: str,
) -> list[str]:
    """The medians table and, when the reference has figures, the ratios table."""
    rows = []
    for r in results:
        row = [r["peer"], str(r.get("version", "?"))]
        for _title, path, fmt, _hib in columns:
            v = _get(r, path)
            row.append(fmt.format(v) if v is not None else missing(r))
        rows.append(row)
    out = [table(["peer", "version", *[c[0] for c in columns]], rows)]
    if ref is None:
        return out
    out += ["", f"Ratios vs {reference} (peer / {reference}; {ratio_note})", ""]
    rows = []
    for r in results:
        row = [r["peer"]]
        for _title, path, _fmt, _hib in columns:
            v, b = _get(r, path), _get(ref, path)
            row.append(f"{v / b:.2f}×" if v is not None and b else missing(r))
        rows.append(row)
    out.append(table(["peer", *[c[0] for c in columns]], rows))
    return out


def _load(m: dict[str, Any]) -> str:
    """The 1-minute load average at the start and end of the run (other work on the box)."""
    if "loadavg_start" not in m:
        return ""
    return (
        f" Load average (1 min) {m['loadavg_start'][0]:.1f} at the start, "
        f"{m['loadavg_end'][0]:.1f} at the end."
    )


def render(data: dict[str, Any]) -> str:
    results = data["results"]
    reference = data["reference"]
    ref = next((r for r in results if r["peer"] == reference and r.get("median")), None)
    phases = data.get("phases", [*PLAIN_PHASES])  # older result files: no flow phase
    m = data["machine"]
    what = {"flow": "flows", "scheduler": "job schedulers"}.get(
        phases[0] if len(phases) == 1 else "", f"{data['jobs']} jobs"
    )
    out = [
        f"## Results: {what}, median of {data['repeats']} repeats",
        "",
        f"Machine: {m['cpus']} CPUs ({m['cpu_model']}), {m['os']}; Redis {m['redis']}; "
        f"Python {m['python']}; Node {m['node']}. Phases: {', '.join(phases)}." + _load(m),
        "",
    ]
    if any(ph in phases for ph in PLAIN_PHASES):
        out += [
            f"Bulk batches of {data['batch']}; {data['latency_samples']} latency samples "
            "(fewer if the time budget ran out). "
            "`-` = the library has no such API or mode (see docs/benchmarks.md).",
            "",
        ]
        out += _tables(
            results,
            ref,
            reference,
            COLUMNS,
            lambda r: "-",
            "for the first four columns higher is better, for the rest lower is better",
        )
    if "flow" in phases:
        f = data["flow"]
        out += [
            "",
            f"### Flows: {f['trees']:,} trees of 1 parent + {f['children']} children "
            f"({f['trees'] * (f['children'] + 1):,} jobs, one queue)",
            "",
            f"Added with the bulk flow call, {f['batch']} trees per call; drained by one worker "
            f"at concurrency {f['concurrency']}, every processor returning 1. Per job = per "
            "parent or child. Parent release = parent processor start - its last child's "
            "processor return. n/a = the library has no flow API.",
            "",
        ]
        out += _tables(
            results,
            ref,
            reference,
            FLOW_COLUMNS,
            lambda r: "n/a" if r.get("flows") is False else "-",
            "for the first three columns higher is better, for the rest lower is better",
        )

    if "scheduler" in phases and "scheduler" in data:
        sc = data["scheduler"]
        out += [
            "",
            f"### Schedulers: {sc['schedulers']:,} every-schedulers of {sc['every_s']:g} s, "
            f"one queue, {sc['duration_s']:g} s",
            "",
            f"One worker process at concurrency {sc['concurrency']}, every processor returning "
            f"at once; measured over {sc['duration_s']:g} s after a 2 s warm-up. Ideal = "
            f"{sc['schedulers'] / sc['every_s']:,.0f} iterations/s. Lateness = processor start - "
            "the iteration's scheduled time (the ms in its id). Per iteration = per processor "
            "start in the window. n/a = the library has no job schedulers.",
            "",
        ]
        out += _tables(
            results,
            ref,
            reference,
            SCHEDULER_COLUMNS,
            lambda r: "n/a" if r.get("schedulers") is False else "-",
            "for the first two columns higher is better, for the rest lower is better",
        )

    lat = [(r["peer"], _get(r, ("latency", "samples"))) for r in results]
    short = [f"{p}: {int(s)}" for p, s in lat if s is not None and s < data["latency_samples"]]
    if short:
        out += ["", "Latency samples cut by the time budget: " + ", ".join(short)]
    bad = [r for r in results if r["status"] != "ok"]
    if bad:
        out += ["", "### Failures", ""]
        out += [f"- **{r['peer']}** ({r['status']}): {r.get('error', '')}" for r in bad]
    return "\n".join(out) + "\n"


def publish(text: str, data: dict[str, Any], output: Path | None) -> None:
    """Print ``text``; with ``output``, also write it to OUTPUT.md and ``data`` to OUTPUT.json."""
    print("\n" + text)
    if output is None:
        return
    md, js = output.with_suffix(".md"), output.with_suffix(".json")
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text(text)
    js.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {md} and {js}")
