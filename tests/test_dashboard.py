"""The dashboard app (``echomq.dashboard.create_app``) over HTTP, on the suite's real Redis.

Requests go through Starlette's TestClient (the app runs on its own event loop in a thread,
with its own Redis client made from the URL, as in production); the state each action leaves
is read back with echomq's public API. The ``echomq dashboard`` process itself is tested at
the end, and in a real browser in tests/test_dashboard_browser.py.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import html
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any
from urllib.parse import quote

import pytest
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families
from redis.asyncio import Redis
from starlette.testclient import TestClient

import echomq
from echomq import FlowJob, FlowProducer, Job, Queue, Worker
from echomq.dashboard import _views as views
from echomq.dashboard import create_app
from echomq.embedded import RedisServer
from echomq.queue import Metrics, MetricsMeta
from helpers import wait_for

FAST: dict[str, Any] = {"drain_delay": 0.2, "stalled_interval": 1.0}
CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def client(redis_url: str, **options: Any) -> TestClient:
    return TestClient(create_app(connection=redis_url, **options), follow_redirects=False)


def csrf_of(page: str) -> str:
    found = CSRF.search(page)
    assert found, "no CSRF field on the page"
    return found.group(1)


def post(c: TestClient, path: str, **form: str) -> Any:
    """POST an action as its page's own form would: with the CSRF token that page holds."""
    page = path.split("/actions/")[0]
    text = c.get(page if "/jobs/" in page else page + "?state=failed").text
    return c.post(path, data={"csrf": csrf_of(text), **form})


async def finish(redis: Redis, queue: str, ok: int, bad: int) -> None:
    """Complete ``ok`` jobs (returning their index) and fail ``bad`` through a real worker."""
    items: list[tuple[str, Any]] = [("ok", {"i": i}) for i in range(ok)]
    items += [("bad", {"i": i}) for i in range(bad)]
    await echomq.add_bulk(queue, items, connection=redis)

    async def run(job: Job) -> Any:
        await job.log(f"working on {job.data['i']}")
        await job.update_progress(50)
        if job.name == "bad":
            raise RuntimeError(f"bad job {job.data['i']}")
        return {"done": job.data["i"]}

    async with Worker(queue, run, connection=redis, metrics_max_data_points=60, **FAST):

        async def finished() -> bool:
            counts = await echomq.get_job_counts(queue, "completed", "failed", connection=redis)
            return counts == {"completed": ok, "failed": bad}

        await wait_for(finished, timeout=15)


@pytest.fixture
def other_prefix() -> Iterator[str]:
    yield f"other{os.getpid()}"


async def test_queue_list_shows_the_queues_of_its_prefix_only(
    redis: Redis, redis_url: str, queue_name: str, other_prefix: str
) -> None:
    await finish(redis, queue_name, ok=2, bad=1)
    await echomq.add(queue_name, "waiting", {}, connection=redis)
    await echomq.add(f"{queue_name}-x", "elsewhere", {}, connection=redis, prefix=other_prefix)
    await echomq.pause(queue_name, connection=redis)
    with client(redis_url) as c:
        page = c.get("/")
        assert page.status_code == 200
        row = re.search(rf'<tr data-queue="{queue_name}">(.*?)</tr>', page.text, re.S)
        assert row, page.text
        cells = dict(re.findall(r'class="count ([a-z-]+)">(\d+)<', row.group(1)))
        assert cells["completed"] == "2" and cells["failed"] == "1" and cells["waiting"] == "1"
        assert "paused" in row.group(1)
        assert f"{queue_name}-x" not in page.text
    with client(redis_url, prefix=other_prefix) as c:
        page = c.get("/")
        assert f'data-queue="{queue_name}-x"' in page.text
        assert f'data-queue="{queue_name}"' not in page.text


async def test_state_tabs_page_through_jobs_newest_first(
    redis: Redis, redis_url: str, queue_name: str
) -> None:
    await finish(redis, queue_name, ok=30, bad=0)
    expected = [j.id for j in await echomq.get_jobs(queue_name, "completed", connection=redis)]
    with client(redis_url) as c:
        first = c.get(f"/queues/{queue_name}?state=completed")
        second = c.get(f"/queues/{queue_name}?state=completed&page=2")
        beyond = c.get(f"/queues/{queue_name}?state=completed&page=99")
        bad_state = c.get(f"/queues/{queue_name}?state=nope")
    ids = [re.findall(r'<tr data-job="([^"]+)">', p.text) for p in (first, second, beyond)]
    assert ids[0] == expected[:25] and ids[1] == expected[25:]
    assert ids[2] == ids[1], "a page past the end shows the last page"
    assert "page 1 of 2" in first.text and "page 2 of 2" in second.text
    assert '<progress max="100" value="50.0">' in first.text
    assert bad_state.status_code == 404


async def test_job_page_shows_everything_of_a_failed_job(
    redis: Redis, redis_url: str, queue_name: str
) -> None:
    await finish(redis, queue_name, ok=0, bad=1)
    (job,) = await echomq.get_jobs(queue_name, "failed", connection=redis)
    with client(redis_url) as c:
        page = c.get(f"/queues/{queue_name}/jobs/{job.id}")
        missing = c.get(f"/queues/{queue_name}/jobs/nope")
    assert page.status_code == 200
    text = page.text
    assert 'id="job-state">failed<' in text
    assert "bad job 0" in text and "RuntimeError" in text  # reason and stack trace
    assert "working on 0" in text  # the log
    assert "&#34;i&#34;: 0" in text  # data as escaped JSON
    for label in ("added", "processed", "failed"):
        assert f"<b>{label}</b>" in text
    assert missing.status_code == 404


async def test_job_page_links_parent_and_children(
    redis: Redis, redis_url: str, queue_name: str
) -> None:
    async with FlowProducer(connection=redis) as flow:
        node = await flow.add(
            FlowJob("parent", queue_name, {}, children=[FlowJob("child", queue_name, {"n": 1})])
        )
    parent, child = node.job, node.children[0].job
    with client(redis_url) as c:
        parent_page = c.get(f"/queues/{queue_name}/jobs/{parent.id}").text
        child_page = c.get(f"/queues/{queue_name}/jobs/{child.id}").text
    assert f'href="/queues/{queue_name}/jobs/{child.id}"' in parent_page
    assert "pending" in parent_page and 'id="job-state">waiting-children<' in parent_page
    assert f'href="/queues/{queue_name}/jobs/{parent.id}"' in child_page


async def test_schedulers_and_global_limits_are_shown(
    redis: Redis, redis_url: str, queue_name: str
) -> None:
    async with Queue(queue_name, connection=redis) as q:
        await q.upsert_job_scheduler("nightly", pattern="0 3 * * *", template={"name": "report"})
        await q.set_global_concurrency(4)
        await q.set_global_rate_limit(10, 2)
    with client(redis_url) as c:
        text = c.get(f"/queues/{queue_name}?state=delayed").text
    schedulers = text[text.index('id="schedulers"') :]
    assert "nightly" in schedulers and "0 3 * * *" in schedulers and "report" in schedulers
    limits = text[text.index('id="limits"') : text.index('id="schedulers"')]
    assert "<b>4</b>" in limits and "<b>10</b> job(s) per 2.0 s" in limits


async def test_actions_go_through_and_leave_the_state_the_api_reads(
    redis: Redis, redis_url: str, queue_name: str
) -> None:
    await finish(redis, queue_name, ok=1, bad=3)
    failed = [j.id for j in await echomq.get_jobs(queue_name, "failed", connection=redis)]
    delayed = [
        (await echomq.add(queue_name, "later", {}, connection=redis, delay=600)).id
        for _ in range(3)
    ]
    base = f"/queues/{queue_name}"
    with client(redis_url) as c:
        answer = post(c, f"{base}/actions/pause", next=f"{base}?state=failed")
        assert answer.status_code == 303 and answer.headers["location"] == f"{base}?state=failed"
        assert await echomq.is_paused(queue_name, connection=redis)
        assert "paused" in c.get(answer.headers["location"]).text  # the flash message
        post(c, f"{base}/actions/resume")
        assert not await echomq.is_paused(queue_name, connection=redis)

        post(c, f"{base}/jobs/{failed[0]}/actions/retry")
        assert await echomq.get_state(queue_name, failed[0], connection=redis) == "waiting"
        post(c, f"{base}/actions/retry-failed")
        states = {await echomq.get_state(queue_name, i, connection=redis) for i in failed}
        assert states == {"waiting"}

        post(c, f"{base}/jobs/{delayed[0]}/actions/promote")
        assert await echomq.get_state(queue_name, delayed[0], connection=redis) == "waiting"
        post(c, f"{base}/actions/promote-delayed")
        assert await echomq.get_job_counts(queue_name, "delayed", connection=redis) == {
            "delayed": 0
        }

        post(c, f"{base}/jobs/{delayed[1]}/actions/remove")
        assert await echomq.get_job(queue_name, delayed[1], connection=redis) is None

        post(c, f"{base}/actions/clean", state="completed", grace="0", limit="0")
        assert await echomq.get_job_counts(queue_name, "completed", connection=redis) == {
            "completed": 0
        }

        added = post(
            c,
            f"{base}/actions/add",
            name="hello",
            data='{"to": "x"}',
            options='{"priority": 3, "attempts": 2}',
        )
        assert added.status_code == 303
        (job,) = await echomq.get_jobs(queue_name, "prioritized", connection=redis)
        assert (job.name, job.data, job.priority, job.attempts) == ("hello", {"to": "x"}, 3, 2)


async def test_a_refused_add_writes_nothing_and_says_why(
    redis: Redis, redis_url: str, queue_name: str
) -> None:
    await echomq.add(queue_name, "seed", {}, connection=redis)
    before = sorted(await redis.keys(f"bull:{queue_name}:*"))
    base = f"/queues/{queue_name}"
    with client(redis_url) as c:
        for form, reason in (
            ({"name": "x", "data": "{oops"}, "data is not valid JSON"),
            ({"name": "x", "options": '{"bogus": 1}'}, "unknown job option"),
            ({"name": "x", "options": '{"delay": -5}'}, "delay"),
            ({"name": "", "data": "{}"}, "a job needs a name"),
        ):
            answer = post(c, f"{base}/actions/add", **form)
            assert answer.status_code == 303
            shown = c.get(answer.headers["location"]).text
            assert 'class="flash error"' in shown and reason in shown, (form, shown[:400])
    assert sorted(await redis.keys(f"bull:{queue_name}:*")) == before


async def test_posts_without_the_pages_csrf_token_or_from_elsewhere_are_refused(
    redis: Redis, redis_url: str, queue_name: str
) -> None:
    await echomq.add(queue_name, "seed", {}, connection=redis)
    path = f"/queues/{queue_name}/actions/pause"
    with client(redis_url) as c:
        token = csrf_of(c.get(f"/queues/{queue_name}").text)
        assert c.post(path, data={}).status_code == 403
        assert c.post(path, data={"csrf": "x" * 43}).status_code == 403
        cross = c.post(path, data={"csrf": token}, headers={"origin": "http://evil.example"})
        assert cross.status_code == 403
        with client(redis_url) as stranger:  # a browser that never loaded our page
            assert stranger.post(path, data={"csrf": token}).status_code == 403
        assert c.get(path).status_code == 405  # actions are POST only
        assert not await echomq.is_paused(queue_name, connection=redis)
        assert c.post(path, data={"csrf": token}).status_code == 303
    assert await echomq.is_paused(queue_name, connection=redis)


async def test_read_only_hides_every_action_and_refuses_posts(
    redis: Redis, redis_url: str, queue_name: str
) -> None:
    await finish(redis, queue_name, ok=0, bad=1)
    (job,) = await echomq.get_jobs(queue_name, "failed", connection=redis)
    with client(redis_url, read_only=True) as c:
        pages = [
            c.get("/").text,
            c.get(f"/queues/{queue_name}?state=failed").text,
            c.get(f"/queues/{queue_name}/jobs/{job.id}").text,
        ]
        assert all('id="read-only"' in p for p in pages)
        assert not any('method="post"' in p for p in pages)
        token = c.cookies.get("echomq_csrf")
        assert token
        for action in ("retry-failed", "pause", "clean"):
            refused = c.post(f"/queues/{queue_name}/actions/{action}", data={"csrf": token})
            assert refused.status_code == 403 and "read-only" in refused.text
        refused = c.post(f"/queues/{queue_name}/jobs/{job.id}/actions/retry", data={"csrf": token})
        assert refused.status_code == 403
    assert await echomq.get_state(queue_name, job.id, connection=redis) == "failed"
    assert not await echomq.is_paused(queue_name, connection=redis)


async def test_no_path_reaches_a_queue_outside_the_prefix(
    redis: Redis, redis_url: str, queue_name: str, other_prefix: str
) -> None:
    outside = await echomq.add(queue_name, "x", {}, connection=redis, prefix=other_prefix)
    await echomq.add(f"{queue_name}-mine", "x", {}, connection=redis)
    with client(redis_url) as c:
        token = csrf_of(c.get(f"/queues/{queue_name}-mine").text)
        for path in (f"/queues/{queue_name}", f"/queues/{other_prefix}:{queue_name}"):
            assert c.get(path).status_code == 404
            action = c.post(f"{path}/actions/pause", data={"csrf": token})
            assert action.status_code == 404
        removal = c.post(
            f"/queues/{queue_name}/jobs/{outside.id}/actions/remove", data={"csrf": token}
        )
        assert removal.status_code == 404
    assert await echomq.get_job(queue_name, outside.id, connection=redis, prefix=other_prefix)
    assert not await echomq.is_paused(queue_name, connection=redis, prefix=other_prefix)


async def test_html_in_job_fields_is_escaped_everywhere(
    redis: Redis, redis_url: str, queue_name: str
) -> None:
    payload = "<script>alert(1)</script>"
    job = await echomq.add(
        queue_name, "<img src=x onerror=alert(2)>", {"x": payload}, connection=redis
    )
    with client(redis_url) as c:
        pages = [
            c.get(f"/queues/{queue_name}?state=waiting").text,
            c.get(f"/queues/{queue_name}/jobs/{job.id}").text,
        ]
    for text in pages:
        assert payload not in text and "<img src=x" not in text
        assert "&lt;img src=x onerror=alert(2)&gt;" in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in pages[1]


def test_basic_auth_and_token(redis_url: str) -> None:
    with client(redis_url, auth="admin:s3cret") as c:
        denied = c.get("/")
        assert denied.status_code == 401 and "Basic" in denied.headers["www-authenticate"]
        assert c.get("/metrics").status_code == 401
        assert c.get("/", auth=("admin", "wrong")).status_code == 401
        assert c.get("/", auth=("admin", "s3cret")).status_code == 200
    with client(redis_url, token="t0ken") as c:
        assert c.get("/").status_code == 401
        assert c.get("/", headers={"authorization": "Bearer t0ken"}).status_code == 200
        landing = c.get("/?token=t0ken&x=1")
        assert landing.status_code == 303 and landing.headers["location"] == "/?x=1"
        assert c.get("/").status_code == 200  # the cookie now carries it
    with pytest.raises(ValueError, match="user:password"):
        create_app(connection=redis_url, auth="nopassword")


async def test_metrics_and_health(redis: Redis, redis_url: str, queue_name: str) -> None:
    await finish(redis, queue_name, ok=2, bad=1)
    with client(redis_url) as c:
        metrics = c.get("/metrics")
        assert c.get("/healthz").text == "ok\n"
    assert metrics.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(metrics.text)
        for s in f.samples
    }
    assert samples[("bullmq_job_count", (("queue", queue_name), ("state", "completed")))] == 2
    assert samples[("bullmq_job_failed_total", (("queue", queue_name),))] == 1


def test_redis_down_is_a_503_page_not_a_crash() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with client(f"redis://127.0.0.1:{port}/0") as c:
        page = c.get("/")
        assert page.status_code == 503
        assert f"Redis at redis://127.0.0.1:{port}/0 cannot be reached" in page.text
        assert "Not found" not in page.text
        assert c.get("/healthz").status_code == 503


async def test_a_stopped_redis_makes_every_page_a_503_naming_it_password_masked(
    fresh_server: Callable[..., RedisServer], queue_name: str
) -> None:
    server = fresh_server()
    async with Redis.from_url(server.url) as admin:
        await admin.config_set("requirepass", "s3cret")
    url = f"redis://:s3cret@127.0.0.1:{server.port}/0"
    job = await echomq.add(queue_name, "x", {}, connection=url)
    with client(url) as c:
        assert c.get(f"/queues/{queue_name}").status_code == 200
        server.stop()
        pages = [
            c.get("/"),
            c.get(f"/queues/{queue_name}"),
            c.get(f"/queues/{queue_name}?state=completed"),
            c.get(f"/queues/{queue_name}/jobs/{job.id}"),
        ]
        for page in pages:
            assert page.status_code == 503, page.text
            title = re.search(r"<title>(.*?)</title>", page.text)
            assert title and title.group(1).startswith("Redis unreachable"), page.text
            message = re.search(r'id="error-message">(.*?)</p>', page.text, re.S)
            assert message, page.text
            text = html.unescape(message.group(1))
            assert text.startswith(
                f"Redis at redis://:***@127.0.0.1:{server.port}/0 cannot be reached: "
            ), text
            assert "s3cret" not in page.text and "Not found" not in page.text
        assert c.get("/healthz").status_code == 503
        assert c.get("/metrics").status_code == 503


async def test_a_queue_without_metrics_says_so_instead_of_an_empty_chart(
    redis: Redis, redis_url: str, queue_name: str
) -> None:
    bare, measured = f"{queue_name}-bare", f"{queue_name}-measured"
    await echomq.add(bare, "x", {}, connection=redis)
    async with Worker(bare, lambda job: None, connection=redis, **FAST):
        await wait_for(lambda: _count(redis, bare, "completed"), timeout=15)  # no metrics
    await finish(redis, measured, ok=3, bad=1)  # a worker with metrics_max_data_points
    with client(redis_url) as c:
        bare_page = c.get(f"/queues/{bare}").text
        measured_page = c.get(f"/queues/{measured}").text
        listing = c.get("/").text
    assert 'id="no-metrics"' in bare_page and '<svg class="chart"' not in bare_page
    assert "No per-minute metrics are recorded for this queue" in bare_page
    assert "--no-metrics" in bare_page and "metrics_max_data_points" in bare_page
    assert 'id="no-metrics"' not in measured_page and '<svg class="chart"' in measured_page
    rows = dict(re.findall(r'<tr data-queue="([^"]+)">(.*?)</tr>', listing, re.S))
    assert "no metrics recorded" in rows[bare] and "<svg" not in rows[bare]
    assert "<svg" in rows[measured] and "no metrics recorded" not in rows[measured]
    # The jobs finished this minute are drawn, though BullMQ stores no data point for them yet.
    done = re.search(r'<polyline class="done" points="([^"]+)"', measured_page)
    assert done, measured_page
    x, y = done.group(1).split()[-1].split(",")
    assert x == "120.0" and float(y) < 23.0, "the current minute (on the right) is not zero"


async def _count(redis: Redis, queue: str, state: str) -> int:
    return (await echomq.get_job_counts(queue, state, connection=redis))[state]


def test_the_chart_counts_the_jobs_finished_since_the_last_stored_minute() -> None:
    minute = 60_000
    now = 1_000 * minute + 30_000
    metrics = Metrics(MetricsMeta(17, now - 5_000, 10), [4, 2], 2)
    assert views.per_minute(metrics, now) == [7, 4, 2]
    rolled = Metrics(MetricsMeta(17, now - 2 * minute, 10), [4], 1)
    assert views.per_minute(rolled, now) == [0, 0, 7, 4]
    empty = Metrics(MetricsMeta(0, 0, 0), [], 0)
    assert views.per_minute(empty, now) == []
    assert len(views.per_minute(rolled, now + 90 * minute)) == views.CHART_MINUTES


def test_the_first_tab_is_the_first_that_holds_jobs() -> None:
    none = dict.fromkeys(views.STATES, 0)
    assert views.first_tab(none, 0) == "waiting"
    assert views.first_tab(none, 2) == "groups"
    assert views.first_tab({**none, "completed": 3, "failed": 1}, 0) == "completed"
    assert views.first_tab({**none, "delayed": 1, "failed": 1}, 1) == "delayed"


async def test_a_queue_page_opens_on_the_first_tab_that_holds_jobs(
    redis: Redis, redis_url: str, queue_name: str
) -> None:
    waiting, done = f"{queue_name}-w", f"{queue_name}-d"
    await finish(redis, done, ok=2, bad=1)
    await echomq.add_bulk(waiting, [("w", {"i": i}) for i in range(3)], connection=redis)
    with client(redis_url) as c:
        page_w = c.get(f"/queues/{waiting}").text
        page_d = c.get(f"/queues/{done}").text
        explicit = c.get(f"/queues/{done}?state=failed").text
        listing = c.get("/").text
    current = re.compile(r'<a href="[^"]*" class="current" data-state="([^"]+)"')
    assert current.findall(page_w) == ["waiting"]
    assert len(re.findall(r'<tr data-job="', page_w)) == 3 and "No failed jobs." not in page_w
    assert current.findall(page_d) == ["completed"]
    assert current.findall(explicit) == ["failed"]
    assert f'href="/queues/{waiting}"' in listing, "the queue list links to the default tab"


async def test_mounted_under_fastapi_its_links_follow_the_mount(
    redis: Redis, redis_url: str, queue_name: str
) -> None:
    job = await echomq.add(queue_name, "x", {}, connection=redis)
    dashboard = create_app(connection=redis_url)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with dashboard.router.lifespan_context(dashboard):  # closes its Redis client
            yield

    api = FastAPI(lifespan=lifespan)
    api.mount("/admin/queues", dashboard)
    with TestClient(api, follow_redirects=False) as c:
        listing = c.get("/admin/queues/")
        assert listing.status_code == 200
        assert f'href="/admin/queues/queues/{queue_name}?state=waiting"' in listing.text
        assert 'href="/admin/queues/static/dashboard.css"' in listing.text
        assert c.get("/admin/queues/static/dashboard.css").status_code == 200
        page = c.get(f"/admin/queues/queues/{queue_name}?state=waiting")
        assert f'href="/admin/queues/queues/{queue_name}/jobs/{job.id}"' in page.text
        token = csrf_of(page.text)
        done = c.post(f"/admin/queues/queues/{queue_name}/actions/pause", data={"csrf": token})
        assert done.headers["location"] == f"/admin/queues/queues/{queue_name}"
    assert await echomq.is_paused(queue_name, connection=redis)


# -- the `echomq dashboard` process -----------------------------------------------------


def start_cli(*args: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "echomq.cli", "dashboard", "--port", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    found = re.search(r"serving (http://\S+/)", line)
    assert found, (line, proc.stderr.read() if proc.poll() is not None else "")
    return proc, found.group(1)


def fetch(url: str, **headers: str) -> tuple[int, str]:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(urllib.request.Request(url, headers=headers), timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.timeout(60)
async def test_cli_serves_and_stops_cleanly_on_sigterm(
    redis: Redis, redis_url: str, queue_name: str
) -> None:
    await echomq.add(queue_name, "x", {}, connection=redis)
    proc, url = start_cli("--url", redis_url, "--auth", "ops:pw")
    try:
        assert url.startswith("http://127.0.0.1:")
        assert fetch(url)[0] == 401
        auth = "Basic " + base64.b64encode(b"ops:pw").decode()
        status, text = fetch(url, authorization=auth)
        assert status == 200 and f'data-queue="{queue_name}"' in text
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "stopped" in err


def refused_cli(*args: str) -> subprocess.CompletedProcess[str]:
    """Run ``echomq dashboard`` with arguments it should refuse (it never serves)."""
    command = [sys.executable, "-m", "echomq.cli", "dashboard", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=30)


def test_cli_refuses_a_taken_port_and_bad_auth(redis_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        busy = refused_cli("--url", redis_url, "--port", port)
    assert busy.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in busy.stderr
    bad_queue = refused_cli("--url", redis_url, "--queue", "a:b")
    assert bad_queue.returncode == 2 and "queue names without ':'" in bad_queue.stderr
    bad = refused_cli("--url", redis_url, "--auth", "x")
    assert bad.returncode == 2 and "user:password" in bad.stderr


async def test_find_a_job_by_id(redis: Redis, redis_url: str, queue_name: str) -> None:
    job = await echomq.add(queue_name, "x", {}, connection=redis, job_id="order-42")
    with client(redis_url) as c:
        found = c.get(f"/queues/{queue_name}/find?id={job.id}")
        assert found.status_code == 303
        assert found.headers["location"] == f"/queues/{queue_name}/jobs/order-42"
        assert c.get(f"/queues/{queue_name}/find?id=nope").status_code == 404


async def test_the_queue_list_is_rescanned_in_the_background_or_on_demand(
    redis: Redis, redis_url: str, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    await echomq.add(queue_name, "x", {}, connection=redis)
    new = f'data-queue="{queue_name}-new"'
    with client(redis_url) as c:
        assert f'data-queue="{queue_name}"' in c.get("/").text
        await echomq.add(f"{queue_name}-new", "x", {}, connection=redis)
        assert new not in c.get("/").text  # the last scan, still fresh
        assert new in c.get("/?refresh").text  # waits for a new scan
        # A queue's own page never waits for a scan.
        assert c.get(f"/queues/{queue_name}-new?state=waiting").status_code == 200
        await echomq.add(f"{queue_name}-newer", "x", {}, connection=redis)
        monkeypatch.setattr("echomq.dashboard._app.DISCOVERY_TTL", 0.0)
        assert f'data-queue="{queue_name}-newer"' not in c.get("/").text  # stale, rescanning

        def listed() -> bool:
            return f'data-queue="{queue_name}-newer"' in c.get("/").text

        await wait_for(listed, timeout=5, interval=0.1)


async def test_a_fixed_list_of_queues_is_all_it_shows_and_touches(
    redis: Redis, redis_url: str, queue_name: str
) -> None:
    other = await echomq.add(f"{queue_name}-other", "x", {}, connection=redis)
    empty = f"{queue_name}-empty"  # no key yet: a queue is a coordinate
    with client(redis_url, queues=[empty, queue_name]) as c:
        listing = c.get("/").text
        assert f'data-queue="{empty}"' in listing and f'data-queue="{queue_name}"' in listing
        assert f"{queue_name}-other" not in listing
        assert c.get(f"/queues/{empty}?state=waiting").status_code == 200
        assert c.get(f"/queues/{queue_name}-other/jobs/{other.id}").status_code == 404
        added = post(c, f"/queues/{empty}/actions/add", name="first", data="{}")
        assert added.status_code == 303
    assert await echomq.get_job_counts(empty, "waiting", connection=redis) == {"waiting": 1}
    for bad in (["a:b"], [""], "single"):
        with pytest.raises(ValueError, match="queue names"):
            create_app(connection=redis_url, queues=bad)


async def test_a_huge_payload_is_cut_on_the_page(
    redis: Redis, redis_url: str, queue_name: str
) -> None:
    job = await echomq.add(queue_name, "big", {"blob": "x" * 300_000}, connection=redis)
    with client(redis_url) as c:
        page = c.get(f"/queues/{queue_name}/jobs/{job.id}")
    assert page.status_code == 200 and len(page.text) < 150_000
    assert "more characters not shown" in page.text


async def test_job_ids_with_url_characters_link_to_their_page(
    redis: Redis, redis_url: str, queue_name: str
) -> None:
    job = await echomq.add(queue_name, "x", {}, connection=redis, job_id="a b#c?d%e")
    with client(redis_url) as c:
        listing = c.get(f"/queues/{queue_name}?state=waiting").text
        href = f"/queues/{queue_name}/jobs/a%20b%23c%3Fd%25e"
        assert f'href="{href}"' in listing
        page = c.get(href)
        assert page.status_code == 200 and 'id="job-id">a b#c?d%e<' in page.text
        removed = post(c, f"{href}/actions/remove")
        assert removed.status_code == 303
    assert await echomq.get_job(queue_name, job.id, connection=redis) is None


async def test_a_queue_that_cannot_be_read_gets_a_row_not_a_broken_page(
    redis: Redis, redis_url: str, queue_name: str
) -> None:
    await echomq.add(queue_name, "x", {}, connection=redis)
    broken = f"{queue_name}-broken"
    await echomq.add(broken, "x", {}, connection=redis)
    await redis.delete(f"bull:{broken}:wait")
    await redis.set(f"bull:{broken}:wait", "not a list")  # LLEN answers WRONGTYPE
    with client(redis_url) as c:
        page = c.get("/?refresh")
    assert page.status_code == 200
    good = re.search(rf'<tr data-queue="{queue_name}">(.*?)</tr>', page.text, re.S)
    bad = re.search(rf'<tr data-queue="{broken}">(.*?)</tr>', page.text, re.S)
    assert good and 'class="count waiting">1<' in good.group(1)
    assert bad and "cannot be read" in bad.group(1) and "WRONGTYPE" in bad.group(1)


# -- groups (docs/groups.md): the groups tab, a group's page, pausing a group -----------------


async def add_groups(redis: Redis, queue: str, sizes: dict[str, int], prefix: str = "bull") -> None:
    async with Queue(queue, connection=redis, prefix=prefix) as q:
        for group, n in sizes.items():
            await q.add_bulk([("job", {"n": i}, {"group": group}) for i in range(n)])


def group_rows(page: str) -> list[tuple[str, str, str, str]]:
    """(id as shown, waiting, active, state text) of each row of the groups table."""
    table = page[page.index('id="groups"') : page.index("</table>", page.index('id="groups"'))]
    rows = re.findall(
        r'<tr data-group="[^"]*">\s*<td><a [^>]*>(.*?)</a></td>\s*<td class="num">(\d+)</td>'
        r'\s*<td class="num">(\d+)</td>\s*<td class="group-state">(.*?)</td>',
        table,
        re.S,
    )
    return [(g, w, a, " ".join(re.sub(r"<[^>]+>", " ", st).split())) for g, w, a, st in rows]


def tab_count(page: str, tab: str) -> int:
    found = re.search(rf'data-state="{tab}"[^>]*>{tab} <span class="count">(\d+)<', page)
    assert found, f"no {tab} tab"
    return int(found.group(1))


async def test_groups_tab_pages_through_groups_most_waiting_first(
    redis: Redis, redis_url: str, queue_name: str
) -> None:
    sizes = {f"t{n:02d}": n for n in range(1, 31)}  # t30 has 30 waiting jobs, t01 one
    await add_groups(redis, queue_name, sizes)
    async with Queue(queue_name, connection=redis) as q:
        expected = [g.id for g in await q.get_groups()]
    assert expected == [f"t{n:02d}" for n in range(30, 0, -1)]
    with client(redis_url) as c:
        first = c.get(f"/queues/{queue_name}?state=groups").text
        second = c.get(f"/queues/{queue_name}?state=groups&page=2").text
        beyond = c.get(f"/queues/{queue_name}?state=groups&page=99").text
    rows = [group_rows(p) for p in (first, second, beyond)]
    assert [r[0] for r in rows[0]] == expected[:25]
    assert [r[0] for r in rows[1]] == expected[25:]
    assert rows[2] == rows[1], "a page past the end shows the last page"
    assert rows[0][0] == ("t30", "30", "0", "—")
    assert "page 1 of 2" in first and "page 2 of 2" in second
    assert f'href="/queues/{queue_name}?state=groups&page=2" rel="next">next →' in first
    assert tab_count(first, "groups") == 30
    assert tab_count(first, "waiting") == sum(sizes.values())  # grouped jobs are waiting jobs


async def test_groups_tab_shows_paused_and_limited_groups(
    redis: Redis, redis_url: str, queue_name: str
) -> None:
    await add_groups(redis, queue_name, {"busy": 4, "held": 2, "free": 1})
    async with Queue(queue_name, connection=redis) as q:
        await q.set_group_concurrency(1, group="busy")
        await q.set_group_concurrency(3)
        await q.set_group_rate_limit(10, 2)
        await q.pause_group("held")
        taker = Worker(queue_name, None, connection=redis)
        job = await taker.get_next_job("tok", block=False)  # busy's turn comes first
        await taker.close()
        assert job is not None and job.group == "busy"
    with client(redis_url) as c:
        page = c.get(f"/queues/{queue_name}?state=groups").text
        busy_page = c.get(f"/queues/{queue_name}?state=groups&group=busy").text
    found = re.search(r'<p class="facts" id="group-limits">(.*?)</p>', page, re.S)
    assert found, "no group limits on the groups tab"
    assert " ".join(re.sub(r"<[^>]+>", "", found.group(1)).split()) == (
        "Default group limits: concurrency 3 job(s) at once · rate 10 start(s) per 2.0 s"
    )
    own = busy_page[busy_page.index('id="group-limits"') :].split("</p>")[0]
    assert "<b>1</b> job(s) at once (its own)" in own and "per 2.0 s (the default)" in own
    assert 'id="group-active">1<' in busy_page
    assert group_rows(page) == [
        ("busy", "3", "1", "limited"),
        ("held", "2", "0", "paused"),
        ("free", "1", "0", "—"),
    ]
    assert 'title="at its concurrency, or its rate window is full"' in page
    # Each row offers the action its state calls for.
    held = page[page.index('data-group="held"') :].split("</tr>")[0]
    assert "Resume group" in held and "Pause group" not in held
    free = page[page.index('data-group="free"') :].split("</tr>")[0]
    assert "Pause group" in free and 'name="group" value="free"' in free


async def test_the_groups_tab_is_always_there(
    redis: Redis, redis_url: str, queue_name: str
) -> None:
    await echomq.add(queue_name, "x", {}, connection=redis)
    with client(redis_url) as c:
        waiting = c.get(f"/queues/{queue_name}?state=waiting").text
        groups = c.get(f"/queues/{queue_name}?state=groups").text
    assert tab_count(waiting, "groups") == 0
    assert 'id="no-groups">No groups with waiting or active jobs.<' in groups
    assert 'class="current" data-state="groups"' in groups


async def test_a_groups_page_lists_its_waiting_jobs_in_the_order_they_run(
    redis: Redis, redis_url: str, queue_name: str
) -> None:
    odd = 'a b&c/d?e#f%g "<i>"'  # a group id is any string: it travels in the query
    async with Queue(queue_name, connection=redis) as q:
        await q.add_bulk([("job", {"n": i}, {"group": odd}) for i in range(27)])
        await q.add("urgent", {}, group=odd, lifo=True)  # runs first within its group
        await q.add("other", {}, group="elsewhere")
        expected = [j.id for j in await q.get_group_jobs(odd)]
    assert len(expected) == 28
    with client(redis_url) as c:
        listing = c.get(f"/queues/{queue_name}?state=groups").text
        href = f"/queues/{queue_name}?state=groups&group=" + quote(odd, safe="/")
        assert f'href="{href}"' in listing  # the row's link to the group's page
        assert "a b&amp;c/d?e#f%g &#34;&lt;i&gt;&#34;" in listing  # the id, as text
        first = c.get(href)
        more = re.search(r'<a href="([^"]+)" rel="next">', first.text)
        assert more, "no link to the next page"
        second = c.get(html.unescape(more.group(1)))
        unknown = c.get(f"/queues/{queue_name}?state=groups&group=nobody")
        too_long = c.get(f"/queues/{queue_name}?state=groups&group={'x' * 257}")
    assert first.status_code == 200
    ids = [re.findall(r'<tr data-job="([^"]+)">', p.text) for p in (first, second)]
    assert ids[0] == expected[:25] and ids[1] == expected[25:]
    assert ids[0][0] == expected[0] == "28"  # the lifo job, added last
    assert 'id="group-id">a b&amp;c/d?e#f%g &#34;&lt;i&gt;&#34;<' in first.text
    assert 'id="group-waiting">28<' in first.text and 'id="group-active">0<' in first.text
    assert "page 1 of 2" in first.text and "page 2 of 2" in second.text
    assert "<i>" not in first.text
    assert unknown.status_code == 200
    assert 'id="no-jobs">No waiting jobs in this group.<' in unknown.text
    assert too_long.status_code == 404 and "at most 256 characters" in too_long.text
    with client(redis_url) as c:  # a grouped job's page links to its group's
        job_page = c.get(f"/queues/{queue_name}/jobs/{expected[0]}").text
    assert f'<a href="{href}" id="job-group">a b&amp;c/d?e#f%g &#34;&lt;i&gt;&#34;</a>' in job_page


async def test_pause_and_resume_a_group_from_the_page(
    redis: Redis, redis_url: str, queue_name: str
) -> None:
    await add_groups(redis, queue_name, {"acme": 2, "other": 1})
    base = f"/queues/{queue_name}"
    here = f"{base}?state=groups&group=acme&page=1"

    async def paused() -> dict[str, bool]:
        async with Queue(queue_name, connection=redis) as q:
            return {g.id: g.paused for g in await q.get_groups()}

    with client(redis_url) as c:
        token = csrf_of(c.get(here).text)
        answer = c.post(
            f"{base}/actions/pause-group", data={"csrf": token, "group": "acme", "next": here}
        )
        assert answer.status_code == 303 and answer.headers["location"] == here
        assert await paused() == {"acme": True, "other": False}
        shown = c.get(here).text
        assert f"group acme of {queue_name} paused" in shown  # the flash message
        assert 'id="group-paused">paused<' in shown and "Resume group" in shown
        assert not await echomq.is_paused(queue_name, connection=redis)  # the queue runs on

        c.post(f"{base}/actions/resume-group", data={"csrf": token, "group": "acme", "next": here})
        assert await paused() == {"acme": False, "other": False}
        assert f"group acme of {queue_name} resumed" in c.get(here).text

        for form, reason in (({}, "give a group id"), ({"group": "x" * 300}, "at most 256")):
            refused = c.post(f"{base}/actions/pause-group", data={"csrf": token, **form})
            assert refused.status_code == 303
            text = c.get(refused.headers["location"]).text
            assert 'class="flash error"' in text and reason in text
        assert c.post(f"{base}/actions/pause-group", data={"group": "acme"}).status_code == 403
    assert await paused() == {"acme": False, "other": False}


async def test_read_only_hides_the_group_actions_and_refuses_them(
    redis: Redis, redis_url: str, queue_name: str
) -> None:
    await add_groups(redis, queue_name, {"acme": 2})
    with client(redis_url, read_only=True) as c:
        pages = [
            c.get(f"/queues/{queue_name}?state=groups").text,
            c.get(f"/queues/{queue_name}?state=groups&group=acme").text,
        ]
        assert 'data-group="acme"' in pages[0] and 'id="group-id">acme<' in pages[1]
        assert not any('method="post"' in p or "Pause group" in p for p in pages)
        token = c.cookies.get("echomq_csrf")
        for action in ("pause-group", "resume-group"):
            refused = c.post(
                f"/queues/{queue_name}/actions/{action}", data={"csrf": token, "group": "acme"}
            )
            assert refused.status_code == 403 and "read-only" in refused.text
    async with Queue(queue_name, connection=redis) as q:
        assert [g.paused for g in await q.get_groups()] == [False]


async def test_metrics_has_the_group_series_of_the_busiest_groups(
    redis: Redis, redis_url: str, queue_name: str, other_prefix: str
) -> None:
    # A prefix of its own: /metrics reads every queue under the prefix.
    await add_groups(redis, queue_name, {"big": 3, "mid": 2, "small": 1}, other_prefix)

    def groups_in(text: str) -> dict[str, float]:
        return {
            s.labels["group"]: s.value
            for f in text_string_to_metric_families(text)
            for s in f.samples
            if s.name == "echomq_group_jobs"
            and s.labels["queue"] == queue_name
            and s.labels["state"] == "waiting"
        }

    with client(redis_url, prefix=other_prefix) as c:
        default = c.get("/metrics").text
    with client(redis_url, prefix=other_prefix, metrics_groups=2) as c:
        two = c.get("/metrics").text
    with client(redis_url, prefix=other_prefix, metrics_groups=0) as c:
        none = c.get("/metrics").text
    assert groups_in(default) == {"big": 3, "mid": 2, "small": 1}
    assert groups_in(two) == {"big": 3, "mid": 2}
    assert f'echomq_groups{{queue="{queue_name}"}} 3' in two
    assert "echomq_" not in none and f'bullmq_job_count{{queue="{queue_name}"' in none
    for bad in (-1, True, "2"):
        with pytest.raises(ValueError, match="group_limit"):
            create_app(connection=redis_url, metrics_groups=bad)  # type: ignore[arg-type]


async def test_workers_page_lists_each_worker_and_the_jobs_it_runs(
    redis: Redis, redis_url: str, queue_name: str
) -> None:
    started, release = asyncio.Event(), asyncio.Event()

    async def hold(job: Job) -> None:
        started.set()
        await release.wait()

    options = {**FAST, "heartbeat_interval": 0.2}
    job = await echomq.add(queue_name, "held", {}, connection=redis)
    with client(redis_url) as c:
        empty = await asyncio.to_thread(c.get, f"/queues/{queue_name}/workers")
        assert empty.status_code == 200 and 'id="no-workers"' in empty.text
        async with Worker(queue_name, hold, connection=redis, name="dash-w", **options) as w:
            await asyncio.wait_for(started.wait(), 10)

            async def page_with_job() -> str:
                page = await asyncio.to_thread(c.get, f"/queues/{queue_name}/workers")
                assert page.status_code == 200
                return page.text if f'data-job="{job.id}"' in page.text else ""

            text = await wait_for(page_with_job, timeout=10)
            row = re.search(rf'<tr data-worker="{w.id}" data-kind="echomq">(.*?)</tr>', text, re.S)
            assert row, text
            assert "dash-w" in row.group(1) and socket.gethostname() in row.group(1)
            assert f'href="/queues/{queue_name}/jobs/{job.id}"' in row.group(1)
            queue_page = await asyncio.to_thread(c.get, f"/queues/{queue_name}")
            assert "1 worker(s) online" in queue_page.text
            assert f'href="/queues/{queue_name}/workers"' in queue_page.text
            release.set()
        after = await asyncio.to_thread(c.get, f"/queues/{queue_name}/workers")
        assert 'id="no-workers"' in after.text
        assert c.get("/queues/no-such-queue/workers").status_code == 404
