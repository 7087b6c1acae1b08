"""Commands a restricted Redis refuses for good, and saying so once.

Managed services and locked-down servers rename or disable commands (``rename-command CONFIG
""``), and ACL users are often denied whole categories (``-@dangerous`` takes ``CONFIG``,
``CLIENT LIST``, ``INFO``). echomq needs none of those to queue and run jobs; it sends a few
only to name its connections (``CLIENT SETNAME``), to list workers (``CLIENT LIST``) and for
its server checks (``CONFIG GET``, ``TIME``). When the server refuses one of them for good (an
unknown command, or an ACL ``NOPERM``), the caller carries on without it and this module logs
one INFO record on the ``echomq.server`` logger, once per process, server and command, naming
the command and what is lost (:data:`LOST`).

Only those two replies are refusals (:func:`refusal`): any other error (a lost connection, a
busy server, a name Redis rejects) is not, and is raised or retried where it happens. This
module imports nothing of the package, so the lowest layer (``wire``'s handshake) can use it.
"""

from __future__ import annotations

import logging
import threading

from redis.exceptions import NoPermissionError, ResponseError

logger = logging.getLogger("echomq.server")

#: What each command echomq can do without is for, as the INFO record says it.
LOST: dict[str, str] = {
    "CLIENT SETNAME": (
        "worker and QueueEvents connections stay unnamed, so get_workers() (and BullMQ's "
        "getWorkers) cannot see them; jobs and events are not affected"
    ),
    "CLIENT LIST": (
        "get_workers() lists only the echomq workers of the worker registry, not BullMQ's "
        "workers for Node (nor echomq workers that keep no registry entry); jobs are not "
        "affected"
    ),
    "CONFIG GET": (
        "the maxmemory-policy check did not run: make sure the server's maxmemory-policy is "
        "noeviction (an evicting policy deletes jobs and locks once memory is full)"
    ),
    "TIME": "the clock-skew check did not run: keep every host's clock synchronised (NTP)",
    "SUBSCRIBE": (
        "the worker does not receive cancel requests from other processes (cancel_job); "
        "allow the ACL user the queue's channels, e.g. &bull:*"
    ),
}

_UNKNOWN = (
    "unknown command",
    "err unknown command",
    "unknown subcommand",
    "err unknown subcommand",
)

_reported: set[tuple[str, str]] = set()
_lock = threading.Lock()  # the sync API may report from several threads at once


def refusal(exc: BaseException) -> str | None:
    """Why Redis refused a command for good, or None when ``exc`` is no such refusal.

    Returns:
        ``"no permission"`` for an ACL ``NOPERM``, ``"unknown command"`` for a command that is
        renamed, disabled or too new for the server; None for anything else.
    """
    if isinstance(exc, NoPermissionError):
        return "no permission"
    if isinstance(exc, ResponseError) and str(exc).lower().startswith(_UNKNOWN):
        return "unknown command"
    return None


def report(
    command: str, address: str, exc: BaseException, *, any_error_reply: bool = False
) -> bool:
    """Log that Redis at ``address`` refused ``command`` (a key of :data:`LOST`), once per
    process, server and command.

    Args:
        command: what was refused.
        address: the server, as messages name it.
        exc: the error the command raised.
        any_error_reply: count every error reply as a refusal, not only the two of
            :func:`refusal` (for a check, which could not run whatever the reply said).

    Returns:
        True when ``exc`` counts as a refusal; False (nothing logged) when it does not, for the
        caller to raise.
    """
    why = refusal(exc)
    if why is None and any_error_reply and isinstance(exc, ResponseError):
        why = "error reply"
    if why is None:
        return False
    with _lock:
        if (command, address) in _reported:
            return True
        _reported.add((command, address))
    logger.info(
        "Redis at %s refused %s (%s); carrying on without it: %s",
        address,
        command,
        str(exc).strip().rstrip("."),
        LOST[command],
        extra={"redis": address, "command": command, "refusal": why},
    )
    return True


def forget() -> None:
    """Forget what was reported (for tests of the once-per-process behaviour)."""
    with _lock:
        _reported.clear()
