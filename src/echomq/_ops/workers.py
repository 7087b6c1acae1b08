"""The worker registry: echomq's own list of a queue's live workers (docs/protocol/workers.md).

Each echomq worker keeps an entry ``P:Q:workers:<id>`` (a JSON STRING with a TTL) and its id in
the index ZSET ``P:Q:workers``, scored by when the entry expires; one ``workerHeartbeat`` call
writes both. Readers take the ids whose score is still ahead and read their entries; an entry
that expired meanwhile is skipped. BullMQ for Node neither writes nor reads these keys: its
workers are only seen by their connection names in ``CLIENT LIST``, and :func:`merge_workers`
lists those as ``kind`` ``"bullmq"``.

This module spells the entry's JSON field names (the wire form) and turns entries and
``CLIENT LIST`` connections into the one public shape, :class:`WorkerInfo`.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, Literal, TypedDict

from ..protocol import fields
from ..protocol.keys import QueueKeys
from . import scripts
from ._base import CommandOp, Plan, ScriptOp, to_str

__all__ = [
    "WorkerInfo",
    "WorkerEntry",
    "heartbeat",
    "merge_workers",
    "read_registry",
    "unregister",
]


class WorkerInfo(TypedDict, total=False):
    """One worker of a queue, as ``get_workers()`` lists it (a plain dict at run time).

    Every entry has ``kind``, ``id``, ``name`` and ``rawname``. Entries of ``kind`` ``"echomq"``
    that come from the registry have every field but the ``CLIENT LIST`` ones; entries found only
    in ``CLIENT LIST`` (BullMQ workers for Node, and echomq workers that keep no registry entry)
    keep that connection's ``CLIENT LIST`` fields as strings (``addr``, ``age``, ``idle``...),
    as before the registry existed.
    """

    #: ``"echomq"`` or ``"bullmq"`` (a connection named as the queue's worker that is no
    #: Python client)
    kind: Literal["echomq", "bullmq"]
    #: the worker's id (registry), or the connection's client id (``CLIENT LIST``)
    id: str
    #: the queue name (as BullMQ's ``getWorkers`` sets it)
    name: str
    #: the worker's connection name (``P:<base64 queue>[:w:<worker name>]``)
    rawname: str
    #: the worker's own name (the ``name`` worker option), or None
    worker_name: str | None
    host: str
    pid: int
    concurrency: int
    started_at: datetime
    #: when the worker last wrote its entry
    heartbeat_at: datetime
    #: the ids of the jobs it held at its last heartbeat
    jobs: list[str]
    #: the echomq version it runs
    version: str
    addr: str
    age: str
    idle: str


class WorkerEntry(TypedDict):
    """What a worker writes about itself at each heartbeat (before the wire names)."""

    id: str
    name: str | None
    host: str
    pid: int
    concurrency: int
    started_ms: int
    jobs: list[str]
    version: str
    client_name: str


# The entry's JSON fields (docs/protocol/workers.md#workers-entry).
_ID = "id"
_NAME = "name"
_HOST = "host"
_PID = "pid"
_QUEUE = "queue"
_CONCURRENCY = "concurrency"
_STARTED = "startedAt"
_HEARTBEAT = "heartbeatAt"
_JOBS = "jobs"
_VERSION = "version"
_CLIENT_NAME = "clientName"
_LIB = "lib"


def heartbeat(keys: QueueKeys, entry: WorkerEntry, ttl_ms: int, now: int) -> ScriptOp[int]:
    """Write (or refresh) the worker's entry for ``ttl_ms``; replies the number of workers."""
    doc = {
        _ID: entry["id"],
        _NAME: entry["name"],
        _HOST: entry["host"],
        _PID: entry["pid"],
        _QUEUE: keys.name,
        _CONCURRENCY: entry["concurrency"],
        _STARTED: entry["started_ms"],
        _HEARTBEAT: now,
        _JOBS: entry["jobs"],
        _VERSION: entry["version"],
        _CLIENT_NAME: entry["client_name"],
        _LIB: "echomq",
    }
    return ScriptOp(
        scripts.get("workerHeartbeat"),
        (keys.workers, keys.worker(entry["id"])),
        [entry["id"], fields.encode(doc), ttl_ms, now],
        int,
    )


def unregister(keys: QueueKeys, worker_id: str, now: int) -> ScriptOp[int]:
    """Remove the worker's entry (a clean close); replies the number of workers left."""
    return ScriptOp(
        scripts.get("workerHeartbeat"),
        (keys.workers, keys.worker(worker_id)),
        [worker_id, "", 1, now],
        int,
    )


def _ms_to_datetime(value: Any) -> datetime:
    ms = value if isinstance(value, int | float) and not isinstance(value, bool) else 0
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def _parse_entry(keys: QueueKeys, text: Any) -> WorkerInfo | None:
    """A registry entry as a :class:`WorkerInfo`; None when it is missing or unreadable."""
    if text is None:
        return None
    try:
        doc = json.loads(to_str(text))
    except ValueError:
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get(_ID), str):
        return None
    jobs = doc.get(_JOBS)
    name = doc.get(_NAME)
    pid, concurrency = doc.get(_PID), doc.get(_CONCURRENCY)
    return WorkerInfo(
        kind="echomq",
        id=doc[_ID],
        name=keys.name,
        rawname=str(doc.get(_CLIENT_NAME) or ""),
        worker_name=name if isinstance(name, str) else None,
        host=str(doc.get(_HOST) or ""),
        pid=pid if isinstance(pid, int) else 0,
        concurrency=concurrency if isinstance(concurrency, int) else 0,
        started_at=_ms_to_datetime(doc.get(_STARTED)),
        heartbeat_at=_ms_to_datetime(doc.get(_HEARTBEAT)),
        jobs=[str(j) for j in jobs] if isinstance(jobs, list) else [],
        version=str(doc.get(_VERSION) or ""),
    )


def read_registry(keys: QueueKeys, now: int) -> Plan[list[WorkerInfo]]:
    """The registry's live workers, oldest first: the index's ids whose entry has not
    expired by ``now`` (ms), then their entries (an entry gone meanwhile is skipped)."""
    ids = yield CommandOp(
        [("ZRANGEBYSCORE", keys.workers, f"({now}", "+inf")],
        lambda replies: [to_str(x) for x in replies[0]],
    )
    if not ids:
        return []
    entries = yield CommandOp(
        [("MGET", *(keys.worker(worker_id) for worker_id in ids))],
        lambda replies: list(replies[0]),
    )
    found = (_parse_entry(keys, text) for text in entries)
    workers = [info for info in found if info is not None]
    workers.sort(key=lambda info: (info["started_at"], info["id"]))
    return workers


def _is_python(client: dict[str, str]) -> bool:
    """Whether a ``CLIENT LIST`` connection says it is redis-py's (Redis >= 7.2 keeps the
    ``lib-name`` that clients set; older servers and ioredis leave it empty)."""
    return client.get("lib-name", "").startswith("redis-py")


def merge_workers(
    registry: list[WorkerInfo], clients: list[dict[str, str]] | None
) -> list[WorkerInfo]:
    """The registry's workers, then the ``CLIENT LIST`` connections no registry entry explains.

    Each registered worker holds one named connection (its blocking one): for each connection
    name, as many connections as registered workers use it are taken to be theirs (Python
    connections first). The others are listed as they are, ``kind`` ``"echomq"`` when the
    connection is redis-py's (an echomq worker without a registry entry) and ``"bullmq"``
    otherwise. ``clients`` None (``CLIENT LIST`` refused): the registry alone.
    """
    merged = list(registry)
    if not clients:
        return merged
    owned: dict[str, int] = {}
    for info in registry:
        owned[info["rawname"]] = owned.get(info["rawname"], 0) + 1
    # Python connections first, so that registered workers account for them before Node's.
    for client in sorted(clients, key=lambda c: not _is_python(c)):
        raw = client.get("rawname", "")
        if owned.get(raw, 0) > 0:
            owned[raw] -= 1
            continue
        entry: dict[str, Any] = dict(client)
        entry["kind"] = "echomq" if _is_python(client) else "bullmq"
        merged.append(entry)  # type: ignore[arg-type]  # CLIENT LIST fields beyond WorkerInfo's
    return merged
