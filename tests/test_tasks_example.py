"""examples/typed_tasks.py: it runs against the session server, and ``mypy --strict`` accepts it
(and refuses a call whose arguments or result type do not match the task's function)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "typed_tasks.py"


def mypy(*paths: Path, cache: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(cache), *map(str, paths)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )


def test_the_example_runs(redis_url: str) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), redis_url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "ada@example.com: 2 words",
        "HELLO; CALLED DIRECTLY",
    ]


@pytest.mark.timeout(300)
def test_mypy_strict_accepts_the_example_and_refuses_mistakes(tmp_path: Path) -> None:
    bad = tmp_path / "bad_tasks.py"
    bad.write_text(
        textwrap.dedent(
            """
            import echomq

            @echomq.task(queue="q")
            async def double(n: int) -> int:
                return n * 2

            async def main() -> None:
                job = await double.aenqueue("two")
                text: str = await double.aresult(job)
                same: int = await double(3)
                print(text, same)
            """
        )
    )
    done = mypy(EXAMPLE, bad, cache=tmp_path / "cache")
    errors = [line for line in done.stdout.splitlines() if ": error:" in line]
    assert all("bad_tasks.py" in line for line in errors), done.stdout
    assert len(errors) == 2, done.stdout
    assert 'Argument 1 to "aenqueue" of "Task" has incompatible type "str"' in errors[0]
    assert 'Incompatible types in assignment (expression has type "int"' in errors[1]
