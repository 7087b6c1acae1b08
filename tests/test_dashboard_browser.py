"""The dashboard as a person uses it: a real browser (headless Chromium through Playwright)
against the real ``echomq dashboard`` command, on the suite's own Redis.

Each dashboard is a ``python -m echomq.cli dashboard --port 0`` subprocess: the test reads the
address from the line it prints once bound, and stops it with SIGTERM, which must end it with
exit code 0. One plain dashboard serves the whole module; read-only, basic-auth and token
dashboards are started by the tests that need them.

The first test also takes the screenshots the docs show, and the groups test the one of the
groups tab. They go to the test's temporary directory, or, with
``ECHOMQ_UPDATE_SCREENSHOTS=1``, over ``docs/images/dashboard-queue.png``,
``docs/images/dashboard-job.png`` and ``docs/images/dashboard-groups.png`` (so a plain test
run leaves the checkout as it was).

Without Playwright or a Chromium the module is skipped, unless ``ECHOMQ_REQUIRE_BROWSER=1``
(CI sets it), in which case its absence is an error.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import linecache
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
import pytest_asyncio
from redis.asyncio import Redis

from echomq import Job, Queue, Worker

try:
    from playwright.async_api import Browser, BrowserContext, Page, async_playwright, expect
    from playwright.async_api import Error as PlaywrightError
except ImportError:
    HAVE_PLAYWRIGHT = False
else:
    HAVE_PLAYWRIGHT = True

REPO = Path(__file__).resolve().parent.parent
DOC_IMAGES = REPO / "docs" / "images"
CHROMIUM = "/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None
CHROMIUM = CHROMIUM or shutil.which("chromium")


def _missing() -> str | None:
    if not HAVE_PLAYWRIGHT:
        return "the playwright package is not installed (pip install playwright)"
    if CHROMIUM is None:
        return "no /usr/bin/chromium and no `chromium` on PATH (apt-get install chromium)"
    return None


if (_why := _missing()) is not None:
    if os.environ.get("ECHOMQ_REQUIRE_BROWSER") == "1":
        pytest.fail(f"ECHOMQ_REQUIRE_BROWSER=1 but {_why}", pytrace=False)
    pytest.skip(f"browser tests skipped: {_why}", allow_module_level=True)

START_TIMEOUT = 20.0
STOP_TIMEOUT = 15.0
ACTION_BUTTONS = re.compile(r"^(Pause|Resume|Retry|Promote|Remove|Clean|Add)\b")
SERVING = re.compile(r"serving (http://127\.0\.0\.1:\d+)/ \(prefix 'bull'( read-only)?\)$")


@dataclass
class Served:
    """One ``echomq dashboard`` subprocess."""

    proc: subprocess.Popen[str]
    url: str  # http://127.0.0.1:PORT, no trailing slash
    log: Path
    line: str

    def stop(self) -> int:
        """SIGTERM, then its exit code (killed, and reported, if it does not stop in time)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=STOP_TIMEOUT)
            code = -999
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return code


async def start_dashboard(redis_url: str, log: Path, *flags: str) -> Served:
    """Run ``echomq dashboard --port 0 FLAGS`` and wait for its ``serving ...`` line."""
    args = [sys.executable, "-m", "echomq.cli", "dashboard", "--url", redis_url, "--port", "0"]
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ECHOMQ_REDIS_URL", "ECHOMQ_DASHBOARD_AUTH", "ECHOMQ_DASHBOARD_TOKEN")
    }
    with open(log, "w") as err:
        proc = subprocess.Popen(
            [*args, *flags], stdout=subprocess.PIPE, stderr=err, text=True, env=env
        )
    assert proc.stdout is not None
    try:
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), START_TIMEOUT)
    except asyncio.TimeoutError:
        proc.kill()  # ends the readline still waiting in its thread
        proc.wait()
        proc.stdout.close()
        pytest.fail(f"the dashboard printed nothing in {START_TIMEOUT}s: {log.read_text()}")
    match = SERVING.match(line.strip())
    if match is None:
        proc.kill()
        proc.wait()
        proc.stdout.close()
        pytest.fail(f"unexpected first line {line!r}; stderr: {log.read_text()}")
    return Served(proc, match.group(1), log, line.strip())


def stopped_cleanly(served: Served) -> None:
    code = served.stop()
    assert code == 0, f"dashboard exited {code} on SIGTERM; stderr:\n{served.log.read_text()}"


@pytest_asyncio.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    """One headless Chromium for the module."""
    args = ["--no-sandbox"] if os.geteuid() == 0 else []
    async with async_playwright() as pw:
        launched = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=args)
        try:
            yield launched
        finally:
            await launched.close()


@pytest_asyncio.fixture(scope="module")
async def dashboard(redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[str]:
    """The module's plain (writable, no auth) dashboard; yields its base URL."""
    log = tmp_path_factory.mktemp("dashboard") / "plain.log"
    served = await start_dashboard(redis_url, log)
    try:
        yield served.url
    finally:
        stopped_cleanly(served)


@pytest.fixture
def another_dashboard(redis_url: str, tmp_path: Path) -> Iterator[Callable[..., Awaitable[Served]]]:
    """Factory of dashboards with flags; each must stop with exit code 0 after the test."""
    made: list[Served] = []
    numbers = itertools.count()

    async def start(*flags: str) -> Served:
        log = tmp_path / f"dashboard-{next(numbers)}.log"
        served = await start_dashboard(redis_url, log, *flags)
        made.append(served)
        return served

    yield start
    for served in made:
        stopped_cleanly(served)


@dataclass
class Browsing:
    """Contexts made for one test, all closed after it."""

    browser: Browser
    contexts: list[BrowserContext] = field(default_factory=list)

    async def page(self, **options: Any) -> Page:
        context = await self.browser.new_context(viewport={"width": 1280, "height": 800}, **options)
        self.contexts.append(context)
        return await context.new_page()


@pytest_asyncio.fixture
async def browsing(browser: Browser) -> AsyncIterator[Browsing]:
    made = Browsing(browser)
    try:
        yield made
    finally:
        for context in made.contexts:
            await context.close()


def worker(
    queue: str, process: Callable[[Job], Awaitable[Any]], redis: Redis, **options: Any
) -> Worker:
    """A worker that notices new jobs quickly."""
    return Worker(
        queue, process, connection=redis, drain_delay=0.2, stalled_interval=5.0, **options
    )


def collect_dialogs(page: Page) -> list[str]:
    """Record (and dismiss) every alert/confirm/prompt the page opens."""
    seen: list[str] = []

    async def on_dialog(dialog: Any) -> None:
        seen.append(dialog.message)
        await dialog.dismiss()

    page.on("dialog", on_dialog)
    return seen


async def state_after_reloads(page: Page, want: str, timeout: float = 10.0) -> str:
    """Reload the job page until ``#job-state`` reads ``want`` (or the time is up)."""
    deadline = time.monotonic() + timeout
    while True:
        shown = (await page.locator("#job-state").inner_text()).strip()
        if shown == want or time.monotonic() > deadline:
            return shown
        await asyncio.sleep(0.2)
        await page.reload()


async def status_of(page: Page, url: str) -> int:
    """The HTTP status of navigating to ``url``, also when the browser gives up on the page
    (a basic-auth 401 it has no credentials for ends the navigation with an error)."""
    async with page.expect_response(
        lambda r: r.url == url and r.request.is_navigation_request()
    ) as answered:
        try:
            await page.goto(url)
        except PlaywrightError as exc:
            assert "ERR_INVALID_AUTH_CREDENTIALS" in str(exc), exc
    return (await answered.value).status


async def csrf_cookie(page: Page) -> str:
    cookies = {c["name"]: c["value"] for c in await page.context.cookies()}
    assert len(cookies.get("echomq_csrf", "")) >= 32, cookies
    return cookies["echomq_csrf"]


# -- 1 (and 6): the failed job, retried from its page, completed by a worker; screenshots --

#: The processor of the screenshots, as a user's module at a neutral path (``/app/shop.py``):
#: the stored tracebacks the pages show name it, not the checkout the screenshots were taken in.
SHOP_PATH = "/app/shop.py"
SHOP_SOURCE = """\
seen = set()


async def process(job):
    if job.name == "charge-card":
        if job.id not in seen:  # declined once, accepted when retried
            seen.add(job.id)
            await job.log("charging card ending 4242")
            await job.update_progress(40)
            raise RuntimeError(f"card declined (order {job.data['order']})")
        return {"charged": job.data["amount"], "currency": "EUR", "receipt": "R-2207"}
    if job.name == "sync-inventory":
        await job.update_progress(70)
        raise ConnectionError("warehouse API timed out after 30 s")
    await job.update_progress(100)
    return {"sent": True, "order": job.data["order"]}
"""


def _shop_processor() -> Callable[[Job], Awaitable[Any]]:
    """``process`` of SHOP_SOURCE, compiled as /app/shop.py (its lines given to linecache so
    tracebacks show them)."""
    lines = SHOP_SOURCE.splitlines(keepends=True)
    linecache.cache[SHOP_PATH] = (len(SHOP_SOURCE), None, lines, SHOP_PATH)
    namespace: dict[str, Any] = {}
    exec(compile(SHOP_SOURCE, SHOP_PATH, "exec"), namespace)
    process: Callable[[Job], Awaitable[Any]] = namespace["process"]
    return process


async def test_retry_a_failed_job_from_its_page(
    redis: Redis, queue_name: str, dashboard: str, browsing: Browsing, tmp_path: Path
) -> None:
    update = os.environ.get("ECHOMQ_UPDATE_SCREENSHOTS") == "1"
    images = DOC_IMAGES if update else tmp_path
    name = f"orders-{queue_name[-4:]}"  # unique, and reads well in the screenshots
    process = _shop_processor()

    async with Queue(name, connection=redis) as queue:
        for i in range(8):
            await queue.add("send-receipt", {"order": 1000 + i, "to": f"customer{i}@example.com"})
        charge = await queue.add("charge-card", {"order": 1042, "amount": 59.9}, attempts=1)
        await queue.add("sync-inventory", {"sku": "KB-104", "warehouse": "north"}, attempts=1)
        async with worker(name, process, redis, metrics_max_data_points=60):  # the chart's
            deadline = time.monotonic() + 10
            while True:
                counts = await queue.get_job_counts("completed", "failed")
                if counts == {"completed": 8, "failed": 2} or time.monotonic() > deadline:
                    break
                await asyncio.sleep(0.05)
        assert counts == {"completed": 8, "failed": 2}
        # No worker from here: these stay waiting, prioritized and delayed.
        for i in range(3):
            await queue.add("send-receipt", {"order": 1100 + i, "to": f"late{i}@example.com"})
        await queue.add("refund", {"order": 977, "amount": 12.5}, priority=5)
        for hours in (1, 6):
            await queue.add("nightly-report", {"day": "tomorrow"}, delay=hours * 3600)

        page = await browsing.page()
        dialogs = collect_dialogs(page)
        await page.goto(dashboard + "/?refresh=1")  # not the list cached 10 s
        row = page.locator(f'tr[data-queue="{name}"]')
        expected = {"waiting": 3, "prioritized": 1, "delayed": 2, "active": 0}
        expected |= {"waiting-children": 0, "completed": 8, "failed": 2}
        for state, count in expected.items():
            await expect(row.locator(f"a.count.{state}")).to_have_text(str(count))

        await row.get_by_role("link", name=name).click()
        await expect(page.locator("#queue-name")).to_have_text(name)
        # It opens on the first tab holding jobs: the 3 waiting ones.
        await expect(page.locator("#tabs a.current")).to_have_attribute("data-state", "waiting")
        await expect(page.locator("#jobs tbody tr")).to_have_count(3)
        await expect(page.locator("svg.chart")).to_be_visible()
        await page.locator('#tabs a[data-state="failed"]').click()
        await expect(page).to_have_url(re.compile(r"\?state=failed$"))
        failed_row = page.locator(f'#jobs tr[data-job="{charge.id}"]')
        await expect(failed_row.locator("td.reason")).to_contain_text("card declined")
        await expect(page.locator("#jobs tbody tr")).to_have_count(2)
        images.mkdir(parents=True, exist_ok=True)
        await page.screenshot(path=str(images / "dashboard-queue.png"), full_page=True)

        await failed_row.get_by_role("link", name=str(charge.id)).click()
        await expect(page.locator("#job-id")).to_have_text(str(charge.id))
        await expect(page.locator("#job-state")).to_have_text("failed")
        await expect(page.locator("#failed-reason")).to_have_text("card declined (order 1042)")
        trace = page.locator("pre.trace").first
        await expect(trace).to_contain_text("Traceback")
        await expect(trace).to_contain_text("in process")
        await expect(trace).to_contain_text(f'File "{SHOP_PATH}"')
        await expect(trace).not_to_contain_text(str(REPO))  # the checkout is not shown
        await expect(trace).to_contain_text("RuntimeError: card declined")
        await expect(page.locator("#logs")).to_have_text("charging card ending 4242")
        await page.screenshot(path=str(images / "dashboard-job.png"), full_page=True)
        assert (images / "dashboard-job.png").stat().st_size > 10_000

        await page.get_by_role("button", name="Retry").click()
        await expect(page.locator("p.flash.ok")).to_have_text(f"job {charge.id} sent back to wait")
        await expect(page.locator("#job-state")).to_have_text("waiting")

        async with worker(name, process, redis):
            shown = await state_after_reloads(page, "completed")
        assert shown == "completed"
        returned = json.loads(await page.locator("#return-value").inner_text())
        assert returned == {"charged": 59.9, "currency": "EUR", "receipt": "R-2207"}
        assert await queue.get_job_counts("failed") == {"failed": 1}
        assert dialogs == []  # Retry asks nothing


# -- 2: read-only --


async def test_read_only_shows_no_actions_and_refuses_posts(
    redis: Redis,
    queue_name: str,
    dashboard: str,
    another_dashboard: Callable[..., Awaitable[Served]],
    browsing: Browsing,
) -> None:
    async with Queue(queue_name, connection=redis) as queue:
        job = await queue.add("resize", {"image": "cat.png"})
        ro = await another_dashboard("--read-only")
        assert ro.line.endswith("(prefix 'bull' read-only)")
        queue_path = f"/queues/{queue_name}?state=waiting"
        job_path = f"/queues/{queue_name}/jobs/{job.id}"

        page = await browsing.page()
        for base, read_only in ((dashboard, False), (ro.url, True)):
            for path in (queue_path, job_path):
                response = await page.goto(base + path)
                assert response is not None and response.status == 200
                await expect(page.locator("h1")).to_be_visible()
                posts = await page.locator("form[method=post]").count()
                to_actions = await page.locator('form[action*="/actions/"]').count()
                buttons = await page.get_by_role("button", name=ACTION_BUTTONS).count()
                badges = await page.locator("#read-only").count()
                if read_only:
                    assert (posts, to_actions, buttons, badges) == (0, 0, 0, 1), path
                    await expect(page.locator("#read-only")).to_be_visible()
                else:  # the same pages, writable, do have the actions
                    assert posts > 0 and to_actions > 0 and buttons > 0, path
                    assert badges == 0, path

        # A well-formed POST (the browser's CSRF cookie, the same value in the form): refused
        # by the read-only dashboard, accepted by the writable one.
        csrf = await csrf_cookie(page)
        form: dict[str, str | float | bool] = {"csrf": csrf, "next": "/"}
        refused = await page.request.post(
            f"{ro.url}/queues/{queue_name}/actions/pause", form=form, max_redirects=0
        )
        assert refused.status == 403
        assert await refused.text() == "the dashboard is read-only"
        assert not await queue.is_paused()
        for action in ("remove", "retry"):
            refused = await page.request.post(
                f"{ro.url}/queues/{queue_name}/jobs/{job.id}/actions/{action}",
                form=form,
                max_redirects=0,
            )
            assert refused.status == 403
        assert await queue.get_job_state(job.id) == "waiting"

        accepted = await page.request.post(
            f"{dashboard}/queues/{queue_name}/actions/pause", form=form, max_redirects=0
        )
        assert accepted.status == 303
        assert await queue.is_paused()
        await queue.resume()


# -- 3: XSS --


async def test_markup_in_jobs_is_shown_as_text(
    redis: Redis, queue_name: str, dashboard: str, browsing: Browsing
) -> None:
    script = "<script>alert(1)</script>"
    img = "<img src=x onerror=alert(2)>"

    async def process(job: Job) -> None:
        raise ValueError(f"rejected {img}")

    async with Queue(queue_name, connection=redis) as queue:
        job = await queue.add(img, {"comment": script, "html": img}, attempts=1)
        await queue.add("plain-name", {"comment": script})
        async with worker(queue_name, process, redis):
            deadline = time.monotonic() + 10
            while await queue.get_job_state(job.id) != "failed" and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        assert await queue.get_job_state(job.id) == "failed"

    page = await browsing.page()
    dialogs = collect_dialogs(page)
    for path in (
        "/",
        f"/queues/{queue_name}?state=failed",
        f"/queues/{queue_name}/jobs/{job.id}",
    ):
        response = await page.goto(dashboard + path)
        assert response is not None and response.status == 200, path
        await page.wait_for_load_state("load")
        assert await page.locator("img").count() == 0, path
        assert await page.locator("main script").count() == 0, path
        if "state=failed" in path:
            row = page.locator(f'#jobs tr[data-job="{job.id}"]')
            await expect(row.locator("td").nth(1)).to_have_text(img)
            await expect(row.locator("td.reason")).to_have_text(f"rejected {img}")
    # On the job page now.
    data = json.loads(await page.locator("#job-data").inner_text())
    assert data == {"comment": script, "html": img}
    await expect(page.locator("#job-data")).to_contain_text(script)
    await expect(page.locator("#failed-reason")).to_have_text(f"rejected {img}")
    await expect(page.locator("h1 small")).to_have_text(img)
    assert dialogs == []
    # The listener does see dialogs: a page's own alert is recorded.
    await page.evaluate("alert('probe')")
    assert dialogs == ["probe"]


# -- 4: basic auth and token --


async def test_basic_auth_and_token(
    redis: Redis,
    queue_name: str,
    another_dashboard: Callable[..., Awaitable[Served]],
    browsing: Browsing,
) -> None:
    async with Queue(queue_name, connection=redis) as queue:
        await queue.add("email", {"to": "a@example.com"})
    basic, token = await asyncio.gather(
        another_dashboard("--auth", "user:secret"), another_dashboard("--token", "T0k3n-for-tests")
    )
    row = f'tr[data-queue="{queue_name}"]'

    anonymous = await browsing.page()
    for path in ("/", f"/queues/{queue_name}", "/metrics", "/static/dashboard.css"):
        assert await status_of(anonymous, basic.url + path) == 401, path
        assert await anonymous.locator(row).count() == 0
    challenge = await anonymous.request.get(basic.url + "/")
    assert challenge.status == 401
    assert challenge.headers["www-authenticate"].startswith("Basic ")
    wrong = await browsing.page(http_credentials={"username": "user", "password": "guess"})
    assert await status_of(wrong, basic.url + "/") == 401
    right = await browsing.page(http_credentials={"username": "user", "password": "secret"})
    assert await status_of(right, basic.url + "/") == 200
    await expect(right.locator(row)).to_be_visible()
    await right.locator(row).get_by_role("link", name=queue_name).click()
    await expect(right.locator("#queue-name")).to_have_text(queue_name)

    visitor = await browsing.page()
    response = await visitor.goto(f"{token.url}/?token=T0k3n-for-tests")
    assert response is not None and response.status == 200
    assert visitor.url == token.url + "/"  # the address loses the token
    await expect(visitor.locator(row)).to_be_visible()
    kept = {c["name"]: c for c in await visitor.context.cookies()}
    assert kept["echomq_token"]["httpOnly"] is True
    response = await visitor.goto(f"{token.url}/queues/{queue_name}?state=waiting")
    assert response is not None and response.status == 200  # the cookie lets it in
    await expect(visitor.locator("#queue-name")).to_have_text(queue_name)

    stranger = await browsing.page()
    for path in ("/", f"/queues/{queue_name}", "/?token=not-the-token"):
        assert await status_of(stranger, token.url + path) == 401, path
    assert await stranger.locator(row).count() == 0


# -- 5: CSRF --


class _Attacker(BaseHTTPRequestHandler):
    page = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(self.page)))
        self.end_headers()
        self.wfile.write(self.page)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def attack_page(action: str) -> str:
    """A page that posts a pause form to ``action`` as soon as it loads."""
    return (
        "<!doctype html><title>win a prize</title>"
        f'<form id="f" method="post" action="{action}">'
        '<input type="hidden" name="csrf" value="guessed-guessed-guessed-guessed-guessed">'
        '<input type="hidden" name="next" value="/"></form>'
        "<script>document.getElementById('f').submit()</script>"
    )


async def test_cross_origin_form_cannot_pause(
    redis: Redis, queue_name: str, dashboard: str, browsing: Browsing
) -> None:
    async with Queue(queue_name, connection=redis) as queue:
        await queue.add("email", {"to": "a@example.com"})
        pause = f"{dashboard}/queues/{queue_name}/actions/pause"
        page = await browsing.page()
        # The victim has the dashboard open (so the browser holds its CSRF cookie).
        await page.goto(f"{dashboard}/queues/{queue_name}?state=waiting")
        await csrf_cookie(page)

        handler = type("Attacker", (_Attacker,), {"page": attack_page(pause).encode()})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            evil = f"http://127.0.0.1:{server.server_address[1]}/"
            for url, why in (
                (evil, "cross-origin request refused"),
                ("data:text/html," + quote(attack_page(pause)), "missing or wrong CSRF token"),
            ):
                async with page.expect_response(lambda r: r.url == pause) as posted:
                    await page.goto(url)
                response = await posted.value
                assert response.request.method == "POST"
                assert response.status == 403, url
                assert why in await response.text()
                assert not await queue.is_paused()
        finally:
            server.shutdown()
            server.server_close()
            thread.join(timeout=5)

        # The dashboard's own Pause button does pause it (the attack aimed at a real action).
        await page.goto(f"{dashboard}/queues/{queue_name}?state=waiting")
        await page.get_by_role("button", name="Pause").click()
        await expect(page.locator("#paused")).to_be_visible()
        assert await queue.is_paused()
        await page.get_by_role("button", name="Resume").click()
        await expect(page.locator("#paused")).to_have_count(0)
        assert not await queue.is_paused()


# -- 6: groups: the tab, paging, a group's page, pausing and resuming a group --


async def test_groups_tab_pages_pauses_and_resumes_groups(
    redis: Redis,
    queue_name: str,
    dashboard: str,
    another_dashboard: Callable[..., Awaitable[Served]],
    browsing: Browsing,
    tmp_path: Path,
) -> None:
    update = os.environ.get("ECHOMQ_UPDATE_SCREENSHOTS") == "1"
    images = DOC_IMAGES if update else tmp_path
    name = f"reports-{queue_name[-4:]}"
    # acme is the busiest tenant; 26 more with fewer jobs each: two pages of groups.
    sizes = {"acme": 40} | {f"tenant-{n:02d}": 30 - n for n in range(26)}

    async with Queue(name, connection=redis) as queue:
        await queue.set_group_concurrency(3)  # the defaults, shown above the groups
        await queue.set_group_rate_limit(10, 1)
        await queue.set_group_concurrency(1, group="tenant-01")
        await queue.pause_group("tenant-02")
        # tenant-01 first: its group is the first in the rotation, so the first fetch takes
        # one of its jobs, which stays active (its concurrency full: limited).
        for group in sorted(sizes, key=lambda g: g != "tenant-01"):
            await queue.add_bulk(
                [("report", {"n": i}, {"group": group}) for i in range(sizes[group])]
            )
        taker = Worker(name, None, connection=redis)
        job = await taker.get_next_job("tok", block=False)
        await taker.close()
        assert job is not None and job.group == "tenant-01"
        expected = [g.id for g in await queue.get_groups()]
        assert expected[0] == "acme" and len(expected) == 27

        page = await browsing.page()
        dialogs = collect_dialogs(page)
        await page.goto(f"{dashboard}/queues/{name}?state=waiting")
        tab = page.locator('#tabs a[data-state="groups"]')
        await expect(tab.locator(".count")).to_have_text("27")
        await tab.click()
        await expect(page).to_have_url(re.compile(r"\?state=groups$"))
        rows = page.locator("#groups tbody tr")
        await expect(rows).to_have_count(25)
        shown = [await r.get_attribute("data-group") for r in await rows.all()]
        assert shown == expected[:25]  # most waiting jobs first
        busy = page.locator('#groups tr[data-group="tenant-01"] td.group-state')
        await expect(busy).to_have_text("limited")
        held = page.locator('#groups tr[data-group="tenant-02"]')
        await expect(held.locator("td.group-state")).to_have_text("paused")
        await expect(page.locator("#pages")).to_contain_text("page 1 of 2")
        await expect(page.locator("#group-limits")).to_have_text(
            "Default group limits: concurrency 3 job(s) at once · rate 10 start(s) per 1.0 s"
        )
        await page.screenshot(path=str(images / "dashboard-groups.png"), full_page=True)

        await page.get_by_role("link", name="next →").click()
        await expect(rows).to_have_count(2)
        assert [await r.get_attribute("data-group") for r in await rows.all()] == expected[25:]
        await page.get_by_role("link", name="← previous").click()
        await expect(rows).to_have_count(25)

        # Pause acme from its row; the page comes back with it paused.
        acme = page.locator('#groups tr[data-group="acme"]')
        await acme.get_by_role("button", name="Pause group").click()
        await expect(page.locator("p.flash.ok")).to_have_text(f"group acme of {name} paused")
        await expect(acme.locator("td.group-state")).to_have_text("paused")
        assert {g.id: g.paused for g in await queue.get_groups()}["acme"] is True
        assert not await queue.is_paused()

        # Its page lists its waiting jobs in the order they will run, and resumes it.
        await acme.get_by_role("link", name="acme").click()
        await expect(page.locator("#group-id")).to_have_text("acme")
        await expect(page.locator("#group-paused")).to_be_visible()
        await expect(page.locator("#group-waiting")).to_have_text("40")
        await expect(page.locator("#group-limits")).to_contain_text(
            "3 job(s) at once (the default)"
        )
        jobs = page.locator("#jobs tbody tr")
        await expect(jobs).to_have_count(25)
        first_ids = [j.id for j in await queue.get_group_jobs("acme", 0, 24)]
        assert [await r.get_attribute("data-job") for r in await jobs.all()] == first_ids
        await page.get_by_role("button", name="Resume group").click()
        await expect(page.locator("p.flash.ok")).to_have_text(f"group acme of {name} resumed")
        await expect(page.locator("#group-paused")).to_have_count(0)
        await expect(page.locator("#group-id")).to_have_text("acme")  # back on its page
        assert {g.id: g.paused for g in await queue.get_groups()}["acme"] is False
        await page.get_by_role("link", name="next →").click()
        await expect(jobs).to_have_count(15)
        await page.get_by_role("link", name="← all groups").click()
        await expect(rows).to_have_count(25)
        assert dialogs == []  # pausing a group asks nothing

        # Read-only: the same tab and page, without a single action.
        ro = await another_dashboard("--read-only")
        for path in (f"/queues/{name}?state=groups", f"/queues/{name}?state=groups&group=acme"):
            response = await page.goto(ro.url + path)
            assert response is not None and response.status == 200, path
            await expect(page.locator("#read-only")).to_be_visible()
            assert await page.locator("form[method=post]").count() == 0, path
            assert await page.get_by_role("button", name=ACTION_BUTTONS).count() == 0, path
        await expect(page.locator("#group-id")).to_have_text("acme")
        form: dict[str, str | float | bool] = {"csrf": await csrf_cookie(page), "group": "acme"}
        refused = await page.request.post(
            f"{ro.url}/queues/{name}/actions/pause-group", form=form, max_redirects=0
        )
        assert refused.status == 403
        assert {g.id: g.paused for g in await queue.get_groups()}["acme"] is False


# -- 7: a newcomer's queue: the first tab with jobs, and words where there are no metrics --


async def test_a_new_queue_opens_on_its_jobs_and_says_it_has_no_metrics(
    redis: Redis, queue_name: str, dashboard: str, browsing: Browsing
) -> None:
    name = f"signups-{queue_name[-4:]}"
    async with Queue(name, connection=redis) as queue:
        for i in range(3):
            await queue.add("welcome", {"user": i})
        page = await browsing.page()
        await page.goto(dashboard + "/?refresh=1")
        row = page.locator(f'tr[data-queue="{name}"]')
        await expect(row.locator(".no-metrics")).to_have_text("no metrics recorded")
        await expect(row.locator("svg.chart")).to_have_count(0)

        await row.get_by_role("link", name=name).click()
        await expect(page).to_have_url(re.compile(rf"/queues/{name}$"))
        await expect(page.locator("#tabs a.current")).to_have_attribute("data-state", "waiting")
        await expect(page.locator("#jobs tbody tr")).to_have_count(3)
        await expect(page.locator("#no-jobs")).to_have_count(0)
        message = page.locator("#no-metrics")
        await expect(message).to_be_visible()
        await expect(message).to_contain_text("No per-minute metrics are recorded for this queue")
        await expect(message).to_contain_text("--no-metrics")
        await expect(page.locator("svg.chart")).to_have_count(0)

        async def done() -> Any:
            return await queue.get_job_counts("completed")

        async def welcome(job: Job) -> None:
            return None

        async with worker(name, welcome, redis, metrics_max_data_points=60):
            deadline = time.monotonic() + 10
            while (await done())["completed"] < 3 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
        assert await done() == {"completed": 3}
        await page.reload()
        await expect(page.locator("#tabs a.current")).to_have_attribute("data-state", "completed")
        await expect(page.locator("#jobs tbody tr")).to_have_count(3)
        await expect(page.locator("svg.chart")).to_be_visible()
        await expect(page.locator("#no-metrics")).to_have_count(0)
        points = await page.locator("svg.chart polyline.done").get_attribute("points")
        assert points is not None, "no chart"
        x, y = points.split()[-1].split(",")
        assert x == "120.0" and float(y) < 23.0, points  # this minute's jobs are drawn


async def test_a_stopped_redis_is_a_503_page_that_says_so(
    fresh_server: Callable[..., Any], queue_name: str, browsing: Browsing, tmp_path: Path
) -> None:
    server = fresh_server()
    async with Queue(queue_name, connection=server.url) as queue:
        await queue.add("x", {})
    served = await start_dashboard(server.url, tmp_path / "down.log")
    try:
        page = await browsing.page()
        response = await page.goto(f"{served.url}/queues/{queue_name}")
        assert response is not None and response.status == 200
        server.stop()
        response = await page.goto(f"{served.url}/queues/{queue_name}")
        assert response is not None and response.status == 503
        await expect(page).to_have_title(re.compile(r"^Redis unreachable"))
        await expect(page.locator("#error-message")).to_contain_text(
            f"Redis at {server.url} cannot be reached"
        )
        await expect(page.get_by_text("Not found")).to_have_count(0)
    finally:
        stopped_cleanly(served)


# -- the workers page: each worker, and the jobs it runs, linked to their pages -------------------


async def test_workers_page_shows_a_running_worker_and_links_its_job(
    redis: Redis, queue_name: str, dashboard: str, browsing: Browsing
) -> None:
    started, release = asyncio.Event(), asyncio.Event()

    async def hold(job: Job) -> None:
        started.set()
        await release.wait()

    async with Queue(queue_name, connection=redis) as queue:
        job = await queue.add("transcode", {"video": 7})
        held = worker(queue_name, hold, redis, name="video-1", heartbeat_interval=0.2)
        async with held:
            await asyncio.wait_for(started.wait(), 10)
            page = await browsing.page()
            await page.goto(f"{dashboard}/queues/{queue_name}?state=active")
            await page.locator("#workers-link").click()
            await expect(page).to_have_url(re.compile(rf"/queues/{queue_name}/workers$"))
            row = page.locator(f'#workers tr[data-worker="{held.id}"]')
            await expect(row).to_have_attribute("data-kind", "echomq")
            await expect(row.locator(".worker-id")).to_contain_text("video-1")
            link = row.locator(f'.worker-jobs a[data-job="{job.id}"]')
            deadline = time.monotonic() + 10
            while await link.count() == 0 and time.monotonic() < deadline:
                await asyncio.sleep(0.2)  # the next heartbeat carries the job
                await page.reload()
            await link.click()
            await expect(page.locator("#job-id")).to_have_text(job.id)
            await expect(page.locator("#job-state")).to_have_text("active")
            release.set()
        await page.goto(f"{dashboard}/queues/{queue_name}/workers")
        await expect(page.locator("#no-workers")).to_be_visible()


# -- attempts: the dashboard reads as the CLI prints ---------------------------------------------


async def test_attempts_of_a_job_added_without_attempts_read_as_the_cli_prints_them(
    redis: Redis, redis_url: str, queue_name: str, dashboard: str, browsing: Browsing
) -> None:
    """A job added without ``attempts`` has one try (BullMQ's default, stored as
    ``attempts: 0``): after its run, the list's ATTEMPTS column and the job page say
    ``1/1`` and ``1 made of 1 allowed``, as ``echomq queue NAME jobs`` / ``job`` print it,
    and the job page's options leave the stored 0 out, as the CLI does."""

    async def welcome(job: Job) -> str:
        return "sent"

    async with Queue(queue_name, connection=redis) as queue:
        job = await queue.add("welcome", {"user": 1})
        async with worker(queue_name, welcome, redis):
            deadline = time.monotonic() + 10
            while await queue.get_job_state(job.id) != "completed":
                assert time.monotonic() < deadline, "the job did not complete"
                await asyncio.sleep(0.05)

    env = {k: v for k, v in os.environ.items() if not k.startswith("ECHOMQ_")}

    def echomq(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "echomq.cli", "queue", queue_name, *args, "--url", redis_url],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    listing = await asyncio.to_thread(echomq, "jobs", "completed")
    header, row = listing.splitlines()[:2]
    column = header.index("ATTEMPTS")
    cli_attempts = row[column:].split()[0]
    assert row.split()[0] == job.id and cli_attempts == "1/1", listing
    shown = json.loads(await asyncio.to_thread(echomq, "job", job.id, "--json"))
    assert (shown["attempts_made"], shown["attempts"]) == (1, 1)
    assert "attempts" not in shown["options"]

    page = await browsing.page()
    await page.goto(f"{dashboard}/queues/{queue_name}?state=completed")
    cell = page.locator(f'#jobs tr[data-job="{job.id}"] td.attempts')
    await expect(cell).to_have_text(cli_attempts)
    await page.locator(f'#jobs tr[data-job="{job.id}"]').get_by_role("link", name=job.id).click()
    await expect(page.locator("#job-id")).to_have_text(job.id)
    detail = await asyncio.to_thread(echomq, "job", job.id)
    cli_line = re.search(r"^attempts +(.+)$", detail, re.MULTILINE)
    assert cli_line is not None and cli_line.group(1) == "1 made of 1 allowed", detail
    await expect(page.locator("#attempts")).to_have_text(cli_line.group(1))
    options = json.loads(await page.locator("#job-opts").inner_text())
    assert "attempts" not in options
