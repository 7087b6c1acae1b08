"""The CLI manages what it starts and says what it talks to: ``server``, ``add``, ``queues``,
``demo --fresh``, ``--url`` anywhere, the embedded-server notices, and quiet broken pipes.

Every command runs for real as ``python -m echomq.cli`` with stdout and stderr on pipes. The
embedded server always lives in a temporary ``ECHOMQ_DATA_DIR`` (never the user's own), and is
stopped after each test.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from redis import Redis as SyncRedis

from _cli import DEADLINE, base_env, cli, queue_call, wait_until
from echomq.cli._server import worker_queue
from echomq.embedded import RedisServer, find_redis_server, stop_embedded_server

EMBEDDED_NOTE = "using embedded Redis at unix://"
NO_QUEUE_WARNING = "warning: the embedded Redis holds no queue"


# -- helpers ---------------------------------------------------------------------------------


def add_jobs(url: str, queue: str, n: int, prefix: str = "bull") -> None:
    queue_call(url, queue, lambda q: q.add_bulk([("job", {"n": i}) for i in range(n)]), prefix)


def keys_of(url: str, pattern: str) -> list[bytes]:
    client = SyncRedis.from_url(url)
    try:
        return list(client.scan_iter(match=pattern))
    finally:
        client.close()


@pytest.fixture
def data_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A short, private data directory for the embedded server; stopped after the test."""
    directory = tmp_path_factory.mktemp("emb")
    try:
        yield directory
    finally:
        stop_embedded_server(directory)


@pytest.fixture
def emb_env(data_dir: Path) -> dict[str, str]:
    """The environment of a command that falls back to the embedded server in ``data_dir``."""
    return base_env(ECHOMQ_DATA_DIR=str(data_dir))


def embedded_url(data_dir: Path) -> str:
    return f"unix://{data_dir.resolve()}/redis.sock?db=0"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "manage_procs.py").write_text("async def process(job):\n    return job.data\n")
    return tmp_path


@pytest.fixture
def workers(project: Path) -> Iterator[Callable[..., subprocess.Popen[bytes]]]:
    """Start ``echomq worker`` subprocesses (stderr to a file); killed after the test if alive."""
    started: list[subprocess.Popen[bytes]] = []

    def start(env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
        with open(project / f"worker-{len(started)}.log", "wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "echomq.cli", "worker", "manage_procs:process", *args],
                cwd=project,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        started.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


# -- server ----------------------------------------------------------------------------------


def test_server_path_and_status_do_not_start_it(data_dir: Path, emb_env: dict[str, str]) -> None:
    path = cli("server", "path", env=emb_env)
    assert (path.returncode, path.stdout, path.stderr) == (0, f"{data_dir.resolve()}\n", "")
    status = cli("server", "status", env=emb_env)
    assert status.returncode == 0, status.stderr
    assert re.search(r"^state\s+stopped$", status.stdout, re.M)
    assert re.search(rf"^data dir\s+{re.escape(str(data_dir.resolve()))}$", status.stdout, re.M)
    assert re.search(r"^size\s+\d", status.stdout, re.M)
    assert not (data_dir / "redis.sock").exists()


def test_server_start_status_stop(data_dir: Path, emb_env: dict[str, str]) -> None:
    started = cli("server", "start", env=emb_env)
    assert started.returncode == 0, started.stderr
    assert re.search(r"^state\s+running \(pid \d+\)$", started.stdout, re.M)

    added = cli("add", "sized", "job", "--data", '{"x": "' + "y" * 5000 + '"}', env=emb_env)
    assert added.returncode == 0, added.stderr
    status = cli("server", "status", "--json", env=emb_env)
    assert status.returncode == 0, status.stderr
    info = json.loads(status.stdout)
    assert info["state"] == "running"
    assert info["data_dir"] == str(data_dir.resolve())
    assert info["url"] == embedded_url(data_dir)
    assert info["size"] > 5000  # the AOF holds the payload
    pid = info["pid"]
    assert isinstance(pid, int)
    os.kill(pid, 0)  # alive

    stopped = cli("server", "stop", env=emb_env)
    assert stopped.returncode == 0, stopped.stderr
    assert f"stopped the embedded Redis (pid {pid}); its data stays in" in stopped.stdout
    wait_until(lambda: not Path(f"/proc/{pid}").exists(), "the server process to exit")
    after = json.loads(cli("server", "status", "--json", env=emb_env).stdout)
    assert (after["state"], after["pid"]) == ("stopped", None)
    assert after["size"] > 5000  # data kept

    again = cli("server", "stop", env=emb_env)
    assert again.returncode == 0
    assert "is not running" in again.stdout

    # Restarted, the job is still there (AOF).
    counts = cli("queue", "sized", "counts", "--json", env=emb_env)
    assert json.loads(counts.stdout)["counts"]["waiting"] == 1


def test_server_refuses_url(emb_env: dict[str, str]) -> None:
    done = cli("--url", "redis://127.0.0.1:1", "server", "status", env=emb_env)
    assert done.returncode == 2
    assert done.stdout == ""
    assert "echomq: error: echomq server manages the embedded Redis only" in done.stderr


def test_server_stop_refuses_while_a_worker_uses_it(
    data_dir: Path,
    emb_env: dict[str, str],
    workers: Callable[..., subprocess.Popen[bytes]],
) -> None:
    url = embedded_url(data_dir)
    assert cli("server", "start", env=emb_env).returncode == 0
    worker = workers(emb_env, "--queue", "busy", "--drain-delay", "0.5")
    wait_until(
        lambda: bool(queue_call(url, "busy", lambda q: q.get_workers())), "the worker to connect"
    )

    refused = cli("server", "stop", env=emb_env)
    assert refused.returncode == 1
    assert refused.stdout == ""
    assert refused.stderr.startswith("echomq: error: not stopping the embedded Redis")
    assert "queue 'busy' (prefix 'bull')" in refused.stderr
    assert "--force" in refused.stderr
    assert json.loads(cli("server", "status", "--json", env=emb_env).stdout)["state"] == "running"
    assert worker.poll() is None

    forced = cli("server", "stop", "--force", env=emb_env)
    assert forced.returncode == 0, forced.stderr
    assert "stopped the embedded Redis" in forced.stdout
    assert json.loads(cli("server", "status", "--json", env=emb_env).stdout)["state"] == "stopped"
    worker.send_signal(signal.SIGTERM)
    worker.wait(timeout=DEADLINE)


def test_server_reset_empties_it_after_asking(
    data_dir: Path,
    emb_env: dict[str, str],
    workers: Callable[..., subprocess.Popen[bytes]],
) -> None:
    url = embedded_url(data_dir)
    assert cli("add", "kept", "job", "--data", "{}", env=emb_env).returncode == 0

    asked = cli("server", "reset", env=emb_env)
    assert asked.returncode == 2
    assert "--yes" in asked.stderr
    assert keys_of(url, "bull:kept:*")  # nothing deleted without --yes

    worker = workers(emb_env, "--queue", "busy", "--drain-delay", "0.5")
    wait_until(
        lambda: bool(queue_call(url, "busy", lambda q: q.get_workers())), "the worker to connect"
    )
    refused = cli("server", "reset", "--yes", env=emb_env)
    assert refused.returncode == 1
    assert refused.stderr.startswith("echomq: error: not resetting the embedded Redis")
    assert keys_of(url, "bull:kept:*")
    worker.send_signal(signal.SIGTERM)
    worker.wait(timeout=DEADLINE)

    done = cli("server", "reset", "--yes", env=emb_env)
    assert done.returncode == 0, done.stderr
    assert "holds nothing now" in done.stdout
    assert keys_of(url, "*") == []
    counts = cli("queue", "kept", "counts", "--json", env=emb_env)
    assert json.loads(counts.stdout)["counts"]["waiting"] == 0


def test_worker_client_names_are_recognised() -> None:
    assert worker_queue("bull:ZW1haWxz") == ("bull", "emails")
    assert worker_queue("bull:ZW1haWxz:w:box-1") == ("bull", "emails")
    assert worker_queue("my:app:ZW1haWxz") == ("my:app", "emails")
    assert worker_queue("bull:ZW1haWxz:qe") is None  # a QueueEvents reader
    assert worker_queue("redis-cli") is None
    assert worker_queue("bull:not base64!") is None


# -- --url anywhere, and what the commands say they talk to ----------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["--url", "{url}", "queue", "{q}", "counts", "--json"],
        ["queue", "{q}", "counts", "--json", "--url", "{url}"],
        ["queue", "--url", "{url}", "{q}", "counts", "--json"],
        ["--url", "redis://127.0.0.1:1/0", "queue", "{q}", "counts", "--json", "--url", "{url}"],
    ],
)
def test_url_before_or_after_the_action(
    argv: list[str], redis_url: str, queue_name: str, emb_env: dict[str, str], data_dir: Path
) -> None:
    add_jobs(redis_url, queue_name, 3)
    done = cli(*(a.format(url=redis_url, q=queue_name) for a in argv), env=emb_env)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["counts"]["waiting"] == 3
    assert "embedded" not in done.stderr
    assert not (data_dir / "redis.sock").exists()


def test_prefix_before_the_command(redis_url: str, queue_name: str) -> None:
    add_jobs(redis_url, queue_name, 2, prefix="other")
    done = cli(
        "--prefix", "other", "--url", redis_url, "queue", queue_name, "counts", "--json",
        env=base_env(),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["counts"]["waiting"] == 2


def test_queue_on_the_embedded_server_says_so_and_warns_of_a_missing_queue(
    data_dir: Path, emb_env: dict[str, str], redis_url: str
) -> None:
    missing = cli("queue", "ghost", "counts", env=emb_env)
    assert missing.returncode == 0, missing.stderr
    assert f"{EMBEDDED_NOTE}{data_dir.resolve()}/redis.sock" in missing.stderr
    assert f"{NO_QUEUE_WARNING} 'ghost' (prefix 'bull') and ECHOMQ_REDIS_URL is unset" in (
        missing.stderr
    )
    assert missing.stdout.startswith("queue ghost\n")

    assert cli("add", "real", "job", "--data", "{}", env=emb_env).returncode == 0
    present = cli("queue", "real", "counts", env=emb_env)
    assert present.returncode == 0
    assert EMBEDDED_NOTE in present.stderr
    assert NO_QUEUE_WARNING not in present.stderr

    env_url = cli("queue", "ghost", "counts", env={**emb_env, "ECHOMQ_REDIS_URL": redis_url})
    assert env_url.returncode == 0
    assert "embedded" not in env_url.stderr
    assert NO_QUEUE_WARNING not in env_url.stderr


def _not_yet_note(queue: str) -> str:
    return (
        f"INFO    echomq.cli: queue {queue!r} (prefix 'bull') is not on the embedded Redis yet: "
        "waiting for its first job; if its producer uses another Redis, pass --url or set "
        "ECHOMQ_REDIS_URL"
    )


def _worker_stderr(project: Path, env: dict[str, str], url: str, queue: str, *args: str) -> str:
    """Run ``echomq worker --queue QUEUE ARGS`` with stderr on a pipe until its registry entry
    is written, SIGTERM it (exit code 0), and return everything it wrote on stderr."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "echomq.cli", "worker", "manage_procs:process", "-q", queue, *args],
        cwd=project,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        client = SyncRedis.from_url(url)
        try:
            wait_until(
                lambda: proc.poll() is not None or client.exists(f"bull:{queue}:workers") == 1,
                "the worker to register",
            )
        finally:
            client.close()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=DEADLINE)
        assert proc.returncode == 0, err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return str(err)


def test_worker_on_the_embedded_server_says_once_at_info_its_queue_is_not_there_yet(
    data_dir: Path, emb_env: dict[str, str], project: Path
) -> None:
    """A worker started before its queue exists (its producer may start later) says so once,
    at INFO, with the hint for a producer on another server; no warning."""
    assert cli("server", "start", env=emb_env).returncode == 0
    url = embedded_url(data_dir)
    text = _worker_stderr(project, emb_env, url, "ghost", "--heartbeat-interval", "0.2")
    assert f"{EMBEDDED_NOTE}{data_dir.resolve()}/redis.sock" in text
    assert text.count("not on the embedded Redis") == 1, text
    assert _not_yet_note("ghost") in text
    assert "ghost'" not in "".join(line for line in text.splitlines() if "WARNING" in line)
    assert NO_QUEUE_WARNING not in text and "warning:" not in text
    # above INFO it is not said at all
    quiet = _worker_stderr(project, emb_env, url, "shade", "--log-level", "WARNING")
    assert "not on the embedded Redis" not in quiet and "warning:" not in quiet, quiet
    # once the queue exists, not said
    again = _worker_stderr(project, emb_env, url, "ghost")
    assert "not on the embedded Redis" not in again and "warning:" not in again, again


# -- add -------------------------------------------------------------------------------------


def test_add_prints_the_job_id_and_applies_the_options(redis_url: str, queue_name: str) -> None:
    done = cli(
        "add", queue_name, "send", "--data", '{"to": "ada", "n": [1, 2]}', "--url", redis_url,
        "--delay", "60", "--attempts", "3", "--job-id", "mail-1",
        env=base_env(),
    )  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (0, "mail-1\n", "")
    job = queue_call(redis_url, queue_name, lambda q: q.get_job("mail-1"))
    assert (job.name, job.data, job.attempts) == ("send", {"to": "ada", "n": [1, 2]}, 3)
    assert job.delay == 60000 or job.delay == 60.0
    state = queue_call(redis_url, queue_name, lambda q: q.get_state("mail-1"))
    assert state == "delayed"

    plain = cli("add", queue_name, "p", "--data", "7", "--priority", "5", "--url", redis_url,
                env=base_env())  # fmt: skip
    assert plain.returncode == 0, plain.stderr
    job_id = plain.stdout.strip()
    assert re.fullmatch(r"\d+", job_id)
    assert queue_call(redis_url, queue_name, lambda q: q.get_state(job_id)) == "prioritized"


@pytest.mark.parametrize("data", ["{bad", "", "{'single': 1}", "[1, 2"])
def test_add_with_invalid_json_writes_nothing(
    data: str, redis_url: str, queue_name: str, data_dir: Path, emb_env: dict[str, str]
) -> None:
    done = cli("add", queue_name, "x", "--data", data, "--url", redis_url, env=emb_env)
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith("echomq: error: --data is not valid JSON")
    assert "nothing was added" in done.stderr
    assert keys_of(redis_url, f"bull:{queue_name}:*") == []
    # Without --url the embedded server is not even started.
    done = cli("add", queue_name, "x", "--data", data, env=emb_env)
    assert done.returncode == 2
    assert not (data_dir / "redis.sock").exists()


def test_add_with_a_bad_option_exits_2(redis_url: str, queue_name: str) -> None:
    done = cli("add", queue_name, "x", "--data", "{}", "--priority", "-1", "--url", redis_url,
               env=base_env())  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.startswith("echomq: error:")
    assert "priority" in done.stderr
    assert keys_of(redis_url, f"bull:{queue_name}:*") == []


def test_add_without_data_adds_an_empty_object(redis_url: str, queue_name: str) -> None:
    done = cli("add", queue_name, "x", "--url", redis_url, env=base_env())
    assert (done.returncode, done.stderr) == (0, "")
    job = queue_call(redis_url, queue_name, lambda q: q.get_job(done.stdout.strip()))
    assert (job.name, job.data) == ("x", {})
    stored = SyncRedis.from_url(redis_url)
    try:  # what echomq.add stores for no data, as Node does for undefined data
        assert stored.hget(f"bull:{queue_name}:{job.id}", "data") == b"{}"
    finally:
        stored.close()


# -- queues ----------------------------------------------------------------------------------


@pytest.fixture
def no_keys_server(tmp_path: Path) -> Iterator[str]:
    """A server on which KEYS is disabled: ``queues`` must find queues with SCAN."""
    server = RedisServer(
        executable=find_redis_server(),
        data_dir=tmp_path / "nokeys",
        extra_args=["--rename-command", "KEYS", ""],
    )
    (tmp_path / "nokeys").mkdir()
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


def test_queues_lists_the_queues_of_a_prefix_with_counts(no_keys_server: str) -> None:
    url = no_keys_server
    client = SyncRedis.from_url(url)
    try:
        with pytest.raises(Exception, match="unknown command"):
            client.keys("*")
    finally:
        client.close()
    add_jobs(url, "alpha", 3, prefix="app[1]")
    add_jobs(url, "beta", 1, prefix="app[1]")
    queue_call(url, "beta", lambda q: q.pause(), prefix="app[1]")
    add_jobs(url, "elsewhere", 2, prefix="app1")  # matched by the unescaped glob app[1]
    add_jobs(url, "default", 1)

    done = cli("queues", "--prefix", "app[1]", "--url", url, env=base_env())
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == [
        "QUEUE", "WAITING", "PRIORITIZED", "DELAYED", "ACTIVE", "COMPLETED", "FAILED",
    ]  # fmt: skip
    assert lines[1].split() == ["alpha", "3", "0", "0", "0", "0", "0"]
    assert lines[2].split()[:3] == ["beta", "(paused)", "1"]
    assert len(lines) == 3

    as_json = json.loads(cli("queues", "--json", "--url", url, env=base_env()).stdout)
    assert as_json == [
        {
            "queue": "default",
            "paused": False,
            "counts": {
                "active": 0, "completed": 0, "delayed": 0, "failed": 0, "prioritized": 0,
                "waiting": 1, "waiting-children": 0,
            },
        }
    ]  # fmt: skip

    none = cli("queues", "--prefix", "nothing-here", "--url", url, env=base_env())
    assert (none.returncode, none.stdout) == (0, "no queues under prefix 'nothing-here'\n")


def test_queues_lists_the_others_when_one_cannot_be_read(redis_url: str) -> None:
    add_jobs(redis_url, "fine", 2, prefix="odd")
    add_jobs(redis_url, "broken", 1, prefix="odd")
    client = SyncRedis.from_url(redis_url)
    try:
        client.delete("odd:broken:wait")
        client.set("odd:broken:wait", "not a list")  # LLEN answers WRONGTYPE
    finally:
        client.close()
    done = cli("queues", "--prefix", "odd", "--url", redis_url, env=base_env())
    assert done.returncode == 0, done.stderr
    rows = {line.split()[0]: line.split()[1:] for line in done.stdout.splitlines()[1:]}
    assert rows == {"broken": ["?"] * 6, "fine": ["2", "0", "0", "0", "0", "0"]}
    assert "echomq: queue 'broken' cannot be read: " in done.stderr
    assert "WRONGTYPE" in done.stderr and "odd:broken:wait" in done.stderr
    listed = cli("queues", "--prefix", "odd", "--json", "--url", redis_url, env=base_env())
    as_json = json.loads(listed.stdout)
    assert [q["queue"] for q in as_json] == ["broken", "fine"]
    assert "WRONGTYPE" in as_json[0]["error"] and as_json[1]["counts"]["waiting"] == 2


# -- demo ------------------------------------------------------------------------------------


def test_demo_fresh_starts_empty_and_draws_no_bar_off_a_terminal(
    data_dir: Path, emb_env: dict[str, str]
) -> None:
    url = embedded_url(data_dir)
    first = cli("demo", "--jobs", "100", env=emb_env)
    assert first.returncode == 0, first.stderr
    add_jobs(url, "echomq-demo", 5)  # leftovers the fresh demo must not count
    fresh = cli("demo", "--jobs", "100", "--fresh", env=emb_env)
    assert fresh.returncode == 0, fresh.stderr
    assert "queue echomq-demo is empty (--fresh)" in fresh.stderr
    assert "compacted the embedded Redis's AOF" in fresh.stderr
    assert "100 completed, 0 failed, 2 retried" in fresh.stdout
    assert "\r" not in fresh.stderr
    assert "[#" not in fresh.stderr
    assert re.search(r"^done 100/100 100% in [\d.]+s", fresh.stderr, re.M)
    counts = queue_call(url, "echomq-demo", lambda q: q.get_job_counts())
    assert (counts["completed"], counts["waiting"]) == (100, 0)


def demo_on_a_terminal(*args: str) -> tuple[int, str, str]:
    """``echomq demo ARGS`` with stderr on a pseudo-terminal (so it draws its bar) and stdout
    on a pipe: its exit code, what the terminal showed (``\r\n`` as ``\n``) and stdout."""
    controller, terminal = pty.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "echomq.cli", "demo", *args],
            env=base_env(),
            stdout=subprocess.PIPE,
            stderr=terminal,
        )
        os.close(terminal)
        seen = b""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(controller, 4096)
                except OSError:  # the terminal closed: the process is gone
                    break
                if not chunk:
                    break
                seen += chunk
            elif proc.poll() is not None:
                break
        out, _ = proc.communicate(timeout=DEADLINE)
    finally:
        os.close(controller)
    text = seen.decode(errors="replace").replace("\r\n", "\n")
    return proc.returncode, text, out.decode()


def test_demo_draws_its_progress_bar_on_a_terminal(redis_url: str, queue_name: str) -> None:
    code, text, out = demo_on_a_terminal("--jobs", "200", "--queue", queue_name, "--url", redis_url)
    assert code == 0, text
    assert "\r[" in text
    assert "200/200 100%" in text
    # One line, redrawn in place, counting the retried attempts instead of logging them.
    assert text.count("\n") == 1 and text.endswith("\n"), text
    assert "WARNING" not in text
    assert re.search(r"\r\[#+\] 200/200 100%  [\d,]+ jobs/s  4 retried  0 failed *\n$", text)
    assert "200 completed, 0 failed, 4 retried" in out


def test_demo_verbose_logs_each_retry_on_a_line_of_its_own(redis_url: str, queue_name: str) -> None:
    code, text, out = demo_on_a_terminal(
        "--jobs", "100", "--queue", queue_name, "--url", redis_url, "--verbose"
    )
    assert code == 0, text
    warnings = re.findall(r"^.*WARNING echomq.worker: .*$", text, re.M)
    assert len(warnings) == 2, text
    # The bar's line is ended before each: a log line never starts after the bar on its line.
    assert all(re.match(r"\d{4}-\d\d-\d\d ", line) for line in warnings), warnings
    assert "100 completed, 0 failed, 2 retried" in out


# -- broken pipes ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["queue", "{q}", "counts"],
        ["queue", "{q}", "jobs", "waiting"],
        ["queues"],
        ["add", "{q}", "x", "--data", "{{}}"],
        ["server", "status"],
        ["server", "path"],
        ["demo", "--jobs", "20", "--queue", "{q}"],
    ],
)
def test_a_reader_that_went_away_ends_the_command_quietly(
    argv: list[str], redis_url: str, queue_name: str, emb_env: dict[str, str]
) -> None:
    add_jobs(redis_url, queue_name, 3)
    env = {**emb_env, "ECHOMQ_REDIS_URL": redis_url}
    proc = subprocess.Popen(
        [sys.executable, "-m", "echomq.cli", *(a.format(q=queue_name) for a in argv)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    proc.stdout.close()  # the reader is gone before the command writes anything
    _, err = proc.communicate(timeout=60)
    text = err.decode(errors="replace")
    assert "Traceback" not in text
    assert "BrokenPipe" not in text
    assert "Exception ignored" not in text
    assert proc.returncode == 141, text


def test_help_to_a_reader_that_went_away_is_quiet() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "echomq.cli", "--help"],
        env=base_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None
    proc.stdout.close()
    _, err = proc.communicate(timeout=60)
    assert err == b""  # argparse drops what it cannot write; --help still succeeds
    assert proc.returncode == 0


def test_piped_into_head(redis_url: str, queue_name: str) -> None:
    add_jobs(redis_url, queue_name, 3000)  # far more output than a pipe buffer holds
    script = (
        f"{sys.executable} -m echomq.cli queue {queue_name} jobs waiting --end -1 "
        f'--url {redis_url} | head -n 2; echo "status=${{PIPESTATUS[0]}}" >&2'
    )
    done = subprocess.run(
        ["bash", "-c", script], env=base_env(), capture_output=True, text=True, timeout=60
    )
    lines = done.stdout.splitlines()
    assert len(lines) == 2
    assert lines[0].split()[:2] == ["ID", "NAME"]
    assert lines[1].split()[:2] == ["1", "job"]
    assert "Traceback" not in done.stderr
    assert "BrokenPipe" not in done.stderr
    assert done.stderr.strip().splitlines()[-1] == "status=141"
