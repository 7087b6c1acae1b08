"""Prometheus: ``Queue.export_prometheus_metrics``, worker-side metrics
(``Worker(metrics_registry=...)``), the group series of the export of every queue under a
prefix, and the ``echomq metrics`` server, read back through ``prometheus_client.parser`` as
Prometheus would read them."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families
from redis import Redis as SyncRedis
from redis.asyncio import Redis

import echomq
import echomq.sync
from echomq import InvalidOptionError, Job, Queue, Worker
from echomq._discovery import prometheus_text
from helpers import wait_for

FAST: dict[str, Any] = {"drain_delay": 0.2, "stalled_interval": 1.0}
STATES = ("active", "completed", "delayed", "failed", "prioritized", "waiting", "waiting-children")
BULLMQ_FAMILIES = {"bullmq_job_count", "bullmq_job_completed", "bullmq_job_failed"}
GROUP_FAMILIES = {"echomq_groups", "echomq_group_jobs"}

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> tuple[dict[str, str], Samples]:
    """Family name -> type, and (sample name, labels) -> value."""
    types: dict[str, str] = {}
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        types[family.name] = family.type
        for s in family.samples:
            key = (s.name, frozenset(s.labels.items()))
            assert key not in samples, f"duplicate sample {key}"
            samples[key] = s.value
    return types, samples


def labels(**kw: str) -> frozenset[tuple[str, str]]:
    return frozenset(kw.items())


def export_samples(queue: str, counts: dict[str, int], done: int, failed: int) -> Samples:
    expected: Samples = {
        ("bullmq_job_count", labels(queue=queue, state=st)): float(counts.get(st, 0))
        for st in STATES
    }
    expected[("bullmq_job_completed_total", labels(queue=queue))] = float(done)
    expected[("bullmq_job_failed_total", labels(queue=queue))] = float(failed)
    return expected


async def finish_some(redis: Redis, queue: str, ok: int, bad: int, prefix: str = "bull") -> None:
    """Run ``ok`` jobs that complete and ``bad`` that fail through a worker with metrics on."""
    items: list[tuple[str, Any]] = [("ok", {})] * ok + [("bad", {})] * bad
    await echomq.add_bulk(queue, items, connection=redis, prefix=prefix)

    async def run(job: Job) -> None:
        if job.name == "bad":
            raise RuntimeError("no")

    async with Worker(
        queue, run, connection=redis, prefix=prefix, metrics_max_data_points=60, **FAST
    ):

        async def finished() -> bool:
            counts = await echomq.get_job_counts(
                queue, "completed", "failed", connection=redis, prefix=prefix
            )
            return counts == {"completed": ok, "failed": bad}

        await wait_for(finished, timeout=10)


async def test_export_of_a_queue_in_several_states(redis: Redis, queue_name: str) -> None:
    await finish_some(redis, queue_name, ok=3, bad=2)
    async with Queue(queue_name, connection=redis) as q:
        await q.add("later", {}, delay=60)
        await q.add("urgent", {}, priority=3)
        await q.add("plain", {})
        await q.add("plain", {})
        taker = Worker(queue_name, None, connection=redis)
        assert await taker.get_next_job("tok", block=False) is not None  # one active
        await taker.close()
        text = await q.export_prometheus_metrics()
    types, samples = parse(text)
    assert types == {
        "bullmq_job_count": "gauge",
        "bullmq_job_completed": "counter",
        "bullmq_job_failed": "counter",
    }
    counts = {"active": 1, "completed": 3, "delayed": 1, "failed": 2, "prioritized": 1}
    counts["waiting"] = 1
    assert samples == export_samples(queue_name, counts, done=3, failed=2)
    assert "# HELP bullmq_job_count Number of jobs in the queue by state" in text


async def test_completed_total_is_the_metrics_count_not_the_set(
    redis: Redis, queue_name: str
) -> None:
    # A worker without metrics completes a job: the set grows, the counter does not.
    await echomq.add(queue_name, "x", {}, connection=redis)
    async with Worker(queue_name, lambda job: None, connection=redis, **FAST):
        await wait_for(lambda: redis.zcard(f"bull:{queue_name}:completed"), timeout=5)
    async with Queue(queue_name, connection=redis) as q:
        _, samples = parse(await q.export_prometheus_metrics())
    assert samples[("bullmq_job_count", labels(queue=queue_name, state="completed"))] == 1
    assert samples[("bullmq_job_completed_total", labels(queue=queue_name))] == 0


async def test_global_labels_are_added_and_escaped(
    redis: Redis, sync_redis: SyncRedis, queue_name: str
) -> None:
    odd = 'a "quoted" back\\slash\nnew line'
    glob = {"env": "prod", "note": odd}
    async with Queue(queue_name, connection=redis) as q:
        await q.add("x", {})
        text = await q.export_prometheus_metrics(glob)
    _, samples = parse(text)
    key = ("bullmq_job_count", labels(queue=queue_name, state="waiting", env="prod", note=odd))
    assert samples[key] == 1
    assert len(samples) == len(STATES) + 2
    assert all(dict(lbl)["note"] == odd for _, lbl in samples)
    with echomq.sync.Queue(queue_name, connection=sync_redis) as sq:
        assert sq.export_prometheus_metrics(glob) == text


@pytest.mark.parametrize("name", ["queue", "state", "1abc", "has-dash", "__reserved"])
async def test_bad_global_label_names_are_refused(redis: Redis, queue_name: str, name: str) -> None:
    async with Queue(queue_name, connection=redis) as q:
        with pytest.raises(InvalidOptionError, match=repr(name)):
            await q.export_prometheus_metrics({name: "x"})


# --- worker-side metrics ---------------------------------------------------------------------


def value(registry: CollectorRegistry, metric: str, /, **lbl: str) -> float:
    found = registry.get_sample_value(metric, lbl)
    return 0.0 if found is None else found


async def test_worker_metrics_count_durations_outcomes_and_active(
    redis: Redis, queue_name: str
) -> None:
    registry = CollectorRegistry()
    gate = asyncio.Event()
    running = asyncio.Event()

    async def run(job: Job) -> str:
        if job.name == "slow":
            running.set()
            await gate.wait()
        if job.name == "bad":
            raise RuntimeError("no")
        return "ok"

    await echomq.add_bulk(
        queue_name, [("slow", {}), ("ok", {}), ("ok", {}), ("bad", {})], connection=redis
    )
    worker = Worker(queue_name, run, connection=redis, metrics_registry=registry, **FAST)
    async with worker:
        await asyncio.wait_for(running.wait(), 5)
        assert value(registry, "echomq_jobs_active", queue=queue_name) == 1
        gate.set()
        await wait_for(
            lambda: value(registry, "echomq_jobs_failed_total", queue=queue_name, name="bad"),
            timeout=5,
        )
        await wait_for(
            lambda: (
                value(registry, "echomq_jobs_completed_total", queue=queue_name, name="ok") == 2
            ),
            timeout=5,
        )
    q = queue_name
    assert value(registry, "echomq_jobs_completed_total", queue=q, name="slow") == 1
    assert value(registry, "echomq_jobs_failed_total", queue=q, name="bad") == 1
    assert value(registry, "echomq_jobs_active", queue=q) == 0
    assert value(registry, "echomq_job_duration_seconds_count", queue=q, name="ok") == 2
    assert value(registry, "echomq_job_duration_seconds_count", queue=q, name="bad") == 1
    assert value(registry, "echomq_lock_renewals_failed_total", queue=q) == 0

    from prometheus_client import generate_latest

    types, samples = parse(generate_latest(registry).decode())
    types = {k: v for k, v in types.items() if not k.endswith("_created")}  # client's timestamps
    assert types == {
        "echomq_job_duration_seconds": "histogram",
        "echomq_jobs_completed": "counter",
        "echomq_jobs_failed": "counter",
        "echomq_jobs_active": "gauge",
        "echomq_lock_renewals_failed": "counter",
    }
    slow_sum = samples[("echomq_job_duration_seconds_sum", labels(queue=q, name="slow"))]
    assert slow_sum > 0


async def test_lock_renewals_failed_is_counted(redis: Redis, queue_name: str) -> None:
    registry = CollectorRegistry()
    started = asyncio.Event()

    async def long(job: Job) -> None:
        started.set()
        await asyncio.sleep(3)

    await echomq.add(queue_name, "long", {}, connection=redis)
    worker = Worker(
        queue_name,
        long,
        connection=redis,
        metrics_registry=registry,
        lock_duration=1.0,
        stalled_interval=5.0,
        drain_delay=0.2,
    )
    async with worker:
        await asyncio.wait_for(started.wait(), 5)
        (job_id,) = await redis.lrange(f"bull:{queue_name}:active", 0, -1)
        assert isinstance(job_id, bytes)
        await redis.delete(f"bull:{queue_name}:{job_id.decode()}:lock")  # as if it expired
        await wait_for(
            lambda: value(registry, "echomq_lock_renewals_failed_total", queue=queue_name),
            timeout=5,
        )
        await worker.close(force=True)
    assert value(registry, "echomq_lock_renewals_failed_total", queue=queue_name) == 1
    assert value(registry, "echomq_jobs_active", queue=queue_name) == 0  # reset at close


async def test_workers_share_a_registry(redis: Redis, queue_name: str) -> None:
    registry = CollectorRegistry()
    other = queue_name + "-b"
    await echomq.add(queue_name, "a", {}, connection=redis)
    await echomq.add(other, "b", {}, connection=redis)
    w1 = Worker(queue_name, lambda job: None, connection=redis, metrics_registry=registry, **FAST)
    w2 = Worker(other, lambda job: None, connection=redis, metrics_registry=registry, **FAST)
    async with w1, w2:

        def both_done() -> bool:
            done = "echomq_jobs_completed_total"
            a = value(registry, done, queue=queue_name, name="a")
            return a == 1 and value(registry, done, queue=other, name="b") == 1

        await wait_for(both_done, timeout=5)


def test_no_registry_registers_no_hook() -> None:
    worker = Worker("q", lambda job: None, connection="redis://127.0.0.1:1")
    assert not any(worker._hooks.has(e) for e in echomq.worker.EVENTS)


def test_a_bad_registry_or_a_missing_extra_is_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(TypeError, match="CollectorRegistry"):
        Worker("q", lambda job: None, connection="redis://127.0.0.1:1", metrics_registry=object())  # type: ignore[arg-type]
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(ImportError, match=r"pip install 'echomq\[prometheus\]'"):
        Worker("q", lambda job: None, connection="redis://127.0.0.1:1", metrics_registry=object())  # type: ignore[arg-type]


# --- echomq metrics: the standalone server ---------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


class MetricsServer:
    """``echomq metrics`` in a child process, on a free port; stopped with SIGTERM."""

    def __init__(self, url: str, prefix: str, *flags: str) -> None:
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "echomq.cli", "metrics", "--url", url, "--prefix", prefix]
            + ["--port", str(self.port), *flags],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    async def started(self) -> str:
        assert self.proc.stdout is not None
        return await asyncio.to_thread(self.proc.stdout.readline)

    async def get(self, path: str) -> tuple[int, str]:
        return await asyncio.to_thread(get, self.base + path)

    async def stop(self) -> tuple[int, str]:
        """SIGTERM, then the exit code and stderr (killed after 10 s)."""
        self.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        while self.proc.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if self.proc.poll() is None:
            self.proc.kill()
        _, err = self.proc.communicate()
        return self.proc.returncode, err


async def test_the_metrics_command_serves_every_queue_under_a_prefix(
    redis: Redis, redis_url: str
) -> None:
    prefix = f"pm{uuid.uuid4().hex[:8]}"
    await finish_some(redis, "alpha", ok=2, bad=1, prefix=prefix)
    await echomq.add("beta", "x", {}, connection=redis, prefix=prefix, delay=60)
    await echomq.add("other", "x", {}, connection=redis)  # another prefix: not exported
    server = MetricsServer(redis_url, prefix)
    try:
        assert f"127.0.0.1:{server.port}/metrics" in await server.started()
        status, text = await server.get("/metrics")
        assert status == 200
        types, samples = parse(text)
        assert set(types) == BULLMQ_FAMILIES | GROUP_FAMILIES
        expected = export_samples("alpha", {"completed": 2, "failed": 1}, done=2, failed=1)
        expected |= export_samples("beta", {"delayed": 1}, done=0, failed=0)
        expected[("echomq_groups", labels(queue="alpha"))] = 0  # no group: no group_jobs
        expected[("echomq_groups", labels(queue="beta"))] = 0
        assert samples == expected
        assert (await server.get("/nope"))[0] == 404
    finally:
        code, err = await server.stop()
    assert code == 0, err


async def test_the_metrics_command_answers_503_while_redis_is_down() -> None:
    server = MetricsServer(f"redis://127.0.0.1:{free_port()}", "bull")  # nothing listens
    try:
        await server.started()
        status, text = await server.get("/metrics")
        assert status == 503 and "redis unavailable" in text
    finally:
        code, err = await server.stop()
    assert code == 0, err


def test_the_metrics_command_refuses_a_port_in_use(redis_url: str) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "echomq.cli", "metrics", "--url", redis_url]
            + ["--port", str(port)],
            capture_output=True,
            text=True,
            timeout=30,
        )
    assert done.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr


# --- groups: the busiest groups of each queue, bounded ---------------------------------------


def group_samples(samples: Samples) -> dict[str, dict[str, float]]:
    """``echomq_group_jobs`` samples as group -> state -> value (one queue)."""
    found: dict[str, dict[str, float]] = {}
    for (name, lbl), v in samples.items():
        if name == "echomq_group_jobs":
            d = dict(lbl)
            found.setdefault(d["group"], {})[d["state"]] = v
    return found


def group_order(text: str, queue: str) -> list[str]:
    """The groups of ``queue`` in the order the text writes their series (each once)."""
    seen: list[str] = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            ours = s.name == "echomq_group_jobs" and s.labels["queue"] == queue
            if ours and s.labels["group"] not in seen:
                seen.append(s.labels["group"])
    return seen


@pytest.fixture
def prefix() -> str:
    return f"pg{uuid.uuid4().hex[:8]}"


async def fill_groups(redis: Redis, queue: str, prefix: str, sizes: dict[str, int]) -> None:
    async with Queue(queue, connection=redis, prefix=prefix) as q:
        for group, n in sizes.items():
            await q.add_bulk([("job", {"n": i}, {"group": group}) for i in range(n)])


async def test_group_series_are_the_busiest_groups_only(redis: Redis, prefix: str) -> None:
    sizes = {"big": 9, "mid": 5, "small": 3, "tiny": 2, "one": 1}
    await fill_groups(redis, "tenants", prefix, sizes)
    await echomq.add("plain", "x", {}, connection=redis, prefix=prefix)  # a queue without groups
    taker = Worker("tenants", None, connection=redis, prefix=prefix)
    taken = [await taker.get_next_job(f"tok{i}", block=False) for i in range(2)]
    await taker.close()
    moved = {j.group for j in taken if j is not None}  # one job of each of two groups, active
    assert len(moved) == 2 and moved <= set(sizes)

    text = await prometheus_text(redis, prefix, group_limit=3)
    types, samples = parse(text)
    assert types == {
        "bullmq_job_count": "gauge",
        "bullmq_job_completed": "counter",
        "bullmq_job_failed": "counter",
        "echomq_groups": "gauge",
        "echomq_group_jobs": "gauge",
    }
    assert samples[("echomq_groups", labels(queue="tenants"))] == 5
    assert samples[("echomq_groups", labels(queue="plain"))] == 0
    async with Queue("tenants", connection=redis, prefix=prefix) as q:
        groups = await q.get_groups(0, 2)
    assert [g.id for g in groups] == group_order(text, "tenants")  # most waiting first
    assert group_samples(samples) == {
        g.id: {"waiting": float(g.waiting), "active": float(g.active)} for g in groups
    }
    assert len(group_samples(samples)) == 3  # top 3 of 5: bounded
    assert sum(v["active"] for v in group_samples(samples).values()) == sum(
        1 for g in groups if g.id in moved
    )
    assert group_order(text, "plain") == []
    # The BullMQ families are as before, grouped jobs counted as waiting and active.
    assert samples[("bullmq_job_count", labels(queue="tenants", state="waiting"))] == 18
    assert samples[("bullmq_job_count", labels(queue="tenants", state="active"))] == 2


async def test_group_ids_are_escaped_and_group_is_a_reserved_label(
    redis: Redis, prefix: str
) -> None:
    odd = 'acme "eu"\\branch\nline 2 {x="y"}'
    await fill_groups(redis, "tenants", prefix, {odd: 2, "plain": 1})
    text = await prometheus_text(redis, prefix, {"env": "prod"}, group_limit=5)
    _, samples = parse(text)
    key = ("echomq_group_jobs", labels(queue="tenants", group=odd, state="waiting", env="prod"))
    assert samples[key] == 2
    # Escaped as every label value is: the sample stays on one line.
    line = next(x for x in text.splitlines() if "acme" in x and 'state="waiting"' in x)
    assert 'group="acme \\"eu\\"\\\\branch\\nline 2 {x=\\"y\\"}"' in line
    with pytest.raises(InvalidOptionError, match="'group' is reserved"):
        await prometheus_text(redis, prefix, {"group": "x"})
    # Without group series, `group` is a global label like any other (as in BullMQ).
    plain = await prometheus_text(redis, prefix, {"group": "x"}, group_limit=0)
    assert all(dict(lbl)["group"] == "x" for _, lbl in parse(plain)[1])


async def test_group_limit_zero_is_bullmqs_export_exactly(redis: Redis, prefix: str) -> None:
    await fill_groups(redis, "tenants", prefix, {"a": 2, "b": 1})
    text = await prometheus_text(redis, prefix, group_limit=0)
    async with Queue("tenants", connection=redis, prefix=prefix) as q:
        # The queue's own export is BullMQ's: no group series, whatever the queue holds.
        assert await q.export_prometheus_metrics() == text
    assert set(parse(text)[0]) == BULLMQ_FAMILIES and "echomq_" not in text


@pytest.mark.parametrize("bad", [-1, True, 2.5, "3", None])
async def test_a_bad_group_limit_is_refused_before_any_read(redis: Redis, bad: Any) -> None:
    with pytest.raises(InvalidOptionError, match="group_limit"):
        await prometheus_text(redis, "never-read", group_limit=bad)


async def test_the_metrics_command_takes_a_group_limit(
    redis: Redis, redis_url: str, prefix: str
) -> None:
    await fill_groups(redis, "tenants", prefix, {"big": 3, "small": 1})
    server = MetricsServer(redis_url, prefix, "--groups", "1")
    try:
        await server.started()
        status, text = await server.get("/metrics")
    finally:
        code, err = await server.stop()
    assert code == 0, err
    assert status == 200
    _, samples = parse(text)
    assert group_samples(samples) == {"big": {"waiting": 3.0, "active": 0.0}}
    assert samples[("echomq_groups", labels(queue="tenants"))] == 2
    off = MetricsServer(redis_url, prefix, "--groups", "0")
    try:
        await off.started()
        assert "echomq_" not in (await off.get("/metrics"))[1]
    finally:
        assert (await off.stop())[0] == 0


def test_the_metrics_command_refuses_a_negative_group_limit(redis_url: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "echomq.cli", "metrics", "--url", redis_url, "--groups", "-1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 2
    assert "--groups" in done.stderr and "expected an integer >= 0" in done.stderr
