"""Grouped jobs under faults (issue 23, item 6; the contract is docs/protocol/groups.md).

Every scenario spreads its jobs over six groups, sets a group concurrency of 2 with the API
(``Queue.set_group_concurrency``) before any worker starts, and runs three echomq worker
processes of concurrency 5: 15 slots for the 12 the groups allow, so the group limit, not the
workers, is what holds each group back. Then the fault, and the verdict:

- the suite's own invariants (:func:`faultkit.lab.verdict`): every acknowledged job completed,
  run exactly once but for the duplicates the physics of the fault allows, one outcome event
  each, no lock left;
- **every job stays in its group**: at the end its hash's ``gid`` and its options' group are
  the group it was added with, and every execution of it (a ledger line, written by the
  processor with the group the worker handed it) was of that group. All along the run,
  :class:`GroupWatch` takes atomic snapshots (MULTI) of the queue's structures and finds each
  acknowledged job in exactly one of them, never in one of BullMQ's (``wait``, ``active``,
  ``delayed``, ...), a waiting job only among its own group's, each group's ``a:<gid>``
  counter equal to its jobs in ``groups:active`` and at most 2, the index and the rotation
  consistent, and no group that may run left out of the rotation; at the end no group key
  holds anything but the settings (no leaked slot);
- **no group ever ran more than 2 jobs at once**, per the ledger, which lives outside the
  Redis under test: an execution runs from its ``start`` line to its ``finish`` line in the
  same process, and one cut by SIGKILL (no ``finish``) until the kill. An execution lies
  inside the time Redis counted its slot as taken (it starts after the fetch that took the
  slot and returns before the call that frees it), so the ledger never sees more overlap
  than Redis allowed. The run must also reach 2 in some group, or the limit never bound and
  the scenario proved nothing. The most seen is the row's ``group_overlap`` mark.

echomq only: BullMQ 6 OSS has no groups (BullMQ Pro's are closed), so no Node baseline exists
for the grouped invariants. The ungrouped scenarios these mirror have one: 1 SIGKILL storm
(test_faults_workers.py), 8 lost replies (test_faults_network.py) and 4 Redis kill -9 with AOF
(test_faults_redis.py); the suite has no ungrouped retry scenario.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import pytest
import redis.exceptions
from faultkit.lab import Lab, Run, now_ms, verdict
from faultkit.ledger import FINISH, START, Entry
from faultkit.proxy import flatten
from faultkit.scale import TEST_TIMEOUT, pick
from test_faults_redis import kill_redis

import echomq
from helpers import queue_key

GROUPS = tuple(f"g{i}" for i in range(6))
GROUP_CONCURRENCY = 2
WORKERS, CONCURRENCY = 3, 5  # 15 slots, the groups allow 12
#: BullMQ's structures: a grouped job is never in one (docs/protocol/groups.md#groups-node).
BULLMQ_LISTS = ("wait", "active", "paused")
BULLMQ_ZSETS = ("prioritized", "delayed")
#: At most this many distinct problems of one kind are kept from the snapshots.
PROBLEMS_PER_KIND = 5


class Groups:
    """Which group each job was added to, decided and kept by the test (outside Redis)."""

    def __init__(self, run: Run) -> None:
        self._run = run
        self.of: dict[str, str] = {}

    def options(
        self, extra: Callable[[int], dict[str, Any]] | None = None
    ) -> Callable[[int], dict[str, Any]]:
        """Options for the i-th job of an ``add_many`` or ``stream``: its id (taken from the
        producer now, so the group is known before the add) and group ``GROUPS[i % 6]``."""

        def make(i: int) -> dict[str, Any]:
            job_id = self._run.producer.new_id()
            self.of[job_id] = GROUPS[i % len(GROUPS)]
            return {"job_id": job_id, "group": self.of[job_id], **(extra(i) if extra else {})}

        return make


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class GroupWatch:
    """Atomic snapshots of the queue's structures every ``every`` seconds, in the background,
    each checked against the groups the jobs were added to (see the module docstring). A
    snapshot the server cannot answer (it is down, loading its AOF) is skipped."""

    def __init__(self, run: Run, groups: Groups, every: float = 0.05) -> None:
        self._run = run
        self._groups = groups
        self._every = every
        self.snapshots = 0
        self.skipped = 0
        self.most_active = 0  # the most a:<gid> (or jobs in groups:active) of a group seen
        self.kinds: Counter[str] = Counter()
        self.problems: list[str] = []
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="faults-group-watch")

    async def stop(self) -> None:
        """Let the snapshot under way end, and take no more. (Not by cancelling it: redis-py
        may turn the CancelledError of a command it was reading into a ConnectionError, and
        the loop would go on.)"""
        task, self._task = self._task, None
        self._stopping.set()
        if task is not None:
            await asyncio.wait_for(task, 30)

    async def _loop(self) -> None:
        while not self._stopping.is_set():
            try:
                await self.snapshot()
            except (redis.exceptions.RedisError, OSError):
                self.skipped += 1
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), self._every)

    def _problem(self, kind: str, text: str) -> None:
        self.kinds[kind] += 1
        if self.kinds[kind] <= PROBLEMS_PER_KIND:
            self.problems.append(f"snapshot {self.snapshots}: {text}")

    async def snapshot(self) -> None:
        q = self._run.queue
        acked = set(self._run.producer.acked)  # acknowledged before the snapshot is sent
        structures: list[str] = []
        pipe = self._run.r.pipeline(transaction=True)
        for name in (*BULLMQ_LISTS, "groups:active"):
            pipe.lrange(queue_key(q, name), 0, -1)
            structures.append(name)
        for name in (*BULLMQ_ZSETS, "completed", "failed", "groups:delayed"):
            pipe.zrange(queue_key(q, name), 0, -1)
            structures.append(name)
        for group in GROUPS:
            pipe.lrange(queue_key(q, f"groups:wait:{group}"), 0, -1)
            structures.append(f"groups:wait:{group}")
            pipe.zrange(queue_key(q, f"groups:prioritized:{group}"), 0, -1)
            structures.append(f"groups:prioritized:{group}")
        pipe.zrange(queue_key(q, "groups:waiting"), 0, -1)
        pipe.zrange(queue_key(q, "groups"), 0, -1, withscores=True)
        pipe.lrange(queue_key(q, "groups:ready"), 0, -1)
        for group in GROUPS:
            pipe.get(queue_key(q, f"groups:run:{group}"))
        replies = await pipe.execute()
        self.snapshots += 1
        held = {name: [_s(m) for m in reply] for name, reply in zip(structures, replies)}
        waiting_index = {_s(m) for m in replies[len(structures)]}
        index = {_s(g): score for g, score in replies[len(structures) + 1]}
        ready = [_s(g) for g in replies[len(structures) + 2]]
        runs = dict(zip(GROUPS, replies[len(structures) + 3 :]))
        of = self._groups.of

        places: dict[str, list[str]] = {}
        for name, members in held.items():
            for job_id in members:
                places.setdefault(job_id, []).append(name)
        for job_id in sorted(acked):
            where = places.get(job_id, [])
            if len(where) != 1:
                self._problem("places", f"job {job_id} ({of.get(job_id)}) is in {where}")
                continue
            (place,) = where
            if place in (*BULLMQ_LISTS, *BULLMQ_ZSETS):
                self._problem("bullmq", f"grouped job {job_id} ({of.get(job_id)}) is in {place}")
            elif place.startswith(("groups:wait:", "groups:prioritized:")) and place not in (
                f"groups:wait:{of.get(job_id)}",
                f"groups:prioritized:{of.get(job_id)}",
            ):
                self._problem("other group", f"job {job_id} of {of.get(job_id)} is in {place}")
        waiting = {
            j for g in GROUPS for s in ("wait", "prioritized") for j in held[f"groups:{s}:{g}"]
        }
        if waiting != waiting_index:
            self._problem(
                "waiting index",
                f"groups:waiting holds {sorted(waiting_index ^ waiting)} differently from "
                "the groups' waiting sets",
            )
        active = Counter(of.get(j) for j in held["groups:active"])
        for group in GROUPS:
            # groups:run:<gid> is twice the group's active jobs, plus 1 while it is in the rotation
            counter, in_rotation = divmod(int(runs[group] or 0), 2)
            n_wait = len(held[f"groups:wait:{group}"]) + len(held[f"groups:prioritized:{group}"])
            self.most_active = max(self.most_active, counter, active[group])
            if counter != active[group]:
                self._problem(
                    "slots",
                    f"{group}: groups:run:{group} counts {counter}, groups:active holds "
                    f"{active[group]} "
                    f"of its jobs {sorted(j for j in held['groups:active'] if of.get(j) == group)}",
                )
            if max(counter, active[group]) > GROUP_CONCURRENCY:
                self._problem("over", f"{group} has {max(counter, active[group])} active jobs")
            listed = index.get(group)
            if (n_wait or active[group]) and listed is None:
                self._problem("index", f"{group} has jobs but is not in `groups`")
            if listed is not None and listed != n_wait:
                self._problem("index", f"`groups` says {group} has {listed} waiting, not {n_wait}")
            if listed is not None and not n_wait and not active[group]:
                self._problem("index", f"{group} is in `groups` with no waiting or active job")
            rotating = ready.count(group)
            if rotating > 1 or rotating != in_rotation:
                self._problem(
                    "rotation", f"{group}: {rotating}x in groups:ready, groups:run {runs[group]}"
                )
            if n_wait and counter < GROUP_CONCURRENCY and not rotating:
                self._problem(
                    "stuck",
                    f"{group} has {n_wait} waiting jobs and {counter} active but is out of the "
                    f"rotation {ready}",
                )


@dataclass
class Execution:
    """One run of a job's processor, per the ledger; ``end`` None: it never ended."""

    job_id: str
    pid: int
    group: str | None
    start: float
    end: float | None = None
    end_group: str | None = None
    killed: bool = False


def executions(entries: Iterable[Entry], killed: Mapping[int, float]) -> list[Execution]:
    """Each ``start`` paired with the next ``finish`` of the same job in the same process; an
    execution of a process SIGKILLed at ``killed[pid]`` (unix ms) without a finish ends then."""
    out: list[Execution] = []
    open_runs: dict[tuple[str, int], list[Execution]] = {}
    for e in entries:
        key = (e.job_id, e.pid)
        if e.event == START:
            run = Execution(e.job_id, e.pid, e.group, e.t_ms)
            open_runs.setdefault(key, []).append(run)
            out.append(run)
        elif e.event == FINISH and open_runs.get(key):
            run = open_runs[key].pop(0)
            run.end, run.end_group = e.t_ms, e.group
    for run in out:
        if run.end is None and run.pid in killed:
            run.end, run.killed = killed[run.pid], True
    return out


def most_overlapping(runs: Iterable[Execution]) -> dict[str, tuple[int, list[Execution]]]:
    """Per group: the most of its executions that ran at once, and one such set. An end
    counts before a start at the same instant; an execution without an end runs forever."""
    points: dict[str, list[tuple[float, int, int]]] = {}
    listed = list(runs)
    for n, run in enumerate(listed):
        group = run.group or "?"
        points.setdefault(group, []).append((run.start, 1, n))
        points[group].append((math.inf if run.end is None else run.end, 0, n))
    out: dict[str, tuple[int, list[Execution]]] = {}
    for group, events in points.items():
        running: set[int] = set()
        best: tuple[int, list[Execution]] = (0, [])
        for _, starts, n in sorted(events):
            if starts:
                running.add(n)
                if len(running) > best[0]:
                    best = (len(running), [listed[i] for i in sorted(running)])
            else:
                running.discard(n)
        out[group] = best
    return out


async def judge(
    run: Run, groups: Groups, watch: GroupWatch, killed: Mapping[int, float] | None = None
) -> None:
    """The grouped verdict (module docstring), after :meth:`Run.finish`: its findings go to
    ``run.problems``, the most overlap seen to the ``group_overlap`` mark."""
    await watch.stop()
    problems = run.problems
    problems.extend(watch.problems)
    for kind, n in watch.kinds.items():
        if n > PROBLEMS_PER_KIND:
            problems.append(f"... {n - PROBLEMS_PER_KIND} more snapshot problems of kind {kind!r}")
    if watch.snapshots < 10:
        problems.append(f"only {watch.snapshots} snapshots of the group structures were taken")
    run.marks["snapshots"] = watch.snapshots
    run.marks["redis_most_active"] = watch.most_active

    of = groups.of
    runs = executions(run.ledger.entries(), killed or {})
    for ex in runs:
        if ex.group != of.get(ex.job_id) or (ex.end_group or ex.group) != ex.group:
            problems.append(
                f"job {ex.job_id} of {of.get(ex.job_id)} ran in pid {ex.pid} as a job of "
                f"{ex.group!r} (finish: {ex.end_group!r})"
            )
        if ex.end is None:
            problems.append(f"job {ex.job_id}'s run in pid {ex.pid} never ended (not killed)")
    overlap = most_overlapping(runs)
    for group, (most, witnesses) in sorted(overlap.items()):
        run.marks[f"overlap:{group}"] = most
        if most > GROUP_CONCURRENCY:
            spans = ", ".join(
                f"{w.job_id}@{w.pid} [{w.start:.1f}, {w.end if w.end is None else f'{w.end:.1f}'}"
                f"{' killed' if w.killed else ''}]"
                for w in witnesses
            )
            problems.append(f"{group} ran {most} jobs at once (limit {GROUP_CONCURRENCY}): {spans}")
    most = max((m for m, _ in overlap.values()), default=0)
    run.marks["group_overlap"] = most
    if most < GROUP_CONCURRENCY:
        problems.append(
            f"no group ever ran {GROUP_CONCURRENCY} jobs at once: the limit never bound"
        )

    assert run.audit is not None, "judge() comes after run.finish()"
    for job_id in run.producer.acked:
        h = run.audit.hashes.get(job_id, {})
        opts = json.loads(h.get("opts", "{}"))
        if h.get("gid") != of[job_id] or opts.get("emqGroup") != of[job_id]:
            problems.append(
                f"job {job_id} was added to {of[job_id]}: gid {h.get('gid')!r}, "
                f"opts group {opts.get('emqGroup')!r}"
            )

    q = run.queue
    lists = ("groups:active", "groups:ready")
    zsets = ("groups", "groups:delayed", "groups:waiting", "groups:limited")
    pipe = run.r.pipeline(transaction=True)
    for name in lists:
        pipe.lrange(queue_key(q, name), 0, -1)
    for name in zsets:
        pipe.zrange(queue_key(q, name), 0, -1)
    pipe.hgetall(queue_key(q, "groups:state"))
    *left, state = await pipe.execute()
    for name, raw in zip((*lists, *zsets), left):
        members = [_s(m) for m in raw]
        if name == "groups:ready":
            members = [m for m in members if m]  # "" (the ungrouped jobs' turn) may linger
        if members:
            problems.append(f"{name} still holds {members} at the end")
    waits = [
        _s(k)
        for pattern in ("groups:wait:*", "groups:prioritized:*")
        async for k in run.r.scan_iter(match=queue_key(q, pattern))
    ]
    if waits:
        problems.append(f"group waiting sets left at the end: {sorted(waits)}")
    counters = [_s(k) async for k in run.r.scan_iter(match=queue_key(q, "groups:run:*"))]
    if counters:
        problems.append(f"group counters left at the end: {sorted(counters)}")
    settings = {_s(k): _s(v) for k, v in state.items() if _s(k) != "seq"}
    if settings != {"c": str(GROUP_CONCURRENCY)}:
        problems.append(f"groups:state ends as {settings}, not just the concurrency setting")
    run.row.marks = dict(run.marks)  # finish() copied them before these


@contextlib.asynccontextmanager
async def grouped_run(
    lab: Lab, scenario: str, **config: Any
) -> AsyncIterator[tuple[Run, Groups, GroupWatch]]:
    """An echomq run with the group concurrency set (before any worker starts) and the
    snapshots running."""
    async with lab.run(scenario, "echomq", **config) as run:
        async with echomq.Queue(run.queue, connection=run.r) as queue:
            await queue.set_group_concurrency(GROUP_CONCURRENCY)
            assert await queue.get_group_concurrency() == GROUP_CONCURRENCY
        groups = Groups(run)
        watch = GroupWatch(run, groups)
        watch.start()
        try:
            yield run, groups, watch
        finally:
            await watch.stop()


# -- G1. Retries, at once and after a backoff ------------------------------------------------


async def grouped_retries(lab: Lab) -> Run:
    """Half the jobs fail their first attempt (``attempts`` 2): a quarter are retried at once
    (back among their group's waiting jobs), a quarter after a fixed backoff (through
    ``groups:delayed``, never ``delayed``, which BullMQ promotes to ``wait``). Each must run
    exactly twice, in its group, and complete with attemptsMade 2; the others run once.
    A delayed retry must not start before its backoff.

    Duplicates allowed: the failing jobs' second runs. Recovery: from a failed attempt's end
    (ledger) until the job starts again, bounded by the backoff + the time all of its group's
    runs take at concurrency 2 (a retry goes to the back of its group) + 1.5 s.
    """
    n, ms, backoff = pick(48, 240), 150, 0.4

    def data(i: int) -> dict[str, Any]:
        return {"ms": ms, "fail_first": i % 4 in (0, 1)}

    def options(i: int) -> dict[str, Any]:
        retry: dict[str, Any] = {"attempts": 2}
        if i % 4 == 1:
            retry["backoff"] = {"type": "fixed", "delay": backoff}
        return retry

    async with grouped_run(lab, "G1 grouped retries", lock=2.0, stalled=0.5) as (run, gs, w):
        ids = await run.producer.add_many(n, data, gs.options(options))
        at_once = [j for i, j in enumerate(ids) if i % 4 == 0]
        delayed = [j for i, j in enumerate(ids) if i % 4 == 1]
        await run.start_workers(WORKERS, concurrency=CONCURRENCY)
        await run.wait_finished(ids, timeout=30)
        retried = at_once + delayed
        run.allow(retried)
        run.row.faults = len(retried)
        run.marks["delayed_retries"] = len(delayed)
        runs_per_group = n / len(GROUPS) * 1.5  # half the jobs run twice
        backlog = math.ceil(runs_per_group / GROUP_CONCURRENCY) * ms / 1000
        bound = backoff + backlog + 1.5
        entries = run.ledger.entries()
        starts = run.ledger.starts()
        for job_id in retried:
            if starts[job_id] != 2:
                run.problems.append(f"failing job {job_id} ran {starts[job_id]} times, not 2")
                continue
            first_end = min(e.t_ms for e in entries if e.job_id == job_id and e.event == FINISH)
            second = max(e.t_ms for e in entries if e.job_id == job_id and e.event == START)
            if job_id in delayed and second - first_end < backoff * 1000 - 20:
                run.problems.append(
                    f"job {job_id} was retried {second - first_end:.0f} ms after its failure, "
                    f"before its {backoff * 1000:.0f} ms backoff"
                )
            run.set_recovery((second - first_end) / 1000, bound)
        await run.finish(attempts=dict.fromkeys(retried, 2))
        await judge(run, gs, w)
    return run


@pytest.mark.timeout(TEST_TIMEOUT)
async def test_grouped_retries_stay_in_their_group(lab: Lab) -> None:
    verdict(await grouped_retries(lab))


# -- G2. SIGKILL mid-job: stalled recovery ---------------------------------------------------


async def grouped_sigkill(lab: Lab) -> Run:
    """Workers are SIGKILLed while running grouped jobs, one after another, and replaced: the
    victim's jobs stay in ``groups:active`` (their group's slots taken) until their locks
    expire and a stalled check returns them to the front of their group. Meanwhile the group
    may not start others in their place beyond its limit; the ledger counts a killed run as
    running until the kill (not beyond: the process is dead, though Redis still holds the
    slot). Ungrouped twin with a Node baseline: 1 SIGKILL storm (test_faults_workers.py).

    Duplicates allowed: the jobs the victim had started and whose outcome was not recorded.
    The stall limit is above the number of kills, so a job hit twice is re-run, not failed.
    Recovery: from each kill until every job the victim was running has started again,
    bounded by lock + 2 stalled intervals + 1.5 s + job times: one for a free slot in its
    group, and one per round the victim's jobs need, since a worker runs at most one job that
    stalled before at a time (finishAndFetch sets the others aside): up to 5 jobs over 3
    workers, two rounds.
    """
    lock, stalled, ms = 1.0, 0.5, 400
    n, kills = pick(60, 240), pick(2, 8)
    async with grouped_run(
        lab, "G2 grouped SIGKILL", lock=lock, stalled=stalled, max_stalled=kills + 1
    ) as (run, gs, w):
        ids = await run.producer.add_many(n, lambda i: {"ms": ms}, gs.options())
        await run.start_workers(WORKERS, concurrency=CONCURRENCY)
        killed: dict[int, float] = {}
        hits: list[tuple[float, set[str]]] = []
        for _ in range(kills):
            victim = await run.busy_worker(GROUP_CONCURRENCY, timeout=20)
            if victim is None:
                break
            victim.kill()
            killed[victim.pid] = killed_at = now_ms()
            running = run.ledger.in_flight(victim.pid)
            run.allow(await run.unfinished(victim))
            hits.append((killed_at, running))
            await run.start_workers(1, concurrency=CONCURRENCY)
        run.row.faults = len(hits)
        run.marks["killed_running"] = sum(len(h) for _, h in hits)
        await run.wait_finished(ids, timeout=30)
        rounds = math.ceil(CONCURRENCY / WORKERS)
        bound = lock + 2 * stalled + (1 + rounds) * ms / 1000 + 1.5
        for killed_at, running in hits:
            run.set_recovery(run.restarted(killed_at, running), bound)
        await run.finish()
        await judge(run, gs, w, killed)
    return run


@pytest.mark.timeout(TEST_TIMEOUT)
async def test_grouped_sigkill_recovers_jobs_in_their_group(lab: Lab) -> None:
    verdict(await grouped_sigkill(lab))


# -- G3. A lost finishAndFetch reply ---------------------------------------------------------


class LostReplies:
    """Which finishAndFetch calls the proxy swallows the reply of: the first ``retries``
    calls recording a retry (an ``R`` or ``D`` item), then every second call recording a
    completion. Only script calls whose items argument is a JSON array of items match."""

    def __init__(self, retries: int) -> None:
        self.retries_left = retries
        self.completions = 0
        #: Calls whose reply was to be swallowed. One of two calls in flight on the same
        #: connection never reaches :attr:`FaultProxy.dropped`: the first drop closed the
        #: connection, so its reply was lost that way.
        self.decided = 0

    @staticmethod
    def kinds(args: list[bytes]) -> set[str]:
        """The item kinds of a finishAndFetch call (empty: not one that records outcomes)."""
        if not args or not isinstance(args[0], bytes):
            return set()
        if args[0].upper() not in (b"EVALSHA", b"EVAL"):
            return set()
        for arg in args:
            if isinstance(arg, bytes) and arg.startswith(b'[["'):
                with contextlib.suppress(ValueError):
                    return {str(item[0]) for item in json.loads(arg)}
        return set()

    def __call__(self, args: list[bytes]) -> bool:
        drop = self._decide(self.kinds(args))
        self.decided += drop
        return drop

    def _decide(self, kinds: set[str]) -> bool:
        if kinds & {"R", "D"} and self.retries_left > 0:
            self.retries_left -= 1
            return True
        if "C" in kinds:
            self.completions += 1
            return self.completions % 2 == 0
        return False


async def grouped_lost_replies(lab: Lab) -> Run:
    """Workers reach Redis through a proxy that swallows the reply of some finishAndFetch
    calls (it forwards the call, drops the reply and closes the connection): every second
    call recording completions (the jobs completed, their groups' slots freed, the next jobs
    taken and their groups' slots taken, but the worker never heard) and, first, the calls
    recording a retry (a quarter of the jobs fail their first attempt, half of those with a
    backoff: the job went back to its group, or to ``groups:delayed``, unheard). The resend
    must record nothing twice (a retry placed twice, a slot freed twice) and get back the
    very jobs the lost call took, without taking their groups' slots again. Ungrouped twin
    with a Node baseline: 8 lost replies (test_faults_network.py).

    Duplicates allowed: the failing jobs' second runs. The lost calls must have taken jobs
    and recorded retries (else those resend paths were not exercised). Recovery: from each
    lost reply until the jobs that call took have started (ledger; the worker never started
    them before), bounded by half the lock duration: they must be found again by the resend,
    not left to the stalled check.
    """
    lock, stalled, ms, backoff = 6.0, 1.0, 100, 0.2
    n, drops, retry_drops = pick(48, 240), pick(4, 6), pick(2, 3)

    def data(i: int) -> dict[str, Any]:
        return {"ms": ms, "fail_first": i % 8 in (0, 1)}

    def options(i: int) -> dict[str, Any]:
        retry: dict[str, Any] = {"attempts": 2}
        if i % 8 == 1:
            retry["backoff"] = {"type": "fixed", "delay": backoff}
        return retry

    async with grouped_run(
        lab, "G3 grouped lost finishAndFetch reply", proxy=True, lock=lock, stalled=stalled
    ) as (run, gs, w):
        assert run.proxy is not None
        proxy = run.proxy
        ids = await run.producer.add_many(n, data, gs.options(options))
        retried = [j for i, j in enumerate(ids) if i % 8 in (0, 1)]
        lost = LostReplies(retry_drops)
        proxy.drop_replies(lost, count=drops)
        await run.start_workers(WORKERS, concurrency=CONCURRENCY)
        await run.until(lambda: lost.decided >= drops, 30, f"{drops} lost replies")
        await run.wait_finished(ids, timeout=2 * lock + 20)
        run.allow(retried)
        run.row.faults = lost.decided
        known = set(ids)
        taken_by_lost = 0
        for drop in proxy.dropped:
            taken = {v.decode() for v in flatten(drop.reply) if v.decode("latin-1") in known}
            taken_by_lost += len(taken)
            run.set_recovery(run.restarted(drop.t * 1000, taken), lock / 2)
        lost_retries = sum(bool(LostReplies.kinds(d.command) & {"R", "D"}) for d in proxy.dropped)
        run.marks["taken_by_lost"] = taken_by_lost
        run.marks["lost_retry_calls"] = lost_retries
        if not taken_by_lost:
            run.problems.append("the lost calls took no job: that resend path was not exercised")
        if not lost_retries:
            run.problems.append("no lost call recorded a retry: that resend path was not exercised")
        starts = run.ledger.starts()
        for job_id in retried:
            if starts[job_id] != 2:
                run.problems.append(f"failing job {job_id} ran {starts[job_id]} times, not 2")
        await run.finish(attempts=dict.fromkeys(retried, 2))
        await judge(run, gs, w)
    return run


@pytest.mark.timeout(TEST_TIMEOUT)
async def test_grouped_lost_finish_and_fetch_reply(lab: Lab) -> None:
    verdict(await grouped_lost_replies(lab))


# -- G4. Redis kill -9 and restart on AOF ----------------------------------------------------


async def grouped_redis_restart(lab: Lab) -> Run:
    """Redis (``appendonly yes``, ``appendfsync always``) is killed with SIGKILL while grouped
    jobs run and are added, and restarted on its directory after 1 s: the AOF brings back
    every acknowledged add, recorded outcome, group counter and setting; workers reconnect and
    finish, the producer's refused adds are retried (same id, same group). Ungrouped twin with
    a Node baseline: 4 Redis kill -9, AOF always (test_faults_redis.py).

    Duplicates allowed: none (the outage is shorter than the lock). Recovery: from the restart
    until the test sees every job that had started and was not finished when Redis died
    finished in Redis, bounded by lock + 2 stalled intervals + 2 s.
    """
    lock, stalled, ms = 4.0, 1.0, 300
    n, faults = pick(60, 300), pick(1, 3)
    async with grouped_run(
        lab,
        "G4 grouped Redis kill -9, AOF always",
        server_args=["--appendonly", "yes", "--appendfsync", "always"],
        lock=lock,
        stalled=stalled,
    ) as (run, gs, w):
        await run.start_workers(WORKERS, concurrency=CONCURRENCY)
        run.producer.stream(n, lambda i: {"ms": ms}, every=0.02, options=gs.options())
        bound = lock + 2 * stalled + 2
        for _ in range(faults):
            if await run.busy_worker(GROUP_CONCURRENCY, timeout=20) is None:
                break
            hit = await run.unfinished()
            ended = await kill_redis(run)
            run.row.faults += 1
            seen = await run.observe_finished(hit, timeout=lock * 3 + 10)
            run.set_recovery(None if seen is None else max(0.0, seen - ended) / 1000, bound)
        await run.producer.join(timeout=60)
        await run.wait_finished(run.producer.acked, timeout=30)
        for worker in run.workers.procs:
            if not worker.alive:
                run.problems.append(f"{worker!r} died")
        run.marks["snapshots_skipped"] = w.skipped
        await run.finish()
        await judge(run, gs, w)
    return run


@pytest.mark.timeout(TEST_TIMEOUT)
async def test_grouped_redis_restart_on_aof(lab: Lab) -> None:
    verdict(await grouped_redis_restart(lab))


def test_overlap_counts_a_killed_run_until_the_kill() -> None:
    entries = [
        Entry("a", 1, START, 0.0, "g"),
        Entry("b", 2, START, 5.0, "g"),
        Entry("a", 1, FINISH, 10.0, "g"),
        Entry("c", 3, START, 10.0, "g"),  # starts as "a" ends: not an overlap
        Entry("d", 2, START, 12.0, "g"),  # pid 2 is killed at 20: "b" runs until then
        Entry("c", 3, FINISH, 30.0, "g"),
        Entry("e", 3, START, 25.0, "h"),
    ]
    runs = executions(entries, killed={2: 20.0})
    assert [(r.job_id, r.end, r.killed) for r in runs if r.group == "g"] == [
        ("a", 10.0, False),
        ("b", 20.0, True),
        ("c", 30.0, False),
        ("d", 20.0, True),
    ]
    overlap = most_overlapping(runs)
    assert overlap["g"][0] == 3 and [r.job_id for r in overlap["g"][1]] == ["b", "c", "d"]
    assert overlap["h"][0] == 1 and runs[-1].end is None
