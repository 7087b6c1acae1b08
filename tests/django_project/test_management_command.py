"""``manage.py echomq_worker``: a real worker process running the project's tasks."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.tasks import TaskResultStatus, task_backends
from django.test import Client
from django.test.utils import override_settings
from shop import tasks

from echomq.contrib.django.management.commands.echomq_worker import worker_argv

from .conftest import PROJECT
from .test_backend import wait_finished

pytestmark = pytest.mark.usefixtures("tasks_settings")


def manage(*args: str, redis_url: str, prefix: str, debug: bool = False) -> subprocess.Popen[str]:
    env = {**os.environ, "ECHOMQ_REDIS_URL": redis_url, "ECHOMQ_PREFIX": prefix}
    env["DJANGO_DEBUG"] = "1" if debug else "0"
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.Popen(
        [sys.executable, "manage.py", *args],
        cwd=PROJECT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


async def test_the_command_runs_tasks_enqueued_by_a_view(redis_url: str, prefix: str) -> None:
    worker = manage(
        "echomq_worker", "--queue", "emails", "-c", "2", redis_url=redis_url, prefix=prefix
    )
    try:
        response = await asyncio.to_thread(
            Client().post,
            "/orders/",
            '{"order": 1, "email": "ada@example.com"}',
            content_type="application/json",
        )
        result = await tasks.send_receipt.aget_result(response.json()["task"])
        await wait_finished(result, timeout=30)
        assert result.status == TaskResultStatus.SUCCESSFUL
        assert result.return_value == {"order": 1, "to": "ada@example.com"}
    finally:
        worker.send_signal(signal.SIGTERM)
        output, _ = worker.communicate(timeout=30)
    assert worker.returncode == 0, output
    assert "processing queue emails" in output
    assert "echomq.contrib.django.worker:run_task" in output


async def test_under_debug_each_task_state_is_logged_once(redis_url: str, prefix: str) -> None:
    """With ``DEBUG = True`` Django's own console handler prints ``django.tasks`` records;
    the worker's log handler must not print them a second time."""
    worker = manage(
        "echomq_worker", "--queue", "emails", redis_url=redis_url, prefix=prefix, debug=True
    )
    try:
        result = await tasks.send_receipt.aenqueue(7, email="ada@example.com")
        await wait_finished(result, timeout=30)
        assert result.status == TaskResultStatus.SUCCESSFUL
    finally:
        worker.send_signal(signal.SIGTERM)
        output, _ = worker.communicate(timeout=30)
    assert worker.returncode == 0, output
    for state in ("RUNNING", "SUCCESSFUL"):
        lines = [line for line in output.splitlines() if f"id={result.id} " in line]
        assert sum(f"state={state}" in line for line in lines) == 1, output


def test_the_command_offers_every_option_of_echomq_worker(redis_url: str, prefix: str) -> None:
    done = manage("echomq_worker", "--help", redis_url=redis_url, prefix=prefix)
    output, _ = done.communicate(timeout=30)
    assert done.returncode == 0, output
    for flag in ("--concurrency", "--lock-duration", "--close-grace", "--limit-max", "--backend"):
        assert flag in output


def test_the_argv_takes_defaults_from_the_backend(redis_url: str, prefix: str) -> None:
    backend = task_backends["default"]
    options: dict[str, Any] = {"concurrency": 5, "uvloop": False, "log_level": "DEBUG"}
    assert worker_argv(backend, options) == [
        "worker",
        "echomq.contrib.django.worker:run_task",
        "--queue",
        "django-default",
        "--url",
        redis_url,
        "--prefix",
        prefix,
        "--concurrency",
        "5",
        "--log-level",
        "DEBUG",
    ]
    given = {"queue": "emails", "url": "redis://elsewhere:1/0", "uvloop": True}
    assert worker_argv(backend, given)[2:7] == [
        "--queue",
        "emails",
        "--url",
        "redis://elsewhere:1/0",
        "--prefix",
    ]
    assert worker_argv(backend, given)[-1] == "--uvloop"
    # Per-minute metrics are on by default, as in `echomq worker`; --no-metrics is a switch.
    assert worker_argv(backend, {"metrics": True, "metrics_data_points": 20160})[-1] == prefix
    off = worker_argv(backend, {"metrics": False, "metrics_data_points": 60})
    assert off[-3:] == ["--metrics-data-points", "60", "--no-metrics"]


def test_a_backend_that_is_not_echomq_is_refused() -> None:
    other = {"default": {"BACKEND": "django.tasks.backends.dummy.DummyBackend"}}
    with override_settings(TASKS=other), pytest.raises(CommandError, match="not an EchoMQBackend"):
        call_command("echomq_worker")
