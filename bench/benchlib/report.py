"""Markdown tables of the medians, and ratios against the reference peer."""

from __future__ import annotations

from typing import Any

# (column title, path into the median dict, format, higher_is_better)
COLUMNS: list[tuple[str, tuple[str, ...], str, bool]] = [
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


def render(data: dict[str, Any]) -> str:
    results = data["results"]
    ref = next((r for r in results if r["peer"] == data["reference"] and r.get("median")), None)
    m = data["machine"]
    out = [
        f"## Results: {data['jobs']} jobs, median of {data['repeats']} repeats",
        "",
        f"Machine: {m['cpus']} CPUs ({m['cpu_model']}), {m['os']}; Redis {m['redis']}; "
        f"Python {m['python']}; Node {m['node']}. Bulk batches of {data['batch']}; "
        f"{data['latency_samples']} latency samples (fewer if the time budget ran out).",
        "",
        "`-` = the library has no such API or mode (see docs/benchmarks.md).",
        "",
    ]
    rows = []
    for r in results:
        row = [r["peer"], str(r.get("version", "?"))]
        for _title, path, fmt, _hib in COLUMNS:
            v = _get(r, path)
            row.append(fmt.format(v) if v is not None else "-")
        rows.append(row)
    out.append(table(["peer", "version", *[c[0] for c in COLUMNS]], rows))

    if ref is not None:
        out += [
            "",
            f"### Ratios vs {data['reference']} (peer / {data['reference']}; "
            "for the first four columns higher is better, for the rest lower is better)",
            "",
        ]
        rows = []
        for r in results:
            row = [r["peer"]]
            for _title, path, _fmt, _hib in COLUMNS:
                v, b = _get(r, path), _get(ref, path)
                row.append(f"{v / b:.2f}×" if v is not None and b else "-")
            rows.append(row)
        out.append(table(["peer", *[c[0] for c in COLUMNS]], rows))

    lat = [(r["peer"], _get(r, ("latency", "samples"))) for r in results]
    short = [f"{p}: {int(s)}" for p, s in lat if s is not None and s < data["latency_samples"]]
    if short:
        out += ["", "Latency samples cut by the time budget: " + ", ".join(short)]
    bad = [r for r in results if r["status"] != "ok"]
    if bad:
        out += ["", "### Failures", ""]
        out += [f"- **{r['peer']}** ({r['status']}): {r.get('error', '')}" for r in bad]
    return "\n".join(out) + "\n"
