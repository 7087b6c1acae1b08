"""Integrations with Python frameworks, each behind its own optional extra.

- :mod:`echomq.contrib.django`: a Django 6 tasks backend and the ``echomq_worker`` management
  command (``pip install 'echomq[django]'``).
- :mod:`echomq.contrib.asgi`: a lifespan and dependencies for FastAPI and Starlette apps
  (``pip install 'echomq[asgi]'``).

Nothing here is imported by ``import echomq``; importing a module whose framework is missing
raises ``ImportError`` naming the pip command to run.
"""
