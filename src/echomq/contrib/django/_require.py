"""The one check that Django 6 (with ``django.tasks``) is importable, with the pip command."""

from __future__ import annotations

import importlib.util

INSTALL_HINT = "pip install 'echomq[django]'"


def require_django() -> None:
    """Raise ``ImportError`` naming the pip command unless ``django.tasks`` can be imported.

    Raises:
        ImportError: Django is missing, or older than 6.0 (no ``django.tasks``).
    """
    try:
        found = importlib.util.find_spec("django.tasks") is not None
    except ImportError:  # no django at all, or one that cannot be imported
        found = False
    if not found:
        raise ImportError(
            f"echomq.contrib.django needs Django 6.0 or later (django.tasks): {INSTALL_HINT}"
        )
