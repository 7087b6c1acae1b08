"""Reading metrics back: ``get_metrics`` (async, sync, Queue) over what workers write."""

from __future__ import annotations

import pytest
from redis import Redis as SyncRedis
from redis.asyncio import Redis

import echomq
import echomq.sync
from echomq import Job, Metrics, MetricsMeta, Queue, ValidationError, Worker
from helpers import wait_for

FAST = {"drain_delay": 0.2, "stalled_interval": 1.0}


async def test_metrics_of_a_queue_never_measured_are_zero(redis: Redis, queue_name: str) -> None:
    empty = Metrics(MetricsMeta(0, 0, 0), [], 0)
    assert await echomq.get_metrics(queue_name, connection=redis) == empty
    assert await echomq.get_metrics(queue_name, "failed", connection=redis) == empty


async def test_a_worker_with_metrics_counts_completed_and_failed(
    redis: Redis, queue_name: str
) -> None:
    await echomq.add_bulk(
        queue_name, [("ok", {}) for _ in range(4)] + [("bad", {}) for _ in range(2)],
        connection=redis,
    )  # fmt: skip

    async def run(job: Job) -> None:
        if job.name == "bad":
            raise RuntimeError("no")

    async with Worker(queue_name, run, connection=redis, metrics_max_data_points=60, **FAST):

        async def all_finished() -> bool:
            counts = await echomq.get_job_counts(
                queue_name, "completed", "failed", connection=redis
            )
            return counts == {"completed": 4, "failed": 2}

        await wait_for(all_finished, timeout=10)
    async with Queue(queue_name, connection=redis) as q:
        completed = await q.get_metrics()
        failed = await q.get_metrics("failed")
    assert completed.meta.count == 4 and failed.meta.count == 2
    assert completed.meta.prev_count == 0 and completed.meta.prev_ts > 0
    # within the first minute no data point is closed yet
    assert (completed.data, completed.count, failed.data, failed.count) == ([], 0, [], 0)


async def test_data_points_slices_and_the_sync_twin(
    redis: Redis, sync_redis: SyncRedis, queue_name: str
) -> None:
    key = f"bull:{queue_name}:metrics:completed"
    await redis.hset(key, mapping={"count": 42, "prevTS": 1700000040000, "prevCount": 40})
    await redis.rpush(key + ":data", 7, 0, 3, 9, "junk")  # most recent minute first
    full = await echomq.get_metrics(queue_name, "completed", connection=redis)
    assert full == Metrics(MetricsMeta(42, 1700000040000, 40), [7, 0, 3, 9, 0], 5)
    window = await echomq.get_metrics(queue_name, "completed", 1, 2, connection=redis)
    assert (window.data, window.count) == ([0, 3], 5)
    assert echomq.sync.get_metrics(queue_name, connection=sync_redis) == full
    with echomq.sync.Queue(queue_name, connection=sync_redis) as q:
        assert q.get_metrics("completed", 1, 2) == window


@pytest.mark.parametrize(
    ("kind", "start", "end", "pattern"),
    [
        ("done", 0, -1, "'completed' or 'failed'"),
        ("completed", "0", -1, "start must be an int"),
        ("failed", 0, 1.5, "end must be an int"),
    ],
)
async def test_bad_arguments_are_refused(
    redis: Redis, queue_name: str, kind: str, start: object, end: object, pattern: str
) -> None:
    with pytest.raises(ValidationError, match=pattern):
        await echomq.get_metrics(queue_name, kind, start, end, connection=redis)  # type: ignore[arg-type]
