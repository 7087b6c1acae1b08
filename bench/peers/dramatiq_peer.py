"""Benchmark adapter for dramatiq with its Redis broker.

Idiomatic use: ``RedisBroker`` plus the ``Results`` middleware (``RedisBackend``) so the
producer can wait for a result; an actor declared with ``@dramatiq.actor(store_results=
True)``; ``noop.send(i)`` to enqueue; one ``dramatiq.Worker`` (what ``dramatiq`` the
command runs in each process) with ``worker_threads`` as its concurrency and dramatiq's
default ``worker_timeout`` (an idle consumer backs off polling up to 1 s); results
through ``message.get_result(block=True)``. dramatiq has no bulk-enqueue API.
"""

from __future__ import annotations

import importlib.metadata
import sys
import threading

import _common as c
import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.results import Results, ResultTimeout
from dramatiq.results.backends import RedisBackend

TRACKER: c.Tracker | None = None


def make_actor(args):
    broker = RedisBroker(url=args.url)
    broker.add_middleware(Results(backend=RedisBackend(url=args.url)))
    dramatiq.set_broker(broker)

    @dramatiq.actor(actor_name=c.JOB_NAME, queue_name=args.queue, store_results=True)
    def noop(i: int) -> None:
        assert TRACKER is not None
        TRACKER.record(i)

    return broker, noop


def enqueue(args) -> None:
    if args.mode == "bulk":
        c.unsupported("dramatiq has no bulk enqueue API")
        return
    broker, noop = make_actor(args)
    broker.client.ping()
    t0 = c.now_ns()
    for i in range(args.n):
        noop.send(i)
    t1 = c.now_ns()
    broker.close()
    c.emit_result(c.timed_enqueue_result(args.n, t0, t1))


def worker(args) -> None:
    global TRACKER
    done = threading.Event()
    TRACKER = tracker = c.Tracker(args.n, None if args.latency else done.set)
    broker, _noop = make_actor(args)
    w = dramatiq.Worker(broker, worker_threads=args.concurrency)
    c.watch_stdin(done.set)
    cpu0 = c.cpu_seconds()
    ready = c.now_ns()
    c.emit_ready()
    w.start()
    if not done.wait(args.timeout):
        print(f"worker timed out after {args.timeout}s", file=sys.stderr)
    stop_ns = c.now_ns()
    cpu = c.cpu_seconds() - cpu0
    threading.Event().wait(c.GRACE_S)  # let a duplicate delivery show up
    w.stop()
    broker.close()
    c.emit_result(
        tracker.summary(ready_ns=ready, stop_ns=stop_ns, cpu_s=cpu, with_starts=args.latency)
    )


def latency(args) -> None:
    broker, noop = make_actor(args)
    broker.client.ping()

    def send_and_wait(i: int) -> bool:
        message = noop.send(i)
        try:
            message.get_result(block=True, timeout=5000)
        except ResultTimeout:
            return False
        return True

    result = c.run_latency_sync(args.n, args.budget, args.gap, send_and_wait)
    broker.close()
    c.emit_result(result)


def main() -> None:
    args = c.parse_args()
    if args.role == "version":
        c.emit_result({"version": importlib.metadata.version("dramatiq")})
        return
    {"enqueue": enqueue, "worker": worker, "latency": latency}[args.role](args)


if __name__ == "__main__":
    main()
