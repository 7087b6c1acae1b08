"""Counts of a queue's groups read with plain commands, a fixed number per call whatever the
number of groups or jobs (docs/protocol/groups.md#groups-keys):

- :func:`count_groups`: how many groups have waiting or active jobs (``ZCARD groups``), for
  the dashboard's groups tab and the Prometheus export's ``echomq_groups``.
- :func:`group_summary`: one group's waiting and active jobs and its paused flag (``ZCARD
  groups:wait:<gid>``, its ``groups:run:<gid>``, its ``p:<gid>`` field of ``groups:state``), for a
  group's page of the dashboard. Unlike ``get_group_job_counts`` it leaves out the group's
  delayed jobs, whose count reads every grouped delayed job of the queue.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..protocol.keys import QueueKeys
from ._base import CommandOp
from .groups import PAUSED, active_jobs, check_group


@dataclass(frozen=True, slots=True)
class GroupSummary:
    """One group's waiting and active jobs and whether it is paused.

    Attributes:
        id: the group id.
        waiting: its jobs waiting to run.
        active: its jobs being processed.
        paused: the group is paused (its flag stays while it has no jobs).
    """

    id: str
    waiting: int
    active: int
    paused: bool


def count_groups(keys: QueueKeys) -> CommandOp[int]:
    """How many groups have waiting or active jobs (one ``ZCARD``)."""
    return CommandOp([("ZCARD", keys.groups)], lambda replies: int(replies[0] or 0))


def group_summary(keys: QueueKeys, group: str) -> CommandOp[GroupSummary]:
    """``group``'s waiting and active jobs and paused flag, in one round trip.

    Raises:
        InvalidOptionError: ``group`` is not a group id ``add(group=...)`` accepts.
    """
    gid = check_group(group)

    def parse(replies: list[Any]) -> GroupSummary:
        waiting, active, paused = replies
        return GroupSummary(gid, int(waiting or 0), active_jobs(active), paused is not None)

    return CommandOp(
        [
            ("ZCARD", keys.group_wait(gid)),
            ("GET", keys.group_run(gid)),
            ("HGET", keys.groups_state, f"{PAUSED}:{gid}"),
        ],
        parse,
    )
