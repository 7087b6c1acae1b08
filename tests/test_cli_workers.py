"""``echomq workers``: every worker of the Redis, across the queues under a prefix, through the
real command's process (exit code, stdout and stderr on pipes).

The workers run in this process on the suite's Redis, under a prefix of the test's own, so the
listing holds exactly them.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import socket
import subprocess
from uuid import uuid4

from redis.asyncio import Redis

import echomq
from _cli import base_env, cli
from echomq import Job, Worker
from helpers import wait_for

FAST = {"drain_delay": 0.2, "heartbeat_interval": 0.2}


async def echomq_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return await asyncio.to_thread(cli, *args, env=base_env())


def rows_of(text: str) -> tuple[list[str], list[list[str]]]:
    """The header and the rows of a table, split on runs of spaces (every cell the tests
    read is filled)."""
    header, *lines = text.splitlines()
    return header.split(), [line.split() for line in lines]


async def test_workers_lists_the_workers_of_every_queue(redis: Redis, redis_url: str) -> None:
    prefix = f"p{uuid4().hex[:8]}"
    started, release = asyncio.Event(), asyncio.Event()

    async def hold(job: Job) -> None:
        started.set()
        await release.wait()

    job = await echomq.add("mail", "send", {}, connection=redis, prefix=prefix)
    mail = Worker("mail", hold, connection=redis, prefix=prefix, name="m-1", concurrency=3, **FAST)
    video = Worker("video", hold, connection=redis, prefix=prefix, name="v-1", **FAST)
    async with mail, video:
        try:
            await _check_listings(redis, redis_url, prefix, job, mail, video, started)
        finally:
            release.set()


async def _check_listings(
    redis: Redis,
    redis_url: str,
    prefix: str,
    job: Job,
    mail: Worker,
    video: Worker,
    started: asyncio.Event,
) -> None:
    await asyncio.wait_for(started.wait(), 10)

    async def registered() -> bool:
        [m] = await echomq.get_workers("mail", connection=redis, prefix=prefix) or [None]
        v = await echomq.get_workers("video", connection=redis, prefix=prefix)
        return m is not None and m["jobs"] == [job.id] and len(v) == 1

    await wait_for(registered, timeout=10, message="both workers registered, mail's job")

    shown = await echomq_cli("workers", "--prefix", prefix, "--url", redis_url)
    assert (shown.returncode, shown.stderr) == (0, ""), shown.stderr
    header, rows = rows_of(shown.stdout)
    assert " ".join(header) == "QUEUE ID NAME KIND HOST PID CONCURRENCY HEARTBEAT JOBS"
    pid, host = str(os.getpid()), socket.gethostname()
    assert len(rows) == 2, shown.stdout
    by_queue = {row[0]: row for row in rows}
    mail_row, video_row = by_queue["mail"], by_queue["video"]
    # HEARTBEAT is its age, "Ns ago" (two cells here)
    assert mail_row[:7] == ["mail", mail.id, "m-1", "echomq", host, pid, "3"], shown.stdout
    assert re.fullmatch(r"\d+s", mail_row[7]) and mail_row[8:] == ["ago", job.id], shown.stdout
    assert video_row[:7] == ["video", video.id, "v-1", "echomq", host, pid, "1"], shown.stdout
    assert re.fullmatch(r"\d+s", video_row[7]) and video_row[8:] == ["ago", "-"], shown.stdout

    # the per-queue listing prints the same columns, without the queue
    one = await echomq_cli("queue", "mail", "workers", "--prefix", prefix, "--url", redis_url)
    assert one.returncode == 0, one.stderr
    one_header, [one_row] = rows_of(one.stdout)
    assert one_header == header[1:]
    assert one_row[:6] == mail_row[1:7] and one_row[-1] == job.id

    as_json = await echomq_cli("workers", "--json", "--prefix", prefix, "--url", redis_url)
    assert as_json.returncode == 0, as_json.stderr
    listed = json.loads(as_json.stdout)
    assert isinstance(listed, list)
    assert sorted((w["queue"], w["id"], w["kind"]) for w in listed) == [
        ("mail", mail.id, "echomq"),
        ("video", video.id, "echomq"),
    ]
    [m] = [w for w in listed if w["queue"] == "mail"]
    assert (m["worker_name"], m["pid"], m["concurrency"], m["jobs"]) == (
        "m-1",
        os.getpid(),
        3,
        [job.id],
    )
    assert isinstance(m["heartbeat_at"], str) and isinstance(m["host"], str)


async def test_workers_with_none_says_so(redis: Redis, redis_url: str) -> None:
    prefix = f"p{uuid4().hex[:8]}"
    await echomq.add("idle", "x", {}, connection=redis, prefix=prefix)
    shown = await echomq_cli("workers", "--prefix", prefix, "--url", redis_url)
    assert (shown.returncode, shown.stderr) == (0, "")
    assert shown.stdout == f"no workers on the queues under prefix '{prefix}' (1 queue)\n"
    as_json = await echomq_cli("workers", "--json", "--prefix", prefix, "--url", redis_url)
    assert (as_json.returncode, as_json.stderr) == (0, "")
    assert json.loads(as_json.stdout) == []

    empty = await echomq_cli("workers", "--prefix", f"{prefix}x", "--url", redis_url)
    assert empty.returncode == 0
    assert empty.stdout == f"no workers on the queues under prefix '{prefix}x' (0 queues)\n"


async def test_a_queue_whose_workers_cannot_be_read_is_named_and_the_rest_listed(
    redis: Redis, redis_url: str
) -> None:
    prefix = f"p{uuid4().hex[:8]}"

    async def process(job: Job) -> None:
        return None

    await echomq.add("broken", "x", {}, connection=redis, prefix=prefix)
    await redis.set(f"{prefix}:broken:workers", "not a sorted set")
    async with Worker("fine", process, connection=redis, prefix=prefix, **FAST) as fine:

        async def registered() -> bool:
            return bool(await echomq.get_workers("fine", connection=redis, prefix=prefix))

        await wait_for(registered, timeout=10)
        shown = await echomq_cli("workers", "--prefix", prefix, "--url", redis_url)
    assert shown.returncode == 0
    assert shown.stderr.startswith("echomq: the workers of queue 'broken' cannot be read: ")
    assert "WRONGTYPE" in shown.stderr
    _, rows = rows_of(shown.stdout)
    assert [row[:2] for row in rows] == [["fine", fine.id]]
