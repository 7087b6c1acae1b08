"""The dashboard mounted beside Django in one ASGI application (``project/asgi.py``)."""

from __future__ import annotations

import importlib
import sys
from typing import Any

from starlette.testclient import TestClient

import echomq


async def test_the_dashboard_and_django_share_one_asgi_app(
    tasks_settings: dict[str, Any], redis_url: str, prefix: str
) -> None:
    job = await echomq.add(
        "django-default", "shop.tasks.add", {}, connection=redis_url, prefix=prefix
    )
    sys.modules.pop("project.asgi", None)
    asgi = importlib.import_module("project.asgi")  # reads the settings of this test
    with TestClient(asgi.application) as client:
        listing = client.get("/admin/queues/")
        assert listing.status_code == 200
        assert 'data-queue="django-default"' in listing.text
        assert 'id="read-only"' in listing.text
        page = client.get(f"/admin/queues/queues/django-default/jobs/{job.id}")
        assert page.status_code == 200 and "shop.tasks.add" in page.text
        assert client.get("/orders/").status_code != 404  # Django still serves its own URLs
