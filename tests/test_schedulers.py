"""Continuing BullMQ job schedulers: the pure parts (interop tests run the real BullMQ)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

from echomq import Job
from echomq.worker._schedulers import is_legacy_repeat_key, next_iteration_options

NOW = 1_800_000_000_000


def iteration(repeat: dict[str, Any], **opts: Any) -> Job:
    job = Job(
        id="repeat:s:1", name="t", data={}, queue_name="q", timestamp=datetime.now(timezone.utc)
    )
    job.wire_options = {"attempts": 2, "jobId": "repeat:s:1", "delay": 5, "timestamp": 1, **opts}
    job.wire_options["repeat"] = repeat
    return job


@pytest.mark.parametrize(
    ("key", "legacy"),
    [
        ("0f9ab3c1d2e4f5a6b7c8d9e0f1a2b3c4", False),  # md5 repeat key
        ("mykey", False),  # custom repeat key
        ("s-every", False),  # a v6 scheduler id
        ("a:b:c:d:e", False),  # non-digit third segment
        ("tick::1700000000000::10000", True),  # every, as bullmq <= 3.0 keyed it
        ("tick:::Europe/Madrid:*/5 * * * *", True),  # cron, same era
        ("tick::::", False),  # nothing after the 4th colon
    ],
)
def test_legacy_repeat_key_shape(key: str, legacy: bool) -> None:
    assert is_legacy_repeat_key(key) is legacy


def test_next_options_advance_the_count_and_drop_clock_fields() -> None:
    planned = next_iteration_options(iteration({"every": 1000, "count": 4}, priority=3), NOW)
    assert planned == ({"attempts": 2, "priority": 3, "repeat": {"every": 1000, "count": 5}}, None)


def test_cron_next_options_carry_the_next_time() -> None:
    # NOW is 2027-01-15T08:00:00Z; prevMillis later than now is BullMQ's "now".
    job = iteration({"pattern": "*/10 * * * * *", "count": 1}, prevMillis=NOW + 20_000)
    planned = next_iteration_options(job, NOW)
    assert planned is not None
    opts, next_ms = planned
    assert next_ms == NOW + 30_000
    assert opts["prevMillis"] == next_ms and opts["repeat"]["count"] == 2


@pytest.mark.parametrize(
    "repeat",
    [
        {"every": 1000, "count": 2, "limit": 2},  # the limit is reached
        {"every": 1000, "count": 1, "endDate": NOW - 1},  # past its end
        {"pattern": "* * * * *", "count": 1, "endDate": NOW - 1},  # cron past its end
        {"count": 1},  # neither
    ],
)
def test_no_next_iteration(repeat: dict[str, Any]) -> None:
    assert next_iteration_options(iteration(repeat), NOW) is None
