"""Django set up for the test project, and a backend pointed at the suite's Redis.

These tests need Django 6 (Python 3.12+). In an interpreter without it (the main ``.venv``),
this directory is left out of collection: ``tests/test_django_backend.py`` runs it in the
Django 6 interpreter instead, and fails if there is none. Each test gets a unique key prefix,
so queues never meet.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import uuid4

import pytest

PROJECT = Path(__file__).resolve().parent
HAS_DJANGO_6 = sys.version_info >= (3, 12) and importlib.util.find_spec("django") is not None

if HAS_DJANGO_6:
    import django
    from django.test.utils import override_settings

    sys.path.insert(0, str(PROJECT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
    django.setup()
else:
    collect_ignore_glob = ["*"]  # run by tests/test_django_backend.py under Django 6


@pytest.fixture
def prefix() -> str:
    """A key prefix no other test uses."""
    return f"dj-{uuid4().hex[:10]}"


@pytest.fixture
def tasks_settings(redis_url: str, prefix: str) -> Iterator[dict[str, Any]]:
    """settings.TASKS pointing the default backend at the suite's Redis, for one test."""
    from django.tasks import task_backends

    tasks = {
        "default": {
            "BACKEND": "echomq.contrib.django.EchoMQBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"url": redis_url, "prefix": prefix, "queue": "django-default"},
        }
    }
    with override_settings(TASKS=tasks):
        try:
            yield tasks
        finally:
            for backend in task_backends.all():
                backend.close()
