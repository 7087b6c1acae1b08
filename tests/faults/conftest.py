"""Fixtures and reporting of the fault suite (tests/faults).

Every scenario starts its own redis-server(s) and worker processes through the ``lab``
fixture; each run adds a result row. The rows are printed as a table at the end of the
session and, when ``$ECHOMQ_FAULTS_REPORT`` names a file, written there as Markdown (that is
how ``scripts/faults`` produces its report). ``$ECHOMQ_FAULTS_SCALE`` picks the sizes
(``ci`` by default, ``full``); see ``faultkit/scale.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from faultkit.lab import Lab
from faultkit.results import Row, markdown, marks_markdown
from faultkit.scale import is_full, scale
from faultkit.workers import node_problem

REPORT_ENV = "ECHOMQ_FAULTS_REPORT"
ROWS = pytest.StashKey[list[Row]]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[ROWS] = []
    config.addinivalue_line(
        "markers", "faults_baseline: also run the Node baseline at the ci scale"
    )


@pytest.fixture
def lab(request: pytest.FixtureRequest, tmp_path: Path) -> Lab:
    """Runs of scenarios for this test; each run closes everything it started."""
    return Lab(tmp_path, request.node.nodeid, request.config.stash[ROWS])


@pytest.fixture
def baseline(request: pytest.FixtureRequest) -> bool:
    """Whether this test also runs the Node (BullMQ) baseline.

    Always at the ``full`` scale; at the ``ci`` scale only for tests marked
    ``@pytest.mark.faults_baseline``. Fails (never skips silently) when Node or
    tests/node_modules is missing.
    """
    wanted = is_full() or request.node.get_closest_marker("faults_baseline") is not None
    if wanted and (problem := node_problem()) is not None:
        pytest.fail(f"the Node baseline cannot run: {problem}", pytrace=False)
    return wanted


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    rows = terminalreporter.config.stash.get(ROWS, [])
    if rows:
        terminalreporter.write_sep("=", f"fault suite results (scale {scale()})")
        terminalreporter.write(markdown(rows))
        if extra := marks_markdown(rows):
            terminalreporter.write("\n" + extra)


def pytest_sessionfinish(session: pytest.Session) -> None:
    target = os.environ.get(REPORT_ENV)
    rows = session.config.stash.get(ROWS, [])
    if target and rows:
        extra = marks_markdown(rows)
        Path(target).write_text(markdown(rows) + (f"\n{extra}" if extra else ""))
