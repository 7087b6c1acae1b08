"""echomq on a restricted Redis, as managed services run it: commands renamed away, an ACL user.

Two servers the module starts itself on free loopback ports:

- ``renamed``: ``rename-command CONFIG ""`` and ``rename-command CLIENT ""`` (no CONFIG, no
  CLIENT at all: no SETNAME, LIST, SETINFO);
- ``acl``: the user ``app`` with ``~bull:* &bull:* +@all -@dangerous`` (no CONFIG, CLIENT LIST,
  INFO...), the default user switched off once the server is up; tests use ``app`` only (the
  ``admin`` user is there to look at the server from outside).

On each: producers, a worker (a delayed job, a retry, a scheduler's iterations), QueueEvents,
the dashboard and the CLI work; nothing fails at start; each refused command is said once per
process at INFO on ``echomq.server``, naming it (``echomq._redis.restricted``);
``get_workers`` lists the worker registry alone where ``CLIENT LIST`` is refused.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio
from starlette.testclient import TestClient

import echomq
import echomq.sync
from _cli import DEADLINE, base_env, cli, wait_until
from echomq import Job, Queue, QueueEvents, Worker
from echomq._keys import queue_keys
from echomq._redis import restricted as restricted_module
from echomq._redis import server_reports
from echomq.dashboard import create_app
from echomq.embedded import RedisServer
from helpers import wait_for

FAST: dict[str, Any] = {"drain_delay": 0.2, "stalled_interval": 1.0}
ACL_RULES = ("~bull:*", "&bull:*", "+@all", "-@dangerous")
#: What a user may add to ACL_RULES for get_workers() and the eviction-policy check.
LISTER_EXTRA = ("+client|list", "+config|get")
RENAMED = ("--rename-command", "CONFIG", "", "--rename-command", "CLIENT", "")


@dataclass(frozen=True)
class Restricted:
    """A started restricted server: what echomq is given, and what it must report."""

    kind: str
    url: str  # what echomq is given
    admin_url: str  # for looking at the server from outside (renamed: the same URL)
    address: str  # host:port, as the INFO records name it
    refused_at_start: frozenset[str]  # commands a worker and QueueEvents report


def _started(kind: str, data_dir: Path) -> tuple[RedisServer, Restricted]:
    if kind == "renamed":
        extra: tuple[str, ...] = RENAMED
    else:
        app = ("--user", "app", "on", ">app-pw", *ACL_RULES)
        lister = ("--user", "lister", "on", ">lister-pw", *ACL_RULES, *LISTER_EXTRA)
        # the queue's keys but no pub/sub channel (a Redis 7 user's default)
        silent = ("--user", "silent", "on", ">silent-pw", "~bull:*", "+@all", "-@dangerous")
        admin = ("--user", "admin", "on", ">admin-pw", "~*", "&*", "+@all")
        extra = (*app, *lister, *silent, *admin)
    server = RedisServer(data_dir=data_dir, appendonly=False, extra_args=extra)
    server.start()
    port = server.port
    if kind == "renamed":
        url = admin_url = server.url
        refused = frozenset({"CLIENT SETNAME", "CONFIG GET"})
    else:
        admin_url = f"redis://admin:admin-pw@127.0.0.1:{port}/0"
        url = f"redis://app:app-pw@127.0.0.1:{port}/0"
        with redis.Redis.from_url(server.url) as default:  # up: the default user goes off
            default.execute_command("ACL", "SETUSER", "default", "off")
        refused = frozenset({"CONFIG GET"})
    return server, Restricted(kind, url, admin_url, f"127.0.0.1:{port}", refused)


@pytest.fixture(scope="module")
def renamed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Restricted]:
    """CONFIG and CLIENT renamed away."""
    server, restricted = _started("renamed", tmp_path_factory.mktemp("redis-renamed"))
    try:
        yield restricted
    finally:
        server.stop()


@pytest.fixture(scope="module")
def acl_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Restricted]:
    """The users app, lister and admin; the default user off."""
    server, restricted = _started("acl", tmp_path_factory.mktemp("redis-acl"))
    try:
        yield restricted
    finally:
        server.stop()


@pytest.fixture(params=["renamed_server", "acl_server"])
def restricted(request: pytest.FixtureRequest) -> Restricted:
    """Each restricted server in turn."""
    server: Restricted = request.getfixturevalue(request.param)
    return server


@pytest.fixture(autouse=True)
def _forget_reports() -> Iterator[None]:
    """Each test sees the once-per-process reports afresh (the servers' ports repeat)."""
    server_reports.forget_all()
    yield
    server_reports.forget_all()


def refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    """The commands named by the INFO records of refusals, one entry per record."""
    found = []
    for record in caplog.records:
        if record.name == "echomq.server" and record.levelno == logging.INFO:
            command = getattr(record, "command", None)
            if command is not None:
                found.append(command)
    return sorted(found)


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    """WARNING records and above, but for the job transition of the planned retry."""
    found = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    return [m for m in found if " retry-delayed " not in m]


async def client_names(restricted: Restricted) -> list[str]:
    """The names of the server's connections, as its admin sees them."""
    admin = redis.asyncio.Redis.from_url(restricted.admin_url, decode_responses=True)
    try:
        return [c["name"] for c in await admin.client_list()]
    finally:
        await admin.aclose()


async def test_default_user_is_off_on_the_acl_server(acl_server: Restricted) -> None:
    anonymous = redis.asyncio.Redis.from_url(acl_server.url.replace("app:app-pw@", ""))
    try:
        with pytest.raises(redis.exceptions.AuthenticationError):
            await anonymous.ping()
    finally:
        await anonymous.aclose()


async def test_producers_and_getters(
    restricted: Restricted, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="echomq")
    url = restricted.url
    first = await echomq.add(queue_name, "a", {"n": 1}, connection=url)
    bulk = await echomq.add_bulk(queue_name, [("b", {"n": 2}), ("c", {"n": 3})], connection=url)
    async with Queue(queue_name, connection=url) as queue:
        await queue.add("d", {"n": 4}, delay=60)
        assert await queue.count() == 4  # waiting and delayed
        counts = await queue.get_job_counts("waiting", "delayed")
        assert counts == {"waiting": 3, "delayed": 1}
        assert [j.id for j in await queue.get_jobs("waiting")] == ["3", "2", "1"]
        job = await queue.get_job(first.id)
        assert job is not None and job.data == {"n": 1}
        assert await queue.get_job_state(bulk[0].id) == "waiting"
        assert not await queue.is_paused()
        assert (await queue.get_metrics("completed")).data == []
    with echomq.sync.Queue(queue_name, connection=url) as sync_queue:
        assert sync_queue.add("e").id == "5"
    # The eviction-policy check could not run: said once, for every producer of the process.
    assert refusals(caplog) == ["CONFIG GET"]
    record = next(r for r in caplog.records if getattr(r, "command", None) == "CONFIG GET")
    message = record.getMessage()
    assert f"Redis at {restricted.address} refused CONFIG GET" in message
    assert "maxmemory-policy check did not run" in message
    assert warnings(caplog) == []


async def test_worker_events_and_scheduler(
    restricted: Restricted, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="echomq")
    url = restricted.url
    seen: list[tuple[str, int]] = []

    async def process(job: Job) -> Any:
        seen.append((job.id, job.attempts_made))
        if job.name == "flaky" and job.attempts_made == 0:
            raise RuntimeError("first attempt fails")
        return job.name

    async with (
        Queue(queue_name, connection=url) as queue,
        QueueEvents(queue_name, connection=url) as events,
    ):
        completed: list[str] = []

        async def listen() -> None:
            async for event in events:
                if isinstance(event, echomq.Completed):
                    completed.append(event.job_id)

        listener = asyncio.create_task(listen())
        async with Worker(queue_name, process, connection=url, **FAST):
            plain = await queue.add("plain")
            delayed = await queue.add("later", delay=0.3)
            flaky = await queue.add("flaky", attempts=2, backoff=0.1)
            assert await events.wait_for_job(plain.id, timeout=10) == "plain"
            assert await events.wait_for_job(delayed.id, timeout=10) == "later"
            assert await events.wait_for_job(flaky.id, timeout=10) == "flaky"
            iteration = await queue.upsert_job_scheduler("tick", every=0.2, limit=2)
            assert iteration is not None
            scheduler = await queue.get_job_scheduler("tick")
            assert scheduler is not None and scheduler.every == 0.2

            async def two_iterations() -> bool:
                return sum(1 for job_id, _ in seen if job_id.startswith("repeat:tick:")) == 2

            await wait_for(two_iterations, timeout=10)
            await wait_for(lambda: len(completed) == 5, timeout=10)
            # CLIENT LIST refused: the worker registry alone, without an error
            [listed] = await queue.get_workers()
            assert listed["kind"] == "echomq" and listed["name"] == queue_name
            if restricted.kind == "acl":  # CLIENT SETNAME is allowed: the worker is named
                names = await client_names(restricted)
                assert queue_keys(queue_name).worker_client_name() in names
        listener.cancel()
        await asyncio.gather(listener, return_exceptions=True)
    assert (flaky.id, 0) in seen and (flaky.id, 1) in seen
    assert set(completed) >= {plain.id, delayed.id, flaky.id}
    assert refusals(caplog) == sorted({*restricted.refused_at_start, "CLIENT LIST"})
    if restricted.kind == "renamed":
        record = next(r for r in caplog.records if getattr(r, "command", None) == "CLIENT SETNAME")
        assert "connections stay unnamed, so get_workers()" in record.getMessage()
    assert warnings(caplog) == []


async def test_events_through_redis_py_handshake(
    restricted: Restricted, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    # A RESP3 client: its events reader cannot use echomq's own connection (a Channel), so
    # redis-py's handshake names the reader, and must carry on unnamed where CLIENT is gone.
    caplog.set_level(logging.INFO, logger="echomq")
    client = redis.asyncio.Redis.from_url(restricted.url, protocol=3)
    try:
        async with QueueEvents(queue_name, connection=client) as events:  # the reader connects
            if restricted.kind == "renamed":
                assert refusals(caplog) == ["CLIENT SETNAME"]
            else:
                assert refusals(caplog) == []
                names = await client_names(restricted)
                assert queue_keys(queue_name).events_client_name() in names
            job = await echomq.add(queue_name, "a", connection=client)
            waiting = asyncio.ensure_future(events.wait_for_job(job.id, timeout=10))

            async def process(job: Job) -> str:
                return "done"

            async with Worker(queue_name, process, connection=restricted.url, **FAST):
                assert await waiting == "done"
    finally:
        await client.aclose()
    assert refusals(caplog) == sorted(restricted.refused_at_start)
    assert warnings(caplog) == []


async def test_client_list_and_config_get_granted_back(
    acl_server: Restricted, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="echomq")
    lister = acl_server.url.replace("app:app-pw@", "lister:lister-pw@")
    await echomq.add(queue_name, "a", connection=lister)  # the policy check runs

    async def process(job: Job) -> None:
        return None

    async with Worker(queue_name, process, connection=acl_server.url, name="w1", **FAST):
        await echomq.add(queue_name, "b", connection=acl_server.url)

        async def listed() -> bool:
            workers = await echomq.get_workers(queue_name, connection=lister)
            return [w["rawname"].rsplit(":", 1)[-1] for w in workers] == ["w1"]

        await wait_for(listed, timeout=10)
    assert refusals(caplog) == []
    assert warnings(caplog) == []


async def test_a_user_without_channels_runs_jobs_and_says_once_that_cancels_are_lost(
    acl_server: Restricted, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="echomq")
    silent = acl_server.url.replace("app:app-pw@", "silent:silent-pw@")

    async def process(job: Job) -> str:
        return "done"

    async with (
        Queue(queue_name, connection=silent) as queue,
        Worker(queue_name, process, connection=silent, **FAST),
    ):
        job = await queue.add("a")

        async def completed() -> bool:
            return await queue.get_job_state(job.id) == "completed"

        await wait_for(completed, timeout=10)
        await asyncio.sleep(0.5)  # long enough for a resubscribing loop to show itself
    assert refusals(caplog) == ["CONFIG GET", "SUBSCRIBE"]
    record = next(r for r in caplog.records if getattr(r, "command", None) == "SUBSCRIBE")
    assert "does not receive cancel requests" in record.getMessage()
    assert warnings(caplog) == []


def test_dashboard(
    restricted: Restricted, queue_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="echomq")
    job = echomq.sync.add(queue_name, "shown", {"n": 1}, connection=restricted.url)
    app = create_app(connection=restricted.url, read_only=False)
    with TestClient(app, follow_redirects=False) as c:
        listing = c.get("/?refresh")
        assert listing.status_code == 200
        assert f'data-queue="{queue_name}"' in listing.text
        assert f'href="/queues/{queue_name}/workers">0</a>' in listing.text
        page = c.get(f"/queues/{queue_name}?state=waiting")
        assert page.status_code == 200
        assert "0 worker(s) online" in page.text and f"/jobs/{job.id}" in page.text
        assert c.get(f"/queues/{queue_name}/jobs/{job.id}").status_code == 200
        assert c.get("/healthz").text.strip() == "ok"
        # The groups tab and a group's page: the getters' commands, nothing restricted.
        echomq.sync.add(queue_name, "grouped", {}, group="acme", connection=restricted.url)
        groups = c.get(f"/queues/{queue_name}?state=groups")
        assert groups.status_code == 200 and 'data-group="acme"' in groups.text
        assert "0 worker(s) online" in groups.text
        workers = c.get(f"/queues/{queue_name}/workers")
        assert workers.status_code == 200 and 'id="no-workers"' in workers.text
        acme = c.get(f"/queues/{queue_name}?state=groups&group=acme")
        assert acme.status_code == 200 and 'id="group-waiting">1<' in acme.text
        metrics = c.get("/metrics")
        assert metrics.status_code == 200 and queue_name in metrics.text
        assert f'echomq_group_jobs{{queue="{queue_name}", group="acme"' in metrics.text
    assert "CLIENT LIST" in refusals(caplog)
    assert refusals(caplog).count("CLIENT LIST") == 1  # four pages, one record
    assert warnings(caplog) == []


PROCESSOR = textwrap.dedent(
    """
    def double(job):
        return job.data["x"] * 2
    """
)


def test_cli(restricted: Restricted, queue_name: str, tmp_path: Path) -> None:
    env = base_env(ECHOMQ_REDIS_URL=restricted.url)
    added = cli("add", queue_name, "double", "--data", '{"x": 21}', env=env)
    assert added.returncode == 0, added.stderr
    job_id = added.stdout.strip().split()[-1]
    scheduled = cli("scheduler", queue_name, "list", env=env)
    assert scheduled.returncode == 0, scheduled.stderr
    (tmp_path / "managed_procs.py").write_text(PROCESSOR)
    log_path = tmp_path / "worker.log"
    with open(log_path, "wb") as log:
        worker = subprocess.Popen(
            [sys.executable, "-m", "echomq.cli", "worker", "managed_procs:double"]
            + ["--queue", queue_name, "--url", restricted.url, "--drain-delay", "0.2"],
            cwd=tmp_path,
            env=base_env(),
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    try:

        def done() -> bool:
            counts = cli("queue", queue_name, "counts", env=env)
            assert counts.returncode == 0, counts.stderr
            return any(line.split() == ["completed", "1"] for line in counts.stdout.splitlines())

        wait_until(done, "the CLI worker to complete the job")
        listed = cli("queues", env=env)
        assert listed.returncode == 0 and queue_name in listed.stdout, listed.stderr
        shown = cli("queue", queue_name, "job", job_id, env=env)
        assert shown.returncode == 0 and "42" in shown.stdout, shown.stderr
    finally:
        worker.send_signal(signal.SIGTERM)
        code = worker.wait(timeout=DEADLINE)
    text = log_path.read_text()
    assert code == 0, text
    for command in ("CLIENT SETNAME", "CONFIG GET"):
        expected = 1 if command in restricted.refused_at_start else 0
        assert text.count(f"refused {command} (") == expected, text
    assert "WARNING" not in text and "ERROR" not in text, text


def test_only_unknown_commands_and_noperm_are_refusals() -> None:
    unknown = redis.exceptions.ResponseError("unknown command 'CLIENT', with args beginning with:")
    assert restricted_module.refusal(unknown) == "unknown command"
    denied = redis.exceptions.NoPermissionError("this user has no permissions to run the 'x'")
    assert restricted_module.refusal(denied) == "no permission"
    spaces = redis.exceptions.ResponseError("Client names cannot contain spaces, newlines or ...")
    assert restricted_module.refusal(spaces) is None
    assert not restricted_module.report("CLIENT SETNAME", "h:1", spaces)  # the caller raises
    assert restricted_module.refusal(redis.exceptions.ConnectionError("gone")) is None
    busy = redis.exceptions.BusyLoadingError("Redis is loading the dataset in memory")
    assert not restricted_module.report("TIME", "h:1", busy, any_error_reply=False)
