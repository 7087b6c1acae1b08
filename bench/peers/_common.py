"""Shared plumbing for the Python peer adapters (standard library only).

Every adapter is run as ``python bench/peers/<peer>.py <role> [options]`` inside that
peer's own virtualenv, so this module must not import anything outside the standard
library. It owns the adapter side of the harness protocol:

* Lines that start with ``@@bench `` on stdout carry one JSON object each; everything
  else on stdout/stderr (library logging) is ignored by the harness.
* ``worker`` prints ``{"ready": true}`` once its objects are built and it is about to
  start consuming, then ``{"result": {...}}`` when it stops.
* ``enqueue`` and ``latency`` print only ``{"result": {...}}``.
* An adapter that cannot do a role prints ``{"unsupported": "why"}`` and exits 0.

Flows (only adapters whose library has them; the harness runs no other): ``enqueue --mode
flow --n TREES --children C --batch B`` adds TREES trees of one parent job named ``parent``
and C children named ``child`` (all in ``--queue``), B trees per bulk flow call;
``worker --flow --n TREES*(C+1)`` drains them. Every job's data carries a distinct
``i`` (see :func:`flow_index`), every processor returns 1, and the worker's result also has
``starts`` and ``ends`` (processor start and return times by ``i``), so the harness can check
that each parent started after all its children had returned. The flow enqueue result also
carries ``cpu_s``, the producer's CPU over the timed part.

Failing jobs (bench/failing_jobs.py): ``enqueue --mode bulk --attempts A`` gives every job A
attempts (no backoff), and ``worker --fail-once`` fails each job's first attempt (its processor
raises) and completes the second; the tracker counts the failed attempts apart
(``failed_attempts``, ``failed_distinct``), so ``first_ns`` is the first attempt of any kind and
the drain still ends when every ``i`` completed once.

The failing phase of bench/run.py (benchlib/failing.py) adds the same way (``--mode bulk``, or
``--mode seq`` for a library without bulk adds, both with ``--attempts``). Each adapter uses its
library's own retry mechanism, with no backoff or delay where the library allows it; where the
number of attempts is declared on the worker's side (arq's ``max_tries``, Celery's
``max_retries``), ``--fail-once`` declares 2. A library without a retry mechanism, or a worker
that cannot run at the concurrency asked, answers ``unsupported``.

Many producers (bench/producers.py, the producers phase of bench/run.py): ``enqueue --mode
concurrent --producers P`` makes the ``--n`` adds from P concurrent producers (coroutines)
sharing one ``Queue`` (or the library's one producer object), or with ``--api module``
(echomq) the module-level ``add`` on one shared client, after one unmeasured warm-up add (then
the database is flushed); the result carries ``cpu_s``, the producer process's CPU over the
timed part (see :func:`run_concurrent_async`). Libraries without an asyncio producer answer
``unsupported``.

Delayed jobs (the lateness phase, benchlib/lateness.py): ``enqueue --mode delayed --span S``
adds the ``--n`` jobs, job ``i`` delayed by :func:`delay_ms` (integer ms spread over S
seconds), in bulk calls of ``--batch`` where the library has them, and reports ``due_ms``: for
each ``i`` the wall clock (``time.time()``, ms) read just before its add call plus its delay,
which is at or before the due time the library computes (see :class:`DelayedAdds`).
``worker --delayed`` records processor starts on the wall clock (``time.time_ns()``; Node:
``performance.timeOrigin + performance.now()``) and reports them all in ``starts``, so the
harness takes lateness = start - due.

``idle`` (bench/idle_latency.py) runs a worker at ``--concurrency`` and its producer in one
process (one clock) and prints only ``{"result": {...}}``. Every job's data is ``{"i": I, "ms":
M}`` and its processor sleeps M ms. After one unmeasured warm-up job it takes ``--samples``
samples: add a "previous" job of ``--previous-ms``, wait until its processor has returned,
stay idle ``--idle-gap`` s, then add a second job of 0 ms (with ``--delay-ms``, a delayed one)
and take the time from just before that add to its processor start, minus the delay; then
wait for that job to end and ``IDLE_SETTLE_S`` more before the next sample (see
:func:`run_idle_async`).

Timestamps are ``time.monotonic_ns()`` (CLOCK_MONOTONIC on Linux), which is shared
between processes on one machine, so the harness can subtract a producer's enqueue time
from a worker's processor-start time. Node's ``process.hrtime.bigint()`` reads the same
clock. The one exception is ``worker --delayed`` (wall clock, as the due times).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

PREFIX = "@@bench "
JOB_NAME = "noop"
PARENT_NAME = "parent"
CHILD_NAME = "child"
TICK_NAME = "tick"  # the schedulers role's iterations
GRACE_S = 0.3
IDLE_SETTLE_S = 0.2  # idle: quiet time after a sample's second job, before the next sample
IDLE_WAIT_S = 20.0  # idle: the longest wait for one processor start or end (4 x drain_delay)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Parse the common adapter command line."""
    p = argparse.ArgumentParser()
    p.add_argument(
        "role", choices=["enqueue", "worker", "latency", "version", "schedulers", "idle"]
    )
    p.add_argument("--url", default="redis://127.0.0.1:6379/0")
    p.add_argument("--queue", default="bench")
    p.add_argument("--n", type=int, default=1000)
    p.add_argument(
        "--mode", choices=["seq", "bulk", "flow", "concurrent", "delayed"], default="seq"
    )
    p.add_argument("--batch", type=int, default=1000, help="jobs (flow: trees) per bulk call")
    p.add_argument("--children", type=int, default=10, help="flow: children per parent")
    p.add_argument("--flow", action="store_true", help="worker: drain flows (return 1, ends)")
    p.add_argument("--attempts", type=int, default=1, help="enqueue: attempts per job (1)")
    p.add_argument("--fail-once", action="store_true", help="worker: fail each job's first attempt")
    # the lateness phase (benchlib/lateness.py): --mode delayed and worker --delayed
    p.add_argument("--span", type=float, default=10.0, help="delayed: delays spread over (s)")
    p.add_argument("--delayed", action="store_true", help="worker: wall-clock starts, all kept")
    # enqueue --mode concurrent (bench/producers.py): --n adds over --producers coroutines
    p.add_argument("--producers", type=int, default=1, help="concurrent: producers (1)")
    p.add_argument("--api", choices=["queue", "module"], default="queue", help="concurrent")
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--timeout", type=float, default=300.0, help="worker gives up after this")
    p.add_argument("--budget", type=float, default=60.0, help="latency: max seconds of sampling")
    p.add_argument("--gap", type=float, default=0.005, help="latency: pause between samples")
    p.add_argument("--latency", action="store_true", help="worker: idle-latency mode")
    p.add_argument("--uvloop", action="store_true")
    # the schedulers role (benchlib/schedulers.py): --n schedulers of --every seconds
    p.add_argument("--every", type=float, default=1.0, help="schedulers: interval (s)")
    p.add_argument("--duration", type=float, default=30.0, help="schedulers: seconds of run")
    p.add_argument("--warmup", type=float, default=2.0, help="schedulers: unmeasured start (s)")
    # the idle role (bench/idle_latency.py): one cell of the idle-worker latency matrix
    p.add_argument("--samples", type=int, default=5, help="idle: samples")
    p.add_argument("--previous-ms", type=float, default=0.0, help="idle: previous job's run (ms)")
    p.add_argument("--delay-ms", type=float, default=0.0, help="idle: second job's delay (ms)")
    p.add_argument("--idle-gap", type=float, default=0.5, help="idle: idle time before add (s)")
    return p.parse_args(argv)


#: Why a library with a synchronous producer has no producers phase.
SYNC_PRODUCER = "its producer is synchronous (no asyncio API)"


def refused(args: argparse.Namespace, **why: str) -> bool:
    """Answer ``unsupported`` (and return True) when ``--mode`` is one of ``why``'s keys."""
    if args.mode in why:
        unsupported(why[args.mode])
        return True
    return False


def dispatch(version: Callable[[], str], roles: dict[str, Callable[[Any], Any]]) -> None:
    """A synchronous adapter's ``main``: the ``version`` role, or the role's function."""
    args = parse_args()
    if args.role == "version":
        emit_result({"version": version()})
        return
    roles[args.role](args)


def emit(obj: dict[str, Any]) -> None:
    """Write one protocol line to stdout."""
    sys.stdout.write(PREFIX + json.dumps(obj, separators=(",", ":")) + "\n")
    sys.stdout.flush()


def emit_ready() -> None:
    emit({"ready": True})


def emit_result(result: dict[str, Any]) -> None:
    emit({"result": result})


def unsupported(why: str) -> None:
    emit({"unsupported": why})


def now_ns() -> int:
    return time.monotonic_ns()


def cpu_seconds() -> float:
    """CPU (user + system) used by this process, its threads and reaped children."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def watch_stdin(on_eof: Callable[[], None]) -> None:
    """Call ``on_eof`` (from a daemon thread) when the harness closes our stdin."""

    def run() -> None:
        try:
            while sys.stdin.readline():
                pass
        finally:
            on_eof()

    threading.Thread(target=run, name="bench-stdin", daemon=True).start()


class Tracker:
    """Records which ``i`` values the processor ran, and when.

    Thread-safe, so it serves asyncio processors and thread-pool processors alike.
    ``on_complete`` fires once, from the recording thread, when ``expected`` distinct
    values have been seen.
    """

    def __init__(
        self,
        expected: int,
        on_complete: Callable[[], None] | None = None,
        clock: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self.expected = expected
        self.on_complete = on_complete
        self.clock = clock  # time.time_ns for worker --delayed
        self.starts: dict[int, int] = {}
        self.ends: dict[int, int] = {}
        self.executions = 0
        self.duplicates: list[int] = []
        self.failed: dict[int, int] = {}  # i -> failed attempts (worker --fail-once)
        self.first_ns: int | None = None
        self.last_ns: int | None = None
        self._lock = threading.Lock()
        self._fired = False

    def record(self, i: int, t_ns: int | None = None) -> None:
        t = self.clock() if t_ns is None else t_ns
        fire = False
        with self._lock:
            self.executions += 1
            if i in self.starts:
                self.duplicates.append(i)
            else:
                self.starts[i] = t
            if self.first_ns is None or t < self.first_ns:
                self.first_ns = t
            if self.last_ns is None or t > self.last_ns:
                self.last_ns = t
            if not self._fired and len(self.starts) >= self.expected:
                self._fired = fire = True
        if fire and self.on_complete is not None:
            self.on_complete()

    def record_failure(self, i: int) -> None:
        """Note an attempt of ``i`` that is about to fail on purpose (``--fail-once``)."""
        t = self.clock()
        with self._lock:
            self.failed[i] = self.failed.get(i, 0) + 1
            if self.first_ns is None or t < self.first_ns:
                self.first_ns = t

    def attempt(self, i: int, fail: bool, error: BaseException | None = None) -> None:
        """The processor's part for ``i``: record the run, or with ``fail`` (``--fail-once``
        and the job's first attempt) note the failure and raise ``error`` (a RuntimeError by
        default; arq retries on its own ``Retry``)."""
        if fail:
            self.record_failure(i)
            raise error or RuntimeError("failing the first attempt on purpose")
        self.record(i)

    def record_end(self, i: int) -> None:
        """Note when the processor of ``i`` returned (flows: a parent must start later)."""
        t = now_ns()
        with self._lock:
            self.ends.setdefault(i, t)

    def summary(
        self, *, ready_ns: int, stop_ns: int, cpu_s: float, with_starts: bool
    ) -> dict[str, Any]:
        """The worker's result object (see ``bench/run.py`` for the fields)."""
        missing = [i for i in range(self.expected) if i not in self.starts]
        out: dict[str, Any] = {
            "expected": self.expected,
            "executions": self.executions,
            "distinct": len(self.starts),
            "duplicates": sorted(set(self.duplicates))[:20],
            "duplicate_count": len(self.duplicates),
            "missing": missing[:20],
            "missing_count": len(missing),
            "unexpected": sorted(i for i in self.starts if not 0 <= i < self.expected)[:20],
            "ready_ns": ready_ns,
            "first_ns": self.first_ns,
            "last_ns": self.last_ns,
            "stop_ns": stop_ns,
            "cpu_s": cpu_s,
        }
        if self.failed:
            out["failed_attempts"] = sum(self.failed.values())
            out["failed_distinct"] = len(self.failed)
        if with_starts:
            out["starts"] = {str(k): v for k, v in self.starts.items()}
        if self.ends:
            out["ends"] = {str(k): v for k, v in self.ends.items()}
        return out


def tracker_for(args: argparse.Namespace, on_complete: Callable[[], None] | None) -> Tracker:
    """The worker's Tracker: ``on_complete`` in drain mode (not with ``--latency``), the wall
    clock with ``--delayed``."""
    clock = time.time_ns if args.delayed else time.monotonic_ns
    return Tracker(args.n, None if args.latency else on_complete, clock)


def with_starts(args: argparse.Namespace) -> bool:
    """Whether the worker's result lists every processor start (``starts``)."""
    return bool(args.latency or args.flow or args.delayed)


def delay_ms(i: int, n: int, span_ms: float) -> int:
    """Job ``i``'s delay in whole ms: the fractional parts of ``i`` times the golden ratio
    spread the ``n`` delays evenly over ``[0, span_ms)`` in an order unrelated to ``i``
    (bench/node/bullmq_peer.mjs computes the same)."""
    return int((i * 0.6180339887498949) % 1.0 * span_ms)


class DelayedAdds:
    """``enqueue --mode delayed``: the jobs in batches of ``batch``, with their due times.

    ``for jobs in plan.batches(): add(jobs)`` (or ``await add(jobs)``), where ``jobs`` is a
    list of ``(i, delay in ms)``: each batch is stamped with the wall clock (whole ms, rounded
    down) just before it is handed over, so a due time recorded here is never after the
    library's own.
    """

    def __init__(self, args: argparse.Namespace, batch: int) -> None:
        self.n = args.n
        self.span_ms = args.span * 1000
        self.batch = batch
        self.due_ms: list[int] = [0] * args.n
        self.t0 = self.t1 = 0

    def batches(self) -> Any:
        self.t0 = now_ns()
        for chunk in chunks(self.n, self.batch):
            jobs = [(i, delay_ms(i, self.n, self.span_ms)) for i in chunk]
            t = time.time_ns() // 1_000_000  # whole ms: libraries stamp jobs in whole ms
            for i, d in jobs:
                self.due_ms[i] = t + d
            yield jobs
        self.t1 = now_ns()

    def each(self) -> Any:
        """One job at a time (a plan made with ``batch`` 1): ``(i, delay in ms)``."""
        for [(i, d)] in self.batches():
            yield i, d

    def result(self) -> dict[str, Any]:
        return timed_enqueue_result(self.n, self.t0, self.t1) | {"due_ms": self.due_ms}


async def run_mode_async(
    args: argparse.Namespace,
    add: Callable[[int], Any],
    flush: Callable[[], Any],
    add_delayed: Callable[[list[tuple[int, int]]], Any],
    batch: int = 1,
) -> dict[str, Any] | None:
    """``enqueue --mode concurrent`` (:func:`run_concurrent_async` with ``add`` and ``flush``)
    or ``--mode delayed`` (``add_delayed(jobs)`` per batch of ``batch`` ``(i, delay ms)``
    pairs; 1 for a library without a bulk add); None for the other modes."""
    if args.mode == "concurrent":
        return await run_concurrent_async(args, add, flush)
    if args.mode != "delayed":
        return None
    plan = DelayedAdds(args, batch)
    for jobs in plan.batches():
        await add_delayed(jobs)
    return plan.result()


async def run_concurrent_async(
    args: argparse.Namespace, add: Callable[[int], Any], flush: Callable[[], Any]
) -> dict[str, Any]:
    """``enqueue --mode concurrent``: ``add(-1)`` once (scripts loaded, connections open), then
    ``flush()`` (drops it: this Redis is private to the benchmark), then the ``--n`` adds shared
    by ``--producers`` coroutines; ``add(i)`` is the library's add, a coroutine."""
    import asyncio

    await add(-1)
    await flush()
    todo = iter(range(args.n))

    async def producer() -> None:
        for i in todo:
            await add(i)

    cpu0, t0 = cpu_seconds(), now_ns()
    await asyncio.gather(*(producer() for _ in range(args.producers)))
    t1, cpu1 = now_ns(), cpu_seconds()
    return timed_enqueue_result(args.n, t0, t1) | {"cpu_s": cpu1 - cpu0}


def run_latency_sync(
    n: int, budget: float, gap: float, send_and_wait: Callable[[int], bool]
) -> dict[str, Any]:
    """Drive ``n`` one-at-a-time samples; ``send_and_wait(i)`` returns True once it saw the
    result (False if the library offers no way to wait, or the wait timed out)."""
    samples = []
    deadline = time.monotonic() + budget
    for i in range(n):
        if time.monotonic() > deadline:
            break
        t0 = now_ns()
        seen = send_and_wait(i)
        t1 = now_ns()
        samples.append([i, t0, t1 if seen else None])
        time.sleep(gap)
    return {"samples": samples}


async def run_latency_async(
    n: int, budget: float, gap: float, send_and_wait: Any
) -> dict[str, Any]:
    """Async twin of :func:`run_latency_sync`; ``send_and_wait`` is a coroutine function."""
    import asyncio

    samples = []
    deadline = time.monotonic() + budget
    for i in range(n):
        if time.monotonic() > deadline:
            break
        t0 = now_ns()
        seen = await send_and_wait(i)
        t1 = now_ns()
        samples.append([i, t0, t1 if seen else None])
        await asyncio.sleep(gap)
    return {"samples": samples}


def timed_enqueue_result(n: int, started_ns: int, ended_ns: int) -> dict[str, Any]:
    return {"n": n, "seconds": (ended_ns - started_ns) / 1e9}


def timed_adds(n: int, add: Callable[[int], Any]) -> dict[str, Any]:
    """A synchronous producer's ``add(i)`` for every ``i``, one after another, timed."""
    t0 = now_ns()
    for i in range(n):
        add(i)
    return timed_enqueue_result(n, t0, now_ns())


def run_main(main: Callable[[], Any], use_uvloop: bool) -> Any:
    """Run the coroutine function ``main`` on asyncio's loop, or uvloop's if asked.

    With ``BENCH_PROFILE=DIR`` in the environment, the run is profiled with cProfile (on process
    CPU time) and the stats are written to ``DIR/<role>-<pid>.prof`` (diagnosis only: it slows
    the adapter).
    """
    out_dir = os.environ.get("BENCH_PROFILE")
    if out_dir:
        import cProfile

        prof = cProfile.Profile(time.process_time)  # CPU, not wall: the box may be loaded
        try:
            return prof.runcall(_run_loop, main, use_uvloop)
        finally:
            role = sys.argv[1] if len(sys.argv) > 1 else "run"
            prof.dump_stats(os.path.join(out_dir, f"{role}-{os.getpid()}.prof"))
    return _run_loop(main, use_uvloop)


def _run_loop(main: Callable[[], Any], use_uvloop: bool) -> Any:
    if use_uvloop:
        import uvloop  # imported lazily: only the echomq venv has it

        return uvloop.run(main())
    import asyncio

    return asyncio.run(main())


def async_tracker(args: argparse.Namespace, done: Any) -> Tracker:
    """A Tracker for an asyncio worker; in drain mode it sets ``done`` when all jobs ran."""
    import asyncio

    loop = asyncio.get_running_loop()
    return tracker_for(args, lambda: loop.call_soon_threadsafe(done.set))


async def drive_async_worker(
    args: argparse.Namespace,
    tracker: Tracker,
    start: Callable[[], Any],
    stop: Callable[[], Any],
    done: Any,
) -> None:
    """Common life cycle of an asyncio worker adapter.

    ``start``/``stop`` are coroutine functions that start consuming and shut the worker
    down; ``done`` is the ``asyncio.Event`` the tracker's ``on_complete`` sets (through
    ``call_soon_threadsafe``). With ``--latency`` the worker keeps
    running until the harness closes stdin; in drain mode it stops once every job ran.
    """
    import asyncio

    loop = asyncio.get_running_loop()
    watch_stdin(lambda: loop.call_soon_threadsafe(done.set))
    cpu0 = cpu_seconds()
    ready = now_ns()
    emit_ready()
    await start()
    try:
        await asyncio.wait_for(done.wait(), args.timeout)
    except asyncio.TimeoutError:
        print(f"worker timed out after {args.timeout}s", file=sys.stderr)
    stop_ns = now_ns()
    cpu = cpu_seconds() - cpu0
    await asyncio.sleep(GRACE_S)  # let a duplicate delivery show up before we stop
    await stop()
    emit_result(
        tracker.summary(ready_ns=ready, stop_ns=stop_ns, cpu_s=cpu, with_starts=with_starts(args))
    )


def drive_sync_worker(
    args: argparse.Namespace,
    tracker: Tracker,
    done: threading.Event,
    start: Callable[[], Any],
    stop: Callable[[], Any],
) -> None:
    """Common life cycle of a thread-pool worker adapter (dramatiq, Celery), as
    :func:`drive_async_worker`: ``ready``, ``start()``, until every job ran (or stdin closes),
    then ``stop()`` and the result; ``done`` is the event the tracker's ``on_complete`` sets."""
    watch_stdin(done.set)
    cpu0 = cpu_seconds()
    ready = now_ns()
    emit_ready()
    start()
    if not done.wait(args.timeout):
        print(f"worker timed out after {args.timeout}s", file=sys.stderr)
    stop_ns = now_ns()
    cpu = cpu_seconds() - cpu0
    threading.Event().wait(GRACE_S)  # let a duplicate delivery show up
    stop()
    emit_result(
        tracker.summary(ready_ns=ready, stop_ns=stop_ns, cpu_s=cpu, with_starts=with_starts(args))
    )


def chunks(n: int, size: int) -> list[range]:
    return [range(s, min(n, s + size)) for s in range(0, n, size)]


def flow_index(tree: int, child: int | None, children: int) -> int:
    """The ``i`` of a flow job: ``tree*(children+1)`` for the parent, ``+1+child`` for a child."""
    return tree * (children + 1) + (0 if child is None else 1 + child)


class SchedulerRecorder:
    """The schedulers role's record of iterations (asyncio processors, one thread).

    ``record`` notes each processor start: the iteration id, its scheduled time (the ms in
    ``repeat:<scheduler id>:<ms>``, else the job's timestamp + delay) and the wall clock.
    Lateness = start - scheduled time, in ms (both wall clocks of this machine).
    """

    def __init__(self, every_s: float) -> None:
        self.every_ms = every_s * 1000
        self.runs: list[tuple[str, float, float]] = []  # (job id, scheduled ms, start ms)

    def record(self, job_id: str, fallback_ms: float) -> None:
        start = time.time() * 1000
        head, _, tail = job_id.rpartition(":")
        scheduled = float(tail) if head.startswith("repeat:") and tail.isdigit() else fallback_ms
        self.runs.append((job_id, scheduled, start))

    def result(self, w0: float, w1: float, cpu_s: float, upsert_s: float) -> dict[str, Any]:
        seen: dict[str, int] = {}
        slots: dict[str, list[float]] = {}
        for job_id, scheduled, _ in self.runs:
            seen[job_id] = seen.get(job_id, 0) + 1
            if seen[job_id] == 1:
                slots.setdefault(job_id.rpartition(":")[0], []).append(scheduled)
        doubled = 0
        for times in slots.values():
            times.sort()
            doubled += sum(1 for a, b in zip(times, times[1:]) if b - a < self.every_ms)
        late = [round(start - sch, 1) for _, sch, start in self.runs if w0 <= start < w1]
        return {
            "executions": len(self.runs),
            "distinct": len(seen),
            "duplicate_count": sum(n - 1 for n in seen.values()),
            "doubled_slots": doubled,
            "schedulers_seen": len(slots),
            "window_s": (w1 - w0) / 1000,
            "window_starts": len(late),
            "lateness_ms": late,
            "cpu_s": cpu_s,
            "upsert_s": upsert_s,
        }


async def drive_scheduler_run(
    args: argparse.Namespace,
    rec: SchedulerRecorder,
    run: Callable[[], Any],
    close: Callable[[], Any],
    upsert_s: float,
) -> None:
    """The schedulers role after the upserts: ``ready``, run the worker (``run()`` is its
    coroutine) for ``--warmup`` s, then a measured window of ``--duration`` s announced with
    ``{"window": "start"}`` / ``{"window": "end"}`` (the harness reads Redis CPU at each),
    then ``close()`` and the result."""
    import asyncio

    emit_ready()
    task = asyncio.create_task(run())
    await asyncio.sleep(args.warmup)
    w0 = time.time() * 1000
    cpu0 = cpu_seconds()
    emit({"window": "start"})
    await asyncio.sleep(args.duration)
    w1 = time.time() * 1000
    cpu = cpu_seconds() - cpu0
    emit({"window": "end"})
    await close()
    await task
    emit_result(rec.result(w0, w1, cpu, upsert_s))


class IdleProbe:
    """The idle role's record of processor starts and ends by ``i``, with waits on them.

    For asyncio processors on one event loop: :meth:`process` is the processor body (it
    reads the clock first, then sleeps ``ms``), :meth:`wait` blocks the producer until a given
    job has started or ended.
    """

    def __init__(self) -> None:
        self.times: dict[str, dict[int, int]] = {"start": {}, "end": {}}
        self.executions = 0
        self._events: dict[tuple[str, int], Any] = {}

    def _event(self, kind: str, i: int) -> Any:
        import asyncio

        return self._events.setdefault((kind, i), asyncio.Event())

    def _mark(self, kind: str, i: int, t_ns: int) -> None:
        self.times[kind].setdefault(i, t_ns)
        self._event(kind, i).set()

    async def process(self, i: int, ms: float) -> None:
        import asyncio

        t = now_ns()
        self.executions += 1
        self._mark("start", i, t)
        await asyncio.sleep(ms / 1000)
        self._mark("end", i, now_ns())

    async def wait(self, kind: str, i: int, timeout: float) -> int:
        """The ``kind`` ("start" or "end") time of job ``i``, once there is one."""
        import asyncio

        try:
            await asyncio.wait_for(self._event(kind, i).wait(), timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"job i={i} did not {kind} within {timeout:g} s") from None
        return self.times[kind][i]


async def run_idle_async(
    args: argparse.Namespace, probe: IdleProbe, add: Callable[[int, float, float], Any]
) -> dict[str, Any]:
    """The idle role's samples; ``add(i, ms, delay_ms)`` is the library's add (a coroutine).

    Lags are in ms: ``lags_ms`` from just before the second job's add to its processor start,
    minus ``--delay-ms`` (for a delayed job: its lateness after the due time);
    ``previous_lags_ms`` the same for each previous job (added after ``IDLE_SETTLE_S`` of
    quiet, unmeasured by the harness's table). A wait over ``IDLE_WAIT_S`` ends the run with
    ``error`` set and the samples taken so far.
    """
    import asyncio

    async def one(i: int, ms: float, delay_ms: float) -> float:
        t0 = now_ns()
        await add(i, ms, delay_ms)
        start = await probe.wait("start", i, IDLE_WAIT_S + delay_ms / 1000)
        await probe.wait("end", i, IDLE_WAIT_S + ms / 1000)
        return round((start - t0) / 1e6 - delay_ms, 3)

    lags: list[float] = []
    previous: list[float] = []
    error = None
    try:
        await one(-1, 0, 0)  # warm-up: scripts loaded, connections open, worker polling
        await asyncio.sleep(IDLE_SETTLE_S)
        for s in range(args.samples):
            previous.append(await one(2 * s, args.previous_ms, 0))
            await asyncio.sleep(args.idle_gap)
            lags.append(await one(2 * s + 1, 0, args.delay_ms))
            await asyncio.sleep(IDLE_SETTLE_S)
    except TimeoutError as exc:
        error = str(exc)
    return {
        "lags_ms": lags,
        "previous_lags_ms": previous,
        "executions": probe.executions,
        "distinct": len(probe.times["start"]),
        "error": error,
    }
