"""Result rows of scenario runs, and the Markdown table ``scripts/faults`` writes."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Row:
    """What one run of one scenario measured.

    ``duplicates`` counts extra starts (a job started three times counts two);
    ``allowed`` is how many the scenario's physics explains at most (jobs running in a
    process that was killed, processors that blocked past their lock...), ``excess`` how
    many went beyond that allowance, job by job. ``recovery`` is
    the scenario's recovery time in seconds (its docstring defines it), ``bound`` the limit
    the echomq run is held to.
    """

    scenario: str
    impl: str
    nodeid: str
    runtime: float = 0.0
    jobs: int = 0
    lost: int = 0
    duplicates: int = 0
    allowed: int = 0
    excess: int = 0
    recovery: float | None = None
    bound: float | None = None
    faults: int = 0
    verdict: str = ""
    #: Scenario-specific numbers (e.g. ``promotion`` s, ``innocents_failed``), shown in the
    #: second table.
    marks: dict[str, float] = field(default_factory=dict)


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


HEADER = (
    "| Scenario | Workers | Faults | Runtime (s) | Jobs | Lost | Duplicates | Allowed | Excess "
    "| Recovery (s) | Bound (s) | Result |\n"
    "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n"
)


def _order(row: Row) -> tuple[int, str, int]:
    number = row.scenario.partition(" ")[0]  # "2b" sorts after "2", before "3"
    digits = "".join(c for c in number if c.isdigit())
    return int(digits or 0), number, 0 if row.impl == "node" else 1


def markdown(rows: list[Row]) -> str:
    """The rows as a Markdown table, by scenario number, the baseline first."""
    lines = [
        f"| {r.scenario} | {r.impl} | {r.faults} | {r.runtime:.1f} | {r.jobs} | {r.lost} "
        f"| {r.duplicates} | {r.allowed} | {r.excess} | {_num(r.recovery)} | {_num(r.bound)} "
        f"| {r.verdict} |"
        for r in sorted(rows, key=_order)
    ]
    return HEADER + "\n".join(lines) + "\n"


#: Marks shown in the second table: seconds from the fault until a replica was promoted;
#: jobs that ended failed although they were not the poison job; jobs that ended failed where
#: none should (a processor that blocked its event loop); the most executions of one group
#: that overlapped, per the ledger (tests/faults/test_faults_groups.py).
PUBLISHED_MARKS = ("promotion", "innocents_failed", "jobs_failed", "group_overlap")


def marks_markdown(rows: list[Row]) -> str:
    """The rows that carry published marks, with those as columns (empty when none does)."""
    marked = [r for r in sorted(rows, key=_order) if set(r.marks) & set(PUBLISHED_MARKS)]
    if not marked:
        return ""
    names = [n for n in PUBLISHED_MARKS if any(n in r.marks for r in marked)]
    head = "| Scenario | Workers | Recovery (s) | Bound (s) | Lost | Duplicates | Allowed | "
    head += " | ".join(names) + " | Result |\n"
    head += "|---|---|" + "---:|" * (5 + len(names)) + "---|\n"
    lines = [
        f"| {r.scenario} | {r.impl} | {_num(r.recovery)} | {_num(r.bound)} | {r.lost} "
        f"| {r.duplicates} | {r.allowed} | "
        + " | ".join(_num(r.marks.get(name)) for name in names)
        + f" | {r.verdict} |"
        for r in marked
    ]
    return head + "\n".join(lines) + "\n"
