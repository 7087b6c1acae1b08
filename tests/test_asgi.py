"""echomq.contrib.asgi with real FastAPI and Starlette apps, through TestClient, on real Redis.

The FastAPI app is the one in docs/integrations.md, executed as written.
"""

from __future__ import annotations

import re
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from redis import Redis as SyncRedis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

import echomq
from echomq.contrib.asgi import EchoMQState, echomq_lifespan, get_queue, get_queue_events

DOC = Path(__file__).resolve().parents[1] / "docs" / "integrations.md"


def doc_example(marker: str) -> str:
    """The first ```python block of docs/integrations.md that contains ``marker``."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    return str(next(block for block in blocks if marker in block))


@pytest.fixture
def example_url(redis_url: str) -> Iterator[str]:
    """A database of the session server for the docs example's fixed queue name, emptied
    after the test (the suite started this server, so flushing it is allowed)."""
    url = redis_url.rsplit("/", 1)[0] + "/9"
    try:
        yield url
    finally:
        client = SyncRedis.from_url(url)
        try:
            client.flushdb()
        finally:
            client.close()


@pytest.fixture
def docs_app(example_url: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("ECHOMQ_REDIS_URL", example_url)
    module = types.ModuleType("integrations_fastapi_example")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(doc_example("app = FastAPI("), str(DOC), "exec"), module.__dict__)
    return module.app


def test_the_docs_fastapi_app_enqueues_and_waits_for_the_result(docs_app: Any) -> None:
    with TestClient(docs_app) as client:
        now = client.post("/thumbnails/now", json={"image": "cat.png", "width": 64})
        assert now.status_code == 200
        assert now.json()["result"] == {"thumbnail": "cat.png@64px"}

        queued = client.post("/thumbnails", json={"image": "dog.png"})
        assert queued.status_code == 202
        job_id = queued.json()["job_id"]
        deadline = time.monotonic() + 10
        while (state := client.get(f"/thumbnails/{job_id}").json())["state"] != "completed":
            assert time.monotonic() < deadline, state
            time.sleep(0.02)
        assert state["result"] == {"thumbnail": "dog.png@128px"}
        assert client.get("/thumbnails/nope").json() == {"state": "unknown"}
        assert client.post("/thumbnails", json={"width": 3}).status_code == 422


def test_the_lifespan_closes_what_it_opened(docs_app: Any) -> None:
    with TestClient(docs_app):
        state = docs_app.state.echomq
        assert isinstance(state, EchoMQState)
        assert state.worker is not None and state.worker.is_running
    assert not hasattr(docs_app.state, "echomq")
    assert state.worker.state.value == "closed"
    with pytest.raises(echomq.ConnectionNotOpenError):
        _ = state.queue._conn.client  # the URL client the queue opened is closed


async def _enqueue(request: Request) -> JSONResponse:
    job = await get_queue(request).add("ping", await request.json())
    return JSONResponse({"job_id": job.id})


async def _events(request: Request) -> JSONResponse:
    try:
        get_queue_events(request)
    except RuntimeError as exc:
        return JSONResponse({"error": str(exc)}, status_code=500)
    return JSONResponse({})


def test_a_starlette_app_without_worker_or_events(
    redis_url: str, sync_redis: SyncRedis, queue_name: str
) -> None:
    app = Starlette(
        routes=[Route("/", _enqueue, methods=["POST"]), Route("/events", _events)],
        lifespan=echomq_lifespan(queue_name, connection=redis_url, events=False),
    )
    with TestClient(app) as client:
        job_id = client.post("/", json={"n": 1}).json()["job_id"]
        assert "events=False" in client.get("/events").json()["error"]
        state = app.state.echomq
        assert (state.events, state.worker) == (None, None)
    job = echomq.sync.get_job(queue_name, job_id, connection=sync_redis)
    assert job is not None and (job.name, job.data) == ("ping", {"n": 1})
    assert echomq.sync.get_state(queue_name, job_id, connection=sync_redis) == "waiting"


def test_the_dependencies_say_when_the_lifespan_did_not_run(queue_name: str) -> None:
    app = Starlette(routes=[Route("/", _enqueue, methods=["POST"])])
    client = TestClient(app, raise_server_exceptions=True)
    with pytest.raises(RuntimeError, match="lifespan=echomq_lifespan"):
        client.post("/", json={})


def test_importing_without_starlette_names_the_pip_command(tmp_path: Path) -> None:
    import subprocess

    blocker = tmp_path / "starlette"
    blocker.mkdir()
    (blocker / "__init__.py").write_text("raise ImportError('blocked for the test')\n")
    done = subprocess.run(
        [sys.executable, "-c", "import echomq.contrib.asgi"],
        env={"PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "pip install 'echomq[asgi]'" in done.stderr
