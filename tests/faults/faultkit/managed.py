"""Restricted servers, as managed Redis services run them (``Lab.run(managed=...)``).

Two kinds, the same as ``tests/test_managed_redis.py``:

``renamed``
    ``rename-command CONFIG ""`` and ``rename-command CLIENT ""``: no CONFIG, and no CLIENT at
    all (SETNAME, LIST, KILL, SETINFO). Nobody can name a connection nor list them, so the
    harness cannot see a worker's blocking connection: :meth:`Restriction.names_visible` is
    false and ``Run.start_workers`` waits for each worker's first job (the ledger) instead.
``acl``
    the user ``app`` with ``~bull:* &bull:* +@all -@dangerous`` (no INFO, CONFIG, CLIENT LIST,
    KEYS...; CLIENT SETNAME stays), which workers and the producer use, and ``admin`` for the
    test's own look at the server; the default user is switched off once the server is up.

Everyone under test gets :meth:`Restriction.client_url`; only the test's own client (the
audit, the waits) gets :meth:`Restriction.admin_url`.
"""

from __future__ import annotations

from dataclasses import dataclass

import redis

from .servers import FaultServer

KINDS = ("renamed", "acl")
APP_USER, APP_PASSWORD = "app", "app-pw"
ADMIN_USER, ADMIN_PASSWORD = "admin", "admin-pw"
ACL_RULES = ("~bull:*", "&bull:*", "+@all", "-@dangerous")
RENAMED = ("--rename-command", "CONFIG", "", "--rename-command", "CLIENT", "")


def _with_user(url: str, user: str, password: str) -> str:
    scheme, sep, rest = url.partition("://")
    return f"{scheme}{sep}{user}:{password}@{rest}"


@dataclass(frozen=True, slots=True)
class Restriction:
    """One kind of restricted server (see the module docstring)."""

    kind: str

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"managed must be one of {KINDS}, got {self.kind!r}")

    @property
    def server_args(self) -> tuple[str, ...]:
        """``redis-server`` arguments."""
        if self.kind == "renamed":
            return RENAMED
        app = ("--user", APP_USER, "on", f">{APP_PASSWORD}", *ACL_RULES)
        admin = ("--user", ADMIN_USER, "on", f">{ADMIN_PASSWORD}", "~*", "&*", "+@all")
        return (*app, *admin)

    @property
    def names_visible(self) -> bool:
        """Whether connections can be named and listed (``CLIENT SETNAME`` / ``LIST``)."""
        return self.kind != "renamed"

    def lock_down(self, server: FaultServer) -> None:
        """What is done once the server is up: the ACL server's default user goes off."""
        if self.kind == "acl":
            with redis.Redis.from_url(server.url) as default:
                default.execute_command("ACL", "SETUSER", "default", "off")

    def client_url(self, url: str) -> str:
        """The URL producers and workers use."""
        return _with_user(url, APP_USER, APP_PASSWORD) if self.kind == "acl" else url

    def admin_url(self, url: str) -> str:
        """The URL of the test's own client."""
        return _with_user(url, ADMIN_USER, ADMIN_PASSWORD) if self.kind == "acl" else url

    @property
    def refused(self) -> tuple[str, ...]:
        """The commands each echomq worker must report, once, at INFO (``refused <cmd> (``)."""
        return ("CLIENT SETNAME", "CONFIG GET") if self.kind == "renamed" else ("CONFIG GET",)
