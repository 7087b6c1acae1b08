"""The worker's lifecycle: four states, the moves between them, and what each state allows.

This table is the one place that decides what a worker may do. The loops ask it, instead of
testing flags of their own::

    state     fetch  run jobs  record outcomes  renew locks  stalled check
    NEW        no      no          no               no            no
    RUNNING    yes     yes         yes              yes           yes
    CLOSING    no      the ones    yes              yes           no
                       it holds
    CLOSED     no      no          no               no            no

Moves: NEW -> RUNNING (``run()``), NEW -> CLOSED (``close()`` before ``run()``),
RUNNING -> CLOSING (``close()``), CLOSING -> CLOSED (the end of ``close()``).

The invariant the table protects: **a job the worker holds keeps its lock renewed until its
outcome is recorded or the job is handed back to ``wait``**, in every state a job can be held
in. A worker that stopped renewing while it waited for its jobs would let another worker run
them a second time.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class WorkerState(str, enum.Enum):
    """Where a worker is in its life."""

    NEW = "new"
    RUNNING = "running"
    CLOSING = "closing"
    CLOSED = "closed"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class Allows:
    """What a worker may do in one state."""

    fetch: bool
    record: bool
    renew_locks: bool
    check_stalled: bool


ALLOWS: dict[WorkerState, Allows] = {
    WorkerState.NEW: Allows(fetch=False, record=False, renew_locks=False, check_stalled=False),
    WorkerState.RUNNING: Allows(fetch=True, record=True, renew_locks=True, check_stalled=True),
    WorkerState.CLOSING: Allows(fetch=False, record=True, renew_locks=True, check_stalled=False),
    WorkerState.CLOSED: Allows(fetch=False, record=False, renew_locks=False, check_stalled=False),
}

MOVES: dict[WorkerState, frozenset[WorkerState]] = {
    WorkerState.NEW: frozenset({WorkerState.RUNNING, WorkerState.CLOSED}),
    WorkerState.RUNNING: frozenset({WorkerState.CLOSING}),
    WorkerState.CLOSING: frozenset({WorkerState.CLOSED}),
    WorkerState.CLOSED: frozenset(),
}


class Lifecycle:
    """The current state of one worker; refuses moves the table does not list."""

    __slots__ = ("state",)

    def __init__(self) -> None:
        self.state = WorkerState.NEW

    def move(self, to: WorkerState) -> None:
        """Move to ``to``.

        Raises:
            RuntimeError: the move is not allowed from the current state.
        """
        if to not in MOVES[self.state]:
            raise RuntimeError(f"a worker cannot go from {self.state} to {to}")
        self.state = to

    @property
    def allows(self) -> Allows:
        """What the current state allows."""
        return ALLOWS[self.state]

    def may_fetch(self) -> bool:
        """Whether new jobs may be taken now."""
        return ALLOWS[self.state].fetch

    def may_renew(self) -> bool:
        """Whether the locks of held jobs are renewed now."""
        return ALLOWS[self.state].renew_locks

    def may_check_stalled(self) -> bool:
        """Whether the stalled check runs now."""
        return ALLOWS[self.state].check_stalled
