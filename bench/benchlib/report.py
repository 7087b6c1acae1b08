"""Markdown tables of the medians, and ratios against the reference peer.

One table (plus its ratios) for the plain phases (seq, bulk, latency), one for the flow
phase and one for the scheduler phase, each only when one of its phases ran; peers without a
flow API (or job schedulers) show n/a there. The failing, producers and lateness phases get
tables of medians with their min-max over the repeats, and ratios taken within each repeat
(peer / reference of the same repeat; median, min-max); a peer that could not express the
phase is listed under the table with its reason.
"""

from __future__ import annotations

import json
import statistics
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


# (title, path into the phase's dict of one repeat, format, higher_is_better or None: no ratio)
RepeatColumn = tuple[str, tuple[str, ...], str, bool | None]


def failing_columns(concurrencies: list[int]) -> list[RepeatColumn]:
    out: list[RepeatColumn] = []
    for c in concurrencies:
        k = f"c{c}"
        out += [
            (f"jobs/s c={c}", (k, "rate"), "{:,.0f}", True),
            (f"worker CPU µs/job c={c}", (k, "worker_cpu_us_per_job"), "{:.0f}", False),
            (f"Redis CPU µs/job c={c}", (k, "redis_cpu_us_per_job"), "{:.1f}", False),
            (f"Redis cmds/job c={c}", (k, "redis_cmds_per_job"), "{:.1f}", False),
        ]
    return out


def producer_columns(counts: list[int]) -> list[RepeatColumn]:
    out: list[RepeatColumn] = [
        (f"adds/s P={p}", (f"p{p}", "rate"), "{:,.0f}", True) for p in counts
    ]
    for p in counts:
        out += [
            (f"producer CPU µs/add P={p}", (f"p{p}", "producer_cpu_us_per_add"), "{:.1f}", False),
            (f"Redis CPU µs/add P={p}", (f"p{p}", "redis_cpu_us_per_add"), "{:.1f}", False),
        ]
    return out


LATENESS_COLUMNS: list[RepeatColumn] = [
    ("p50 ms", ("p50_ms",), "{:,.1f}", False),
    ("p99 ms", ("p99_ms",), "{:,.1f}", False),
    ("max ms", ("max_ms",), "{:,.1f}", False),
    ("started early", ("early",), "{:.0f}", None),
    ("add time s", ("enqueue_s",), "{:.2f}", None),
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


def _at(node: Any, path: tuple[str, ...]) -> float | None:
    for key in path:
        if not isinstance(node, dict):
            return None
        node = node.get(key)
    return node if isinstance(node, (int, float)) else None


def _spread(values: list[float], fmt: str) -> str:
    """Median, and the min-max when there are several values."""
    if not values:
        return "-"
    text = fmt.format(statistics.median(values))
    if len(values) > 1:
        text += f" ({fmt.format(min(values))}–{fmt.format(max(values))})"
    return text


#: One row of a repeat table: label, version, the phase's dict of each repeat ({} if none).
Row = tuple[str, str, list[dict[str, Any]]]


def phase_rows(
    results: list[dict[str, Any]], phase: str, sub: str = ""
) -> tuple[list[Row], list[str]]:
    """The rows of peers that ran ``phase`` (``sub``: a dict inside it, e.g. Node's ``ap``),
    and the lines saying why the others did not."""
    rows: list[Row] = []
    notes: list[str] = []
    for r in results:
        if r["status"] != "ok" or not r.get("repeats"):
            continue
        reps = [rep.get(phase) or {} for rep in r["repeats"]]
        if sub:
            if not any(sub in x for x in reps):
                continue
            reps = [x.get(sub) or {} for x in reps]
        label = f"{r['peer']}+{sub}" if sub else r["peer"]
        reasons = sorted({x["skipped"] for x in reps if "skipped" in x})
        failed = sum(1 for x in reps if "failed" in x)
        if failed:
            reasons.append(f"verification failed in {failed} of {len(reps)} repeats (see Failures)")
        if all(set(x) <= {"skipped", "failed"} for x in reps):
            if reasons:
                notes.append(f"- {label}: {'; '.join(reasons)}")
            continue
        if reasons:
            notes.append(f"- {label}, in part: {'; '.join(reasons)}")
        rows.append((label, str(r.get("version", "?")), reps))
    return rows, notes


def repeat_tables(
    rows: list[Row], ref: Row | None, columns: list[RepeatColumn], ratio_note: str
) -> list[str]:
    """Medians (min-max) per row, then ratios to ``ref`` taken within each repeat."""
    body = []
    for label, version, reps in rows:
        cells = [
            _spread([v for x in reps if (v := _at(x, c[1])) is not None], c[2]) for c in columns
        ]
        body.append([label, version, *cells])
    out = [table(["peer", "version", *[c[0] for c in columns]], body)]
    ratio_cols = [c for c in columns if c[3] is not None]
    if ref is None or not ratio_cols or all(row[0] == ref[0] for row in rows):
        return out
    body = []
    for label, _version, reps in rows:
        if label == ref[0]:
            continue
        cells = []
        for c in ratio_cols:
            values = []
            for x, y in zip(reps, ref[2]):
                a, b = _at(x, c[1]), _at(y, c[1])
                if a is not None and b:
                    values.append(a / b)
            cells.append(_spread(values, "{:.2f}×"))
        body.append([label, *cells])
    out += [
        "",
        f"Ratios vs {ref[0]}, taken within each repeat (median, min–max; {ratio_note}):",
        "",
        table(["peer", *[c[0] for c in ratio_cols]], body),
    ]
    return out


def _section(
    results: list[dict[str, Any]],
    reference: str,
    phase: str,
    head: list[str],
    columns: list[RepeatColumn],
    ratio_note: str,
) -> list[str]:
    """One phase's title and text (``head``), tables, and the peers that did not run it (for
    the producers phase, Node's auto-pipelining row too, and ratios against it)."""
    rows, notes = phase_rows(results, phase)
    out = ["", *head, ""]
    ap_rows = phase_rows(results, phase, "ap")[0] if phase == "producers" else []
    ref = next((row for row in rows if row[0] == reference), None)
    out += repeat_tables(rows + ap_rows, ref, columns, ratio_note)
    others = [row for row in rows if row[0] != reference]
    for ref_ap in ap_rows:
        rates = [c for c in columns if c[1][-1] == "rate"]
        if others:
            out += repeat_tables(others, ref_ap, rates, "higher is better")[1:]
    return out + (["", "Not run:", "", *notes] if notes else [])


#: The failing, producers and lateness sections: title, text (both formatted with the run's
#: settings of the phase), the columns for those settings, and the ratio tables' note.
EXTRA_SECTIONS: dict[str, tuple[str, str, Any, str]] = {
    "failing": (
        "### Failing jobs: {jobs:,} jobs that fail once, then succeed",
        "attempts={attempts}, no backoff, added in bulk (one by one without a bulk API); one "
        "worker whose processor raises on each job's first attempt, through the library's own "
        "retry mechanism. jobs/s = (jobs - 1) / (first attempt's start -> last job's successful "
        "start). Checked: every job failed once and succeeded once. Figures: median (min–max) of "
        "the repeats.",
        lambda d: failing_columns(d["concurrencies"]),
        "jobs/s: higher is better",
    ),
    "producers": (
        "### Many producers: {adds:,} adds from P concurrent producers on one queue",
        "One process; P coroutines (Node: async functions) share one queue object (arq: one "
        "pool; taskiq: one broker). bullmq-node+ap = BullMQ with ioredis enableAutoPipelining. "
        "Checked: the queue holds every job afterwards. Figures: median (min–max) of the "
        "repeats.",
        lambda d: producer_columns(d["counts"]),
        "adds/s: higher is better",
    ),
    "lateness": (
        "### Delayed jobs: {jobs:,} jobs, delays spread over {span_s:g} s",
        "Added up front (in bulk where the library has a bulk add with delays); one worker at "
        "concurrency {concurrency}. Lateness = processor start - due time (the wall clock just "
        "before the add call + the delay), in ms; 'started early' counts jobs that started "
        "before it. Figures: median (min–max) of the repeats.",
        lambda d: LATENESS_COLUMNS,
        "lower is better",
    ),
}


def _extra_phases(data: dict[str, Any], phases: list[str]) -> list[str]:
    """The failing, producers and lateness tables (those of the phases that ran)."""
    out: list[str] = []
    for phase, (title, text, columns, note) in EXTRA_SECTIONS.items():
        if phase in phases and phase in data:
            d = data[phase]
            head = [title.format(**d), "", text.format(**d)]
            out += _section(data["results"], data["reference"], phase, head, columns(d), note)
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
    what = {
        "flow": "flows",
        "scheduler": "job schedulers",
        "failing": "failing jobs",
        "producers": "many producers",
        "lateness": "delayed jobs",
    }.get(phases[0] if len(phases) == 1 else "", f"{data['jobs']} jobs")
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

    out += _extra_phases(data, phases)

    lat = [(r["peer"], _get(r, ("latency", "samples"))) for r in results]
    short = [f"{p}: {int(s)}" for p, s in lat if s is not None and s < data["latency_samples"]]
    if short:
        out += ["", "Latency samples cut by the time budget: " + ", ".join(short)]
    bad = [r for r in results if r["status"] != "ok"]
    phase_failures = [(r["peer"], f) for r in results for f in r.get("phase_failures", [])]
    if bad or phase_failures:
        out += ["", "### Failures", ""]
        out += [f"- **{r['peer']}** ({r['status']}): {r.get('error', '')}" for r in bad]
        out += [f"- **{peer}** (FAILED, that phase only): {f}" for peer, f in phase_failures]
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
