"""The ledger: every execution of a job, written by the worker process that ran it.

It lives in a plain file, outside the Redis under test, so it survives whatever the scenario
does to Redis or to the worker (a SIGKILLed worker's ``start`` line is already on disk). Each
line is ``<job id> <pid> <event> <unix ms>``; ``event`` is ``start`` (the processor began) or
``finish`` (the processor returned; the outcome may not be recorded in Redis yet). Writers
open the file with ``O_APPEND`` and write each line with one ``write()``, so lines of
concurrent processes never interleave. A grouped job's lines carry a fifth field, its group as
the processor saw it (percent-encoded, so it holds no space): ``<job id> <pid> <event> <unix
ms> <group>``.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

START = "start"
FINISH = "finish"


@dataclass(frozen=True, slots=True)
class Entry:
    """One ledger line."""

    job_id: str
    pid: int
    event: str
    t_ms: float
    group: str | None = None


class LedgerWriter:
    """Appends lines to a ledger file (one ``O_APPEND`` descriptor per process)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, job_id: str, event: str, group: str | None = None) -> None:
        tail = "" if group is None else f" {quote(group, safe='')}"
        line = f"{job_id} {os.getpid()} {event} {time.time() * 1000:.1f}{tail}\n"
        os.write(self._fd, line.encode())

    def close(self) -> None:
        os.close(self._fd)


class Ledger:
    """Reads a ledger file; every method reads the file anew, so it sees live writers."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.touch()

    def entries(self) -> list[Entry]:
        """Every complete line, in file order."""
        out = []
        # a line being written has no newline yet: it is skipped (the last piece)
        for line in self.path.read_text().split("\n")[:-1]:
            parts = line.split(" ")
            if len(parts) in (4, 5):
                group = unquote(parts[4]) if len(parts) == 5 else None
                out.append(Entry(parts[0], int(parts[1]), parts[2], float(parts[3]), group))
        return out

    def starts(self) -> Counter[str]:
        """How many times each job's processor began."""
        return Counter(e.job_id for e in self.entries() if e.event == START)

    def started(self) -> set[str]:
        return set(self.starts())

    def in_flight(self, pid: int | None = None) -> set[str]:
        """Jobs whose processor began and has not returned (optionally in one process).

        A job counts once per process: a start not followed by a finish *in the same
        process*.
        """
        open_runs: Counter[tuple[str, int]] = Counter()
        for e in self.entries():
            if pid is not None and e.pid != pid:
                continue
            key = (e.job_id, e.pid)
            if e.event == START:
                open_runs[key] += 1
            elif e.event == FINISH:
                open_runs[key] -= 1
        return {job_id for (job_id, _), n in open_runs.items() if n > 0}

    def first_start(self, job_id: str) -> float | None:
        """Unix ms of the job's first start, if any."""
        for e in self.entries():
            if e.job_id == job_id and e.event == START:
                return e.t_ms
        return None

    def pids_of(self, job_id: str) -> list[int]:
        """The processes that started the job, in order."""
        return [e.pid for e in self.entries() if e.job_id == job_id and e.event == START]


def duplicates(starts: Counter[str]) -> dict[str, int]:
    """Jobs started more than once, with their number of extra starts."""
    return {job_id: n - 1 for job_id, n in starts.items() if n > 1}
