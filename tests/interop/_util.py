"""Helpers for the echomq <-> BullMQ (Node) interop tests.

They put an echomq :class:`~echomq.Job` in the shape the Node driver reports (``getJob`` ->
``json``), so that both views of the same job hash can be compared field by field.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from echomq import Job

#: Fields of the driver's ``getJob.json`` that echomq decodes too (Node name -> same meaning).
COMPARED_FIELDS: tuple[str, ...] = (
    "id",
    "name",
    "data",
    "delay",
    "timestamp",
    "priority",
    "attemptsMade",
    "attemptsStarted",
    "stalledCounter",
    "processedOn",
    "finishedOn",
    "returnvalue",
    "failedReason",
    "stacktrace",
    "progress",
    "processedBy",
    "deferredFailure",
    "deduplicationId",
    "repeatJobKey",
    "parentKey",
)

#: Fields that depend on the clock of the run (differ between two otherwise equal jobs).
CLOCK_FIELDS: frozenset[str] = frozenset({"timestamp", "processedOn", "finishedOn"})


def ms(value: datetime | None) -> int | None:
    """An aware datetime as epoch milliseconds (None stays None)."""
    return None if value is None else round(value.timestamp() * 1000)


def node_view(job: Job) -> dict[str, Any]:
    """The echomq job as the Node driver's ``getJob.json`` would show it (compared fields only)."""
    return {
        "id": job.id,
        "name": job.name,
        "data": job.data,
        "delay": round(job.delay * 1000),
        "timestamp": ms(job.timestamp),
        "priority": job.priority,
        "attemptsMade": job.attempts_made,
        "attemptsStarted": job.attempts_started,
        "stalledCounter": job.stalled_counter,
        "processedOn": ms(job.processed_on),
        "finishedOn": ms(job.finished_on),
        "returnvalue": job.return_value,
        "failedReason": job.failed_reason,
        "stacktrace": job.stacktrace,
        "progress": job.progress,
        "processedBy": job.processed_by,
        "deferredFailure": job.deferred_failure,
        "deduplicationId": job.deduplication_id,
        "repeatJobKey": job.repeat_job_key,
        "parentKey": job.parent_key,
    }


def node_subset(json: dict[str, Any]) -> dict[str, Any]:
    """The compared fields of a driver ``getJob.json``."""
    return {k: json.get(k) for k in COMPARED_FIELDS}


def without(view: dict[str, Any], *names: str) -> dict[str, Any]:
    """``view`` without the given keys."""
    return {k: v for k, v in view.items() if k not in names}


def diff(left: dict[str, Any], right: dict[str, Any]) -> dict[str, tuple[Any, Any]]:
    """Keys whose values differ, as ``key -> (left, right)`` (for readable assertion output)."""
    return {
        k: (left.get(k, "<missing>"), right.get(k, "<missing>"))
        for k in sorted(set(left) | set(right))
        if left.get(k, "<missing>") != right.get(k, "<missing>")
    }
