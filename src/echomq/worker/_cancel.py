"""Cancelling running jobs: in the worker that runs them, and from any process through the
queue's control channel (docs/protocol/control-channel.md).

In-process, a cancel sets the job's :class:`~echomq._run_state.RunState` (a sync processor sees
``job.cancelled``) and, while the processor runs, cancels the job's task: an async processor
gets ``asyncio.CancelledError`` at its next ``await``; for a sync one the worker stops waiting
for its thread (which runs on until it returns; its result is discarded). Executors with a
stoppable unit of work (a child process) register a callback on the RunState.
:func:`absorb_cancel` then tells the job's task whether the ``CancelledError`` it caught was
such a cancel (the job fails with the reason, or goes back to wait) or the worker closing.

Across processes, ``Queue.cancel_job`` PUBLISHes a small JSON message on the queue's control
channel (``<prefix>:<queue>:echomq:control``, a pub/sub channel and not a key, so Node never
sees it); every echomq worker of the queue keeps one subscribed connection
(:class:`ControlListener`) and the one holding the job cancels it. Messages sent while a
worker is reconnecting are lost: a request is confirmed by the job's state, not by delivery.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import redis.asyncio
import redis.asyncio.cluster

from .._ops.worker import CancelRequest, decode_control
from .._redis import restricted
from .._redis.connection import AsyncConn
from .._redis.retry import TRANSIENT, RetryBackoff, classify
from .._run_state import RunState
from ..protocol.keys import QueueKeys
from ._outages import OutageLog

logger = logging.getLogger("echomq.worker")

#: The ``reason`` given to jobs cancelled because their worker closed.
CLOSING_REASON = "the worker closed before the job finished"


def absorb_cancel(run: RunState | None) -> bool:
    """Whether a ``CancelledError`` caught around a processor is a job cancel to absorb (the
    job then gets its cancel outcome) rather than the worker closing (re-raise it).

    On Python 3.11+ the task's cancel count must fall to 0 once this cancel is taken back, so
    a close that cancelled the task too still wins.
    """
    if run is None or not run.cancelled or run.by_close:
        return False
    task = asyncio.current_task()
    uncancel = getattr(task, "uncancel", None)
    if uncancel is None:  # Python 3.10: only the flag tells
        return True
    return bool(uncancel() == 0)


def request_cancel(
    run: RunState, task: asyncio.Task[Any] | None, reason: str, *, requeue: bool
) -> bool:
    """Cancel one job's run; False if its processor already ended or it was cancelled before.

    Args:
        run: the job's run.
        task: the task awaiting its processor.
        reason: why (the failed reason).
        requeue: put the job back in wait instead of failing it.
    """
    if run.done or not run.cancel(reason, requeue=requeue):
        return False
    if task is not None and run.in_processor and not task.done():
        task.cancel()
    return True


class ControlListener:
    """Keeps one connection subscribed to the queue's control channel and hands each cancel
    request to ``on_cancel``; reconnects with backoff until cancelled."""

    def __init__(
        self,
        keys: QueueKeys,
        conn: AsyncConn,
        on_cancel: Callable[[CancelRequest], None],
    ) -> None:
        self._keys = keys
        self._conn = conn
        self._on_cancel = on_cancel
        #: set once subscribed (again after each reconnect)
        self.ready = asyncio.Event()

    async def run(self) -> None:
        """Listen until cancelled."""
        client = self._conn.client
        if isinstance(client, redis.asyncio.cluster.RedisCluster):
            logger.info(
                "queue=%s: cancel requests from other processes are not received on Redis "
                "Cluster; cancel with Worker.cancel_job in the worker's process",
                self._keys.name,
            )
            return
        backoff = RetryBackoff.for_outages()
        outage: OutageLog | None = None  # the current run of failed subscribes, if any
        while True:
            subscriber = self._conn.new_client(socket_timeout=None)
            pubsub = subscriber.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self._keys.control_channel())
                self.ready.set()
                backoff.reset()
                if outage is not None:
                    outage.recovered()
                    outage = None
                while True:
                    message = await pubsub.get_message(timeout=None)
                    if message is not None and message.get("type") == "message":
                        self._handle(message.get("data"))
            except asyncio.CancelledError:
                raise
            except TRANSIENT as exc:
                self.ready.clear()
                if restricted.report("SUBSCRIBE", self._conn.server, exc):
                    return  # the ACL user may not use the channel: said once, at INFO
                kind = classify(exc)
                if kind is None:
                    logger.warning(
                        "queue=%s control channel lost (%s: %s); resubscribing",
                        self._keys.name,
                        type(exc).__name__,
                        exc,
                    )
                else:  # an outage: warned when it starts, every few seconds, and when it ends
                    outage = outage or OutageLog(
                        f"queue={self._keys.name} control channel", "resubscribing"
                    )
                    outage.failed(exc, kind)
                await backoff.sleep()
            finally:
                await _close(pubsub, subscriber)

    def _handle(self, data: Any) -> None:
        request = decode_control(data)
        if request is None:
            logger.debug("queue=%s ignored a control message: %r", self._keys.name, data)
            return
        try:
            self._on_cancel(request)
        except Exception:  # never let one request end the listener
            logger.exception(
                "queue=%s cancel request for job %s failed", self._keys.name, request.job_id
            )


async def _close(pubsub: Any, client: redis.asyncio.Redis) -> None:
    try:
        await asyncio.shield(pubsub.aclose())
        await asyncio.shield(client.aclose())
    except (asyncio.CancelledError, *TRANSIENT):
        pass
