"""``ENQUEUE_ON_COMMIT``: the job is written when the transaction commits, never after a
rollback (SQLite in memory, the project's database)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.tasks import task_backends
from django.test.utils import override_settings
from shop import tasks

import echomq.sync
from echomq.contrib.django import EchoMQBackend


@pytest.fixture
def on_commit_settings(redis_url: str, prefix: str) -> Iterator[dict[str, Any]]:
    settings = {
        "default": {
            "BACKEND": "echomq.contrib.django.EchoMQBackend",
            "QUEUES": ["default", "emails"],
            "ENQUEUE_ON_COMMIT": True,
            "OPTIONS": {"url": redis_url, "prefix": prefix, "queue": "django-default"},
        }
    }
    with override_settings(TASKS=settings):
        try:
            yield settings
        finally:
            for backend in task_backends.all():
                backend.close()


def waiting(redis_url: str, prefix: str) -> int:
    """Jobs waiting (or prioritized) in the queue of Django's default queue name."""
    return echomq.sync.count("django-default", connection=redis_url, prefix=prefix)


@pytest.mark.usefixtures("on_commit_settings")
def test_a_rolled_back_transaction_enqueues_nothing(redis_url: str, prefix: str) -> None:
    class Rollback(Exception):
        pass

    with pytest.raises(Rollback), transaction.atomic():
        result = tasks.add.enqueue(1, 2)
        assert result.id and result.enqueued_at is None  # not written yet
        raise Rollback
    assert waiting(redis_url, prefix) == 0


@pytest.mark.usefixtures("on_commit_settings")
def test_a_committed_transaction_enqueues(redis_url: str, prefix: str) -> None:
    with transaction.atomic():
        result = tasks.add.enqueue(2, 3)
        assert waiting(redis_url, prefix) == 0  # only once the transaction commits
    assert waiting(redis_url, prefix) == 1
    assert result.enqueued_at is not None
    assert tasks.add.get_result(result.id).args == [2, 3]
    outside = tasks.add.enqueue(4, 5)  # no transaction: written at once
    assert outside.enqueued_at is not None and waiting(redis_url, prefix) == 2


def test_enqueue_on_commit_must_be_a_bool() -> None:
    with pytest.raises(ImproperlyConfigured, match="ENQUEUE_ON_COMMIT"):
        EchoMQBackend("x", {"ENQUEUE_ON_COMMIT": "yes", "OPTIONS": {}})
