"""The Prometheus text of a queue's counts, as BullMQ's ``Queue.exportPrometheusMetrics`` writes it.

Three families, each sample labelled ``queue`` (and the caller's global labels, after it):

- ``bullmq_job_count`` (gauge): jobs per state, also labelled ``state``, for the states Node's
  ``getJobCounts()`` counts by default (:data:`COUNT_STATES`).
- ``bullmq_job_completed_total`` and ``bullmq_job_failed_total`` (counters): the ``count`` of the
  queue's ``metrics:completed`` / ``metrics:failed`` hashes, which only workers with metrics
  enabled update (not the size of the completed or failed set).

The text parses (``prometheus_client.parser``) to the same families, samples, labels and values
as Node's. Unlike Node's it ends with a newline, and :func:`render` merges many queues into one
family each, so a scrape of every queue under a prefix stays valid exposition text.
This module is I/O-free: :func:`sample_plan` says what to read, and the caller runs it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..errors import InvalidOptionError
from ..protocol.keys import QueueKeys
from ._base import Plan
from .jobs import DEFAULT_COUNT_TYPES, get_counts, get_metrics

#: The states of ``bullmq_job_count`` (Node v6's default ``getJobCounts()`` states).
COUNT_STATES: tuple[str, ...] = DEFAULT_COUNT_TYPES

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
_RESERVED = frozenset({"queue", "state"})


@dataclass(frozen=True, slots=True)
class QueueSample:
    """What the export reads of one queue.

    Attributes:
        queue: the queue name.
        counts: jobs per state (:data:`COUNT_STATES`).
        completed: the completed metrics' running count.
        failed: the failed metrics' running count.
    """

    queue: str
    counts: Mapping[str, int]
    completed: int
    failed: int


def sample_plan(keys: QueueKeys) -> Plan[QueueSample]:
    """Read what the export needs of one queue: its counts and both metrics' running counts."""
    counts = yield get_counts(keys, COUNT_STATES)
    completed = yield get_metrics(keys, "completed", 0, 0)
    failed = yield get_metrics(keys, "failed", 0, 0)
    return QueueSample(keys.name, counts, completed.meta.count, failed.meta.count)


def escape_label_value(value: object) -> str:
    """``value`` inside a quoted label value: backslash, double quote and newline escaped."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def check_global_labels(global_labels: Mapping[str, object] | None) -> str:
    """The ``, name="value"`` suffix of every sample's labels; validates the names.

    Raises:
        InvalidOptionError: a name is not a Prometheus label name, or is ``queue`` / ``state``.
    """
    if not global_labels:
        return ""
    parts = []
    for name, value in global_labels.items():
        if not isinstance(name, str) or not _LABEL_NAME.match(name) or name.startswith("__"):
            raise InvalidOptionError(f"global label {name!r} is not a Prometheus label name")
        if name in _RESERVED:
            raise InvalidOptionError(f"global label {name!r} is reserved by the export")
        parts.append(f', {name}="{escape_label_value(value)}"')
    return "".join(parts)


def render(
    samples: Iterable[QueueSample], global_labels: Mapping[str, object] | None = None
) -> str:
    """The exposition text of ``samples`` (one or many queues), each family written once."""
    extra = check_global_labels(global_labels)
    samples = list(samples)
    lines = [
        "# HELP bullmq_job_count Number of jobs in the queue by state",
        "# TYPE bullmq_job_count gauge",
    ]
    for s in samples:
        queue = escape_label_value(s.queue)
        for state in COUNT_STATES:
            count = s.counts.get(state, 0)
            lines.append(f'bullmq_job_count{{queue="{queue}", state="{state}"{extra}}} {count}')
    for family, help_text, attr in (
        ("bullmq_job_completed_total", "Total number of completed jobs", "completed"),
        ("bullmq_job_failed_total", "Total number of failed jobs", "failed"),
    ):
        lines.append(f"# HELP {family} {help_text}")
        lines.append(f"# TYPE {family} counter")
        for s in samples:
            queue = escape_label_value(s.queue)
            lines.append(f'{family}{{queue="{queue}"{extra}}} {getattr(s, attr)}')
    return "\n".join(lines) + "\n"
