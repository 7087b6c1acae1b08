"""``echomq worker MODULE``: every task of a module, one worker per queue, run by the real
command in its own process."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from uuid import uuid4

import pytest

import echomq
from _cli import DEADLINE, base_env, cli, wait_until

TASKS_MODULE = textwrap.dedent(
    """
    import echomq

    @echomq.task(queue="{queue}-mail")
    async def send_welcome(to: str, name: str = "there") -> str:
        return f"hello {{name}} <{{to}}>"

    @echomq.task(queue="{queue}-math", name="double")
    def double(n: int) -> int:
        return n * 2

    not_a_task = 42
    """
)


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, str]:
    """A directory holding ``cli_tasks_<id>.py`` (tasks on two queues), and the module name."""
    queue = f"q{uuid4().hex[:10]}"
    module = f"cli_tasks_{queue}"
    (tmp_path / f"{module}.py").write_text(TASKS_MODULE.format(queue=queue))
    return tmp_path, module


def state(url: str, queue: str, job_id: str) -> str:
    return str(echomq.sync.get_state(queue, job_id, connection=url))


def test_worker_runs_every_task_of_a_module(project: tuple[Path, str], redis_url: str) -> None:
    cwd, module = project
    queue = module.removeprefix("cli_tasks_")
    mail = echomq.sync.add(f"{queue}-mail", "send_welcome", {"to": "a@b.c"}, connection=redis_url)
    math = echomq.sync.add(f"{queue}-math", "double", {"n": "21"}, connection=redis_url)
    log = cwd / "worker.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "echomq.cli", "worker", module, "--url", redis_url]
            + ["--drain-delay", "0.5"],
            cwd=cwd,
            env=base_env(),
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        wait_until(
            lambda: (
                state(redis_url, f"{queue}-mail", mail.id) == "completed"
                and state(redis_url, f"{queue}-math", math.id) == "completed"
            ),
            "both tasks completed",
        )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=DEADLINE) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    got = echomq.sync.get_job(f"{queue}-math", math.id, connection=redis_url)
    assert got is not None and got.return_value == 42
    text = log.read_text()
    assert f"processing queue {queue}-mail" in text and "tasks send_welcome of" in text
    assert f"processing queue {queue}-math" in text and "tasks double of" in text


def test_queue_selects_the_tasks_of_one_queue(project: tuple[Path, str], redis_url: str) -> None:
    cwd, module = project
    queue = module.removeprefix("cli_tasks_")
    mail = echomq.sync.add(f"{queue}-mail", "send_welcome", {"to": "a@b.c"}, connection=redis_url)
    math = echomq.sync.add(f"{queue}-math", "double", {"n": 2}, connection=redis_url)
    proc = subprocess.Popen(
        [sys.executable, "-m", "echomq.cli", "worker", module, "--queue", f"{queue}-math"]
        + ["--url", redis_url, "--drain-delay", "0.5"],
        cwd=cwd,
        env=base_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(
            lambda: state(redis_url, f"{queue}-math", math.id) == "completed", "the math task"
        )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=DEADLINE) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert state(redis_url, f"{queue}-mail", mail.id) == "waiting"  # not this worker's queue
    done = cli(
        "worker", module, "--queue", "elsewhere", "--url", redis_url, env=base_env(), cwd=cwd
    )
    assert done.returncode == 2
    assert "has no task on queue 'elsewhere'" in done.stderr
    assert f"{queue}-mail, {queue}-math" in done.stderr
    done = cli("worker", f"{module}:double", "--url", redis_url, env=base_env(), cwd=cwd)
    assert done.returncode == 2
    assert "--queue is required with PROCESSOR module:function" in done.stderr
