"""The Django app of echomq (``INSTALLED_APPS = [..., "echomq.contrib.django"]``): it only
makes the ``echomq_worker`` management command available."""

from __future__ import annotations

from django.apps import AppConfig


class EchoMQConfig(AppConfig):  # type: ignore[misc]  # Django ships no types
    """The app config; the label ``echomq`` keeps clear of Django's own apps."""

    name = "echomq.contrib.django"
    label = "echomq"
    verbose_name = "EchoMQ"
