"""The project's ASGI entry point: Django, with the echomq dashboard mounted beside it.

Django's ASGI handler serves everything but ``/admin/queues/``, which the dashboard serves
(read-only here) for the queues of the backend's prefix. Serve it with any ASGI server:
``uvicorn project.asgi:application``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator

from django.conf import settings
from django.core.asgi import get_asgi_application
from starlette.applications import Starlette
from starlette.routing import Mount

from echomq.dashboard import create_app

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "project.settings")
django_app = get_asgi_application()
options = settings.TASKS["default"]["OPTIONS"]
dashboard = create_app(connection=options["url"], prefix=options["prefix"], read_only=True)


@contextlib.asynccontextmanager
async def lifespan(app: Starlette) -> AsyncIterator[None]:
    async with dashboard.router.lifespan_context(dashboard):  # closes the dashboard's client
        yield


application = Starlette(
    routes=[Mount("/admin/queues", dashboard), Mount("/", django_app)], lifespan=lifespan
)
