"""Which Redis a command talks to, and the ``--url`` / ``--prefix`` options every command has.

Resolution order, the same for every subcommand: ``--url``, else ``$ECHOMQ_REDIS_URL``, else
the private per-user server of :func:`echomq.embedded.ensure_embedded_server` (started on first
use). Using the embedded server is announced once on stderr, so nobody mistakes it for theirs.
"""

from __future__ import annotations

import argparse
import os
import sys
from urllib.parse import urlsplit, urlunsplit

from ..embedded import ensure_embedded_server
from ..errors import EmbeddedRedisError
from ..protocol.keys import DEFAULT_PREFIX
from ._errors import EXIT_USAGE, CliError

URL_ENV = "ECHOMQ_REDIS_URL"


def connection_options() -> argparse.ArgumentParser:
    """A parent parser holding ``--url`` and ``--prefix``, for every subcommand."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("connection")
    group.add_argument(
        "--url",
        help=f"Redis URL (redis://, rediss:// or unix://); default ${URL_ENV}, "
        "else a private embedded Redis",
    )
    group.add_argument(
        "--prefix", default=DEFAULT_PREFIX, help=f"key prefix (default: {DEFAULT_PREFIX})"
    )
    return parent


def resolve_url(url: str | None) -> str:
    """The Redis URL to use: ``url``, else ``$ECHOMQ_REDIS_URL``, else the embedded server.

    Raises:
        CliError: no URL was given and the embedded server cannot run (exit code 2).
    """
    if url:
        return url
    from_env = os.environ.get(URL_ENV)
    if from_env:
        return from_env
    try:
        embedded = ensure_embedded_server()
    except EmbeddedRedisError as exc:
        raise CliError(
            f"no Redis URL given (--url or {URL_ENV}) and the embedded Redis cannot run: {exc}",
            EXIT_USAGE,
        ) from exc
    print(
        f"using embedded Redis at {embedded}; set {URL_ENV} or --url to use your own",
        file=sys.stderr,
    )
    return embedded


def redact(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***`` (for logs and messages)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
