"""Job schedulers from Python: upsert, getters, removal, and iterations made by real workers."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from redis import Redis as SyncRedis
from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster

import echomq
import echomq.sync
from echomq import (
    InvalidOptionError,
    Job,
    JobScheduler,
    Queue,
    SchedulerIterationExistsError,
    SchedulerSlotsBusyError,
    Worker,
)
from echomq._cron import next_cron_ms
from helpers import snapshot, wait_for

FAST: dict[str, Any] = {"drain_delay": 0.2, "stalled_interval": 5.0}


def now_s() -> float:
    return time.time()


async def iterations(r: Redis, queue: str, scheduler: str) -> list[str]:
    """Ids of every job hash of ``scheduler``'s iterations, in time order."""
    keys = [k.decode() async for k in r.scan_iter(match=f"bull:{queue}:repeat:{scheduler}:*")]
    ids = [k.removeprefix(f"bull:{queue}:") for k in keys]
    ids = [i for i in ids if re.fullmatch(rf"repeat:{re.escape(scheduler)}:\d+", i)]
    return sorted(ids, key=lambda i: int(i.rsplit(":", 1)[1]))


async def event_names(r: Redis, queue: str) -> list[tuple[str, str]]:
    entries: Any = await r.xrange(f"bull:{queue}:events")
    return [(f[b"event"].decode(), f.get(b"jobId", b"").decode()) for _, f in entries]


async def test_every_scheduler_runs_under_a_worker(redis: Redis, queue_name: str) -> None:
    seen: list[Job] = []

    async def record(job: Job) -> None:
        seen.append(job)

    async with Queue(queue_name, connection=redis) as queue:
        first = await queue.upsert_job_scheduler(
            "tick", every=0.3, template={"name": "t", "data": {"n": 1}, "opts": {"attempts": 2}}
        )
        assert first is not None and first.id.startswith("repeat:tick:")
        assert first.repeat_job_key == "tick" and first.data == {"n": 1}
        async with Worker(queue_name, record, connection=redis, **FAST):
            await wait_for(lambda: asyncio.sleep(0, len(seen) >= 4), timeout=10)
        ids = [job.id for job in seen[:4]]
        assert ids[0] == first.id
        millis = [int(i.rsplit(":", 1)[1]) for i in ids]
        assert [b - a for a, b in zip(millis, millis[1:])] == [300, 300, 300]
        assert all(job.name == "t" and job.data == {"n": 1} for job in seen)
        counts = [job.wire_options["repeat"]["count"] for job in seen[:4]]
        assert counts == [1, 2, 3, 4]
        assert all(job.wire_options["attempts"] == 2 for job in seen)
        scheduler = await queue.get_job_scheduler("tick")
        assert scheduler is not None and scheduler.iteration_count is not None
        assert scheduler.iteration_count >= 5  # the next one exists before the last one runs
        assert scheduler.every == 0.3 and scheduler.template.data == {"n": 1}


async def test_cron_scheduler_runs_under_a_worker(redis: Redis, queue_name: str) -> None:
    seen: list[Job] = []

    async def record(job: Job) -> None:
        seen.append(job)

    async with Queue(queue_name, connection=redis) as queue:
        first = await queue.upsert_job_scheduler(
            "cron", pattern="* * * * * *", tz="America/New_York"
        )
        assert first is not None
        assert int(first.id.rsplit(":", 1)[1]) % 1000 == 0
        async with Worker(queue_name, record, connection=redis, **FAST):
            await wait_for(lambda: asyncio.sleep(0, len(seen) >= 3), timeout=10)
    millis = [int(job.id.rsplit(":", 1)[1]) for job in seen[:3]]
    assert [b - a for a, b in zip(millis, millis[1:])] == [1000, 1000]
    for job, ms in zip(seen, millis):
        assert job.wire_options["prevMillis"] == ms
        assert job.wire_options["repeat"]["pattern"] == "* * * * * *"
        assert job.wire_options["repeat"]["tz"] == "America/New_York"


async def test_upsert_replaces_the_pending_iteration(redis: Redis, queue_name: str) -> None:
    start = now_s() + 60
    async with Queue(queue_name, connection=redis) as queue:
        a = await queue.upsert_job_scheduler(
            "s", every=10, start_date=start, template={"data": {"v": 1}}
        )
        b = await queue.upsert_job_scheduler(
            "s", every=10, start_date=start, template={"data": {"v": 2}}
        )
        assert a is not None and b is not None and a.id == b.id
        assert await iterations(redis, queue_name, "s") == [a.id]
        assert await redis.zcard(f"bull:{queue_name}:delayed") == 1
        job = await queue.get_job(a.id)
        assert job is not None and job.data == {"v": 2}
        # a changed interval starts over; the old iteration is gone
        c = await queue.upsert_job_scheduler("s", every=20, start_date=start + 5)
        assert c is not None and c.id != a.id
        assert await iterations(redis, queue_name, "s") == [c.id]
        # cron over every: replaced again, ic kept at 1 (no worker ran)
        d = await queue.upsert_job_scheduler("s", pattern="0 0 1 1 *", tz="UTC")
        assert d is not None and d.id.startswith("repeat:s:")
        assert await iterations(redis, queue_name, "s") == [d.id]
        got = await queue.get_job_scheduler("s")
        assert got is not None and got.pattern == "0 0 1 1 *" and got.every is None
        assert got.iteration_count == 1 and got.tz == "UTC" and got.template.data == {}
        assert await queue.get_job_schedulers_count() == 1


async def test_upsert_over_a_waiting_iteration_keeps_its_slot(
    redis: Redis, queue_name: str
) -> None:
    async with Queue(queue_name, connection=redis) as queue:
        a = await queue.upsert_job_scheduler("w", every=60)
        b = await queue.upsert_job_scheduler("w", every=60, template={"data": {"x": 1}})
        assert a is not None and b is not None and a.id == b.id
        assert await redis.lrange(f"bull:{queue_name}:wait", 0, -1) == [a.id.encode()]


async def test_remove_and_getters(redis: Redis, queue_name: str) -> None:
    later = now_s() + 3600
    async with Queue(queue_name, connection=redis) as queue:
        await queue.upsert_job_scheduler("a", every=5, start_date=later)
        await queue.upsert_job_scheduler("b", every=5, start_date=later + 10)
        # A cron run comes after b's start whatever the hour: its first run is after a start
        # date a day past b's (a plain "0 0 * * *" came first an hour a day, 22:00-23:00 UTC).
        day_after = later + 86400
        await queue.upsert_job_scheduler(
            "c", pattern="0 0 * * *", tz="Europe/Madrid", start_date=day_after
        )
        assert await queue.get_job_schedulers_count() == 3
        ordered = [s.id for s in await queue.get_job_schedulers(asc=True)]
        assert ordered[:2] == ["a", "b"] and set(ordered) == {"a", "b", "c"}
        assert [s.id for s in await queue.get_job_schedulers()] == ordered[::-1]
        assert [s.id for s in await queue.get_job_schedulers(0, 0, asc=True)] == ["a"]
        a = await queue.get_job_scheduler("a")
        assert isinstance(a, JobScheduler) and not a.legacy
        assert a.next_run == a.start_date
        assert await queue.get_job_scheduler("nope") is None

        pending = (await iterations(redis, queue_name, "a"))[0]
        assert await queue.remove_job_scheduler("a") is True
        assert await queue.remove_job_scheduler("a") is False
        assert await queue.get_job_scheduler("a") is None
        assert not await redis.exists(f"bull:{queue_name}:repeat:a", f"bull:{queue_name}:{pending}")
        assert ("removed", pending) in await event_names(redis, queue_name)
        assert await queue.get_job_schedulers_count() == 2


async def test_a_waiting_iteration_runs_once_after_removal(redis: Redis, queue_name: str) -> None:
    seen: list[str] = []

    async def record(job: Job) -> None:
        seen.append(job.id)

    async with Queue(queue_name, connection=redis) as queue:
        first = await queue.upsert_job_scheduler("once", every=0.2)
        assert first is not None
        assert await queue.remove_job_scheduler("once") is True
        async with Worker(queue_name, record, connection=redis, **FAST):
            await wait_for(lambda: asyncio.sleep(0, len(seen) >= 1), timeout=10)
            await asyncio.sleep(0.6)
        assert seen == [first.id]
        assert await queue.get_job_schedulers_count() == 0


@pytest.mark.parametrize("stop", ["limit", "end_date"])
async def test_limit_and_end_date_stop_the_scheduler(
    redis: Redis, queue_name: str, stop: str
) -> None:
    seen: list[str] = []

    async def record(job: Job) -> None:
        seen.append(job.id)

    end = now_s() + 0.5
    kwargs: dict[str, Any] = {"limit": 3} if stop == "limit" else {"end_date": end}
    async with Queue(queue_name, connection=redis) as queue:
        await queue.upsert_job_scheduler("lim", every=0.2, **kwargs)
        async with Worker(queue_name, record, connection=redis, **FAST):
            await wait_for(lambda: asyncio.sleep(0, len(seen) >= 2), timeout=10)
            await asyncio.sleep(1.2)
        assert len(seen) == len(set(seen))
        if stop == "limit":
            assert len(seen) == 3
        else:
            # As in BullMQ, an iteration taken before the end still makes the next one, so
            # the last iteration is due less than one interval after end_date.
            millis = [int(i.rsplit(":", 1)[1]) for i in seen]
            assert 2 <= len(seen) <= 4
            assert millis[-2] <= end * 1000 and millis[-1] <= end * 1000 + 200
        left = await queue.get_job_scheduler("lim")
        assert left is not None and left.iteration_count == len(seen)  # the entry stays
        assert await redis.zcard(f"bull:{queue_name}:delayed") == 0


async def test_legacy_repeatable_jobs_are_listed_and_removed(redis: Redis, queue_name: str) -> None:
    base = f"bull:{queue_name}:"
    key = "0f9ab3c1d2e4f5a6b7c8d9e0f1a2b3c4"
    due = int(now_s() * 1000) + 60_000
    await redis.zadd(base + "repeat", {key: due})
    await redis.hset(base + f"repeat:{key}", mapping={"name": "old", "every": "5000"})
    iteration = f"repeat:{key}:{due}"
    await redis.hset(base + iteration, mapping={"name": "old", "data": "{}", "rjk": key})
    await redis.zadd(base + "delayed", {iteration: due * 4096})
    async with Queue(queue_name, connection=redis) as queue:
        listed = await queue.get_job_schedulers()
        assert [(s.id, s.legacy, s.name, s.every) for s in listed] == [(key, True, "old", 5.0)]
        assert listed[0].iteration_count is None
        assert await queue.get_job_schedulers_count() == 1
        assert await queue.remove_job_scheduler(key) is True
        assert await queue.get_job_schedulers() == []
    assert not await redis.exists(base + f"repeat:{key}", base + iteration)


BAD: list[tuple[dict[str, Any], str]] = [
    ({"pattern": "61 * * * *"}, "minute"),
    ({"pattern": "* * * *  * * *"}, "more than 6 fields"),
    ({"pattern": "* * * * *", "tz": "Mars/Olympus"}, "Mars/Olympus"),
    ({"every": 1, "tz": "Nowhere/City"}, "Nowhere/City"),
    ({"every": 0}, "every must be at least 1 ms"),
    ({"every": -1}, "every must be at least 1 ms"),
    ({"every": timedelta(0)}, "every must be at least 1 ms"),
    ({"every": 1, "pattern": "* * * * *"}, "exactly one of every"),
    ({}, "exactly one of every"),
    ({"every": 1, "start_date": 2e9, "end_date": 2e9 - 1}, "must be after start_date"),
    ({"every": 1, "end_date": 1_000_000}, "not in the future"),
    ({"every": 1, "limit": 0}, "limit must be an int >= 1"),
    ({"every": 1, "immediately": True, "start_date": 2e9}, "immediately and start_date"),
    ({"every": 1, "template": {"opts": {"retries": 3}}}, "unknown job option"),
    ({"every": 1, "template": {"opts": {"delay": 3}}}, "may not set delay"),
    ({"every": 1, "template": {"opts": {"job_id": "x"}}}, "may not set job_id"),
    ({"every": 1, "template": {"nmae": "x"}}, "unknown template key"),
    ({"pattern": "* * * * *", "offset": 1}, "offset applies to every"),
    ({"evry": 1}, "unknown scheduler field(s) ['evry']"),
]


@pytest.mark.parametrize(("kwargs", "message"), BAD)
async def test_bad_input_is_refused_and_nothing_written(
    redis: Redis, queue_name: str, kwargs: dict[str, Any], message: str
) -> None:
    match = f"bull:{queue_name}:*"
    async with Queue(queue_name, connection=redis) as queue:
        await queue.upsert_job_scheduler("keep", every=60, start_date=now_s() + 60)
        before = await snapshot(redis, match)
        with pytest.raises(InvalidOptionError, match=re.escape(message)):
            await queue.upsert_job_scheduler("keep", **kwargs)
        assert await snapshot(redis, match) == before


async def test_queue_default_options_apply_to_the_template(redis: Redis, queue_name: str) -> None:
    async with Queue(
        queue_name, connection=redis, default_job_options={"attempts": 3, "priority": 2}
    ) as queue:
        job = await queue.upsert_job_scheduler("d", every=60, template={"opts": {"priority": 5}})
        assert job is not None
    h = await redis.hgetall(f"bull:{queue_name}:repeat:d")
    assert json.loads(h[b"opts"]) == {"attempts": 3, "priority": 5}
    assert await redis.zcard(f"bull:{queue_name}:prioritized") == 1


async def test_cron_with_no_next_time_before_its_end_writes_nothing(
    redis: Redis, queue_name: str
) -> None:
    now = datetime.now(timezone.utc)
    end = now + timedelta(minutes=5)
    # Once a day, at the time of day six hours from now (UTC): never before end_date, on any
    # day at any hour (a fixed pattern would meet end_date once a year).
    far = now + timedelta(hours=6)
    pattern = f"{far.minute} {far.hour} * * *"
    async with Queue(queue_name, connection=redis) as queue:
        made = await queue.upsert_job_scheduler("never", pattern=pattern, tz="UTC", end_date=end)
        assert made is None
        assert await queue.get_job_schedulers_count() == 0


def test_sync_queue(sync_redis: SyncRedis, queue_name: str) -> None:
    with echomq.sync.Queue(queue_name, connection=sync_redis) as queue:
        job = queue.upsert_job_scheduler("s", every=timedelta(minutes=1), template={"name": "n"})
        assert job is not None and job.name == "n"
        got = queue.get_job_scheduler("s")
        assert got is not None and got.every == 60.0
        assert queue.get_job_schedulers_count() == 1
        assert [s.id for s in queue.get_job_schedulers()] == ["s"]
        assert queue.remove_job_scheduler("s") is True


# -- docs/schedulers.md, run as written ------------------------------------------------------

DOC = Path(__file__).resolve().parents[1] / "docs" / "schedulers.md"


async def test_the_documented_example_runs(
    redis: Redis, queue_name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    match = re.search(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    assert match is not None, "docs/schedulers.md has no python block"
    namespace: dict[str, Any] = {}
    exec(compile(match.group(1), str(DOC), "exec"), namespace)
    async with Queue(queue_name, connection=redis) as queue:
        await namespace["main"](queue)
        left = {s.id: s for s in await queue.get_job_schedulers()}
    assert set(left) == {"morning-report", "sync"}
    report = left["morning-report"]
    assert report.pattern == "30 6 * * 1-5" and report.tz == "Europe/Madrid"
    assert report.limit == 100 and report.next_run is not None
    assert report.next_run.astimezone(ZoneInfo("Europe/Madrid")).strftime("%H:%M") == "06:30"
    assert left["sync"].every == 300.0 and left["sync"].end_date is not None
    printed = capsys.readouterr().out
    assert "heartbeat" in printed and "morning-report" in printed


# -- the CLI, as a real process --------------------------------------------------------------


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "echomq.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_cli_add_list_remove_and_counts(redis_url: str, queue_name: str) -> None:
    url = ["--url", redis_url]
    done = cli("scheduler", queue_name, "add", "tick", "--every", "30", *url)
    assert done.returncode == 0, done.stderr
    assert "scheduler tick" in done.stdout and "every 30s" in done.stdout
    done = cli(
        "scheduler", queue_name, "add", "rep", "--cron", "0 30 6 * * *", "--tz", "Asia/Tokyo",
        "--data", '{"k": 1}', *url,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    listed = cli("scheduler", queue_name, "list", "--json", *url)
    assert listed.returncode == 0, listed.stderr
    rows = {row["id"]: row for row in json.loads(listed.stdout)}
    assert rows["tick"]["every"] == 30.0
    assert rows["rep"]["pattern"] == "0 30 6 * * *" and rows["rep"]["tz"] == "Asia/Tokyo"
    assert rows["rep"]["data"] == {"k": 1}
    table = cli("scheduler", queue_name, "list", *url)
    assert re.search(r"^rep\s+rep\s+cron 0 30 6 \* \* \* \(Asia/Tokyo\)", table.stdout, re.M)
    counts = cli("queue", queue_name, "counts", *url)
    assert re.search(r"^job schedulers: 2$", counts.stdout, re.M), counts.stdout
    bad = cli("scheduler", queue_name, "add", "x", "--cron", "99 * * * *", *url)
    assert bad.returncode == 2 and "minute" in bad.stderr
    bad = cli("scheduler", queue_name, "add", "x", "--every", "1", "--tz", "No/Where", *url)
    assert bad.returncode == 2 and "No/Where" in bad.stderr
    assert cli("scheduler", queue_name, "remove", "tick", *url).returncode == 0
    gone = cli("scheduler", queue_name, "remove", "tick", *url)
    assert gone.returncode == 1 and "no scheduler tick" in gone.stdout
    counts = cli("queue", queue_name, "counts", "--json", *url)
    assert json.loads(counts.stdout)["schedulers"] == 1


async def test_on_redis_cluster(redis_cluster: list[str]) -> None:
    client = RedisCluster.from_url(redis_cluster[0], decode_responses=True)
    name = f"{{sched-{uuid.uuid4().hex[:8]}}}"
    seen: list[str] = []

    async def record(job: Job) -> None:
        seen.append(job.id)

    try:
        async with Queue(name, connection=client) as queue:
            await queue.upsert_job_scheduler("e", every=0.2)
            await queue.upsert_job_scheduler("c", pattern="* * * * * *", tz="UTC")
            assert await queue.get_job_schedulers_count() == 2
            assert {s.id for s in await queue.get_job_schedulers()} == {"e", "c"}
            async with Worker(name, record, connection=client, **FAST):
                await wait_for(
                    lambda: asyncio.sleep(0, {i.split(":")[1] for i in seen} == {"e", "c"}),
                    timeout=10,
                )
            assert await queue.remove_job_scheduler("e") is True
            assert await queue.remove_job_scheduler("c") is True
            assert await queue.get_job_schedulers() == []
    finally:
        await client.aclose()
    assert len(seen) == len(set(seen))


async def test_taken_iteration_ids_are_refused(redis: Redis, queue_name: str) -> None:
    base = f"bull:{queue_name}:"
    start_ms = (int(now_s()) + 3600) * 1000
    next_new_year = next_cron_ms("0 0 1 1 *", int(now_s() * 1000), "UTC")
    assert next_new_year is not None
    await redis.hset(base + f"repeat:cron:{next_new_year}", "name", "squatter")
    for k in range(33):
        await redis.hset(base + f"repeat:every:{start_ms + k * 1000}", "name", "squatter")
    match = base + "*"
    before = await snapshot(redis, match)
    async with Queue(queue_name, connection=redis) as queue:
        with pytest.raises(SchedulerIterationExistsError, match="job scheduler cron"):
            await queue.upsert_job_scheduler("cron", pattern="0 0 1 1 *", tz="UTC")
        with pytest.raises(SchedulerSlotsBusyError, match="job scheduler every"):
            await queue.upsert_job_scheduler("every", every=1, start_date=start_ms / 1000)
    assert await snapshot(redis, match) == before
    # 32 taken slots: the 33rd is used
    await redis.delete(base + f"repeat:every:{start_ms + 32 * 1000}")
    async with Queue(queue_name, connection=redis) as queue:
        job = await queue.upsert_job_scheduler("every", every=1, start_date=start_ms / 1000)
    assert job is not None and job.id == f"repeat:every:{start_ms + 32 * 1000}"


class _FailsOnce:
    """A worker connection whose first call meets a lost connection (an injected fault in
    front of the real Redis), as when Redis restarts between a fetch and the next call."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self.failed = 0

    async def run(self, op: Any) -> Any:
        if not self.failed:
            self.failed += 1
            raise echomq.RedisUnavailableError("injected: connection lost", address="test")
        return await self._conn.run(op)


async def test_a_transient_error_does_not_stop_a_scheduler(
    redis: Redis, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The next iteration is made through outages (BullMQ retries this step too): one failed
    call must not leave the scheduler without a next iteration for ever."""
    seen: list[str] = []

    async def record(job: Job) -> None:
        seen.append(job.id)

    async with Queue(queue_name, connection=redis) as queue:
        await queue.upsert_job_scheduler("tick", every=0.2)
        worker = Worker(queue_name, record, connection=redis, **FAST)
        flaky = _FailsOnce(worker._schedulers._conn)
        worker._schedulers._conn = flaky  # type: ignore[assignment]
        async with worker:
            await wait_for(lambda: asyncio.sleep(0, len(seen) >= 3), timeout=10)
    assert flaky.failed == 1
    assert len(set(seen)) == len(seen)  # no iteration ran twice
    assert "went through after 1 failed try" in caplog.text
