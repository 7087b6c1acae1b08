"""Logging setup for the CLI: the only place in echomq that configures logging.

The library logs one INFO line per job transition on ``echomq.worker``; the CLI sends every
record at or above the chosen level to stderr, one line each: text, or with ``json`` one JSON
object per line (``time``, ``level``, ``logger``, ``message``, the record's ``extra`` facts, and
``exc_info`` with the traceback when there is one). A traceback is the record's ``exc_text``
when it has one (the worker's line for a failed job brings the text it stored with the job),
else formatted once from ``exc_info``. A record that a handler of its own logger already
printed (Django's ``console`` handler on ``django`` under ``DEBUG = True``, say) is not printed
again.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone
from typing import Any

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
FORMATS = ("text", "json")
_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
_HANDLER_NAME = "echomq-cli"
#: Attributes every LogRecord has; anything else on a record came from ``extra``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, timezone.utc).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in out:
                out[key] = value
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)  # cached, as Formatter does
        if record.exc_text:  # set already by the worker for a failed job: formatted once
            out["exc_info"] = record.exc_text
        return json.dumps(out, default=str)


class _NotPrintedBelowRoot(logging.Filter):
    """Drops a record that a handler between its logger and the root will also handle, so that
    a framework's own console handler (Django's, under ``DEBUG``) and ours never print one
    record twice."""

    def filter(self, record: logging.LogRecord) -> bool:
        logger: logging.Logger | None = logging.getLogger(record.name)
        root = logging.getLogger()
        while logger is not None and logger is not root:
            for handler in logger.handlers:
                if record.levelno >= handler.level and handler.filter(record):
                    return False
            if not logger.propagate:
                break
            logger = logger.parent
        return True


def configure_logging(level: str, log_format: str = "text") -> None:
    """Log records at ``level`` and above to stderr; calling it again replaces the handler.

    Args:
        level: one of :data:`LEVELS`.
        log_format: one of :data:`FORMATS`.
    """
    handler = logging.StreamHandler(sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.setFormatter(JsonFormatter() if log_format == "json" else logging.Formatter(_FORMAT))
    handler.addFilter(_NotPrintedBelowRoot())
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
