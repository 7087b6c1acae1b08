"""Logging setup for the CLI: the only place in echomq that configures logging.

The library logs one INFO line per job transition on ``echomq.worker``; the CLI sends every
record at or above the chosen level to stderr, one line each.
"""

from __future__ import annotations

import logging
import sys

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
_HANDLER_NAME = "echomq-cli"


def configure_logging(level: str) -> None:
    """Log records at ``level`` and above to stderr; calling it again replaces the handler.

    Args:
        level: one of :data:`LEVELS`.
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(logging.Formatter(_FORMAT))
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == _HANDLER_NAME]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)


def flush_logging() -> None:
    """Flush every root handler and the standard streams (before an immediate exit)."""
    for handler in logging.getLogger().handlers:
        handler.flush()
    sys.stdout.flush()
    sys.stderr.flush()
