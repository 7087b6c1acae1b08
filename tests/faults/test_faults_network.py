"""Faults of the connections: replies lost on the way back, connections killed by the server,
an events reader cut off.

Lost replies and cut connections go through :class:`faultkit.proxy.FaultProxy`; ``CLIENT
KILL`` is sent by the test's own connection (named ``faults-tester``) to the worker's.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

import pytest
from faultkit.audit import stream
from faultkit.lab import Lab, Run, now_ms, verdict
from faultkit.proxy import Predicate, flatten
from faultkit.scale import TEST_TIMEOUT, pick
from faultkit.workers import WorkerProc

from echomq import QueueEvents

# -- 8. Replies lost after the command was applied -------------------------------------------


def finish_call(queue: str) -> Predicate:
    """Matches a script call that records a completion: echomq's finishAndFetch (its items
    argument starts with a complete item ``["C", ...``) or BullMQ's moveToFinished (it
    names the queue's ``completed`` key)."""
    completed = f"bull:{queue}:completed".encode()

    def match(args: list[bytes]) -> bool:
        if not args or not isinstance(args[0], bytes):
            return False
        if args[0].upper() not in (b"EVALSHA", b"EVAL"):
            return False
        return any(
            isinstance(a, bytes) and (a == completed or a.startswith(b'[["C"')) for a in args
        )

    return match


async def lost_replies(lab: Lab, impl: str) -> Run:
    """Workers reach Redis through a proxy that, for every third call recording a
    completion, forwards the call, swallows its reply and closes the worker's connection:
    the job was completed and the next jobs were taken, but the worker never heard.

    Every job must still complete, its completion recorded once (one ``completed`` event,
    attemptsMade 1). Duplicates allowed: none (the jobs the lost call took never started).
    Recovery: from each lost reply until the jobs that call took are completed, bounded by
    half the lock duration: they must be found again, not left to the stalled check (which
    needs the lock to expire first).
    """
    lock, stalled = 6.0, 1.0
    n, drops = pick(40, 200), pick(3, 10)
    async with lab.run(
        "8 lost replies (proxy)", impl, proxy=True, lock=lock, stalled=stalled, concurrency=2
    ) as run:
        assert run.proxy is not None
        proxy = run.proxy
        ids = await run.producer.add_many(n, lambda i: {"ms": 100})
        proxy.drop_replies(finish_call(run.queue), count=drops, every=3)
        await run.start_workers(2)
        await run.until(lambda: len(proxy.dropped) >= drops, 30, f"{drops} lost replies")
        await run.wait_finished(ids, timeout=2 * lock + 20)
        run.row.faults = len(proxy.dropped)
        known = set(ids)
        for drop in proxy.dropped:
            taken = {v.decode() for v in flatten(drop.reply) if v.decode("latin-1") in known}
            run.set_recovery(await run.recovery(drop.t * 1000, taken), lock / 2)
        await run.finish()
    return run


@pytest.mark.timeout(TEST_TIMEOUT)
async def test_lost_replies(lab: Lab, baseline: bool) -> None:
    node = await lost_replies(lab, "node") if baseline else None
    echo = await lost_replies(lab, "echomq")
    verdict(echo, node)


# -- 9. CLIENT KILL of each connection the worker has ----------------------------------------


class Reader:
    """Reads a queue's events from the start of the stream in a background task, noting
    each delivered entry id and when it arrived."""

    def __init__(self, run: Run, url: str) -> None:
        self.events = QueueEvents(run.queue, connection=url, last_event_id="0", block=1.0)
        self.got: list[tuple[str, float]] = []  # (entry id, unix ms)
        self.completed: Counter[str] = Counter()
        self._task = asyncio.create_task(self._read(), name="faults-reader")

    async def _read(self) -> None:
        async for event in self.events:
            self.got.append((event.event_id, now_ms()))
            if event.name == "completed":
                self.completed[getattr(event, "job_id", "")] += 1

    def first_after(self, t_ms: float) -> float | None:
        return next((t for _, t in self.got if t > t_ms), None)

    async def aclose(self) -> None:
        await self.events.aclose()
        await asyncio.wait_for(self._task, 10)


async def stream_ids(run: Run) -> list[str]:
    """Every entry id of the queue's events stream, oldest first."""
    return [entry_id for entry_id, _ in await stream(run.r, run.queue)]


def check_reader(run: Run, reader: Reader, expected: list[str], what: str) -> tuple[int, int]:
    """Compare what ``reader`` delivered with the stream: (missed, delivered twice)."""
    got = [event_id for event_id, _ in reader.got]
    counts = Counter(got)
    twice = sum(n - 1 for n in counts.values() if n > 1)
    missed = len(set(expected) - set(got))
    if got != expected:
        run.problems.append(
            f"{what} delivered {len(got)} entries ({missed} missed, {twice} twice, "
            f"in order: {got == sorted(got, key=_id_key)}); the stream has {len(expected)}"
        )
    return missed, twice


def _id_key(event_id: str) -> tuple[int, int]:
    ms, _, seq = event_id.partition("-")
    return int(ms), int(seq)


async def connections(run: Run, worker: WorkerProc, kind: str) -> list[dict[str, Any]]:
    """The server's clients of one kind: ``blocking`` (the worker's marker connection),
    ``reader`` (QueueEvents), ``command`` (every other connection of the worker: the script
    channel and any pool connection)."""
    blocking = run.workers.blocking_name(worker.name)
    out = []
    for client in await run.r.client_list():
        name = client["name"]
        if name.startswith("faults-"):
            continue
        if name == blocking:
            found = "blocking"
        elif name.endswith(":qe"):
            found = "reader"
        else:
            found = "command"
        if found == kind:
            out.append(client)
    return out


async def client_kill(lab: Lab, impl: str) -> Run:
    """``CLIENT KILL`` of each kind of connection: the worker's script channel (and any other
    command connection) while it runs jobs; its blocking marker connection while it waits
    idle, then while it runs jobs; the QueueEvents reader. After each, new jobs must be taken
    and finished, and the reader must deliver every event exactly once.

    Duplicates allowed: none (no process dies and no lock expires). Recovery: from each kill
    until that phase's jobs are seen finished, bounded by the job time + lock + 2 stalled
    intervals + 1.5 s (a killed call whose reply was lost leaves the jobs it took to the
    stalled check today).
    """
    lock, stalled, ms, per_phase = 2.0, 0.5, 500, 4
    phases = [("command", True), ("blocking", False), ("blocking", True), ("reader", True)]
    async with lab.run("9 CLIENT KILL", impl, lock=lock, stalled=stalled, concurrency=2) as run:
        (worker,) = await run.start_workers(1)
        reader = Reader(run, run.server.url)
        bound = ms / 1000 + lock + 2 * stalled + 1.5
        try:
            for kind, busy in phases:
                if busy:
                    ids = [await run.producer.add({"ms": ms}) for _ in range(per_phase)]
                    await run.busy_worker(2, timeout=10)
                else:

                    async def idle() -> bool:
                        found = await connections(run, worker, "blocking")
                        return bool(found) and found[0]["cmd"] == "bzpopmin"

                    await run.until(idle, 10, "the worker to wait on its marker")
                if kind == "command" and impl == "echomq":
                    # The script channel also carries the odd plain command (the clock-skew
                    # check's TIME at start): wait until its last command is a script.
                    async def on_script() -> list[dict[str, Any]]:
                        found = await connections(run, worker, "command")
                        scripts = [c for c in found if c["cmd"] in ("evalsha", "eval")]
                        return found if scripts else []

                    await run.until(on_script, 5, "the worker's script channel to run a script")
                victims = await connections(run, worker, kind)
                if not victims:
                    run.problems.append(f"no {kind} connection to kill")
                killed_at = now_ms()
                for victim in victims:
                    await run.r.client_kill_filter(_id=victim["id"])
                run.row.faults += 1
                if not busy:
                    ids = [await run.producer.add({"ms": ms}) for _ in range(per_phase)]
                seen = await run.observe_finished(ids, timeout=bound + 10)
                recovery = None if seen is None else max(0.0, seen - killed_at) / 1000
                run.set_recovery(recovery, bound)
            await run.wait_finished(run.producer.acked, timeout=20)
            expected = await stream_ids(run)
            await run.until(
                lambda: [e for e, _ in reader.got][-1:] == expected[-1:], 10, "the reader"
            )
        finally:
            await reader.aclose()
        check_reader(run, reader, await stream_ids(run), "the killed reader")
        for job_id in run.producer.acked:
            if reader.completed[job_id] != 1:
                run.problems.append(f"reader saw job {job_id} complete {reader.completed[job_id]}x")
        await run.finish()
    return run


@pytest.mark.timeout(TEST_TIMEOUT)
async def test_client_kill(lab: Lab, baseline: bool) -> None:
    node = await client_kill(lab, "node") if baseline else None
    echo = await client_kill(lab, "echomq")
    verdict(echo, node)


# -- 12. The events reader cut off -------------------------------------------------------------


def is_xread(args: list[bytes]) -> bool:
    return bool(args) and isinstance(args[0], bytes) and args[0].upper() == b"XREAD"


async def events_cut(lab: Lab) -> Run:
    """Two QueueEvents readers follow a busy queue from the start of its stream: one on a
    direct connection, one through the proxy. They are cut off over and over, in turn by
    ``CLIENT KILL`` (both), by the proxy closing the connection, and by the proxy swallowing
    an XREAD reply that carried entries (read by Redis, never received). Each must resume
    from the last entry it delivered: in the end each delivered exactly the stream's entries,
    in order, none twice.

    In the row, "lost" also counts entries a reader missed and "duplicates" entries delivered
    twice (none allowed). Recovery: from each cut until both readers deliver again, bounded
    by 2 s. echomq only: the reader is echomq's QueueEvents whatever the workers are.
    """
    n, cuts = pick(80, 400), pick(6, 24)
    async with lab.run(
        "12 events reader cut", "echomq", proxy=True, via_proxy=False, lock=2.0, stalled=0.5
    ) as run:
        assert run.proxy is not None
        proxy = run.proxy
        direct = Reader(run, run.server.url)
        proxied = Reader(run, proxy.url)
        try:
            await run.start_workers(2)
            run.producer.stream(n, lambda i: {"ms": 20}, every=0.02)
            for i in range(cuts):
                await run.until(lambda: direct.got and proxied.got, 10, "events flowing")
                cut_at = now_ms()
                how = ("client kill", "proxy cut", "lost XREAD reply")[i % 3]
                if how == "client kill":
                    for client in await run.r.client_list():
                        if client["name"].endswith(":qe"):
                            await run.r.client_kill_filter(_id=client["id"])
                elif how == "proxy cut":
                    proxy.cut_all()
                else:
                    proxy.drop_replies(is_xread, count=1)
                    await run.until(lambda: proxy.dropped, 10, "an XREAD reply to drop")
                run.row.faults += 1

                def resumed(at: float = cut_at) -> bool:
                    return bool(direct.first_after(at) and proxied.first_after(at))

                await run.until(resumed, 10, f"the readers to resume after a {how}")
                first = max(direct.first_after(cut_at) or 0, proxied.first_after(cut_at) or 0)
                run.set_recovery(max(0.0, first - cut_at) / 1000 if first else None, 2.0)

                def flowing(at: float = cut_at) -> bool:  # a few events between two cuts
                    return all(sum(t > at for _, t in r.got) >= 3 for r in (direct, proxied))

                await run.until(flowing, 10, "events to flow again")
            await run.producer.join(timeout=60)
            await run.wait_finished(run.producer.acked, timeout=20)
            expected = await stream_ids(run)

            def caught_up() -> bool:
                return all([e for e, _ in r.got][-1:] == expected[-1:] for r in (direct, proxied))

            await run.until(caught_up, 10, "the readers to reach the end of the stream")
        finally:
            await direct.aclose()
            await proxied.aclose()
        await run.finish()
        expected = await stream_ids(run)
        missed_a, twice_a = check_reader(run, direct, expected, "the direct reader")
        missed_b, twice_b = check_reader(run, proxied, expected, "the proxied reader")
        run.row.lost += missed_a + missed_b
        run.row.duplicates += twice_a + twice_b
        run.row.excess += twice_a + twice_b
    return run


@pytest.mark.timeout(TEST_TIMEOUT)
async def test_events_reader_resumes(lab: Lab) -> None:
    verdict(await events_cut(lab))


# -- 17. CLIENT KILL of the idle blocking connection -------------------------------------------


async def blocking_kill(lab: Lab, impl: str) -> Run:
    """An idle worker waits on its marker; its blocking connection is killed (``CLIENT
    KILL``), and a job is added at once. The worker must notice and take the job: recovery is
    from the job's acknowledgement until its processor starts (ledger), bounded by 0.1 s.
    Repeated, each time once the worker waits on its marker again. Duplicates allowed: none.
    """
    kills = pick(3, 10)
    async with lab.run("17 CLIENT KILL idle blocking", impl, lock=2.0, stalled=0.5) as run:
        (worker,) = await run.start_workers(1)

        async def idle() -> bool:
            found = await connections(run, worker, "blocking")
            return bool(found) and found[0]["cmd"] == "bzpopmin"

        for _ in range(kills):
            await run.until(idle, 10, "the worker to wait on its marker")
            await asyncio.sleep(0.2)  # well inside its wait
            for victim in await connections(run, worker, "blocking"):
                await run.r.client_kill_filter(_id=victim["id"])
            run.row.faults += 1
            job_id = await run.producer.add({"ms": 10})
            acked = run.producer.acked[job_id] * 1000
            await run.wait_finished([job_id], timeout=10)
            started = run.ledger.first_start(job_id)
            run.set_recovery(None if started is None else max(0.0, started - acked) / 1000, 0.1)
        await run.finish()
    return run


@pytest.mark.faults_baseline
@pytest.mark.timeout(TEST_TIMEOUT)
async def test_client_kill_of_the_idle_blocking_connection(lab: Lab, baseline: bool) -> None:
    node = await blocking_kill(lab, "node") if baseline else None
    echo = await blocking_kill(lab, "echomq")
    verdict(echo, node)
