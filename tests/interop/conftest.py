"""The interop tests need Node.js 20+ and the pinned BullMQ in tests/node_modules.

When either is missing, every test here is skipped, before any fixture runs, with one reason
that pytest's ``-ra`` summary prints as one line. With ``ECHOMQ_REQUIRE_NODE=1`` (CI sets it) a
missing Node is an error instead: the run stops before any test, with the reason.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Generator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:  # works with or without __init__.py
    sys.path.insert(0, str(HERE))

import nodepeer  # noqa: E402

REQUIRE_ENV = "ECHOMQ_REQUIRE_NODE"
_PROBLEM = pytest.StashKey[str | None]()


def node_problem() -> str | None:
    """Why the Node peer cannot run here, or None when it can."""
    binary = nodepeer.node_binary()
    if binary is None:
        return "node is not on PATH (or set ECHOMQ_NODE)"
    if not nodepeer.node_available():
        return f"{binary} is not a runnable Node.js 20 or later"
    try:
        nodepeer.require_node_modules()
    except nodepeer.NodeModulesMissing as missing:
        return str(missing)
    return None


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_PROBLEM] = node_problem()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    problem = config.stash[_PROBLEM]
    if problem is None:
        return
    mine = [item for item in items if item.path.is_relative_to(HERE)]
    if mine and os.environ.get(REQUIRE_ENV) == "1":
        raise pytest.UsageError(
            f"{REQUIRE_ENV}=1 but the {len(mine)} interop tests cannot run: {problem}"
        )
    skip = pytest.mark.skip(
        reason=f"interop tests need Node.js 20+ and BullMQ: {problem} ({REQUIRE_ENV}=1 fails)"
    )
    for item in mine:
        item.add_marker(skip)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Report every Node skip at tests/interop, no line: ``-ra`` folds them into one line."""
    report = yield
    if (
        report.skipped
        and item.config.stash[_PROBLEM] is not None
        and isinstance(report.longrepr, tuple)
    ):
        # A None line is what pytest itself uses for folded skips (typed as int all the same).
        report.longrepr = (str(HERE), None, report.longrepr[2])  # type: ignore[assignment]
    return report
