"""A Django 6 tasks backend on echomq: ``django.tasks`` enqueues jobs, echomq workers run them.

Settings::

    INSTALLED_APPS = [..., "echomq.contrib.django"]   # for `manage.py echomq_worker`
    TASKS = {
        "default": {
            "BACKEND": "echomq.contrib.django.EchoMQBackend",
            "QUEUES": ["default", "emails"],          # Django's own check of queue names
            "OPTIONS": {"url": os.environ["ECHOMQ_REDIS_URL"], "queue": "django"},
        }
    }

A task's ``queue_name`` is the echomq queue its jobs go to, except Django's default queue name
(``"default"``), which goes to ``OPTIONS["queue"]``. Without ``"url"`` the backend follows
echomq's connection rule (:func:`echomq.default_redis_url`). Each job is named after the task's
module path and carries ``{"args": [...], "kwargs": {...}}`` as JSON. ``python manage.py
echomq_worker`` runs them, with the options of ``echomq worker``.

Importing this package without Django 6 raises ``ImportError`` naming the pip command.
"""

from ._require import require_django

require_django()

from ._backend import EchoMQBackend  # noqa: E402

__all__ = ["EchoMQBackend"]
