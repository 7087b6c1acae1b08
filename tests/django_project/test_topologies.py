"""The Django tasks backend on a Sentinel-managed Redis and on a Redis Cluster, through the URL
forms its ``OPTIONS["url"]`` accepts (``redis+sentinel://``, ``redis+cluster://``), with the
suite's own Sentinel and cluster setups."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.tasks import TaskResultStatus, task_backends
from django.test.utils import override_settings
from shop import tasks

import echomq
from echomq.contrib.django.worker import run_task

from .test_backend import wait_finished

#: Braced, so that the queue's keys share one cluster slot.
QUEUE = "{django-topology}"


@pytest.fixture
def topology_settings(topology_url: str, prefix: str) -> Iterator[dict[str, Any]]:
    settings = {
        "default": {
            "BACKEND": "echomq.contrib.django.EchoMQBackend",
            "QUEUES": ["default"],
            "OPTIONS": {"url": topology_url, "prefix": prefix, "queue": QUEUE},
        }
    }
    with override_settings(TASKS=settings):
        try:
            yield settings
        finally:
            for backend in task_backends.all():
                backend.close()


async def test_a_task_enqueued_and_run_on_a_topology_url(
    topology_settings: dict[str, Any], topology_url: str, prefix: str
) -> None:
    result = await tasks.add.aenqueue(2, b=3)
    assert result.status == TaskResultStatus.READY
    assert result.id.startswith(f"{QUEUE}:")
    worker = echomq.Worker(QUEUE, run_task, connection=topology_url, prefix=prefix)
    async with worker:
        await wait_finished(result, timeout=20)
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    again = await task_backends["default"].aget_result(result.id)
    assert again.status == TaskResultStatus.SUCCESSFUL
