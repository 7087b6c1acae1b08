"""A redis-server per scenario, started with the configuration the scenario needs.

:class:`FaultServer` runs ``redis-server`` on a free loopback port in its own directory and
can hurt it the ways the scenarios need: ``kill -9`` and a restart on the same port and
directory (AOF), ``SIGSTOP`` / ``SIGCONT``. It never touches a server it did not start.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from echomq.embedded import find_redis_server

STARTUP_TIMEOUT = 20.0


class ServerError(RuntimeError):
    """The server did not come up."""


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _probe(port: int) -> bytes:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(64)
    except OSError:
        return b""


class FaultServer:
    """One ``redis-server`` child process.

    Args:
        data_dir: its working directory (AOF files, log); kept across restarts.
        args: extra ``redis-server`` arguments, e.g. ``["--appendonly", "yes"]``.
    """

    def __init__(self, data_dir: Path, args: Sequence[str] = ()) -> None:
        self.data_dir = data_dir
        self.args = list(args)
        self.port = 0
        self._proc: subprocess.Popen[bytes] | None = None
        self._frozen = False

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int:
        assert self._proc is not None, "server not running"
        return self._proc.pid

    @property
    def log_path(self) -> Path:
        return self.data_dir / "redis.log"

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def start(self) -> None:
        """Start (or restart after :meth:`kill9`) on the same port and directory; wait for PONG."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        fixed = self.port != 0  # a restart keeps its port: clients know it
        for _ in range(1 if fixed else 5):
            self.port = self.port or _free_port()
            executable = shutil.which("redis-server") or find_redis_server()
            argv = [executable, "--port", str(self.port), "--bind", "127.0.0.1"]
            argv += ["--dir", str(self.data_dir), "--save", "", "--logfile", "redis.log"]
            argv += ["--appendonly", "no", *self.args]
            self._proc = subprocess.Popen(
                argv, cwd=self.data_dir, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL
            )
            if self._wait_ready():
                return
            self._reap()
            if fixed or "Address already in use" not in self.log_tail():
                break
            self.port = 0  # lost the race for the port: pick another
        raise ServerError(f"redis-server did not start:\n{self.log_tail()}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while time.monotonic() < deadline:
            assert self._proc is not None
            if self._proc.poll() is not None:
                return False
            if _probe(self.port).startswith(b"+PONG"):
                return True
            time.sleep(0.02)
        return False

    def _reap(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            if self._frozen:
                os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
        proc.wait()
        self._frozen = False

    def kill9(self) -> None:
        """SIGKILL, as a crash or an OOM killer would: nothing is flushed."""
        self._reap()

    def freeze(self) -> None:
        """SIGSTOP: the server answers nothing until :meth:`thaw`; connections stay open."""
        os.kill(self.pid, signal.SIGSTOP)
        self._frozen = True

    def thaw(self) -> None:
        """SIGCONT."""
        os.kill(self.pid, signal.SIGCONT)
        self._frozen = False

    def stop(self) -> None:
        """SIGTERM (SIGKILL after 10 s); stopping a stopped server does nothing."""
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            if self._frozen:
                os.kill(proc.pid, signal.SIGCONT)
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._proc = None
        self._frozen = False
