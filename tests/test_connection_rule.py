"""The connection rule: which Redis an entry point given no ``connection`` uses.

In order: ``echomq.set_default_connection(...)``, else ``$ECHOMQ_REDIS_URL``, else the per-user
embedded Redis **only if it is already running** (said once per process by a WARNING on the
``echomq.connection`` logger), else ``ConnectionNotOpenError`` naming the ways to give one
(``_redis/default.py``). Against real servers only: the session server (one database per
step, so each add shows where it went) and embedded servers started in temporary data
directories (``ECHOMQ_DATA_DIR`` in this process, ``HOME`` for the subprocesses that run the
docs' main examples as a reader who ran only README's "Try it" runs them), never the
developer's own. Every test starts with no default, no ``ECHOMQ_REDIS_URL`` and an empty data
directory of its own.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
import redis
import redis.asyncio

import echomq
import echomq.sync
from echomq.embedded import embedded_server_status, ensure_embedded_server, stop_embedded_server

ROOT = Path(__file__).resolve().parents[1]
#: The one line the rule logs when it falls back to the embedded Redis (``<url>`` for its URL).
NOTICE = (
    "echomq found no connection (none given, ECHOMQ_REDIS_URL not set): using the embedded "
    "Redis at <url>; to use your own Redis, set ECHOMQ_REDIS_URL or pass connection="
)
#: What the error without any connection must name: every way to give one.
WAYS = ("connection=", "set_default_connection", "ECHOMQ_REDIS_URL", "echomq server start")


def db_url(redis_url: str, db: int) -> str:
    return redis_url.rsplit("/", 1)[0] + f"/{db}"


@pytest.fixture(autouse=True)
def nothing_configured(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """No default, no ``ECHOMQ_REDIS_URL``, and an embedded data directory nothing runs in
    (it does not exist: a server started there would create it)."""
    data = tmp_path_factory.mktemp("none") / "data"
    monkeypatch.delenv("ECHOMQ_REDIS_URL", raising=False)
    monkeypatch.setenv("ECHOMQ_DATA_DIR", str(data))
    echomq.set_default_connection(None)
    try:
        yield data
    finally:
        echomq.set_default_connection(None)


@pytest.fixture
def embedded(
    monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A running embedded Redis in a data directory of its own (ECHOMQ_DATA_DIR); its URL."""
    data = tmp_path_factory.mktemp("emb")
    url = ensure_embedded_server(data)
    monkeypatch.setenv("ECHOMQ_DATA_DIR", str(data))
    try:
        yield url
    finally:
        stop_embedded_server(data)


@pytest_asyncio.fixture
async def db_clients(redis_url: str) -> AsyncIterator[dict[int, redis.asyncio.Redis]]:
    """Clients of databases 11, 12 and 13 of the session server, closed after the test."""
    clients = {db: redis.asyncio.Redis.from_url(db_url(redis_url, db)) for db in (11, 12, 13)}
    try:
        yield clients
    finally:
        for client in clients.values():
            await client.aclose()


async def counts(queue: str, **where: redis.asyncio.Redis | str) -> dict[str, int]:
    """How many jobs ``queue`` holds at each place."""
    return {name: await echomq.count(queue, connection=conn) for name, conn in where.items()}


# -- the order ---------------------------------------------------------------------------------


async def test_explicit_then_default_then_environment_then_running_embedded(
    embedded: str,
    redis_url: str,
    db_clients: dict[int, redis.asyncio.Redis],
    queue_name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    explicit, default, env = db_clients[11], db_clients[12], db_clients[13]
    echomq.set_default_connection(db_url(redis_url, 12))
    monkeypatch.setenv("ECHOMQ_REDIS_URL", db_url(redis_url, 13))

    await echomq.add(queue_name, "explicit", connection=explicit)
    await echomq.add(queue_name, "default")  # the default wins over the environment
    assert echomq.default_redis_url() == db_url(redis_url, 12)
    echomq.set_default_connection(None)
    await echomq.add(queue_name, "env")  # then the environment over the embedded server
    assert echomq.default_redis_url() == db_url(redis_url, 13)
    monkeypatch.delenv("ECHOMQ_REDIS_URL")
    await echomq.add(queue_name, "embedded")  # then the running embedded server
    assert echomq.default_redis_url() == embedded

    where = await counts(queue_name, explicit=explicit, default=default, env=env, emb=embedded)
    assert where == {"explicit": 1, "default": 1, "env": 1, "emb": 1}


async def test_every_entry_point_follows_the_rule(
    redis_url: str, db_clients: dict[int, redis.asyncio.Redis], queue_name: str
) -> None:
    echomq.set_default_connection(db_clients[11])  # a client: used as given, never closed
    async with echomq.Queue(queue_name) as queue:
        await queue.add("q")
        assert not queue._conn.owned
    await echomq.add_bulk(queue_name, [("b", {}), ("b", {})])
    async with echomq.FlowProducer() as flows:
        await flows.add(echomq.FlowJob("parent", queue_name, children=[]))
    async with echomq.QueueEvents(queue_name) as events:
        assert events._conn.client is db_clients[11]
    worker = echomq.Worker(queue_name, None)
    assert worker._conn.client is db_clients[11] and not worker._conn.owned
    await worker.close()
    assert await db_clients[11].ping()  # the default client is still open
    assert await echomq.count(queue_name, connection=db_clients[11]) == 4

    echomq.set_default_connection(db_url(redis_url, 12))  # a URL: each object opens its own
    async with echomq.Queue(queue_name) as queue:
        await queue.add("q")
        assert queue._conn.owned
    with pytest.raises(echomq.ConnectionNotOpenError):
        _ = queue._conn.client  # closed by the queue that opened it
    assert await echomq.count(queue_name, connection=db_clients[12]) == 1


async def test_tasks_and_their_worker_follow_the_rule(
    redis_url: str, queue_name: str, db_clients: dict[int, redis.asyncio.Redis], embedded: str
) -> None:
    @echomq.task(queue=queue_name)
    async def double(n: int) -> int:
        return 2 * n

    job = await double.aenqueue(4)  # the running embedded server, as a plain add
    async with echomq.Worker.for_tasks([double]):
        assert await double.aresult(job, timeout=10) == 8
    assert await echomq.get_state(queue_name, job.id, connection=embedded) == "completed"
    echomq.set_default_connection(db_url(redis_url, 12))
    assert double.enqueue(5).data == {"n": 5}  # the sync side: a shared redis.Redis
    assert await echomq.count(queue_name, connection=db_clients[12]) == 1


# -- the sync twin -----------------------------------------------------------------------------


def test_the_sync_api_gets_sync_clients(
    redis_url: str, queue_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ECHOMQ_REDIS_URL", db_url(redis_url, 12))
    added = echomq.sync.add(queue_name, "a", {"n": 1})
    with echomq.sync.Queue(queue_name) as queue:
        client = queue._conn.client
        assert isinstance(client, redis.Redis) and queue._conn.owned
        assert queue.get_job(added.id) is not None
    with pytest.raises(echomq.ConnectionNotOpenError):
        _ = queue._conn.client
    with echomq.sync.FlowProducer() as flows:
        flows.add(echomq.FlowJob("parent", queue_name))

    own = redis.Redis.from_url(db_url(redis_url, 12))
    try:
        echomq.set_default_connection(own)
        with echomq.sync.Queue(queue_name) as queue:
            assert queue._conn.client is own and not queue._conn.owned
            assert queue.count() == 2
        assert own.ping()  # the queue did not close a client it was given
    finally:
        own.close()


async def test_a_default_client_of_the_other_kind_is_refused(
    redis: redis.asyncio.Redis, sync_redis: redis.Redis, queue_name: str
) -> None:
    echomq.set_default_connection(redis)
    with pytest.raises(echomq.ConnectionNotOpenError, match=r"redis\.asyncio\.Redis client.*sync"):
        echomq.sync.add(queue_name, "a")
    echomq.set_default_connection(sync_redis)
    with pytest.raises(echomq.ConnectionNotOpenError, match=r"redis\.Redis client.*async API"):
        await echomq.add(queue_name, "a")
    with pytest.raises(echomq.ConnectionNotOpenError, match="not a URL"):
        echomq.default_redis_url()
    with pytest.raises(echomq.ValidationError, match="got int"):
        echomq.set_default_connection(6379)  # type: ignore[arg-type]


# -- nothing configured: the error, and no server started ------------------------------------


async def test_without_any_connection_every_entry_point_says_how_to_give_one(
    nothing_configured: Path, queue_name: str
) -> None:
    @echomq.task(queue=queue_name)
    def noop() -> None: ...

    calls = {
        "add": lambda: echomq.add(queue_name, "a"),
        "get_job_counts": lambda: echomq.get_job_counts(queue_name),
        "aenqueue": lambda: noop.aenqueue(),
    }
    for name, call in calls.items():
        with pytest.raises(echomq.ConnectionNotOpenError) as caught:
            await call()
        assert all(way in str(caught.value) for way in WAYS), (name, caught.value)
    makers = {
        "Queue": lambda: echomq.Queue(queue_name),
        "Worker": lambda: echomq.Worker(queue_name, None),
        "Worker.for_tasks": lambda: echomq.Worker.for_tasks([noop]),
        "QueueEvents": lambda: echomq.QueueEvents(queue_name),
        "QueueEventsProducer": lambda: echomq.QueueEventsProducer(queue_name),
        "FlowProducer": lambda: echomq.FlowProducer(),
        "sync.add": lambda: echomq.sync.add(queue_name, "a"),
        "sync.Queue": lambda: echomq.sync.Queue(queue_name),
        "sync.FlowProducer": lambda: echomq.sync.FlowProducer(),
        "enqueue": lambda: noop.enqueue(),
        "default_redis_url": echomq.default_redis_url,
    }
    for name, make in makers.items():
        with pytest.raises(echomq.ConnectionNotOpenError) as caught:
            make()
        assert all(way in str(caught.value) for way in WAYS), (name, caught.value)
    assert str(nothing_configured.resolve()) in str(caught.value)  # where it looked
    assert not nothing_configured.exists(), "the library started the embedded server"


async def test_a_stopped_embedded_server_is_not_started_again(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch, queue_name: str
) -> None:
    data = tmp_path_factory.mktemp("stopped")
    ensure_embedded_server(data)
    stop_embedded_server(data)
    monkeypatch.setenv("ECHOMQ_DATA_DIR", str(data))
    with pytest.raises(echomq.ConnectionNotOpenError, match="echomq server start"):
        await echomq.add(queue_name, "a")
    assert embedded_server_status(data).state == "stopped"


# -- as a reader runs the docs: real processes, the embedded server of a temporary HOME ------


def reader_env(home: Path) -> dict[str, str]:
    """A reader's environment: HOME is ``home``, and nothing names a Redis or a data dir."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("ECHOMQ_") and k not in ("XDG_DATA_HOME", "PYTEST_CURRENT_TEST")
    }
    env["HOME"] = str(home)
    return env


def run_python(code: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    script = cwd / "example.py"
    script.write_text(code, encoding="utf-8")
    return subprocess.run(
        [sys.executable, str(script)], env=env, cwd=cwd, capture_output=True, text=True, timeout=60
    )


def python_blocks(page: str, after: str = "") -> list[str]:
    """The ```python blocks of ``page`` (from the heading ``after`` on, to the next ``## ``)."""
    text = (ROOT / page).read_text(encoding="utf-8")
    if after:
        text = text[text.index(after) :]
        text = text[: text.find("\n## ", 1)] if "\n## " in text[1:] else text
    return re.findall(r"```python\n(.*?)```", text, re.S)


@pytest.fixture
def reader_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A HOME whose embedded Redis was started by the CLI, as README's "Try it" leaves it."""
    home = tmp_path_factory.mktemp("home")
    env = reader_env(home)
    started = subprocess.run(
        [sys.executable, "-m", "echomq.cli", "server", "start"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode == 0, started.stderr
    try:
        yield home
    finally:
        stop_embedded_server(home / ".local" / "share" / "echomq")


def test_the_main_docs_examples_run_as_copied_on_the_embedded_server(
    reader_home: Path, tmp_path: Path
) -> None:
    data_dir = (reader_home / ".local" / "share" / "echomq").resolve()
    url = f"unix://{data_dir}/redis.sock?db=0"
    notice = NOTICE.replace("<url>", url)
    readme_first, _readme_task, readme_sync = python_blocks("README.md", "## Use it")
    index_tasks = python_blocks("docs/index.md")[0]
    env = reader_env(reader_home)
    embedded = redis.Redis(unix_socket_path=str(data_dir / "redis.sock"), decode_responses=True)
    try:
        for code, queue, state, output in (
            (readme_first, "emails", "completed", "{'sent': True}"),
            (index_tasks, "emails", "completed", "{'sent': 'hello Ada <ada@example.com>'}"),
            (readme_sync, "emails", "waiting", ""),
        ):
            before = echomq.sync.get_job_counts(queue, state, connection=embedded)[state]
            done = run_python(code, env, tmp_path)
            assert done.returncode == 0, done.stderr
            assert output in done.stdout
            assert done.stderr.splitlines().count(notice) == 1, done.stderr
            assert done.stderr.count("embedded") == 1, done.stderr
            after = echomq.sync.get_job_counts(queue, state, connection=embedded)[state]
            assert after == before + 1, (code, state, before, after)
    finally:
        embedded.close()


def test_the_notice_is_logged_once_per_process_and_not_with_a_url(
    reader_home: Path, tmp_path: Path, redis_url: str
) -> None:
    code = (
        "import asyncio, logging, echomq, echomq.sync\n"
        "logging.basicConfig(format='%(levelname)s %(name)s: %(message)s')\n"
        "async def main():\n"
        "    await echomq.add('notice', 'a')\n"
        "    async with echomq.Queue('notice') as q:\n"
        "        await q.add('b')\n"
        "    echomq.default_redis_url()\n"
        "asyncio.run(main())\n"
        "echomq.sync.add('notice', 'c')\n"
        "print(echomq.sync.count('notice'))\n"
    )
    env = reader_env(reader_home)
    done = run_python(code, env, tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("WARNING echomq.connection: "), lines
    assert done.stdout.split()[-1] == "3"
    given = run_python(code, {**env, "ECHOMQ_REDIS_URL": db_url(redis_url, 12)}, tmp_path)
    assert given.returncode == 0, given.stderr
    assert given.stderr == ""


def test_with_nothing_running_the_readme_example_fails_naming_the_ways(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (first, *_) = python_blocks("README.md", "## Use it")
    done = run_python(first, reader_env(home), tmp_path)
    assert done.returncode == 1
    assert "echomq.errors.ConnectionNotOpenError" in done.stderr, done.stderr
    assert all(way in done.stderr for way in WAYS), done.stderr
    assert not (home / ".local").exists(), "the library started the embedded server"
