"""Benchmark adapter for dramatiq with its Redis broker.

Idiomatic use: ``RedisBroker`` plus the ``Results`` middleware (``RedisBackend``) so the
producer can wait for a result; an actor declared with ``@dramatiq.actor(store_results=
True)``; ``noop.send(i)`` to enqueue; one ``dramatiq.Worker`` (what ``dramatiq`` the
command runs in each process) with ``worker_threads`` as its concurrency and dramatiq's
default ``worker_timeout`` (an idle consumer backs off polling up to 1 s); results
through ``message.get_result(block=True)``. dramatiq has no bulk-enqueue API.

Retries: dramatiq's ``Retries`` middleware (in its default set); the enqueue side gives each
message ``max_retries`` = ``--attempts`` - 1 and ``min_backoff=0``, so the retry is sent again
with a delay of 0 ms (through the delay queue, as every dramatiq retry); with ``--fail-once``
the worker adds the ``CurrentMessage`` middleware and the actor raises while the message's
``retries`` option is 0. Delayed jobs: ``send_with_options(delay=ms)``. dramatiq's producer is
synchronous, so the producers phase is unsupported.
"""

from __future__ import annotations

import importlib.metadata
import threading

import _common as c
import dramatiq
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware import CurrentMessage
from dramatiq.results import Results, ResultTimeout
from dramatiq.results.backends import RedisBackend

TRACKER: c.Tracker | None = None


def make_actor(args):
    broker = RedisBroker(url=args.url)
    broker.add_middleware(Results(backend=RedisBackend(url=args.url)))
    if args.fail_once:
        broker.add_middleware(CurrentMessage())
    dramatiq.set_broker(broker)

    @dramatiq.actor(actor_name=c.JOB_NAME, queue_name=args.queue, store_results=True)
    def noop(i: int) -> None:
        assert TRACKER is not None
        first = args.fail_once and not CurrentMessage.get_current_message().options.get("retries")
        TRACKER.attempt(i, first)

    return broker, noop


def enqueue(args) -> None:
    if c.refused(args, bulk="dramatiq has no bulk enqueue API", concurrent=c.SYNC_PRODUCER):
        return
    broker, noop = make_actor(args)
    broker.client.ping()
    if args.mode == "delayed":
        plan = c.DelayedAdds(args, 1)
        for i, d in plan.each():
            noop.send_with_options(args=(i,), delay=d)
        broker.close()
        c.emit_result(plan.result())
        return
    options = {"max_retries": args.attempts - 1, "min_backoff": 0} if args.attempts > 1 else {}
    result = c.timed_adds(args.n, lambda i: noop.send_with_options(args=(i,), **options))
    broker.close()
    c.emit_result(result)


def worker(args) -> None:
    global TRACKER
    done = threading.Event()
    TRACKER = tracker = c.tracker_for(args, done.set)
    broker, _noop = make_actor(args)
    w = dramatiq.Worker(broker, worker_threads=args.concurrency)

    def stop() -> None:
        w.stop()
        broker.close()

    c.drive_sync_worker(args, tracker, done, w.start, stop)


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
    roles = {"enqueue": enqueue, "worker": worker, "latency": latency}
    c.dispatch(lambda: importlib.metadata.version("dramatiq"), roles)


if __name__ == "__main__":
    main()
