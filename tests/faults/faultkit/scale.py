"""Scenario sizes: ``ECHOMQ_FAULTS_SCALE=ci`` (the default, what CI runs) or ``full``.

``ci`` keeps the whole of tests/faults well under four minutes on two cores and runs the Node
baseline where it costs little; ``full`` (``scripts/faults``) runs more jobs and more
repetitions, and the Node baseline on every scenario that has one.
"""

from __future__ import annotations

import os
from typing import TypeVar

T = TypeVar("T")

SCALE_ENV = "ECHOMQ_FAULTS_SCALE"


def scale() -> str:
    value = os.environ.get(SCALE_ENV, "ci").strip().lower() or "ci"
    if value not in ("ci", "full"):
        raise ValueError(f"{SCALE_ENV} must be 'ci' or 'full', got {value!r}")
    return value


def pick(ci: T, full: T) -> T:
    """The value for the current scale."""
    return full if scale() == "full" else ci


def is_full() -> bool:
    return scale() == "full"


#: pytest timeout of a scenario test: two runs (Node, echomq), each within its time budget.
TEST_TIMEOUT = pick(150, 900)
