"""A minimal Django 6 project whose tasks run on echomq.

The Redis URL and key prefix come from the environment so the suite can point the project
(and the `manage.py echomq_worker` processes it starts) at its own private server.
"""

import os

SECRET_KEY = "test-only"
DEBUG = os.environ.get("DJANGO_DEBUG") == "1"  # the suite runs one worker with DEBUG on
ALLOWED_HOSTS = ["testserver", "localhost"]
USE_TZ = True
ROOT_URLCONF = "project.urls"
INSTALLED_APPS = ["echomq.contrib.django", "shop"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

TASKS = {
    "default": {
        "BACKEND": "echomq.contrib.django.EchoMQBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {
            "url": os.environ.get("ECHOMQ_REDIS_URL", "redis://localhost:6379/0"),
            "prefix": os.environ.get("ECHOMQ_PREFIX", "bull"),
            "queue": "django-default",
        },
    }
}
