"""Benchmark adapter for Celery with its Redis broker and Redis result backend.

Idiomatic use: a ``Celery`` app with ``broker`` and ``backend`` on the benchmark's Redis and
``task_default_queue`` = ``--queue``; a task declared with ``@app.task``; ``noop.delay(i)`` to
enqueue; one worker, Celery's own ``WorkController`` with the ``threads`` pool and
``concurrency`` (run in this process with ``celery.contrib.testing.worker.start_worker``, no
ping task, so the tracker sees every run; mingle, gossip and heartbeats off, as that helper
sets them); results through ``AsyncResult.get`` (the Redis backend's pub/sub). Celery has no
bulk-enqueue API (a ``group`` publishes its messages one by one), and its producer is
synchronous, so there is no producers phase.

Retries: the task is declared with ``autoretry_for=(RuntimeError,)``, ``max_retries=1``
(Celery counts retries on the worker's side: ``--attempts`` has no per-message form) and
``default_retry_delay=0`` (no backoff), and raises while ``self.request.retries == 0``.
Delayed jobs: ``apply_async(countdown=s)``; the worker holds such a message until its ETA.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import threading

import _common as c
from celery import Celery
from celery.contrib.testing.worker import start_worker

TRACKER: c.Tracker | None = None


def make_app(args):
    app = Celery("bench", broker=args.url, backend=args.url, set_as_current=True)
    app.conf.update(
        task_default_queue=args.queue,
        worker_hijack_root_logger=False,
        broker_connection_retry_on_startup=True,
    )
    retries = {"autoretry_for": (RuntimeError,), "max_retries": 1, "default_retry_delay": 0}

    @app.task(name=c.JOB_NAME, bind=True, **(retries if args.fail_once else {}))
    def noop(self, i: int) -> None:
        assert TRACKER is not None
        TRACKER.attempt(i, args.fail_once and self.request.retries == 0)

    return app, noop


def enqueue(args) -> None:
    if c.refused(args, bulk="Celery has no bulk enqueue API", concurrent=c.SYNC_PRODUCER):
        return
    app, noop = make_app(args)
    with app.connection_for_write() as conn:
        conn.ensure_connection()
    if args.mode == "delayed":  # the worker is running: no warm-up job, no flush
        plan = c.DelayedAdds(args, 1)
        for i, d in plan.each():
            noop.apply_async((i,), countdown=d / 1000)
        c.emit_result(plan.result())
        return
    noop.delay(-1)  # connect the producer outside the timing
    with app.connection_for_write() as conn:
        conn.default_channel.client.flushdb()  # drop it (this Redis is the benchmark's own)
    c.emit_result(c.timed_adds(args.n, noop.delay))


def worker(args) -> None:
    global TRACKER
    done = threading.Event()
    TRACKER = tracker = c.tracker_for(args, done.set)
    app, _noop = make_app(args)
    running = start_worker(
        app,
        pool="threads",
        concurrency=args.concurrency,
        loglevel="WARNING",
        perform_ping_check=False,
        shutdown_timeout=60,
    )
    with contextlib.ExitStack() as stack:
        c.drive_sync_worker(args, tracker, done, lambda: stack.enter_context(running), stack.close)


def latency(args) -> None:
    app, noop = make_app(args)
    with app.connection_for_write() as conn:
        conn.ensure_connection()

    def send_and_wait(i: int) -> bool:
        try:
            noop.delay(i).get(timeout=5)
        except Exception:  # celery.exceptions.TimeoutError
            return False
        return True

    c.emit_result(c.run_latency_sync(args.n, args.budget, args.gap, send_and_wait))


def main() -> None:
    roles = {"enqueue": enqueue, "worker": worker, "latency": latency}
    c.dispatch(lambda: importlib.metadata.version("celery"), roles)


if __name__ == "__main__":
    main()
