"""The interop tests without Node: one skip line, or one error with ``ECHOMQ_REQUIRE_NODE=1``.

Runs pytest in a subprocess on tests/interop/test_node_driver.py with a PATH that holds no
``node`` (the rule lives in tests/interop/conftest.py). This file sits outside tests/interop so
that it runs where Node is absent too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from echomq.embedded import find_redis_server

ROOT = Path(__file__).resolve().parent.parent
TARGET = "tests/interop/test_node_driver.py"


def run_without_node(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"  # only python: no node, whatever the machine has
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    child_env = {key: value for key, value in os.environ.items() if not key.startswith("ECHOMQ_")}
    child_env.update(PATH=str(bin_dir), ECHOMQ_REDIS_SERVER=find_redis_server(), **env)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", TARGET],
        cwd=ROOT,
        env=child_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_interop_tests_skip_with_one_line_without_node(tmp_path: Path) -> None:
    run = run_without_node(tmp_path)
    skip_lines = [line for line in run.stdout.splitlines() if line.startswith("SKIPPED")]
    assert run.returncode == 0, run.stdout + run.stderr
    assert len(skip_lines) == 1, run.stdout
    assert "interop tests need Node.js 20+" in skip_lines[0]
    assert "node is not on PATH" in skip_lines[0]
    assert " passed" not in run.stdout and " skipped" in run.stdout


def test_interop_tests_fail_without_node_when_required(tmp_path: Path) -> None:
    run = run_without_node(tmp_path, ECHOMQ_REQUIRE_NODE="1")
    assert run.returncode == 4, run.stdout + run.stderr  # pytest's usage error
    assert "ECHOMQ_REQUIRE_NODE=1 but the" in run.stderr
    assert "node is not on PATH" in run.stderr
