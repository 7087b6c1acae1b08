"""Lock renewal: every interval, all locks of a worker are renewed in one script call.

A lock that could not be renewed is reported; the job keeps running (as in Node) and its
finish will be refused by the script, after which the stalled checker deals with it. The
renewer runs in every worker state that holds jobs (running and closing), so a job waiting
for its outcome to be recorded never loses its lock to a worker that is shutting down.

The renewer runs off the worker's event loop (:func:`run_in_thread`): in a thread of its own,
on an event loop of its own, over a client of its own. An ``async def`` processor that blocks
the loop (``time.sleep``, a blocking client, a CPU loop) for longer than the lock then stalls
the worker's other work, but does not lose its job to another worker's stalled check (the
event-loop watchdog says which processor blocked, and for how long). The thread reads the
table of held jobs by copying it, which CPython does atomically, and hands lost locks back to
the worker's loop.

Jobs the worker holds but does not know of yet are renewed too: a fetch's jobs are locked when
Redis runs the call, but enter the table only once the loop reads the reply, which a blocked
loop does not do. While the loop is blocked, the renewer renews the jobs of the fetches in
flight by their tokens (the worker numbers them before it sends the call). And a job whose
outcome is being recorded is not reported lost: the call that records it deletes its lock.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import logging
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass

import redis.asyncio

from .._ops import worker as wops
from .._redis import topology
from .._redis.connection import AsyncConn
from .._redis.retry import TRANSIENT, RetryBackoff
from ..protocol.keys import QueueKeys

logger = logging.getLogger("echomq.worker")


def _nothing() -> Collection[str]:
    return ()


@dataclass(eq=False, slots=True)
class LockRenewer:
    """Renews the locks returned by ``held()`` (token -> job id) every ``interval`` seconds,
    and those of the jobs locked with the tokens ``unread()`` returns (jobs taken by calls
    whose reply is not read yet); ``recording()`` returns the tokens of jobs whose outcome is
    being recorded, whose lock may be gone on purpose."""

    keys: QueueKeys
    conn: AsyncConn
    held: Callable[[], dict[str, str]]
    lock_ms: int
    interval: float
    on_lost: Callable[[list[str]], None] | None = None
    unread: Callable[[], Collection[str]] = _nothing
    recording: Callable[[], Collection[str]] = _nothing

    async def renew_once(self) -> list[str]:
        """Renew every held lock now; returns the ids whose lock was lost."""
        held = self.held()
        unread = [token for token in self.unread() if token not in held]
        if unread:
            await self.conn.run(wops.extend_locks_by_token(self.keys, unread, self.lock_ms))
        if not held:
            return []
        tokens = list(held)
        op = wops.extend_locks(self.keys, [held[t] for t in tokens], tokens, self.lock_ms)
        lost = await self.conn.run(op)
        if lost:  # a job whose outcome is recorded (or was, meanwhile) lost its lock on purpose
            still, token_of = self.held(), {held[t]: t for t in tokens}
            recording = set(self.recording())
            lost = [
                job_id
                for job_id in lost
                if (token := token_of.get(job_id)) in still and token not in recording
            ]
        for job_id in lost:
            logger.warning(
                "queue=%s job=%s lock could not be renewed; another worker may take it",
                self.keys.name,
                job_id,
            )
        if lost and self.on_lost is not None:
            self.on_lost(lost)
        return lost

    async def run(self, keep_going: Callable[[], bool]) -> None:
        """Renew until cancelled or ``keep_going()`` turns false.

        A renewal that fails (Redis busy, loading, unreachable) is tried again within
        milliseconds, backing off up to the renewal interval, so that a short outage does not
        eat the lock's remaining time.
        """
        delay = self.interval
        backoff = RetryBackoff(first=0.05, cap=self.interval)
        failures = 0
        while keep_going():
            await asyncio.sleep(delay)
            try:
                await self.renew_once()
            except TRANSIENT as exc:
                if failures % 20 == 0:
                    logger.warning(
                        "lock renewal failed (%s: %s); retrying", type(exc).__name__, exc
                    )
                failures += 1
                delay = backoff.advance()
                continue
            except Exception as exc:  # the renewer must never die silently
                logger.exception("lock renewal error (%s); retrying", exc)
                delay = backoff.advance()
                continue
            failures = 0
            backoff.reset()
            delay = self.interval


async def run_in_thread(
    renewer: LockRenewer,
    keep_going: Callable[[], bool],
    new_client: Callable[[], redis.asyncio.Redis],
) -> None:
    """Run ``renewer`` in a daemon thread, on an event loop of its own, until cancelled (or
    ``keep_going()`` turns false), over a client made by ``new_client`` (closed at the end).

    The renewer's ``on_lost`` is called on the caller's loop. Cancelling this coroutine stops
    the thread's loop and waits for the thread to end.
    """
    caller = asyncio.get_running_loop()
    on_lost = renewer.on_lost
    started: concurrent.futures.Future[tuple[asyncio.AbstractEventLoop, asyncio.Task[None]]]
    started = concurrent.futures.Future()
    ended: concurrent.futures.Future[None] = concurrent.futures.Future()

    def lost(ids: list[str]) -> None:
        if on_lost is not None:
            with contextlib.suppress(RuntimeError):  # the worker's loop closed meanwhile
                caller.call_soon_threadsafe(on_lost, ids)

    async def main() -> None:
        task = asyncio.current_task()
        assert task is not None
        try:
            client = new_client()
        except Exception as exc:
            started.set_exception(exc)
            return
        conn = AsyncConn(client)
        started.set_result((asyncio.get_running_loop(), task))
        try:
            thread_renewer = dataclasses.replace(renewer, conn=conn, on_lost=lost)
            await thread_renewer.run(keep_going)
        finally:
            await topology.aclose(client)

    def thread_main() -> None:
        try:
            asyncio.run(main())
        except asyncio.CancelledError:
            pass
        except BaseException as exc:  # reported to the awaiting coroutine
            if not started.done():
                started.set_exception(exc)
            ended.set_exception(exc)
            return
        ended.set_result(None)

    thread = threading.Thread(
        target=thread_main, name=f"echomq-locks-{renewer.keys.name}", daemon=True
    )
    thread.start()
    try:
        loop, task = await asyncio.shield(asyncio.wrap_future(started))
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):  # its loop, to stop, if it started one
            loop, task = await asyncio.wrap_future(started)
            loop.call_soon_threadsafe(task.cancel)
        raise
    except Exception as exc:  # no client for the thread: renew on this loop instead
        logger.warning(
            "queue=%s lock renewal cannot run in a thread (%s: %s); renewing on the event "
            "loop, where a processor that blocks it delays the renewal",
            renewer.keys.name,
            type(exc).__name__,
            exc,
        )
        await renewer.run(keep_going)
        return
    try:
        await asyncio.shield(asyncio.wrap_future(ended))
    except asyncio.CancelledError:
        with contextlib.suppress(RuntimeError):  # its loop has ended already
            loop.call_soon_threadsafe(task.cancel)
        await asyncio.shield(asyncio.wrap_future(ended))
        raise
