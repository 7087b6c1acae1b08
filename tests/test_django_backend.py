"""The Django 6 tasks backend, run from the main suite.

Django 6 needs Python 3.12+, so its tests (tests/django_project: a real project, its settings,
an app with tasks and views, ``manage.py echomq_worker`` processes) run in an interpreter that
has Django 6: ``$ECHOMQ_DJANGO_PYTHON``, else ``.venv-django/bin/python`` at the repository
root (scripts/test creates it). They use their own session Redis, like this suite.
"""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DJANGO_PYTHON_ENV = "ECHOMQ_DJANGO_PYTHON"


def django_python() -> str:
    """The interpreter with Django 6 and echomq's dev dependencies installed."""
    given = os.environ.get(DJANGO_PYTHON_ENV)
    path = Path(given) if given else ROOT / ".venv-django" / "bin" / "python"
    if not path.exists():
        pytest.fail(
            f"no Python with Django 6 at {path}: create it with\n"
            f"  python3.12 -m venv .venv-django && "
            f".venv-django/bin/pip install -e '.[dev,django]'\n"
            f"or point {DJANGO_PYTHON_ENV} at one",
            pytrace=False,
        )
    return str(path)


@pytest.mark.timeout(300)
def test_the_django_project_suite_passes_on_django_6() -> None:
    python = django_python()
    version = subprocess.run(
        [python, "-c", "import django; print(django.VERSION[0])"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert version.returncode == 0, version.stderr
    assert int(version.stdout) >= 6
    done = subprocess.run(
        [python, "-m", "pytest", "tests/django_project", "-q", "-p", "no:cacheprovider"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    sys.stdout.write(done.stdout[-4000:])
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout


@pytest.mark.timeout(300)
def test_each_django_module_imports_first_under_django_6() -> None:
    # The counterpart of tests/test_layers.py, which can only see their pip-command error
    # where Django is missing.
    package = ROOT / "src" / "echomq" / "contrib" / "django"
    modules = sorted(
        ".".join(
            ("echomq", *path.relative_to(package.parents[1]).with_suffix("").parts)
        ).removesuffix(".__init__")
        for path in package.rglob("*.py")
    )
    assert "echomq.contrib.django.management.commands.echomq_worker" in modules
    python = django_python()

    def import_alone(name: str) -> tuple[str, str]:
        done = subprocess.run(
            [python, "-W", "error", "-c", f"import {name}"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        return name, done.stderr.strip().splitlines()[-1] if done.returncode else ""

    with ThreadPoolExecutor(max_workers=4) as pool:
        failed = {name: error for name, error in pool.map(import_alone, modules) if error}
    assert failed == {}


@pytest.mark.parametrize("django_init", ["", "raise ImportError('broken install')\n"])
def test_importing_without_django_6_names_the_pip_command(tmp_path: Path, django_init: str) -> None:
    # A `django` without `django.tasks` (Django 5, say), or one that fails to import.
    fake = tmp_path / "django"
    fake.mkdir()
    (fake / "__init__.py").write_text(django_init)
    done = subprocess.run(
        [sys.executable, "-c", "import echomq.contrib.django"],
        env={"PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "needs Django 6.0 or later" in done.stderr
    assert "pip install 'echomq[django]'" in done.stderr
