"""One run of one scenario: its own redis-server, worker processes, producer and ledger.

A scenario is an async function ``scenario(lab, impl) -> Run`` that injects its fault and
waits (with deadlines, never fixed sleeps) for the queue to settle. It does not raise on what
it observes: findings go to :attr:`Run.problems` and the result row, so that the Node baseline
always yields a row and the echomq run fails with the full picture. :func:`verdict` then
holds the echomq run to the invariants and to the baseline:

- no acknowledged job lost, every job in exactly one state, no leftover lock, one outcome
  event per finished job (the audit);
- duplicates (a job's processor started more than once) only where the scenario's physics
  allows them (:meth:`Run.allow`);
- recovery within the scenario's bound;
- never worse than the Node baseline: not more lost jobs, not more duplicates beyond what
  the physics of the run explains (the allowance is computed per run, from the faults that
  run actually suffered, so the two runs compare fairly even when their faults hit
  different numbers of running jobs); where a scenario asks (``no_slower``), no slower
  recovery either, within a slack.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

import redis.asyncio
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from .audit import Audit, audit, finished, finished_at
from .ledger import START, Ledger
from .managed import Restriction
from .producer import Producer
from .proxy import FaultProxy
from .results import Row
from .scale import pick
from .servers import FaultServer
from .topology import Replicated, replicated
from .workers import WorkerConfig, WorkerGroup, WorkerProc

COMPLETED = ("completed",)
#: Seconds all the waits of one run may take together (a healthy run needs a fraction).
RUN_BUDGET = pick(45.0, 240.0)
#: Error lines a worker may log before its first job until it counts as unable to start.
ERRORS_AT_START = 20
#: What polling the server under test may meet while a fault is on.
_UNAVAILABLE = (RedisConnectionError, RedisTimeoutError, OSError, ResponseError)


def now_ms() -> float:
    return time.time() * 1000


class Run:
    """Everything one scenario run owns; built by :meth:`Lab.run`, closed by it."""

    def __init__(
        self,
        scenario: str,
        impl: str,
        server: FaultServer | Replicated,
        proxy: FaultProxy | None,
        directory: Path,
        worker_config: dict[str, Any],
        nodeid: str,
        managed: Restriction | None = None,
    ) -> None:
        self.scenario = scenario
        self.impl = impl
        self._server = server
        self.proxy = proxy
        self.managed = managed
        self.queue = f"faults-{uuid.uuid4().hex[:8]}"
        if isinstance(server, Replicated) and server.kind == "cluster":
            self.queue = f"{{{self.queue}}}"  # all of the queue's keys in one slot
        self.ledger = Ledger(directory / "ledger.txt")
        via_proxy = proxy is not None and worker_config.pop("via_proxy", True)
        url = proxy.url if via_proxy and proxy is not None else server.url
        if isinstance(server, Replicated):
            worker_config["node_options"] = server.node_options()
        client_url = server.url
        if managed is not None:  # everyone under test is restricted; the test's own look is not
            url, client_url = managed.client_url(url), managed.client_url(server.url)
        config = WorkerConfig(impl=impl, queue=self.queue, url=url, **worker_config)
        self.workers = WorkerGroup(config, self.ledger.path, directory)
        named = managed is None or managed.names_visible
        self.producer = Producer(
            client_url, self.queue, client_name="faults-producer" if named else None
        )
        self.r = redis.asyncio.Redis.from_url(
            self._direct_url(), client_name="faults-tester" if named else None
        )
        self.row = Row(scenario, impl, nodeid)
        self.problems: list[str] = []
        self.marks: dict[str, float] = {}  # scenario-specific numbers
        self.audit: Audit | None = None
        self.abandoned = False  # see abandon()
        self._allowed: Counter[str] = Counter()
        self._t0 = time.monotonic()
        # Every wait of the run shares this budget, so a run where nothing works fails in
        # about that long instead of waiting out each deadline in turn.
        self._deadline = self._t0 + RUN_BUDGET

    @property
    def server(self) -> FaultServer:
        """The run's one server (not for a replicated run: see :attr:`topology`)."""
        assert isinstance(self._server, FaultServer), "a replicated run: use run.topology"
        return self._server

    @property
    def topology(self) -> Replicated:
        """The run's replicated setup (``Lab.run(topology=...)``)."""
        assert isinstance(self._server, Replicated), "a single-server run: use run.server"
        return self._server

    def _direct_url(self) -> str:
        """A plain URL of the node that holds the queue's keys now (the primary)."""
        if isinstance(self._server, Replicated):
            return self._server.primary_url(self.queue)
        if self.managed is not None:
            return self.managed.admin_url(self._server.url)
        return self._server.url

    async def follow_primary(self) -> None:
        """Point the test's own client at the node that holds the queue now (after a
        failover)."""
        url = await asyncio.to_thread(self._direct_url)
        await self.r.aclose()
        self.r = redis.asyncio.Redis.from_url(url, client_name="faults-tester")

    # -- workers ---------------------------------------------------------------------------

    async def start_workers(self, n: int, **overrides: Any) -> list[WorkerProc]:
        """Start ``n`` workers and wait until each has connected (on a server where no
        connection can be named, until each has started a job: jobs must be waiting)."""
        procs = [self.workers.start(**overrides) for _ in range(n)]
        if self.managed is not None and not self.managed.names_visible:
            if (failure := await self.wait_first_jobs(procs)) is not None:
                raise AssertionError(f"a worker cannot start: {failure}")
            return procs
        clients = [self.r]
        if isinstance(self._server, Replicated) and self._server.kind == "cluster":
            # BullMQ names its blocking connection on whichever node ioredis picks
            clients = [redis.asyncio.Redis.from_url(u) for u in self._server.node_urls()]
        try:
            await self.workers.wait_ready(clients, procs)
        finally:
            for client in clients:
                if client is not self.r:
                    await client.aclose()
        return procs

    async def wait_first_jobs(
        self, procs: Iterable[WorkerProc], timeout: float = 20.0
    ) -> str | None:
        """Wait until each of ``procs`` has started a job, per the ledger (jobs must be
        waiting); None then. A process that exits, or logs :data:`ERRORS_AT_START` error lines
        without having started a job, cannot start: returns its first error line (BullMQ
        retries a failing connect at once, for ever). On timeout: a problem, and None.
        """
        procs = list(procs)

        def ready() -> str | bool:
            started = {e.pid for e in self.ledger.entries() if e.event == START}
            for proc in procs:
                if proc.pid in started:
                    continue
                errors = proc.errors()
                if len(errors) >= ERRORS_AT_START or not proc.alive:
                    return errors[0] if errors else f"{proc!r} exited"
            return all(p.pid in started for p in procs)

        found = await self.until(ready, timeout, f"{len(procs)} workers to start a job")
        return found if isinstance(found, str) else None

    # -- waiting ---------------------------------------------------------------------------

    async def until(
        self, predicate: Callable[[], Awaitable[Any] | Any], timeout: float, what: str
    ) -> Any:
        """Poll ``predicate`` until truthy; on timeout note a problem and return None."""
        deadline = min(time.monotonic() + timeout, self._deadline)
        error: Exception | None = None
        while True:
            try:
                result = predicate()
                if asyncio.iscoroutine(result):
                    result = await result
            except _UNAVAILABLE as exc:  # the server is restarting or busy: look again
                if isinstance(exc, ResponseError) and not str(exc).startswith("BUSY"):
                    raise
                result, error = None, exc
            if result:
                return result
            if time.monotonic() > deadline:
                last = f" (last error: {error!r})" if error else ""
                spent = " (the run's time budget is spent)" if deadline >= self._deadline else ""
                self.problems.append(
                    f"timed out after {timeout:.0f}s waiting for {what}{last}{spent}"
                )
                return None
            await asyncio.sleep(0.02)

    async def observe_finished(self, ids: Iterable[str], timeout: float) -> float | None:
        """Wait until every job in ``ids`` is finished; unix ms when that was seen, or None."""
        return now_ms() if await self.wait_finished(ids, timeout) else None

    async def wait_finished(self, ids: Iterable[str], timeout: float) -> bool:
        """Wait until every job in ``ids`` is completed or failed (a problem on timeout)."""
        wanted = set(ids)

        async def done() -> bool:
            return wanted <= await finished(self.r, self.queue)

        return bool(await self.until(done, timeout, f"{len(wanted)} jobs to finish"))

    async def in_flight_at_least(self, worker: WorkerProc, n: int, timeout: float) -> set[str]:
        """Wait until ``worker`` runs at least ``n`` jobs (per the ledger); those jobs."""

        def enough() -> set[str] | None:
            running = self.ledger.in_flight(worker.pid)
            return running if len(running) >= n else None

        return set(await self.until(enough, timeout, f"{n} jobs running in {worker!r}") or ())

    async def busy_worker(self, running: int, timeout: float) -> WorkerProc | None:
        """Wait for a live worker with at least ``running`` jobs in its processor."""

        def find() -> WorkerProc | None:
            for worker in self.workers.alive():
                if len(self.ledger.in_flight(worker.pid)) >= running:
                    return worker
            return None

        found: WorkerProc | None = await self.until(
            find, timeout, f"a worker running {running} jobs"
        )
        return found

    async def unfinished(self, worker: WorkerProc | None = None) -> set[str]:
        """Jobs started (by ``worker``, or by anyone) whose outcome is not recorded."""
        started = {e.job_id for e in self.ledger.entries() if worker is None or e.pid == worker.pid}
        return started - await finished(self.r, self.queue)

    # -- accounting ------------------------------------------------------------------------

    def allow(self, job_ids: Iterable[str], times: int = 1) -> None:
        """Allow these jobs one more start each (``times`` more), as the physics explains."""
        for job_id in job_ids:
            self._allowed[job_id] += times

    async def recovery(self, since_ms: float, job_ids: Iterable[str]) -> float | None:
        """Seconds from ``since_ms`` until the last of ``job_ids`` was finished in Redis
        (``finishedOn``); None if one never finished (then recovery is unbounded)."""
        ids = list(job_ids)
        if not ids:
            return 0.0
        at = await finished_at(self.r, self.queue, ids)
        if len(at) < len(ids):
            return None
        return max(0.0, (max(at.values()) - since_ms) / 1000)

    def restarted(self, since_ms: float, job_ids: Iterable[str]) -> float | None:
        """Seconds from ``since_ms`` until each of ``job_ids`` was started again (per the
        ledger); None if one never was."""
        latest = since_ms
        for job_id in job_ids:
            again = [
                e.t_ms
                for e in self.ledger.entries()
                if e.job_id == job_id and e.event == "start" and e.t_ms > since_ms
            ]
            if not again:
                return None
            latest = max(latest, min(again))
        return (latest - since_ms) / 1000

    def set_recovery(self, value: float | None, bound: float) -> None:
        """Record the run's recovery time (worst of all calls) and its bound."""
        self.row.bound = bound
        if value is None:
            self.row.recovery = float("inf")
        else:
            self.row.recovery = max(self.row.recovery or 0.0, value)

    async def finish(
        self,
        expected: Mapping[str, Iterable[str]] | None = None,
        *,
        absent: Iterable[str] = (),
        attempts: Mapping[str, int] | None = None,
    ) -> Audit:
        """Stop the workers, audit Redis and the ledger, fill in the row.

        Args:
            expected: final states allowed per job; default: every acknowledged job completed.
            absent: ids that must be in no state at the end.
            attempts: attemptsMade of the completed jobs where it is not 1 (see
                :func:`~faultkit.audit.audit`).
        """
        await self.workers.stop_supervising()
        if expected is None:
            expected = dict.fromkeys(self.producer.acked, COMPLETED)
        result = await audit(self.r, self.queue, expected, absent=absent, attempts=attempts)
        self.audit = result
        extra = {j: n - 1 for j, n in self.ledger.starts().items() if n > 1}
        self.row.jobs = len(expected)
        self.row.lost = len(result.lost)
        self.row.duplicates = sum(extra.values())
        self.row.allowed = sum(self._allowed.values())
        self.row.excess = sum(max(0, n - self._allowed[j]) for j, n in extra.items())
        for job_id, n in sorted(extra.items()):
            if n > self._allowed[job_id]:
                pids = self.ledger.pids_of(job_id)
                self.problems.append(
                    f"job {job_id} started {n + 1} times (pids {pids}); the physics allows "
                    f"{self._allowed[job_id] + 1}"
                )
        self.problems.extend(result.problems)
        recovery, bound = self.row.recovery, self.row.bound
        if recovery is not None and bound is not None and recovery > bound:
            self.problems.append(f"recovery took {recovery:.2f}s, bound {bound:.2f}s")
        self.row.runtime = time.monotonic() - self._t0
        self.row.marks = dict(self.marks)
        return result

    async def abandon(self, result: str) -> None:
        """End a run whose workers never got going (a baseline that cannot start there):
        kill them and record ``result`` as the row's result. Nothing is audited, and
        :func:`compare` does not hold echomq to this run."""
        await self.workers.aclose()
        self.abandoned = True
        self.audit = Audit({})
        self.row.verdict = result
        self.row.runtime = time.monotonic() - self._t0

    def worker_logs(self) -> str:
        return self.workers.logs()

    async def aclose(self) -> None:
        await self.workers.aclose()
        await self.producer.aclose()
        await self.r.aclose()
        if self.proxy is not None:
            await self.proxy.aclose()
        await asyncio.to_thread(self._server.stop)


class Lab:
    """Factory of :class:`Run` objects for one test; collects their rows."""

    def __init__(self, directory: Path, nodeid: str, rows: list[Row]) -> None:
        self._dir = directory
        self._nodeid = nodeid
        self._rows = rows
        self.runs: list[Run] = []

    @contextlib.asynccontextmanager
    async def run(
        self,
        scenario: str,
        impl: str,
        *,
        server_args: Iterable[str] = (),
        proxy: bool = False,
        topology: str | None = None,
        managed: str | None = None,
        **worker_config: Any,
    ) -> AsyncIterator[Run]:
        """A run of ``scenario`` with ``impl`` workers, on a new server started with
        ``server_args``; with ``proxy`` a :class:`FaultProxy` is started too, and the
        workers connect through it unless ``via_proxy=False`` is given. With ``topology``
        (``sentinel`` or ``cluster``) the run gets a replicated setup instead of one server
        (:mod:`faultkit.topology`), which everyone reaches through its URL form. With
        ``managed`` (``renamed`` or ``acl``) the server is restricted as a managed service
        would be, and everyone but the test itself connects as the restricted user
        (:mod:`faultkit.managed`)."""
        directory = self._dir / f"{len(self.runs)}-{impl}"
        directory.mkdir(parents=True)
        restriction = None if managed is None else Restriction(managed)
        server: FaultServer | Replicated
        if topology is not None:
            server = replicated(topology, directory / topology)
            await asyncio.to_thread(server.start)
        else:
            restricted = () if restriction is None else restriction.server_args
            server = FaultServer(directory / "redis", [*server_args, *restricted])
            server.start()
            if restriction is not None:
                restriction.lock_down(server)
        fault_proxy: FaultProxy | None = None
        if proxy:
            assert isinstance(server, FaultServer), "a proxy stands before one server"
            fault_proxy = FaultProxy(server.port)
            await fault_proxy.start()
        run = Run(
            scenario, impl, server, fault_proxy, directory, worker_config, self._nodeid, restriction
        )
        self.runs.append(run)
        try:
            await run.producer.prepare()
            yield run
            if run.audit is None:
                await run.finish()
        except BaseException as exc:
            run.row.verdict = f"error: {type(exc).__name__}"
            run.row.runtime = time.monotonic() - run._t0
            raise
        finally:
            self._rows.append(run.row)
            await run.aclose()


def compare(echo: Run, node: Run | None) -> list[str]:
    """How the echomq run did worse than the Node baseline (empty: not worse)."""
    if node is None or node.abandoned:
        return []
    e, n = echo.row, node.row
    out = []
    if e.lost > n.lost:
        out.append(f"echomq lost {e.lost} jobs, BullMQ {n.lost}")
    if e.excess > n.excess:
        out.append(f"echomq had {e.excess} unexplained duplicates, BullMQ {n.excess}")
    return out


def slower(echo: Run, node: Run | None, slack: float) -> list[str]:
    """How the echomq run recovered slower than the Node baseline by more than ``slack``
    seconds (empty: not slower). The slack is for what neither side controls: the phase of
    the stalled check and of the lock renewals at the moment of the fault."""
    if node is None or node.abandoned or node.row.recovery is None:
        return []
    ours, theirs = echo.row.recovery, node.row.recovery
    if ours is None or ours <= theirs + slack:
        return []
    return [f"echomq recovered in {ours:.2f}s, BullMQ in {theirs:.2f}s (slack {slack:.2f}s)"]


def verdict(echo: Run, node: Run | None = None, *, no_slower: float | None = None) -> None:
    """Assert the echomq run's invariants and that it did not do worse than the baseline;
    with ``no_slower`` (a slack in seconds), that it recovered no slower than the baseline
    either (:func:`slower`)."""
    worse = compare(echo, node)
    if no_slower is not None:
        worse += slower(echo, node, no_slower)
    problems = echo.problems + worse
    echo.row.verdict = "fail" if problems else "pass"
    if node is not None and not node.row.verdict:  # abandon() wrote its own
        node.row.verdict = "baseline"
    if problems:
        baseline = f"\nBullMQ baseline: {node.row}\n  " + "\n  ".join(node.problems) if node else ""
        raise AssertionError(
            f"{echo.scenario} (echomq): {echo.row}\n  "
            + "\n  ".join(problems)
            + baseline
            + f"\n--- worker logs ---\n{echo.worker_logs()[-6000:]}"
        )
