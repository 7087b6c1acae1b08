"""The worker's lifecycle: four states, the moves between them, and what each state allows.

This table is the one place that decides what a worker may do. The loops ask it, instead of
testing flags of their own::

    state     fetch  start jobs it took  renew locks, record outcomes  stalled check
    NEW        no         no                      no                       no
    RUNNING    yes        yes                     yes                      yes
    CLOSING    no         no (handed back)        yes                      no
    CLOSED     no         no                      no                       no

"Fetch" and "start jobs it took" are one column: a state that takes no new jobs hands back the
jobs a call in flight returns, and every "is the worker closing?" is this question. Outcomes
are recorded exactly while locks are renewed: a held job's lock is kept until its outcome is
recorded or the job is handed back. ``pause()`` is an overlay on RUNNING kept here too: a
paused worker fetches nothing and runs what it holds (:meth:`Lifecycle.may_fetch_now`).

Moves: NEW -> RUNNING (``run()``), NEW -> CLOSED (``close()`` before ``run()``),
RUNNING -> CLOSING (``close()``), CLOSING -> CLOSED (the end of ``close()``).

The invariant the table protects: **a job the worker holds keeps its lock renewed until its
outcome is recorded or the job is handed back to ``wait``**, in every state a job can be held
in. A worker that stopped renewing while it waited for its jobs would let another worker run
them a second time. The options ``skip_lock_renewal`` and ``skip_stalled_check`` (BullMQ's) turn
the renewer and the stalled checker off for the whole run (``_session``): the user's choice,
outside this table.

The closing deadline belongs to CLOSING: once the grace period is over, ``close()`` starts it
(:meth:`Lifecycle.start_finish_deadline`), and every call of the worker that meets an outage
(recording outcomes, handing jobs back, a scheduler's next iteration) asks
:meth:`Lifecycle.finish_deadline_passed` whether to stop retrying. A running worker keeps
trying while its locks are renewed.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass

#: Seconds ``close()`` keeps trying, after the grace period, to record outcomes and hand jobs
#: back through a busy or unreachable Redis (the CLI's own stop deadline is 15 s later).
FINISH_DEADLINE = 10.0


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
    renew_locks: bool
    check_stalled: bool


ALLOWS: dict[WorkerState, Allows] = {
    WorkerState.NEW: Allows(fetch=False, renew_locks=False, check_stalled=False),
    WorkerState.RUNNING: Allows(fetch=True, renew_locks=True, check_stalled=True),
    WorkerState.CLOSING: Allows(fetch=False, renew_locks=True, check_stalled=False),
    WorkerState.CLOSED: Allows(fetch=False, renew_locks=False, check_stalled=False),
}

MOVES: dict[WorkerState, frozenset[WorkerState]] = {
    WorkerState.NEW: frozenset({WorkerState.RUNNING, WorkerState.CLOSED}),
    WorkerState.RUNNING: frozenset({WorkerState.CLOSING}),
    WorkerState.CLOSING: frozenset({WorkerState.CLOSED}),
    WorkerState.CLOSED: frozenset(),
}


class Lifecycle:
    """The current state of one worker; refuses moves the table does not list."""

    __slots__ = ("_finish_by", "paused", "state")

    def __init__(self) -> None:
        self.state = WorkerState.NEW
        #: ``pause()``: no fetching, in any state, until ``resume()``
        self.paused = False
        self._finish_by: float | None = None  # monotonic time; None: no deadline yet

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
        """Whether the state takes new jobs (False: closing, or not running); jobs a call in
        flight returns are handed back when it does not."""
        return ALLOWS[self.state].fetch

    def may_fetch_now(self) -> bool:
        """Whether a fetch may start now: the state takes jobs and the worker is not paused."""
        return ALLOWS[self.state].fetch and not self.paused

    def may_renew(self) -> bool:
        """Whether the locks of held jobs are renewed now."""
        return ALLOWS[self.state].renew_locks

    def may_check_stalled(self) -> bool:
        """Whether the stalled check runs now."""
        return ALLOWS[self.state].check_stalled

    def start_finish_deadline(self) -> None:
        """From now on, calls meeting an outage give up after :data:`FINISH_DEADLINE`."""
        self._finish_by = time.monotonic() + FINISH_DEADLINE

    def finish_deadline_passed(self) -> bool:
        """Whether a call meeting an outage should stop retrying: only once ``close()``
        started the deadline and it has passed."""
        finish_by = self._finish_by
        return finish_by is not None and time.monotonic() > finish_by
