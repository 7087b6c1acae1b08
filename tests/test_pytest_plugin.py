"""The pytest plugin, run the way a user's project runs it: pytester builds a project whose
tests use the fixtures and helpers, and runs pytest on it in a subprocess (the plugin loads
from its installed ``pytest11`` entry point, as it would for them)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from echomq.testing import plugin

pytest_plugins = ["pytester"]

DOC = Path(__file__).resolve().parents[1] / "docs" / "integrations.md"
INI = """
[pytest]
asyncio_mode = auto
asyncio_default_fixture_loop_scope = function
filterwarnings = error
"""


def run(pytester: pytest.Pytester, source: str, *args: str) -> pytest.RunResult:
    pytester.makeini(INI)
    pytester.makepyfile(test_user=source)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, timeout=120)


def test_the_docs_example_passes(pytester: pytest.Pytester) -> None:
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    example = next(block for block in blocks if "run_until_drained(" in block)
    result = run(pytester, example)
    result.assert_outcomes(passed=1)


def test_fixtures_give_a_real_server_and_a_fresh_queue_each_test(
    pytester: pytest.Pytester,
) -> None:
    source = """
import redis
import echomq
from echomq.embedded import RedisServer

seen = []

def test_server(echomq_redis, echomq_url):
    assert isinstance(echomq_redis, RedisServer) and echomq_redis.is_running
    assert echomq_url == echomq_redis.url
    client = redis.Redis.from_url(echomq_url)
    try:
        assert client.ping()
    finally:
        client.close()

async def test_first(echomq_queue, echomq_url):
    assert isinstance(echomq_queue, echomq.Queue)
    assert echomq_queue.name.startswith("test-")
    await echomq_queue.add("a", {"n": 1})
    seen.append((echomq_queue.name, echomq_url))

async def test_second_is_empty_and_named_apart(echomq_queue, echomq_url):
    assert seen and seen[0][0] != echomq_queue.name and seen[0][1] == echomq_url
    assert await echomq_queue.count() == 0
    # the first test's queue was obliterated after it
    assert await echomq.count(seen[0][0], connection=echomq_url) == 0
    client = redis.Redis.from_url(echomq_url)
    try:
        assert client.keys(f"bull:{seen[0][0]}:*") == []
    finally:
        client.close()
"""
    run(pytester, source).assert_outcomes(passed=3)


def test_run_until_drained_returns_completed_and_failed_jobs(pytester: pytest.Pytester) -> None:
    source = """
import echomq
from echomq.testing import run_until_drained

def sync_processor(job):
    if job.data.get("fail"):
        raise ValueError("nope")
    return job.data["n"] * 2

async def test_drain(echomq_queue):
    for n in range(5):
        await echomq_queue.add("double", {"n": n})
    await echomq_queue.add("double", {"fail": True})
    await echomq_queue.add("later", {"n": 10}, delay=0.3)
    jobs = await run_until_drained(echomq_queue, sync_processor, timeout=10)
    assert sorted(j.return_value for j in jobs if j.name == "later") == [20]
    done = [j for j in jobs if j.failed_reason is None]
    assert sorted(j.return_value for j in done) == [0, 2, 4, 6, 8, 20]
    [failed] = [j for j in jobs if j.failed_reason is not None]
    assert failed.failed_reason == "nope"
    assert await echomq_queue.get_job_counts("waiting", "delayed", "active") == {
        "waiting": 0, "delayed": 0, "active": 0}

async def test_timeout(echomq_queue):
    import asyncio, pytest
    await echomq_queue.add("slow", {})
    async def slow(job):
        await asyncio.sleep(5)
    with pytest.raises(TimeoutError, match="not drained"):
        await run_until_drained(echomq_queue, slow, timeout=0.2,
                                options=echomq.WorkerOptions(close_grace=0.1))
"""
    run(pytester, source).assert_outcomes(passed=2)


def test_assert_enqueued_matches_and_explains_failures(pytester: pytest.Pytester) -> None:
    source = """
import pytest
from echomq.testing import assert_enqueued

async def test_matches(echomq_queue):
    await echomq_queue.add("welcome", {"to": "ada"})
    await echomq_queue.add("welcome", {"to": "bob"}, delay=60)
    await echomq_queue.add("reminder", {"to": "ada"}, priority=3)
    assert len(await assert_enqueued(echomq_queue, name="welcome")) == 2
    [job] = await assert_enqueued(echomq_queue, name="welcome", data={"to": "bob"})
    assert job.data == {"to": "bob"}
    await assert_enqueued(echomq_queue, data={"to": "ada"}, count=2)
    await assert_enqueued(echomq_queue, name="reminder", count=1)

async def test_explains(echomq_queue):
    await echomq_queue.add("welcome", {"to": "ada"})
    with pytest.raises(AssertionError) as info:
        await assert_enqueued(echomq_queue, name="welcome", data={"to": "zed"})
    assert "found 0" in str(info.value) and "{'to': 'ada'}" in str(info.value)
    with pytest.raises(AssertionError, match="expected 2 job"):
        await assert_enqueued(echomq_queue, name="welcome", count=2)
"""
    run(pytester, source).assert_outcomes(passed=2)


COUNTING_CONFTEST = """
from pathlib import Path
from echomq.embedded import RedisServer

_start = RedisServer.start

def start(self):
    with open(Path(__file__).with_name("starts.txt"), "a") as out:
        out.write("started\\n")
    _start(self)

RedisServer.start = start
"""


def test_the_plugin_starts_no_server_unless_a_fixture_is_used(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(COUNTING_CONFTEST)
    starts = pytester.path / "starts.txt"
    listed = run(pytester, "def test_nothing():\n    pass\n", "--fixtures")
    listed.stdout.fnmatch_lines(["*echomq_redis*", "*echomq_url*", "*echomq_queue*"])
    run(pytester, "def test_nothing():\n    pass\n").assert_outcomes(passed=1)
    assert not starts.exists()
    run(pytester, "def test_url(echomq_url):\n    assert echomq_url\n").assert_outcomes(passed=1)
    assert starts.read_text() == "started\n"


def test_without_pytest_asyncio_the_plugin_loads_and_the_queue_fixture_says_why(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocked = pytester.mkpydir("blocked")
    (blocked / "pytest_asyncio.py").write_text("raise ImportError('not installed')\n")
    monkeypatch.setenv("PYTHONPATH", str(blocked))
    pytester.makeini("[pytest]\nfilterwarnings = error\n")
    pytester.makepyfile(
        test_user="""
def test_url(echomq_url):
    assert echomq_url.startswith("redis://")

def test_queue(echomq_queue):
    pass
"""
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:asyncio")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["*echomq_queue fixture needs pytest-asyncio*echomq[[]testing]*"])


def test_the_plugin_module_is_the_entry_point() -> None:
    from importlib.metadata import entry_points

    [entry] = entry_points(group="pytest11", name="echomq")
    assert entry.load() is plugin
