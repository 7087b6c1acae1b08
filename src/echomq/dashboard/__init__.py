"""The echomq web dashboard: an ASGI app (Starlette + Jinja2) over the public API.

``create_app(connection=..., prefix=...)`` returns an app to serve with any ASGI server or to
mount under FastAPI, Starlette or Django's ASGI handler; ``echomq dashboard`` serves it with
uvicorn. It lists the queues under one prefix, pages through each state of a queue and
through its groups, shows one job whole, and (unless read-only) retries, promotes, removes,
cleans, pauses and adds jobs and pauses and resumes groups, each through the same public API
the rest of the library offers. See docs/operations.md.

Needs the ``dashboard`` extra: ``pip install 'echomq[dashboard]'``.
"""

from __future__ import annotations

try:
    import jinja2  # noqa: F401
    import starlette  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "echomq.dashboard needs Starlette and Jinja2: pip install 'echomq[dashboard]'"
    ) from exc

from ._app import create_app

__all__ = ["create_app"]
