"""The Sentinel and Cluster URL forms from the entry points a person uses: the CLI (a real
process, its exit code and output on a pipe) and the dashboard (its HTTP answers).

The suite starts the Sentinels (``tests/_sentinel.py``) and the cluster (``redis_cluster``).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

from starlette.testclient import TestClient

import echomq
from echomq import JobState, Queue
from echomq.dashboard import create_app

DEADLINE = 30.0

PROCESSOR = textwrap.dedent(
    """
    async def process(job):
        return job.data["x"] * 2
    """
)


def cli(*args: str, cwd: Path, url: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "ECHOMQ_REDIS_URL"}
    env["ECHOMQ_REDIS_URL"] = url  # the environment variable, as a deployment sets it
    return subprocess.Popen(
        [sys.executable, "-m", "echomq.cli", *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def state_of(url: str, queue: str, job_id: str) -> JobState:
    async def read() -> JobState:
        async with Queue(queue, connection=url) as q:
            return await q.get_state(job_id)

    return asyncio.run(read())


def test_the_cli_adds_and_runs_jobs_on_a_topology_url(tmp_path: Path, topology_url: str) -> None:
    (tmp_path / "topo_procs.py").write_text(PROCESSOR)
    queue = f"{{cli-{uuid.uuid4().hex[:8]}}}"  # braces: one slot on a cluster
    added = cli("add", queue, "double", "--data", '{"x": 21}', cwd=tmp_path, url=topology_url)
    out, err = added.communicate(timeout=DEADLINE)
    assert added.returncode == 0, err
    job_id = out.split()[-1] if out.split() else ""
    assert state_of(topology_url, queue, job_id) is JobState.WAITING, out
    worker = cli("worker", "topo_procs:process", "--queue", queue, cwd=tmp_path, url=topology_url)
    try:
        deadline = time.monotonic() + DEADLINE
        while state_of(topology_url, queue, job_id) is not JobState.COMPLETED:
            assert time.monotonic() < deadline, "the CLI worker did not complete the job"
            assert worker.poll() is None, worker.communicate()[1]
            time.sleep(0.05)
    finally:
        worker.send_signal(signal.SIGTERM)
        _, log = worker.communicate(timeout=DEADLINE)
    assert worker.returncode == 0, log
    assert f"job={job_id}" in log and "completed" in log


def test_the_dashboard_on_a_topology_url(topology_url: str) -> None:
    queue = f"{{dash-{uuid.uuid4().hex[:8]}}}"
    job = asyncio.run(echomq.add(queue, "shown", {"x": 1}, connection=topology_url))
    grouped = asyncio.run(echomq.add(queue, "mine", {}, group="acme", connection=topology_url))
    with TestClient(create_app(connection=topology_url, queues=[queue])) as client:
        assert client.get("/healthz").text == "ok\n"
        page = client.get(f"/queues/{queue}?state=waiting")
        assert page.status_code == 200
        assert f"/jobs/{job.id}" in page.text
        groups = client.get(f"/queues/{queue}?state=groups")  # the group reads, one slot
        assert groups.status_code == 200 and 'data-group="acme"' in groups.text
        acme = client.get(f"/queues/{queue}?state=groups&group=acme")
        assert acme.status_code == 200 and f'data-job="{grouped.id}"' in acme.text
