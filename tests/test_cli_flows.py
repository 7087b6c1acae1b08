"""The flow parts of the ``echomq`` command, run for real: ``echomq queue NAME flow ID`` and
the parent and children lines of ``echomq queue NAME job ID``.

Each command runs as a ``python -m echomq.cli`` subprocess against the session server; its
exit code, stdout and stderr are checked as a user would see them. Flows are set up and driven
to the states under test with the public API and an in-process worker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

from redis.asyncio import Redis

import echomq
from echomq import FlowJob, FlowProducer, Worker
from helpers import wait_for


def run_cli(redis_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "ECHOMQ_REDIS_URL"}
    return subprocess.run(
        [sys.executable, "-m", "echomq.cli", *args, "--url", redis_url],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


async def state_of(r: Redis, queue: str, job_id: str, prefix: str = "bull") -> str:
    return str(await echomq.get_state(queue, job_id, connection=r, prefix=prefix))


async def process_until(r: Redis, queue: str, states: dict[str, str]) -> None:
    """Run a worker on ``queue`` until each job of ``states`` (id -> state) is in its state
    ("ok" jobs return their data, any other name raises)."""

    async def processor(job: echomq.Job) -> Any:
        if job.name != "ok":
            raise RuntimeError(f"{job.name} broke")
        return job.data

    async def there() -> bool:
        return all([await state_of(r, queue, i) == s for i, s in states.items()])

    async with Worker(queue, processor, connection=r, drain_delay=0.2):
        await wait_for(there, timeout=10, message=f"jobs never reached {states}")


async def three_level_flow(r: Redis, queue: str) -> str:
    """publish (queue) <- transcode t720 (queue-t) <- ok "probe" (queue), and transcode t1080
    (queue-t, delayed). The probe is processed, so t720 is released to wait."""
    tree = FlowJob(
        "publish",
        queue,
        {"video": "v1"},
        children=[
            FlowJob(
                "transcode",
                queue + "-t",
                {"res": 720},
                job_id="t720",
                children=[FlowJob("ok", queue, {"probe": 1}, job_id="probe")],
            ),
            FlowJob("transcode", queue + "-t", {"res": 1080}, job_id="t1080", delay=60),
        ],
    )
    async with FlowProducer(connection=r) as flows:
        root = (await flows.add(tree)).job.id
    await process_until(r, queue, {"probe": "completed"})
    return root


async def test_flow_prints_the_tree_indented(redis: Redis, redis_url: str, queue_name: str) -> None:
    root = await three_level_flow(redis, queue_name)
    done = run_cli(redis_url, "queue", queue_name, "flow", root)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"publish  id={root}  queue={queue_name}  state=waiting-children",
        f"  transcode  id=t1080  queue={queue_name}-t  state=delayed",
        f"  transcode  id=t720  queue={queue_name}-t  state=waiting",
        f"    ok  id=probe  queue={queue_name}  state=completed",
    ]
    assert done.stderr == ""


async def test_flow_of_a_child_and_depth_limit(
    redis: Redis, redis_url: str, queue_name: str
) -> None:
    root = await three_level_flow(redis, queue_name)
    done = run_cli(redis_url, "queue", queue_name, "flow", root, "--depth", "1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"publish  id={root}  queue={queue_name}  state=waiting-children",
        f"  transcode  id=t1080  queue={queue_name}-t  state=delayed",
        f"  transcode  id=t720  queue={queue_name}-t  state=waiting",
        "    ... 1 more children below (raise --depth)",
    ]
    # Any job can be the top of the tree; a queue under the same prefix is shown by name.
    done = run_cli(redis_url, "queue", queue_name + "-t", "flow", "t720")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        f"transcode  id=t720  queue={queue_name}-t  state=waiting",
        f"  ok  id=probe  queue={queue_name}  state=completed",
    ]
    done = run_cli(redis_url, "queue", queue_name, "flow", root, "--depth", "0")
    assert done.stdout.splitlines() == [
        f"publish  id={root}  queue={queue_name}  state=waiting-children",
        "  ... 2 more children below (raise --depth)",
    ]


async def test_flow_json(redis: Redis, redis_url: str, queue_name: str) -> None:
    root = await three_level_flow(redis, queue_name)
    done = run_cli(redis_url, "queue", queue_name, "flow", root, "--json")
    assert done.returncode == 0, done.stderr
    tree = json.loads(done.stdout)
    assert (tree["id"], tree["name"], tree["queue"], tree["prefix"], tree["state"]) == (
        root,
        "publish",
        queue_name,
        "bull",
        "waiting-children",
    )
    assert tree["children_counts"] == {"processed": 0, "pending": 2, "failed": 0, "ignored": 0}
    assert [(c["id"], c["state"]) for c in tree["children"]] == [
        ("t1080", "delayed"),
        ("t720", "waiting"),
    ]
    t720 = tree["children"][1]
    assert t720["children_counts"]["processed"] == 1
    assert [(c["id"], c["state"], c["children"]) for c in t720["children"]] == [
        ("probe", "completed", [])
    ]
    assert (tree["hidden_children"], tree["hidden_reason"]) == (0, None)


async def test_flow_shows_failed_ignored_removed_and_other_prefix_children(
    redis: Redis, redis_url: str, queue_name: str
) -> None:
    work = queue_name + "-w"
    tree = FlowJob(
        "parent",
        queue_name,
        job_id="p",
        children=[
            FlowJob("ok", work, {"v": 1}, job_id="gone", remove_on_complete=True),
            FlowJob("ok", work, {"v": 2}, job_id="kept"),
            FlowJob("bad", work, job_id="ign", ignore_dependency_on_failure=True),
            FlowJob("bad", work, job_id="fpof", fail_parent_on_failure=True),
            FlowJob("later", "other", job_id="pend", prefix="alt"),
        ],
    )
    async with FlowProducer(connection=redis) as flows:
        await flows.add(tree)
    await process_until(
        redis, work, {"gone": "unknown", "kept": "completed", "ign": "failed", "fpof": "failed"}
    )
    done = run_cli(redis_url, "queue", queue_name, "flow", "p")
    assert done.returncode == 0, done.stderr
    # The fail_parent_on_failure child released the parent to wait (its worker fails it).
    assert done.stdout.splitlines() == [
        f"parent  id=p  queue={queue_name}  state=waiting",
        f"  bad  id=fpof  queue={work}  state=failed",
        f"  bad  id=ign  queue={work}  state=failed",
        "  later  id=pend  queue=alt:other  state=waiting",
        f"  ok  id=kept  queue={work}  state=completed",
        "  ... 1 recorded children no longer exist (removed)",
    ]

    done = run_cli(redis_url, "queue", queue_name, "job", "p")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"job p (parent) in queue {queue_name}: waiting"
    assert "children  2 processed, 1 pending, 1 failed, 1 ignored" in lines
    assert "parent    none" in lines

    done = run_cli(redis_url, "queue", "other", "job", "pend", "--prefix", "alt")
    assert done.returncode == 0, done.stderr
    assert f"parent    bull:{queue_name}:p" in done.stdout.splitlines()
    assert "children  none" in done.stdout.splitlines()

    done = run_cli(redis_url, "queue", queue_name, "job", "p", "--json")
    detail = json.loads(done.stdout)
    assert detail["children"] == {"processed": 2, "pending": 1, "failed": 1, "ignored": 1}
    assert detail["parent_key"] is None
    done = run_cli(redis_url, "queue", work, "job", "ign", "--json")
    detail = json.loads(done.stdout)
    assert detail["parent_key"] == f"bull:{queue_name}:p"
    assert detail["parent"] == {"id": "p", "queue_key": f"bull:{queue_name}"}


async def test_max_children_limit_is_reported(
    redis: Redis, redis_url: str, queue_name: str
) -> None:
    # 200 pending children: a set that large is no longer returned whole by SSCAN.
    children = [FlowJob("leaf", queue_name + "-c", {"i": i}) for i in range(200)]
    async with FlowProducer(connection=redis) as flows:
        root = (await flows.add(FlowJob("root", queue_name, children=children))).job.id
    done = run_cli(redis_url, "queue", queue_name, "flow", root, "--max-children", "5")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    shown = [line for line in lines if line.startswith("  leaf  ")]
    assert len(shown) < 200  # SSCAN's COUNT is a hint: about 5, maybe fewer or more
    assert lines[-1] == f"  ... {200 - len(shown)} more children not shown (raise --max-children)"
    done = run_cli(redis_url, "queue", queue_name, "flow", root, "--max-children", "500")
    assert len([line for line in done.stdout.splitlines() if "leaf" in line]) == 200


def test_flow_of_a_missing_job_exits_1(redis_url: str, queue_name: str) -> None:
    done = run_cli(redis_url, "queue", queue_name, "flow", "nope")
    assert done.returncode == 1
    assert done.stdout == ""
    assert f"echomq: error: no job 'nope' in queue '{queue_name}'" in done.stderr


def test_flow_bad_depth_is_a_usage_error(redis_url: str, queue_name: str) -> None:
    done = run_cli(redis_url, "queue", queue_name, "flow", "x", "--depth", "-1")
    assert done.returncode == 2
    assert "--depth must be 0 or more" in done.stderr
    done = run_cli(redis_url, "queue", queue_name, "flow", "x", "--depth", "two")
    assert done.returncode == 2
    assert "invalid int value" in done.stderr
