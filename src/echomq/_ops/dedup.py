"""Deduplication windows: reading and releasing the key ``de:<dedupId>`` of a queue.

See docs/protocol/flows-dedup-schedulers.md#dedup. The window is opened by the add script
(docs/protocol/scripts.md#step-dedup) and released by finishing or removing its owner; these
operations are the manual side, as BullMQ's ``Queue.getDeduplicationJobId`` and
``Queue.removeDeduplicationKey``.
"""

from __future__ import annotations

from typing import Any

from ..errors import ValidationError
from ..protocol.keys import QueueKeys
from . import scripts
from ._base import CommandOp, ScriptOp, to_str


def _check_id(dedup_id: object) -> str:
    if not isinstance(dedup_id, str) or not dedup_id:
        raise ValidationError(f"deduplication id must be a non-empty str, got {dedup_id!r}")
    return dedup_id


def get_deduplication_job_id(keys: QueueKeys, dedup_id: str) -> CommandOp[str | None]:
    """GET ``de:<dedupId>``: the id of the job that owns the window, or None."""
    key = keys.dedup(_check_id(dedup_id))

    def parse(replies: list[Any]) -> str | None:
        return None if replies[0] is None else to_str(replies[0])

    return CommandOp([("GET", key)], parse)


def remove_deduplication_key(keys: QueueKeys, dedup_id: str) -> CommandOp[bool]:
    """DEL ``de:<dedupId>``, whichever job owns it (a held-back keepLastIfActive add in
    ``dn:<dedupId>`` is left for the owner's finish, as in BullMQ); True if it existed."""
    key = keys.dedup(_check_id(dedup_id))
    return CommandOp([("DEL", key)], lambda replies: bool(replies[0]))


def remove_own_deduplication_key(keys: QueueKeys, dedup_id: str, job_id: str) -> ScriptOp[bool]:
    """Delete ``de:<dedupId>`` only while job ``job_id`` owns it (BullMQ's
    ``Job.removeDeduplicationKey``; docs/protocol/scripts.md#script-removeDeduplicationKey);
    True if it was deleted."""
    key = keys.dedup(_check_id(dedup_id))
    return ScriptOp(scripts.get("removeDeduplicationKey"), [key], [job_id], lambda r: bool(int(r)))
