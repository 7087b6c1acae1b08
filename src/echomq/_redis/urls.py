"""The Redis URL forms echomq accepts, and the one check that refuses every other string.

One node, as redis-py reads them::

    redis://[[user]:password@]host[:port][/db][?options]    (host localhost, port 6379, db 0)
    rediss://...                                             the same, TLS
    unix://[[user]:password@]/path/to/redis.sock[?db=N&options]

Sentinel and Cluster: ``redis+sentinel://``, ``rediss+sentinel://``, ``redis+cluster://`` and
``rediss+cluster://`` (:mod:`echomq._redis.topology` parses them).

:func:`check_url` runs before any client is made (``client_from_url``, a URL given as
``connection=``, and so everything built on them) and in the CLI before the embedded server is
started, so a careless URL is refused at once with a :class:`~echomq.errors.ValidationError`
naming the part that is wrong and the form expected, instead of a ``ValueError`` from deep in
redis-py, or a silent fallback (redis-py reads ``redis://host/abc`` as database 0 and
``unix://tmp/redis.sock`` as the socket ``/redis.sock``). It refuses only what no client could
use as meant; query options redis-py understands are left to it.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit

import redis.connection

from ..errors import ValidationError
from . import topology
from .fail_fast import redact_url

#: The form of each one-node scheme, for messages.
FORMS = {
    "redis": "redis://[[user]:password@]host[:port][/db], e.g. redis://localhost:6379/0",
    "rediss": "rediss://[[user]:password@]host[:port][/db], e.g. rediss://redis.example.com:6380/0",
    "unix": "unix:///path/to/redis.sock[?db=N], e.g. unix:///run/redis/redis.sock?db=0",
}
#: Every scheme, as messages list them.
SCHEMES_TEXT = (
    "redis://, rediss:// or unix:// (one node), redis+sentinel:// or rediss+sentinel:// "
    "(Sentinel), redis+cluster:// or rediss+cluster:// (Cluster)"
)
_DB_PATH = re.compile(r"/?|/[0-9]+/?")
_DIGITS = re.compile(r"[0-9]+")
_HOST_PORT = re.compile(r"[A-Za-z0-9.\-]+(:[0-9]*)?|\[[0-9A-Fa-f:.]+\](:[0-9]*)?")


def check_url(url: str) -> None:
    """Refuse a URL no client would open as meant, before anything connects.

    Args:
        url: a Redis URL (the forms in the module docstring).

    Raises:
        ValidationError: the scheme is not one of the accepted ones, or the URL's port,
            database, socket path or an option value is malformed; the message names the
            part and shows the form expected (passwords masked).
    """
    if topology.is_topology_url(url):
        topology.parse(url)
        return
    scheme, sep, _ = url.partition("://")
    if not sep or scheme not in FORMS:
        raise ValidationError(_scheme_problem(url))
    form = FORMS[scheme]

    def bad(why: str) -> ValidationError:
        return ValidationError(f"connection URL {_shown(url)!r}: {why}; expected {form}")

    try:
        parts = urlsplit(url)
    except ValueError as exc:  # brackets of an IPv6 host that do not hold one
        raise bad(f"the host is not valid ({exc})") from None
    try:
        port = parts.port
    except ValueError:
        written = parts.netloc.rpartition("@")[2].rpartition(":")[2]
        raise bad(f"the port {written!r} is not a number from 1 to 65535") from None
    if port == 0:
        raise bad("the port 0 is not a number from 1 to 65535")
    host = parts.netloc.rpartition("@")[2]
    if scheme == "unix":
        if host:
            raise bad(
                f"{host!r} stands where the socket path starts: a unix:// URL takes an "
                "absolute path, with three slashes"
            )
        if not parts.path:
            raise bad("the socket path is missing")
    elif not _DB_PATH.fullmatch(parts.path):
        raise bad(f"the database {parts.path.strip('/')!r} (the URL's path) is not a number")
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name == "db" and not _DIGITS.fullmatch(value):
            raise bad(f"the database {value!r} (option db) is not a number")
    try:
        redis.connection.parse_url(url)  # type: ignore[no-untyped-call, unused-ignore]
    except ValueError as exc:  # an option value redis-py cannot read
        raise bad(str(exc).rstrip(".")) from None


def _scheme_problem(url: str) -> str:
    if not url:
        return f"the connection URL is empty; it must start with {SCHEMES_TEXT}"
    message = f"connection URL {_shown(url)!r} must start with {SCHEMES_TEXT}"
    if _HOST_PORT.fullmatch(url):
        return f"{message}; did you mean redis://{url}?"
    return message


def _shown(url: str) -> str:
    """``url`` with its password masked, even when it is too malformed to be parsed."""
    try:
        return redact_url(url)
    except ValueError:
        scheme, sep, rest = url.partition("://")
        _, at, location = rest.rpartition("@")
        return f"{scheme}{sep}***@{location}" if sep and at else url
