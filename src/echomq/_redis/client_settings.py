"""What a pipelined Channel (:mod:`echomq._redis.wire`) mirrors of a redis-py client: its
connection settings, read once from the client's public ``connection_pool.connection_kwargs``
completed by the defaults of the connection class's constructor, and the TLS context its
``ssl_*`` settings describe.

:func:`read_settings` gives None for a client a Channel cannot mirror (Redis Cluster, a
single-connection client, RESP3, a custom handshake or encoder, an encoding other than UTF-8,
a connection class other than redis-py's three or echomq's fail-fast variants of them) and for
any setting it does not know (:data:`HANDLED`): a setting is never dropped silently.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging
import ssl
from collections.abc import Mapping
from typing import Any

import redis.asyncio
import redis.asyncio.connection
from redis import exceptions as rx

from .fail_fast import FAIL_FAST_KEYS, fail_fast_budget

logger = logging.getLogger("echomq.connection")

_ASYNC = redis.asyncio.connection
_KINDS: tuple[tuple[type, str], ...] = (  # SSLConnection first: it is also a Connection
    (_ASYNC.SSLConnection, "tls"),
    (_ASYNC.UnixDomainSocketConnection, "unix"),
    (_ASYNC.Connection, "tcp"),
)
_TLS_KEYS = frozenset(
    {
        *("ssl_keyfile", "ssl_certfile", "ssl_password", "ssl_cert_reqs", "ssl_ca_certs"),
        *("ssl_ca_data", "ssl_ca_path", "ssl_check_hostname", "ssl_min_version", "ssl_ciphers"),
        *("ssl_include_verify_flags", "ssl_exclude_verify_flags"),
    }
)
#: Connection settings a Channel applies, or knows to be about redis-py's own machinery
#: (retries, health checks, parser, buffers, RESP3 notifications). Any other setting with a
#: value makes :func:`open_channel` decline, so a new redis-py setting is never dropped unseen.
HANDLED = frozenset(
    {
        *("host", "port", "path", "db", "username", "password", "credential_provider"),
        *("socket_timeout", "socket_connect_timeout", "socket_keepalive"),
        *("socket_keepalive_options", "socket_type", "client_name", "lib_name", "lib_version"),
        *("encoding", "encoding_errors", "decode_responses", "protocol"),
        *("retry", "retry_on_timeout", "retry_on_error", "health_check_interval"),
        *("parser_class", "socket_read_size", "driver_info", "legacy_responses"),
        *("event_dispatcher", "himport_registry", "maint_notifications_config"),
        *("maint_notifications_pool_handler", "maintenance_state"),
        *("maintenance_notification_hash", "orig_host_address", "orig_socket_timeout"),
        *("orig_socket_connect_timeout", "oss_cluster_maint_notifications_handler"),
        *("redis_connect_func", "encoder_class"),  # declined below unless the default
        *_TLS_KEYS,
        *FAIL_FAST_KEYS,
    }
)


@functools.cache
def _defaults(cls: type) -> dict[str, Any]:
    """The defaults of ``cls``'s constructor parameters, through its bases (what a setting
    absent from ``connection_kwargs`` is for redis-py's own connections)."""
    found: dict[str, Any] = {}
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        for name, param in inspect.signature(init).parameters.items():
            if param.default is not inspect.Parameter.empty:
                found.setdefault(name, param.default)
    return found


def _kind(cls: type) -> str | None:
    """ "tcp", "tls" or "unix" for redis-py's asyncio connection classes and echomq's fail-fast
    variants; None for another class (it may connect in ways a Channel would not mirror)."""
    for base, kind in _KINDS:
        if cls is base or (issubclass(cls, base) and cls.__module__ == "echomq._redis.fail_fast"):
            return kind
    return None


@dataclasses.dataclass(frozen=True)
class Settings:
    """What a Channel's connection needs to know, read once from a client."""

    kind: str
    address: tuple[str, int] | str  # (host, port), or a socket path
    tls: dict[str, Any]
    db: int
    username: str | None
    password: str | None
    credential_provider: Any
    client_name: str | None
    lib: tuple[str | None, str | None]
    connect_timeout: float | None
    timeout: float | None
    call_timeout: float | None
    keepalive: bool
    keepalive_options: Mapping[int, int | bytes]
    encoding: str | None
    errors: str
    budget: tuple[float, str] | None  # a fail-fast client's connect budget and its URL


def read_settings(client: redis.asyncio.Redis) -> Settings | None:
    """The settings of ``client`` a Channel would mirror, or None when it cannot."""
    pool = getattr(client, "connection_pool", None)
    if pool is None or getattr(client, "single_connection_client", True):
        return None  # Redis Cluster, or a client asked to use one connection only
    cls = pool.connection_class
    kind = _kind(cls)
    if kind is None:
        return None
    given: dict[str, Any] = dict(pool.connection_kwargs)
    unknown = sorted(k for k, v in given.items() if k not in HANDLED and v)
    if unknown:
        logger.debug("no pipelined channel: connection settings %s are not mirrored", unknown)
        return None
    defaults = _defaults(cls)
    s = {**defaults, **given}
    if str(s.get("protocol") or 2) != "2":
        return None  # RESP3 may carry push messages between replies
    if s.get("redis_connect_func") is not None:
        return None  # a custom handshake
    if "encoder_class" in given and given["encoder_class"] is not defaults.get("encoder_class"):
        return None  # arguments encoded otherwise than hiredis does
    if str(s.get("encoding") or "utf-8").lower().replace("-", "").replace("_", "") != "utf8":
        return None  # hiredis packs str arguments as UTF-8
    timeout = s.get("socket_timeout")
    connect_timeout = s.get("socket_connect_timeout")
    if connect_timeout is None:
        connect_timeout = timeout  # as redis-py does
    address: tuple[str, int] | str
    address = str(s["path"]) if kind == "unix" else (s.get("host") or "localhost", int(s["port"]))
    options = s.get("socket_keepalive_options")
    lib_name, lib_version = s.get("lib_name"), s.get("lib_version")
    return Settings(
        kind=kind,
        address=address,
        tls={k: s.get(k) for k in _TLS_KEYS} if kind == "tls" else {},
        db=int(s.get("db") or 0),
        username=s.get("username"),
        password=s.get("password"),
        credential_provider=s.get("credential_provider"),
        client_name=s.get("client_name"),
        lib=(
            lib_name if isinstance(lib_name, str) else None,
            lib_version if isinstance(lib_version, str) else None,
        ),
        connect_timeout=connect_timeout,
        timeout=timeout,
        # Calls are bounded only by a socket_timeout the client was given: the connection
        # class's default (5 s in redis-py 8) would keep a watchdog timer in the event loop of
        # every Queue, which costs a producer about 5 % of each add.
        call_timeout=given.get("socket_timeout"),
        keepalive=bool(s.get("socket_keepalive")) and kind != "unix",
        keepalive_options=options if isinstance(options, Mapping) else {},
        encoding=str(s.get("encoding") or "utf-8") if s.get("decode_responses") else None,
        errors=str(s.get("encoding_errors") or "strict"),
        budget=fail_fast_budget(given),
    )


_CERT_REQS = {"none": ssl.CERT_NONE, "optional": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


def ssl_context(tls: Mapping[str, Any]) -> ssl.SSLContext:
    """The TLS context redis-py's ``ssl_*`` settings describe."""
    reqs = tls.get("ssl_cert_reqs")
    if reqs is None:
        reqs = ssl.CERT_NONE
    elif isinstance(reqs, str):
        if reqs not in _CERT_REQS:
            raise rx.RedisError(f"invalid ssl_cert_reqs {reqs!r}: use none, optional or required")
        reqs = _CERT_REQS[reqs]
    context = ssl.create_default_context()
    context.check_hostname = bool(tls.get("ssl_check_hostname"))
    context.verify_mode = reqs
    for flag in tls.get("ssl_include_verify_flags") or ():
        context.verify_flags |= flag
    for flag in tls.get("ssl_exclude_verify_flags") or ():
        context.verify_flags &= ~flag
    if tls.get("ssl_certfile") or tls.get("ssl_keyfile"):
        context.load_cert_chain(
            tls["ssl_certfile"], tls.get("ssl_keyfile"), tls.get("ssl_password")
        )
    ca_certs, ca_path, ca_data = (
        tls.get(k) for k in ("ssl_ca_certs", "ssl_ca_path", "ssl_ca_data")
    )
    if ca_certs or ca_path or ca_data:
        context.load_verify_locations(cafile=ca_certs, capath=ca_path, cadata=ca_data)
    if tls.get("ssl_min_version") is not None:
        context.minimum_version = tls["ssl_min_version"]
    if tls.get("ssl_ciphers") is not None:
        context.set_ciphers(tls["ssl_ciphers"])
    return context
