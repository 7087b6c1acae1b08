"""The step-job recipe of docs/workers.md#step-jobs, run exactly as documented.

The processor is not copied here: its code block is read from the docs and executed, with the
``packing`` queue it adds children through, then driven by real workers against the session
server. If the docs change, this test runs the new text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

import echomq
from echomq import Queue, Worker
from helpers import wait_for

DOC = Path(__file__).resolve().parents[1] / "docs" / "workers.md"

Processor = Callable[[echomq.Job], Awaitable[Any]]


def documented_processor(packing: Queue) -> Processor:
    """``process_order`` as docs/workers.md defines it, bound to ``packing``."""
    text = DOC.read_text()
    section = text[text.index("## Step jobs") :]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match is not None, "docs/workers.md#step-jobs has no python block"
    # The block makes its own `packing` by the connection rule, which this process has no
    # Redis for: it is given the test's instead (the function reads the global at call time).
    made = 'packing = echomq.Queue("packing")'
    assert made in match.group(1), "the step-jobs block no longer makes its packing queue"
    namespace: dict[str, Any] = {"packing": packing}
    exec(compile(match.group(1).replace(made, "packing = packing"), str(DOC), "exec"), namespace)
    processor: Processor = namespace["process_order"]
    return processor


async def pack(job: echomq.Job) -> str:
    return f"packed {job.data['item']}"


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def events_of(r: Redis, queue: str) -> list[tuple[str, str, str]]:
    entries = await r.xrange(f"bull:{queue}:events") or []
    out = []
    for _, raw in entries:
        fields = {_s(k): _s(v) for k, v in (raw or {}).items()}
        out.append((fields["event"], fields.get("jobId", ""), fields.get("prev", "")))
    return out


async def reaches(r: Redis, queue: str, job_id: str, state: str) -> None:
    async def there() -> bool:
        return await echomq.get_state(queue, job_id, connection=r) == state

    await wait_for(there, timeout=10, message=f"job {job_id} never became {state}")


async def test_step_job_waits_for_its_children_then_a_delay_then_completes(
    redis: Redis, queue_name: str
) -> None:
    orders, packing_name = queue_name, queue_name + "-packing"
    runs: list[str] = []
    async with Queue(packing_name, connection=redis) as packing:
        process_order = documented_processor(packing)

        async def counted(job: echomq.Job) -> Any:
            runs.append(job.data.get("step", "start"))
            return await process_order(job)

        data = {"items": ["cup", "pan", "pot"], "cool_off": 0.3}
        job = await echomq.add(orders, "order", data, connection=redis)
        async with Worker(orders, counted, connection=redis, drain_delay=0.2):
            # No packing worker yet: the order must park itself in waiting-children.
            await reaches(redis, orders, job.id, "waiting-children")
            parked = await echomq.get_job(orders, job.id, connection=redis)
            assert parked is not None and parked.data == {**data, "step": "packing"}
            children = await packing.get_jobs(["waiting"])
            assert sorted(c.data["item"] for c in children) == ["cup", "pan", "pot"]
            assert {c.parent_key for c in children} == {f"bull:{orders}:{job.id}"}
            counts = await parked.get_dependencies_count()
            assert (counts.unprocessed, counts.processed) == (3, 0)

            async with Worker(packing_name, pack, connection=redis, concurrency=3):
                await reaches(redis, orders, job.id, "completed")

    done = await echomq.get_job(orders, job.id, connection=redis)
    assert done is not None
    assert done.return_value == {"packed": ["packed cup", "packed pan", "packed pot"]}
    assert done.data["step"] == "done"
    # Run 1: start -> packing (parked); run 2: packing -> cooling (delayed); run 3: done.
    assert runs == ["start", "packing", "done"]
    assert done.attempts_made == 1  # parking counts no attempt; the completion counts one
    # The parks, in the order's own event stream.
    evs = [e for e in await events_of(redis, orders) if e[1] == job.id]
    names = [e[0] for e in evs]
    assert ("waiting-children", job.id, "active") in evs
    assert names.index("waiting-children") < names.index("delayed") < names.index("completed")
    raw = await redis.hget(f"bull:{orders}:{job.id}", "returnvalue")
    assert raw is not None and json.loads(raw) == done.return_value


async def test_step_job_goes_on_when_the_children_finished_first(
    redis: Redis, queue_name: str
) -> None:
    # A packing worker that is already running can finish every child before the order asks
    # to wait: move_to_waiting_children then returns False and the order goes straight on.
    orders, packing_name = queue_name, queue_name + "-packing"
    async with Queue(packing_name, connection=redis) as packing:
        process_order = documented_processor(packing)
        async with (
            Worker(packing_name, pack, connection=redis, concurrency=5, drain_delay=0.2),
            Worker(orders, process_order, connection=redis, drain_delay=0.2),
        ):
            jobs = [
                await echomq.add(
                    orders, "order", {"items": [f"i{n}", "lid"], "cool_off": 0.1}, connection=redis
                )
                for n in range(5)
            ]
            for job in jobs:
                await reaches(redis, orders, job.id, "completed")
    for n, job in enumerate(jobs):
        done = await echomq.get_job(orders, job.id, connection=redis)
        assert done is not None
        assert done.return_value == {"packed": sorted([f"packed i{n}", "packed lid"])}


async def test_a_failed_child_without_policy_keeps_the_step_job_waiting(
    redis: Redis, queue_name: str
) -> None:
    # As the docs warn: a child that fails for good and has no failure policy stays a
    # pending dependency, so the parked order keeps waiting.
    orders, packing_name = queue_name, queue_name + "-packing"

    async def broken_pack(job: echomq.Job) -> str:
        raise RuntimeError(f"no box for {job.data['item']}")

    async with Queue(packing_name, connection=redis) as packing:
        process_order = documented_processor(packing)
        job = await echomq.add(orders, "order", {"items": ["cup"]}, connection=redis)
        async with Worker(orders, process_order, connection=redis, drain_delay=0.2):
            await reaches(redis, orders, job.id, "waiting-children")
            (child,) = await packing.get_jobs(["waiting"])
            async with Worker(packing_name, broken_pack, connection=redis, drain_delay=0.2):
                await reaches(redis, packing_name, child.id, "failed")
            assert await echomq.get_state(orders, job.id, connection=redis) == "waiting-children"
            parked = await echomq.get_job(orders, job.id, connection=redis)
            assert parked is not None
            counts = await parked.get_dependencies_count()
            assert (counts.unprocessed, counts.failed) == (1, 0)


async def test_a_rerun_of_the_first_step_attaches_the_children_it_already_added(
    redis: Redis, queue_name: str
) -> None:
    # As if a first run had added the "cup" child and died before saving its next step.
    orders, packing_name = queue_name, queue_name + "-packing"
    async with Queue(packing_name, connection=redis) as packing:
        process_order = documented_processor(packing)
        job = await echomq.add(orders, "order", {"items": ["cup", "pan"]}, connection=redis)
        await packing.add("pack", {"item": "cup"}, parent=job, job_id=f"{job.id}-cup")
        async with Worker(orders, process_order, connection=redis, drain_delay=0.2):
            await reaches(redis, orders, job.id, "waiting-children")
        assert sorted(c.id for c in await packing.get_jobs(["waiting"])) == [
            f"{job.id}-cup",
            f"{job.id}-pan",
        ]
        parked = await echomq.get_job(orders, job.id, connection=redis)
        assert parked is not None
        assert (await parked.get_dependencies_count()).unprocessed == 2
        assert ("duplicated", f"{job.id}-cup", "") in await events_of(redis, packing_name)
