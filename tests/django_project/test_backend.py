"""EchoMQBackend against real Redis and a real echomq Worker, following Django's contract.

The contract checks mirror Django's own task tests (tests/tasks in Django's repository), run
here against this backend: validation at enqueue, JSON arguments, results, mismatches.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any

import pytest
from django.tasks import TaskResultStatus, default_task_backend, task, task_backends
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist, TaskResultMismatch
from django.test import Client
from django.test.utils import override_settings
from django.utils import timezone
from shop import tasks

import echomq
from echomq.contrib.django import EchoMQBackend
from echomq.contrib.django.worker import run_task

pytestmark = pytest.mark.usefixtures("tasks_settings")


async def wait_finished(result: Any, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not result.is_finished:
        assert asyncio.get_running_loop().time() < deadline, f"{result.id} is {result.status}"
        await asyncio.sleep(0.02)
        await result.arefresh()


@pytest.fixture
async def workers(redis_url: str, prefix: str) -> AsyncIterator[None]:
    """Workers on both echomq queues of the backend, running Django tasks."""
    running = [
        echomq.Worker(name, run_task, connection=redis_url, prefix=prefix, concurrency=4)
        for name in ("django-default", "emails")
    ]
    for worker in running:
        await worker.__aenter__()
    try:
        yield
    finally:
        for worker in running:
            await worker.close()


def test_the_backend_is_echomq_and_says_what_it_supports() -> None:
    backend = task_backends["default"]
    assert isinstance(backend, EchoMQBackend)
    assert (backend.supports_defer, backend.supports_async_task) == (True, True)
    assert (backend.supports_get_result, backend.supports_priority) == (True, True)


def test_enqueue_writes_one_job_with_json_arguments(redis_url: str, prefix: str) -> None:
    result = tasks.add.enqueue(2, b=3)
    assert result.status == TaskResultStatus.READY
    assert (result.args, result.kwargs) == ([2], {"b": 3})
    assert result.enqueued_at is not None and result.attempts == 0
    queue_name, job_id = result.id.split(":")
    job = echomq.sync.get_job(queue_name, job_id, connection=redis_url, prefix=prefix)
    assert job is not None
    assert (job.queue_name, job.name) == ("django-default", "shop.tasks.add")
    assert job.data == {"args": [2], "kwargs": {"b": 3}}
    again = tasks.add.get_result(result.id)
    assert again.status == TaskResultStatus.READY
    assert (again.args, again.kwargs, again.task.func) == ([2], {"b": 3}, tasks.add.func)
    assert again == result  # as Django's own test of get_result asks


def test_arguments_that_are_not_json_raise_djangos_error_and_write_nothing(
    redis_url: str, prefix: str
) -> None:
    with pytest.raises(TypeError, match="Unsupported type"):
        tasks.add.enqueue(datetime.now(), 1)
    with pytest.raises(TypeError, match="Unsupported type"):
        tasks.add.enqueue(1, b={1, 2})
    counts = echomq.sync.get_job_counts("django-default", connection=redis_url, prefix=prefix)
    assert sum(counts.values()) == 0


async def test_aenqueue_refuses_non_json_too() -> None:
    with pytest.raises(TypeError, match="Unsupported type"):
        await tasks.add.aenqueue(object(), 1)


def test_task_validation_follows_django() -> None:
    with pytest.raises(InvalidTask, match="aware datetime"):
        tasks.add.using(run_after=datetime.now())
    with pytest.raises(InvalidTask, match="whole number between -100 and 100"):
        tasks.add.using(priority=101)
    with pytest.raises(InvalidTask, match="Queue 'other' is not valid for backend"):
        tasks.add.using(queue_name="other")
    with pytest.raises(InvalidTask, match="module level"):
        task()(lambda: None)


def test_a_queue_name_echomq_refuses_is_an_invalid_task(redis_url: str) -> None:
    backend = EchoMQBackend("colon", {"QUEUES": [], "OPTIONS": {"url": redis_url}})
    try:
        odd = tasks.add.using()
        object.__setattr__(odd, "queue_name", "a:b")  # past the default backend's QUEUES
        with pytest.raises(InvalidTask, match="contains ':'"):
            backend.validate_task(odd)
    finally:
        backend.close()


def test_unknown_options_are_refused() -> None:
    from django.core.exceptions import ImproperlyConfigured

    with pytest.raises(ImproperlyConfigured, match="unknown option"):
        EchoMQBackend("bad", {"OPTIONS": {"urll": "redis://x"}})


def test_missing_and_foreign_results_do_not_exist() -> None:
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result("django-default:nope")
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result("no-queue-in-this-id")


async def test_aget_result_of_a_missing_job_does_not_exist() -> None:
    with pytest.raises(TaskResultDoesNotExist):
        await tasks.add.aget_result("django-default:missing")


def test_a_result_of_another_task_is_a_mismatch() -> None:
    result = tasks.add.enqueue(1, 2)
    with pytest.raises(TaskResultMismatch, match="Task does not match"):
        tasks.fail.get_result(result.id)


@pytest.mark.usefixtures("workers")
async def test_sync_and_async_tasks_run_and_report_results() -> None:
    added = await tasks.add.aenqueue(20, 22)
    receipt = await tasks.send_receipt.aenqueue(7, email="ada@example.com")
    assert receipt.id.startswith("emails:")
    for result in (added, receipt):
        await wait_finished(result)
        assert result.status == TaskResultStatus.SUCCESSFUL
        assert result.errors == [] and result.attempts == 1
        assert result.started_at is not None and result.finished_at is not None
        assert result.finished_at >= result.started_at >= result.enqueued_at
    assert added.return_value == 42
    assert receipt.return_value == {"order": 7, "to": "ada@example.com"}
    assert receipt.task.priority == 10 and receipt.task.queue_name == "emails"


@pytest.mark.usefixtures("workers")
async def test_a_task_taking_context_sees_its_result_id() -> None:
    result = await tasks.who_am_i.aenqueue("x")
    await wait_finished(result)
    assert result.return_value == {"id": result.id, "attempt": 1, "label": "x"}


@pytest.mark.usefixtures("workers")
async def test_failures_keep_the_exception_class_and_traceback() -> None:
    failed = await tasks.fail.aenqueue("no stock")
    bad_return = await tasks.returns_a_set.aenqueue()
    await wait_finished(failed)
    await wait_finished(bad_return)
    assert failed.status == TaskResultStatus.FAILED
    with pytest.raises(ValueError, match="Task failed"):
        _ = failed.return_value
    assert failed.errors[0].exception_class is ValueError
    assert failed.errors[0].traceback.endswith("ValueError: no stock\n")
    assert bad_return.status == TaskResultStatus.FAILED
    assert bad_return.errors[0].exception_class is TypeError
    assert "Unsupported type" in bad_return.errors[0].traceback


async def test_run_after_delays_the_job(redis_url: str, prefix: str) -> None:
    when = timezone.now() + timedelta(seconds=30)
    result = await tasks.add.using(run_after=when).aenqueue(1, 1)
    queue_name, job_id = result.id.split(":")
    state = await echomq.get_state(queue_name, job_id, connection=redis_url, prefix=prefix)
    assert state == echomq.JobState.DELAYED
    read = await tasks.add.aget_result(result.id)
    assert read.status == TaskResultStatus.READY
    assert read.task.run_after is not None
    assert abs((read.task.run_after - when).total_seconds()) < 1


async def test_higher_django_priority_runs_first(redis_url: str, prefix: str) -> None:
    low = await tasks.low.aenqueue("low")
    high = await tasks.high.aenqueue("high")
    order: list[str] = []

    async def recording(job: echomq.Job) -> Any:
        order.append(job.data["args"][0])
        return await run_task(job)

    async with echomq.Worker("django-default", recording, connection=redis_url, prefix=prefix):
        await wait_finished(low)
        await wait_finished(high)
    assert order == ["high", "low"]
    assert (await tasks.low.aget_result(low.id)).task.priority == -50


@pytest.mark.usefixtures("workers")
async def test_a_view_enqueues_and_the_result_is_read_back() -> None:
    client = Client()
    body = json.dumps({"order": 42, "email": "grace@example.com"})
    response = await asyncio.to_thread(
        client.post, "/orders/", body, content_type="application/json"
    )
    assert response.status_code == 202
    result_id = response.json()["task"]
    assert response.json()["status"] == "READY"
    result = await tasks.send_receipt.aget_result(result_id)
    await wait_finished(result)
    status = (await asyncio.to_thread(client.get, f"/tasks/{result_id}/")).json()
    assert status == {
        "status": "SUCCESSFUL",
        "return_value": {"order": 42, "to": "grace@example.com"},
    }


async def test_a_retried_task_reports_every_attempt(
    redis_url: str, prefix: str, tasks_settings: dict[str, Any]
) -> None:
    retrying = {"default": {**tasks_settings["default"]}}
    retrying["default"]["OPTIONS"] = {
        **retrying["default"]["OPTIONS"],
        "job_options": {"attempts": 2},
    }
    with override_settings(TASKS=retrying):
        result = await tasks.flaky.aenqueue(prefix)
        async with echomq.Worker("django-default", run_task, connection=redis_url, prefix=prefix):
            await wait_finished(result)
        task_backends["default"].close()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == prefix
    assert result.attempts == 2
    [error] = result.errors
    assert error.exception_class is ConnectionError
    assert error.traceback.endswith(f"ConnectionError: first try for {prefix}\n")


@pytest.mark.usefixtures("workers")
async def test_djangos_task_signals_and_logs(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="django.tasks"):
        done = await tasks.add.aenqueue(1, 2)
        failed = await tasks.fail.aenqueue("nope")
        await wait_finished(done)
        await wait_finished(failed)
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if r.name == "django.tasks"]
    for result, final, level in ((done, "SUCCESSFUL", "INFO"), (failed, "FAILED", "ERROR")):
        mine = [(lv, msg) for lv, msg in lines if f"id={result.id} " in msg]
        # Django sends task_enqueued after the job is stored, so a worker may
        # log RUNNING before the producer logs "enqueued": only the worker's
        # own two records have an order.
        enqueued = [(lv, msg) for lv, msg in mine if "enqueued" in msg]
        ran = [(lv, msg) for lv, msg in mine if "enqueued" not in msg]
        assert [lv for lv, _ in enqueued] == ["DEBUG"], mine
        assert [lv for lv, _ in ran] == ["INFO", level], mine
        assert "state=RUNNING" in ran[0][1] and f"state={final}" in ran[1][1]
