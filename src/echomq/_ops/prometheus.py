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

Groups (echomq's own, docs/groups.md), only when the sample was read with a ``group_limit``
above 0 (``echomq metrics`` and the dashboard's ``/metrics`` do, by default
:data:`DEFAULT_GROUP_LIMIT`; ``Queue.export_prometheus_metrics`` does not, so that its text
stays BullMQ's):

- ``echomq_groups`` (gauge): the groups with waiting or active jobs, labelled ``queue`` only.
- ``echomq_group_jobs`` (gauge): the waiting and active jobs of the queue's ``group_limit``
  groups with the most waiting jobs (``get_groups``' order), labelled ``queue``, ``group`` and
  ``state``. The other groups are left out, so that the series stay bounded however many
  groups a queue has (at most ``2 * group_limit`` per queue).

This module is I/O-free: :func:`sample_plan` says what to read, and the caller runs it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..errors import InvalidOptionError
from ..protocol.keys import QueueKeys
from ._base import Plan
from .groups import GroupInfo, count_groups, get_groups_plan
from .jobs import DEFAULT_COUNT_TYPES, get_counts, get_metrics

#: The states of ``bullmq_job_count`` (Node v6's default ``getJobCounts()`` states).
COUNT_STATES: tuple[str, ...] = DEFAULT_COUNT_TYPES
#: The states of ``echomq_group_jobs``.
GROUP_STATES: tuple[str, ...] = ("waiting", "active")
#: How many of a queue's busiest groups ``echomq metrics`` and the dashboard export.
DEFAULT_GROUP_LIMIT = 20

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")
_RESERVED = frozenset({"queue", "state"})
#: Also reserved when the text has group series.
_GROUP_LABEL = "group"


@dataclass(frozen=True, slots=True)
class QueueSample:
    """What the export reads of one queue.

    Attributes:
        queue: the queue name.
        counts: jobs per state (:data:`COUNT_STATES`).
        completed: the completed metrics' running count.
        failed: the failed metrics' running count.
        groups: how many groups have waiting or active jobs; None when groups were not read
            (``group_limit`` 0): the text then has no group series for this queue.
        top_groups: the groups with the most waiting jobs, most first, at most
            ``group_limit`` of them.
    """

    queue: str
    counts: Mapping[str, int]
    completed: int
    failed: int
    groups: int | None = None
    top_groups: tuple[GroupInfo, ...] = field(default=())


def check_group_limit(group_limit: object) -> int:
    """``group_limit`` as an int >= 0 (0: no group series).

    Raises:
        InvalidOptionError: it is not an int >= 0.
    """
    if isinstance(group_limit, bool) or not isinstance(group_limit, int) or group_limit < 0:
        raise InvalidOptionError(
            f"group_limit must be an int >= 0 (0: no group series), got {group_limit!r}"
        )
    return group_limit


def sample_plan(keys: QueueKeys, group_limit: int = 0) -> Plan[QueueSample]:
    """Read what the export needs of one queue: its counts and both metrics' running counts,
    and with ``group_limit`` > 0 its number of groups and its ``group_limit`` busiest groups
    (``get_groups``; not read when it has none).

    Raises:
        InvalidOptionError: ``group_limit`` is not an int >= 0 (before anything is read).
    """
    limit = check_group_limit(group_limit)

    def plan() -> Plan[QueueSample]:
        counts = yield get_counts(keys, COUNT_STATES)
        completed = yield get_metrics(keys, "completed", 0, 0)
        failed = yield get_metrics(keys, "failed", 0, 0)
        sample = QueueSample(keys.name, counts, completed.meta.count, failed.meta.count)
        if not limit:
            return sample
        groups: int = yield count_groups(keys)
        top: list[GroupInfo] = []
        if groups:
            top = yield from get_groups_plan(keys, 0, limit - 1)
        return QueueSample(
            sample.queue, counts, sample.completed, sample.failed, groups, tuple(top[:limit])
        )

    return plan()


def escape_label_value(value: object) -> str:
    """``value`` inside a quoted label value: backslash, double quote and newline escaped."""
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def check_global_labels(global_labels: Mapping[str, object] | None, groups: bool = False) -> str:
    """The ``, name="value"`` suffix of every sample's labels; validates the names.

    Raises:
        InvalidOptionError: a name is not a Prometheus label name, or is ``queue`` / ``state``
            (or ``group``, when ``groups``: the text has group series).
    """
    if not global_labels:
        return ""
    reserved = _RESERVED | {_GROUP_LABEL} if groups else _RESERVED
    parts = []
    for name, value in global_labels.items():
        if not isinstance(name, str) or not _LABEL_NAME.match(name) or name.startswith("__"):
            raise InvalidOptionError(f"global label {name!r} is not a Prometheus label name")
        if name in reserved:
            raise InvalidOptionError(f"global label {name!r} is reserved by the export")
        parts.append(f', {name}="{escape_label_value(value)}"')
    return "".join(parts)


def render(
    samples: Iterable[QueueSample], global_labels: Mapping[str, object] | None = None
) -> str:
    """The exposition text of ``samples`` (one or many queues), each family written once; the
    group families only when some sample was read with groups (``group_limit`` > 0), with
    series for those samples only."""
    samples = list(samples)
    grouped = [s for s in samples if s.groups is not None]
    extra = check_global_labels(global_labels, groups=bool(grouped))
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
    if grouped:
        lines += _group_lines(grouped, extra)
    return "\n".join(lines) + "\n"


def _group_lines(samples: list[QueueSample], extra: str) -> list[str]:
    lines = [
        "# HELP echomq_groups Number of groups with waiting or active jobs",
        "# TYPE echomq_groups gauge",
    ]
    for s in samples:
        lines.append(f'echomq_groups{{queue="{escape_label_value(s.queue)}"{extra}}} {s.groups}')
    lines += [
        "# HELP echomq_group_jobs Jobs of the groups with the most waiting jobs, by state",
        "# TYPE echomq_group_jobs gauge",
    ]
    for s in samples:
        queue = escape_label_value(s.queue)
        for g in s.top_groups:
            group = escape_label_value(g.id)
            for state in GROUP_STATES:
                count = g.waiting if state == "waiting" else g.active
                lines.append(
                    f'echomq_group_jobs{{queue="{queue}", group="{group}", state="{state}"{extra}}}'
                    f" {count}"
                )
    return lines
