"""Which Redis a command talks to, and the connection options every command has.

Resolution order, the same for every subcommand: ``--url``, else ``$ECHOMQ_REDIS_URL``, else
the private per-user server of :func:`echomq.embedded.ensure_embedded_server` (started on first
use). Using the embedded server is announced once on stderr with its fsync policy, so nobody
mistakes it for theirs or for a different durability. ``--durability`` (else
``$ECHOMQ_DURABILITY``, else ``always``) applies to the embedded server only; given explicitly
together with a URL it is ignored with a note on stderr.
"""

from __future__ import annotations

import argparse
import os
import sys

from .._fail_fast import redact_url
from ..embedded import DURABILITIES, DURABILITY_ENV, ensure_embedded_server, resolve_durability
from ..errors import EmbeddedRedisError
from ..protocol.keys import DEFAULT_PREFIX
from ._errors import EXIT_USAGE, CliError

URL_ENV = "ECHOMQ_REDIS_URL"


def connection_options() -> argparse.ArgumentParser:
    """A parent parser with ``--url``, ``--prefix`` and ``--durability``, for every subcommand."""
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
    group.add_argument(
        "--durability",
        choices=DURABILITIES,
        help="AOF fsync of the embedded Redis: 'always' (an acknowledged add survives a crash of "
        "the server) or 'everysec' (faster; up to ~1 s of acknowledged adds can be lost); "
        f"default ${DURABILITY_ENV}, else always. Not used with --url",
    )
    return parent


def resolve_url(url: str | None, durability: str | None = None) -> str:
    """The Redis URL to use: ``url``, else ``$ECHOMQ_REDIS_URL``, else the embedded server.

    Args:
        url: the ``--url`` option.
        durability: the ``--durability`` option, for the embedded server.

    Raises:
        CliError: no URL was given and the embedded server cannot run (exit code 2).
        ValidationError: ``$ECHOMQ_DURABILITY`` holds an unknown policy (exit code 2).
    """
    given = url or os.environ.get(URL_ENV)
    if given:
        if durability is not None:
            print(
                "note: --durability applies only to the embedded Redis; "
                "your server's own appendfsync setting decides",
                file=sys.stderr,
            )
        return given
    policy = resolve_durability(durability)
    try:
        embedded = ensure_embedded_server(durability=policy)
    except EmbeddedRedisError as exc:
        raise CliError(
            f"no Redis URL given (--url or {URL_ENV}) and the embedded Redis cannot run: {exc}",
            EXIT_USAGE,
        ) from exc
    print(
        f"using embedded Redis at {embedded} (appendfsync {policy}); "
        f"set {URL_ENV} or --url to use your own",
        file=sys.stderr,
    )
    return embedded


def redact(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***`` (for logs and messages)."""
    return redact_url(url)
