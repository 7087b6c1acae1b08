"""Which Redis a command talks to, and the connection options every command has.

Resolution order, the same for every subcommand: ``--url``, else ``$ECHOMQ_REDIS_URL``, else
the private per-user server of :func:`echomq.embedded.ensure_embedded_server` (started on first
use). Every command that uses the embedded server says so in one line on stderr, with its URL
and fsync policy, whether it started the server or found it running, so nobody mistakes it for
theirs or for a different durability. ``--durability`` (else
``$ECHOMQ_DURABILITY``, else ``always``) applies to the embedded server only; given explicitly
together with a URL it is ignored with a note on stderr.

The connection options are accepted at every level of a command line (``echomq --url X queue
emails counts`` and ``echomq queue emails counts --url X``): every parser declares them with a
suppressed default, so a level where they are absent never overwrites one where they were
given, and :func:`fill_defaults` supplies the defaults after parsing. ``--durability`` is
explained once, in ``echomq server --help`` (:data:`DURABILITY_HELP`); elsewhere its help is one
line pointing there.

Every command checks its queue names and ``--prefix`` (:func:`check_names`) and whatever else
it can check offline before it calls :func:`resolve`, so a refused argument never starts the
embedded server or touches Redis. :func:`resolve` itself checks the URL first, with the library's
one check (``echomq._redis.urls.check_url``): a malformed ``--url`` or ``$ECHOMQ_REDIS_URL``
(a port that is not a number, a database that is not one, no scheme) is a one-line error with
exit code 2, and an empty ``--url`` is refused rather than read as "not given".
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass

import redis
import redis.exceptions

from .._keys import queue_keys, validate_queue_name
from .._redis.fail_fast import redact_url
from .._redis.urls import check_url
from ..embedded import DURABILITIES, DURABILITY_ENV, ensure_embedded_server, resolve_durability
from ..errors import EmbeddedRedisError, InvalidQueueNameError, ValidationError
from ..protocol.keys import DEFAULT_PREFIX
from ._errors import EXIT_USAGE, CliError

URL_ENV = "ECHOMQ_REDIS_URL"
#: The value each connection option takes when no level of the command line gave it.
DEFAULTS: dict[str, object] = {"url": None, "prefix": DEFAULT_PREFIX, "durability": None}


#: The whole story of ``--durability``, told by ``echomq server --help`` (and its actions that
#: start the server); every other command's help points there in one line.
DURABILITY_HELP = (
    "AOF fsync of the embedded Redis: 'always' (an acknowledged add survives a crash of the "
    "server) or 'everysec' (faster; up to ~1 s of acknowledged adds can be lost); default "
    f"${DURABILITY_ENV}, else always. Applied whenever a command starts or uses the embedded "
    "Redis; not used with --url"
)
_DURABILITY_POINTER = "fsync of the embedded Redis: see echomq server --help"


def connection_options(durability_help: str = _DURABILITY_POINTER) -> argparse.ArgumentParser:
    """A parent parser with ``--url``, ``--prefix`` and ``--durability``, for every subcommand.

    Their defaults are suppressed (see the module docstring); call :func:`fill_defaults` on the
    parsed namespace.

    Args:
        durability_help: the help of ``--durability``: by default one line pointing to
            ``echomq server --help``; :data:`DURABILITY_HELP` there, ``argparse.SUPPRESS``
            where the option is accepted but has no effect.
    """
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("connection")
    group.add_argument(
        "--url",
        default=argparse.SUPPRESS,
        help="Redis URL (redis://[[user]:password@]host[:port][/db], rediss:// for TLS, "
        "unix:///path/to/redis.sock[?db=N], redis+sentinel:// or redis+cluster://); "
        f"default ${URL_ENV}, else a private embedded Redis",
    )
    group.add_argument(
        "--prefix",
        default=argparse.SUPPRESS,
        help=f"key prefix (default: {DEFAULT_PREFIX})",
    )
    group.add_argument(
        "--durability",
        default=argparse.SUPPRESS,
        choices=DURABILITIES,
        help=durability_help,
    )
    return parent


def listen_options(parser: argparse.ArgumentParser, default_port: int) -> None:
    """``--host`` and ``--port`` of a command that serves HTTP (loopback unless told otherwise)."""
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    parser.add_argument(
        "--port", type=int, default=default_port, help=f"port (default: {default_port}; 0: any)"
    )


def fill_defaults(args: argparse.Namespace) -> None:
    """Give ``args`` the default of every connection option no level of the command line set."""
    for name, default in DEFAULTS.items():
        if not hasattr(args, name):
            setattr(args, name, default)


def check_names(queues: Iterable[str], prefix: str) -> None:
    """Refuse bad queue names and a bad ``--prefix`` before anything is started or written.

    Raises:
        InvalidQueueNameError: a name the API would refuse (empty, or with ``:``), or an empty
            prefix (exit code 2).
    """
    for queue in queues:
        validate_queue_name(queue)
    if not prefix:
        raise InvalidQueueNameError(
            f"--prefix must not be empty (the default is {DEFAULT_PREFIX!r})"
        )


@dataclass(frozen=True)
class Target:
    """The Redis a command talks to."""

    url: str
    #: Whether it is the private embedded server (no ``--url``, no ``$ECHOMQ_REDIS_URL``).
    embedded: bool


def resolve_url(url: str | None, durability: str | None = None) -> str:
    """The Redis URL to use: ``url``, else ``$ECHOMQ_REDIS_URL``, else the embedded server.

    Args:
        url: the ``--url`` option.
        durability: the ``--durability`` option, for the embedded server.

    Raises:
        CliError: the URL given is malformed or empty, or no URL was given and the embedded
            server cannot run (exit code 2).
        ValidationError: ``$ECHOMQ_DURABILITY`` holds an unknown policy (exit code 2).
    """
    return resolve(url, durability).url


def resolve(url: str | None, durability: str | None = None) -> Target:
    """As :func:`resolve_url`, also saying whether the URL is the embedded server's."""
    given = given_url(url)
    if given is not None:
        if durability is not None:
            print(
                "note: --durability applies only to the embedded Redis; "
                "your server's own appendfsync setting decides",
                file=sys.stderr,
            )
        return Target(given, embedded=False)
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
    return Target(embedded, embedded=True)


def given_url(url: str | None) -> str | None:
    """The URL of ``--url``, else of ``$ECHOMQ_REDIS_URL`` (unset or empty: None), checked.

    Raises:
        CliError: ``--url`` is empty, or the URL is malformed (exit code 2); the message says
            which of the two gave it.
    """
    source = "--url"
    if url == "":
        raise CliError(
            "--url is empty: give a Redis URL such as redis://localhost:6379/0, or leave --url "
            f"out to use ${URL_ENV} or the embedded Redis",
            EXIT_USAGE,
        )
    if url is None:
        url, source = os.environ.get(URL_ENV) or None, f"${URL_ENV}"
    if url is None:
        return None
    try:
        check_url(url)
    except ValidationError as exc:
        raise CliError(f"{source}: {exc}", EXIT_USAGE) from None
    return url


def missing_queues(target: Target, queues: list[str], prefix: str) -> list[str]:
    """On the embedded server, those of ``queues`` it holds no key of (elsewhere, or when the
    server cannot be asked: none; the command itself reports an unreachable server)."""
    if not target.embedded or not queues:
        return []
    client = redis.Redis.from_url(target.url, socket_timeout=5.0)
    try:
        missing = []
        for queue in queues:
            keys = queue_keys(queue, prefix)
            probe = [keys.meta, keys.id, keys.events, keys.wait, keys.paused, keys.active]
            probe += [keys.prioritized, keys.delayed, keys.completed, keys.failed, keys.repeat]
            probe.append(keys.waiting_children)
            if int(client.exists(*probe)) == 0:
                missing.append(queue)
        return missing
    except redis.exceptions.RedisError:
        return []
    finally:
        client.close()


def warn_if_no_queue(target: Target, queue: str, prefix: str) -> None:
    """On the embedded server, warn on stderr when it holds no key of ``queue``.

    Someone who ran a worker with ``--url`` and then ``echomq queue`` without it would
    otherwise read an empty queue of the embedded server and believe it. (A worker says it
    once at INFO instead: a worker started before its producer is normal; see
    :mod:`echomq.cli._worker`.)
    """
    if missing_queues(target, [queue], prefix):
        print(
            f"warning: the embedded Redis holds no queue {queue!r} (prefix {prefix!r}) and "
            f"{URL_ENV} is unset; if the queue lives on another server, pass --url or set "
            f"{URL_ENV}",
            file=sys.stderr,
        )


def redact(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***`` (for logs and messages)."""
    return redact_url(url)
