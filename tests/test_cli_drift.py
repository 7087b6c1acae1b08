"""What the CLI and its docs say agrees with what it does.

Every command runs for real as ``python -m echomq.cli`` (the README's shell lines through the
installed ``echomq`` script) with stdout and stderr on pipes. A command that may fall back to
the embedded server gets a private ``ECHOMQ_DATA_DIR`` under the test's temporary directory,
never the user's own, and any server started there is stopped after the test. Messages the docs
quote (the embedded server's notice, the worker's signal lines) are read from docs/workers.md,
so a change on either side fails here.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from redis import Redis as SyncRedis

import echomq
from _cli import DEADLINE, base_env, cli, queue_call, wait_until
from echomq import Queue
from echomq.cli._connect import URL_ENV
from echomq.embedded import RedisServer, stop_embedded_server

ROOT = Path(__file__).resolve().parent.parent
WORKERS_MD = ROOT / "docs" / "workers.md"
README = ROOT / "README.md"
#: The one line ``echomq server --help`` gives --durability in full (a piece of it).
DURABILITY_STORY = "an acknowledged add survives a crash of the server"
DURABILITY_POINTER = "fsync of the embedded Redis: see echomq server --help"


# -- helpers ---------------------------------------------------------------------------------


def doc_rows(logger: str) -> list[str]:
    """The messages (first backticked text of the third column) of the log table rows of
    ``logger`` in docs/workers.md."""
    found = []
    for line in WORKERS_MD.read_text(encoding="utf-8").splitlines():
        cells = [cell.strip() for cell in line.split(" | ")]
        if line.startswith(f"| `{logger}` |") and len(cells) > 2:
            message = re.match(r"`([^`]*)`", cells[2])
            if message:
                found.append(message.group(1))
    return found


@pytest.fixture
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A short, private data directory for the embedded server; stopped after the test."""
    directory = tmp_path_factory.mktemp("drift")
    try:
        yield directory
    finally:
        stop_embedded_server(directory)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A working directory with ``drift_procs.py``: ``slow`` writes a marker, then sleeps."""
    (tmp_path / "drift_procs.py").write_text(
        "import asyncio, os, pathlib\n\n"
        "async def process(job):\n"
        "    pathlib.Path(os.environ['MARKER']).write_text(job.id)\n"
        "    await asyncio.sleep(job.data.get('seconds', 0))\n"
        "    return job.data\n"
    )
    return tmp_path


# -- 1. refused before anything starts -------------------------------------------------------

HAS_DASHBOARD = importlib.util.find_spec("starlette") is not None
BAD_NAME = "queue name 'a:b' contains ':'"
#: What every refusal of a string that is not a cron pattern says (and the --cron help).
CRON_FORMS = (
    "a cron pattern is 5 fields (minute hour day-of-month month day-of-week) or 6 with seconds "
    "first, e.g. '0 12 * * *' for every day at noon"
)
NO_PREFIX = "--prefix must not be empty"

REFUSED: list[tuple[list[str], str]] = [
    (["add", "a:b", "x", "--data", "{}"], BAD_NAME),
    (["add", "q", "x", "--data", "{}", "--job-id", "12"], "integer string"),
    (["add", "q", "x", "--data", "{}", "--job-id", "a:b"], "job_id 'a:b' contains ':'"),
    (["queue", "a:b", "counts"], BAD_NAME),
    (["queue", "a:b", "job", "1"], BAD_NAME),
    (["queue", "q", "counts", "--prefix", ""], NO_PREFIX),
    (["--prefix", "", "queue", "q", "jobs", "failed"], NO_PREFIX),
    (["queue", "q", "flow", "1", "--depth", "-1"], "--depth must be 0 or more"),
    (["queue", "q", "flow", "1", "--max-children", "0"], "--max-children must be at least 1"),
    (["queue", "q", "limits", "--clear", "--rate", "1/1"], "--clear cannot be combined"),
    (["queue", "q", "clean", "failed", "--grace", "-1"], "grace must not be negative"),
    (["queue", "q", "retry-failed", "--count", "0"], "count must be >= 1"),
    (["scheduler", "a:b", "list"], BAD_NAME),
    (["scheduler", "q", "add", "s", "--cron", "99 * * * *"], "minute"),
    (["scheduler", "q", "add", "s", "--cron", "every day at noon"], CRON_FORMS),
    (["scheduler", "q", "add", "s", "--every", "1", "--tz", "No/Where"], "No/Where"),
    (["scheduler", "q", "add", "s", "--every", "0"], "every must be at least 1 ms"),
    (["scheduler", "q", "add", "s", "--every", "5", "--data", "{x"], "--data must be JSON"),
    (["scheduler", "q", "add", "s", "--every", "5", "--limit", "0"], "limit must be an int"),
    (["worker", "nowhere:process", "--queue", "a:b"], BAD_NAME),
    (["worker", "drift_procs:process", "-q", "q", "--connect-timeout", "0"], "connect_timeout"),
    (["demo", "--queue", "a:b"], BAD_NAME),
    (["queues", "--prefix", ""], NO_PREFIX),
    (["workers", "--prefix", ""], NO_PREFIX),
    (["metrics", "--prefix", ""], NO_PREFIX),
    (["dashboard", "--queue", "a:b"], BAD_NAME),
    (["dashboard", "--auth", "x"], "user:password"),
    (["dashboard", "--token", ""], "token must not be empty"),
]


@pytest.mark.parametrize(("args", "reason"), REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_a_refused_argument_starts_no_server(
    args: list[str], reason: str, tmp_path: Path, project: Path
) -> None:
    if args[0] == "dashboard" and not HAS_DASHBOARD:
        pytest.skip("the dashboard extra is not installed")
    data = tmp_path / "data"  # does not exist: a server started there would create it
    done = cli(*args, env=base_env(ECHOMQ_DATA_DIR=str(data)), cwd=project)
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert done.stderr.startswith("echomq: error: "), done.stderr
    assert reason in done.stderr
    assert "embedded" not in done.stderr
    assert not data.exists(), "the embedded server was started for a refused command"


#: One command line of each subcommand that reaches Redis, valid but for its URL.
EVERY_COMMAND: list[list[str]] = [
    ["add", "q", "x"],
    ["queue", "q", "counts"],
    ["queues"],
    ["workers"],
    ["metrics", "--port", "0"],
    ["dashboard", "--port", "0"],
    ["scheduler", "q", "list"],
    ["scheduler", "q", "add", "s", "--every", "5"],
    ["demo", "--jobs", "1"],
    ["worker", "drift_procs:process", "--queue", "q"],
]
#: Careless URLs, what their one-line error says, and the accepted form it shows.
BAD_URLS: list[tuple[str, str]] = [
    ("redis://127.0.0.1:notaport", "the port 'notaport' is not a number from 1 to 65535"),
    ("redis://127.0.0.1:99999", "the port '99999' is not a number from 1 to 65535"),
    ("redis://127.0.0.1:1/abc", "the database 'abc' (the URL's path) is not a number"),
    ("redis://127.0.0.1:1?db=x", "the database 'x' (option db) is not a number"),
    ("unix://tmp/redis.sock", "a unix:// URL takes an absolute path"),
    ("localhost:6379", "did you mean redis://localhost:6379?"),
    ("http://x", "must start with redis://, rediss:// or unix://"),
    ("", "--url is empty"),
]


def refused_at_once(done: subprocess.CompletedProcess[str], data: Path) -> str:
    """The one line of a refusal that exited 2 with nothing printed or started; that line."""
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith("echomq: error: "), done.stderr
    assert "Traceback" not in done.stderr and "using embedded Redis" not in done.stderr
    assert not data.exists(), "the embedded server was started for a refused command"
    return done.stderr


@pytest.mark.parametrize("args", EVERY_COMMAND, ids=" ".join)
def test_every_command_refuses_a_malformed_url_at_once(
    args: list[str], tmp_path: Path, project: Path
) -> None:
    if args[0] == "dashboard" and not HAS_DASHBOARD:
        pytest.skip("the dashboard extra is not installed")
    data = tmp_path / "data"  # does not exist: a server started there would create it
    env = base_env(ECHOMQ_DATA_DIR=str(data))
    done = cli(*args, "--url", "redis://127.0.0.1:notaport", env=env, cwd=project)
    line = refused_at_once(done, data)
    assert "--url: connection URL 'redis://127.0.0.1:notaport': the port 'notaport'" in line
    assert "expected redis://[[user]:password@]host[:port][/db]" in line
    env[URL_ENV] = "redis://127.0.0.1:1/abc"
    line = refused_at_once(cli(*args, env=env, cwd=project), data)
    assert f"${URL_ENV}: connection URL 'redis://127.0.0.1:1/abc': the database 'abc'" in line


@pytest.mark.parametrize(("url", "reason"), BAD_URLS, ids=[u or "empty" for u, _ in BAD_URLS])
def test_a_careless_url_is_one_line_naming_what_is_wrong(
    url: str, reason: str, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    for args in (["queue", "q", "counts"], ["add", "q", "x"]):
        done = cli(*args, "--url", url, env=base_env(ECHOMQ_DATA_DIR=str(data)))
        assert reason in refused_at_once(done, data)


def test_a_url_with_a_bad_database_writes_nothing_to_its_server(
    redis_url: str, queue_name: str
) -> None:
    # redis-py would read the path 'abc' as database 0 and add the job there.
    port = urlsplit(redis_url).port
    for url in (f"redis://127.0.0.1:{port}/abc", f"redis://127.0.0.1:{port}/0/1"):
        done = cli("add", queue_name, "x", "--url", url, env=base_env())
        assert done.returncode == 2, done.stderr
        assert "(the URL's path) is not a number" in done.stderr
    client = SyncRedis.from_url(redis_url)
    try:
        assert list(client.scan_iter(match=f"bull:{queue_name}:*")) == []
    finally:
        client.close()


def test_the_url_forms_that_work_still_work(redis_url: str, queue_name: str) -> None:
    port = urlsplit(redis_url).port
    base = f"redis://127.0.0.1:{port}"
    for url in (base, f"{base}/0", f"{base}/0?socket_timeout=5", f"{base}/"):
        done = cli("add", queue_name, "x", "--data", "{}", "--url", url, env=base_env())
        assert done.returncode == 0, done.stderr
    assert queue_call(redis_url, queue_name, lambda q: q.count()) == 4


def test_the_cron_help_says_what_a_cron_pattern_is() -> None:
    done = cli("scheduler", "q", "add", "--help", env=base_env())
    assert done.returncode == 0, done.stderr
    assert CRON_FORMS.replace("a cron pattern is ", "a cron pattern: ") in " ".join(
        done.stdout.split()
    )
    assert "6 fields: seconds first" not in done.stdout


def test_a_refused_argument_writes_nothing_to_the_given_server(
    redis_url: str, queue_name: str
) -> None:
    url = ["--url", redis_url]
    for args in (
        ["add", queue_name, "x", "--data", "{}", "--job-id", "7"],
        ["scheduler", queue_name, "add", "s", "--every", "5", "--data", "{x"],
        ["queue", queue_name, "limits", "--clear", "--concurrency", "2"],
    ):
        done = cli(*args, *url, env=base_env())
        assert done.returncode == 2, done.stderr
    client = SyncRedis.from_url(redis_url)
    try:
        assert list(client.scan_iter(match=f"bull:{queue_name}:*")) == []
    finally:
        client.close()


@pytest.mark.parametrize("command", ["metrics", "dashboard"])
def test_a_port_in_use_starts_no_server(command: str, tmp_path: Path) -> None:
    if command == "dashboard" and not HAS_DASHBOARD:
        pytest.skip("the dashboard extra is not installed")
    data = tmp_path / "data"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        done = cli(command, "--port", port, env=base_env(ECHOMQ_DATA_DIR=str(data)))
    assert done.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert not data.exists()


# -- 2. a job's options agree with its attempts ----------------------------------------------


def test_job_shows_the_options_it_was_given_and_the_tries_it_has(
    redis_url: str, queue_name: str
) -> None:
    url = ["--url", redis_url]
    plain = cli("add", queue_name, "plain", "--data", "{}", *url, env=base_env()).stdout.strip()
    three = cli("add", queue_name, "three", "--data", "{}", "--attempts", "3", *url,
                env=base_env()).stdout.strip()  # fmt: skip
    stored = SyncRedis.from_url(redis_url)
    try:  # what every producer stores when no attempts were given
        assert json.loads(stored.hget(f"bull:{queue_name}:{plain}", "opts") or "") == {
            "attempts": 0
        }
    finally:
        stored.close()

    async def once(job: echomq.Job) -> str:
        return "done"

    async def process() -> None:
        worker = echomq.Worker(queue_name, once, connection=redis_url, drain_delay=0.2)
        async with Queue(queue_name, connection=redis_url) as q, worker:
            deadline = time.monotonic() + DEADLINE
            while (await q.get_job_counts("completed"))["completed"] < 2:
                assert time.monotonic() < deadline, "the jobs were not processed"
                await asyncio.sleep(0.02)

    asyncio.run(process())

    shown = cli("queue", queue_name, "job", plain, *url, env=base_env())
    assert shown.returncode == 0, shown.stderr
    assert re.search(r"^attempts\s+1 made of 1 allowed$", shown.stdout, re.M), shown.stdout
    assert re.search(r"^options\s+\{\}$", shown.stdout, re.M), shown.stdout
    as_json = json.loads(cli("queue", queue_name, "job", plain, "--json", *url,
                             env=base_env()).stdout)  # fmt: skip
    assert (as_json["attempts_made"], as_json["attempts"], as_json["options"]) == (1, 1, {})

    shown = cli("queue", queue_name, "job", three, *url, env=base_env())
    assert re.search(r"^attempts\s+1 made of 3 allowed$", shown.stdout, re.M), shown.stdout
    assert re.search(r'^options\s+\{"attempts": 3\}$', shown.stdout, re.M), shown.stdout

    listed = json.loads(cli("queue", queue_name, "jobs", "completed", "--json", *url,
                            env=base_env()).stdout)  # fmt: skip
    assert sorted(job["attempts"] for job in listed) == [1, 3]


# -- 3. --durability is explained once -------------------------------------------------------

POINTING = [
    [],
    ["worker"],
    ["queue"],
    ["queue", "q", "counts"],
    ["queue", "q", "flow"],
    ["queues"],
    ["metrics"],
    ["dashboard"],
    ["add"],
    ["scheduler", "q", "add"],
    ["demo"],
]


@pytest.mark.parametrize("command", POINTING, ids=lambda c: " ".join(c) or "echomq")
def test_other_commands_point_to_the_server_help_for_durability(command: list[str]) -> None:
    done = cli(*command, "--help", env=base_env(COLUMNS="80"))
    assert done.returncode == 0, done.stderr
    assert DURABILITY_STORY not in done.stdout
    lines = done.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.strip().startswith("--durability"))
    assert lines[at + 1].strip() == DURABILITY_POINTER  # the option and one line of help


def test_the_server_help_tells_durability_where_it_can_start_the_server() -> None:
    for starting in ([], ["start"], ["reset"]):
        done = cli("server", *starting, "--help", env=base_env())
        assert done.returncode == 0
        assert DURABILITY_STORY in " ".join(done.stdout.split()), starting
    for other in ("status", "stop", "path"):
        done = cli("server", other, "--help", env=base_env())
        assert done.returncode == 0
        assert "--durability" not in done.stdout, other


def test_durability_still_works_where_it_did(
    data_dir: Path, redis_url: str, queue_name: str
) -> None:
    env = base_env(ECHOMQ_DATA_DIR=str(data_dir))
    status = cli("server", "status", "--durability", "everysec", env=env)
    assert status.returncode == 0, status.stderr
    assert re.search(r"^state\s+stopped$", status.stdout, re.M)
    counts = cli("queue", queue_name, "counts", "--durability", "everysec", env=env)
    assert counts.returncode == 0, counts.stderr
    assert "(appendfsync everysec)" in counts.stderr
    client = SyncRedis(unix_socket_path=str(data_dir.resolve() / "redis.sock"))
    try:
        assert client.config_get("appendfsync") == {"appendfsync": "everysec"}
    finally:
        client.close()
    given = cli("--durability", "always", "queue", queue_name, "counts", "--url", redis_url,
                env=env)  # fmt: skip
    assert given.returncode == 0
    assert "note: --durability applies only to the embedded Redis" in given.stderr
    assert cli("queue", queue_name, "counts", "--durability", "never", env=env).returncode == 2


# -- 4. the worker's signal lines are the documented ones ------------------------------------


def test_the_signal_lines_are_those_the_docs_list(
    project: Path, tmp_path: Path, queue_name: str
) -> None:
    documented = [m for m in doc_rows("echomq.cli") if m.startswith("received SIGTERM")]
    first, second, third = (
        next(m for m in documented if m.startswith(start))
        for start in ("received SIGTERM: ", "received SIGTERM again: ", "received SIGTERM a third")
    )
    # A private server, frozen after the first signal so the second one's hand-back waits and
    # a third signal finds the process still running.
    (tmp_path / "redis").mkdir()
    server = RedisServer(data_dir=tmp_path / "redis")
    server.start()
    log_path = project / "worker.log"
    proc: subprocess.Popen[bytes] | None = None
    frozen = False
    try:
        queue_call(server.url, queue_name, lambda q: q.add("slow", {"seconds": 60}))
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "echomq.cli", "worker", "drift_procs:process"]
                + ["--queue", queue_name, "--url", server.url, "--drain-delay", "0.5"],
                cwd=project,
                env=base_env(MARKER=str(project / "started")),
                stdout=subprocess.DEVNULL,
                stderr=log,
            )

        def logged(line: str) -> Callable[[], bool]:
            return lambda: line in log_path.read_text()

        wait_until((project / "started").exists, "the slow job to start")
        proc.send_signal(signal.SIGTERM)
        wait_until(logged(first), f"the line {first!r}")
        assert server.pid is not None
        os.kill(server.pid, signal.SIGSTOP)
        frozen = True
        proc.send_signal(signal.SIGTERM)
        wait_until(logged(second), f"the line {second!r}")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=DEADLINE) == 128 + signal.SIGTERM
        assert third in log_path.read_text()
    finally:
        if frozen and server.pid is not None:
            os.kill(server.pid, signal.SIGCONT)
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        server.stop()


# -- 5. the embedded server's notice is the documented one -----------------------------------


def test_the_embedded_server_is_named_in_one_line_whether_started_or_reused(
    data_dir: Path,
) -> None:
    text = " ".join(WORKERS_MD.read_text(encoding="utf-8").split())
    found = re.search(r"running: `(using embedded Redis at [^`]*)`", text)
    assert found, "docs/workers.md no longer quotes the embedded server's notice"
    notice = found.group(1).replace("<data dir>", str(data_dir.resolve()))
    env = base_env(ECHOMQ_DATA_DIR=str(data_dir))
    started = cli("add", "drift", "job", "--data", "{}", env=env)
    reused = cli("queue", "drift", "counts", env=env)
    for done in (started, reused):
        assert done.returncode == 0, done.stderr
        assert done.stderr.splitlines().count(notice) == 1, done.stderr
        assert done.stderr.count("embedded") == 1, done.stderr


# -- 6. the README's "Use it" examples work for the reader of "Try it" -----------------------


def readme_blocks(language: str) -> list[str]:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Use it") :]
    section = section[: section.index("\n## ", 1)]
    return re.findall(rf"```{language}\n(.*?)```", section, re.S)


def run_readme(env: dict[str, str], cwd: Path) -> str:
    """Run the README's Python examples, then its shell lines that return; their stdout."""
    python, task, sync = readme_blocks("python")
    (shell,) = readme_blocks("sh")
    out = []
    for n, block in enumerate((python, task, sync)):
        script = cwd / f"readme_{n}.py"
        script.write_text(block)
        done = subprocess.run(
            [sys.executable, str(script)], env=env, cwd=cwd, capture_output=True, text=True,
            timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        out.append(done.stdout)
    lines = []
    for line in shell.splitlines():
        words = shlex.split(line, comments=True)
        if words[:2] in (["echomq", "worker"], ["echomq", "dashboard"]):
            continue  # they run until stopped
        lines.append(line)
    bin_dir = str(Path(sys.executable).parent)
    shell_env = {**env, "PATH": bin_dir + os.pathsep + env.get("PATH", "")}
    done = subprocess.run(
        ["bash", "-euc", "\n".join(lines)], env=shell_env, cwd=cwd, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out.append(done.stdout)
    return "\n".join(out)


def test_the_readme_examples_run_on_the_embedded_server(data_dir: Path, tmp_path: Path) -> None:
    env = base_env(ECHOMQ_DATA_DIR=str(data_dir))
    started = cli("server", "start", env=env)  # what "Try it" leaves running (echomq demo)
    assert started.returncode == 0, started.stderr
    out = run_readme(env, tmp_path)
    assert "sending ada@example.com" in out
    assert "{'sent': True}" in out
    assert "hello Ada <ada@example.com>" in out  # the task's typed result
    assert re.search(r"^emails\s+2\s", out, re.M), out  # the sync add and the CLI's add wait
    assert (data_dir / "redis.sock").exists()


def test_the_readme_examples_run_on_your_own_redis(tmp_path: Path) -> None:
    (tmp_path / "redis").mkdir()
    server = RedisServer(data_dir=tmp_path / "redis")
    server.start()
    try:
        env = base_env(ECHOMQ_REDIS_URL=server.url)  # the data dir cannot be created
        out = run_readme(env, tmp_path)
    finally:
        server.stop()
    assert "sending ada@example.com" in out
    assert "hello Ada <ada@example.com>" in out
    assert re.search(r"^emails\s+2\s", out, re.M), out
