"""The producer of the durability benchmark: echomq adds, and a ledger of every acknowledged one.

Run by ``bench/durability.py`` in ``bench/.venvs/echomq``::

    python bench/peers/echomq_ledger.py produce --url URL --queue Q --ledger FILE [--max-seconds S]

It adds jobs one at a time through ``Queue.add`` (each awaited: the reply of Redis is the
acknowledgement) and keeps the id of every add that returned, in this process's memory, outside
Redis. It prints ``{"ready": true}`` after its first add, keeps adding until an add fails (the
harness kills the server) or ``--max-seconds`` pass, then writes the ledger, one id a line in
acknowledgement order, and prints ``{"result": {...}}``. An add that raised is not in the ledger:
it was never acknowledged, whether or not Redis kept it.
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

import _common as c
import redis.asyncio as aioredis

import echomq


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("role", choices=["produce"])
    p.add_argument("--url", required=True)
    p.add_argument("--queue", required=True)
    p.add_argument("--ledger", type=Path, required=True)
    p.add_argument("--max-seconds", type=float, default=30.0)
    return p.parse_args()


async def produce(args: argparse.Namespace) -> None:
    conn = aioredis.Redis.from_url(args.url)
    queue = echomq.Queue(args.queue, connection=conn)
    ledger: list[str] = [(await queue.add(c.JOB_NAME, {"i": 0})).id]
    c.emit({"ready": True})
    error = None
    t0 = c.now_ns()
    deadline = t0 + int(args.max_seconds * 1e9)
    while c.now_ns() < deadline:
        try:
            job = await queue.add(c.JOB_NAME, {"i": len(ledger)})
        except Exception as exc:  # the server went away: stop, this add is not acknowledged
            error = f"{type(exc).__name__}: {exc}"
            break
        ledger.append(job.id)
    seconds = (c.now_ns() - t0) / 1e9
    args.ledger.write_text("".join(f"{job_id}\n" for job_id in ledger))
    for closing in (queue.aclose(), conn.aclose()):
        # closing connections to a dead server may complain; there is nothing left to keep
        with contextlib.suppress(Exception):
            await closing
    c.emit_result({"acked": len(ledger), "seconds": seconds, "stopped_by": error})


def main() -> None:
    args = parse_args()
    c.run_main(lambda: produce(args), False)


if __name__ == "__main__":
    main()
