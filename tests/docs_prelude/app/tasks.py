"""The user's task module: ``echomq worker app.tasks:send_email`` loads it."""

from docs_prelude import send_email

__all__ = ["send_email"]
