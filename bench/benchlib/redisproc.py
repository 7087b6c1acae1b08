"""A private ``redis-server`` for one benchmark run, and a tiny RESP client for it.

The harness runs on the system Python with no third-party packages, so it speaks RESP
over a socket itself (PING, INFO, FLUSHALL, SHUTDOWN, and the reads of the durability
check). The server is started on a free loopback port, with persistence off unless an
AOF fsync policy is asked for, and is always stopped again. ``kill`` (SIGKILL) and a
later ``start`` on the same port and directory reproduce a crash and a restart.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from pathlib import Path


class RespClient:
    """Just enough RESP2 to send a command and read one reply."""

    def __init__(self, port: int, host: str = "127.0.0.1") -> None:
        self.sock = socket.create_connection((host, port), timeout=30)
        self.buf = b""

    def close(self) -> None:
        self.sock.close()

    @staticmethod
    def _encode(parts: tuple[str, ...]) -> bytes:
        out = [f"*{len(parts)}\r\n".encode()]
        for p in parts:
            b = p.encode()
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        return b"".join(out)

    def call(self, *parts: str) -> object:
        self.sock.sendall(self._encode(parts))
        return self._read()

    def pipeline(self, commands: list[tuple[str, ...]], chunk: int = 1000) -> list[object]:
        """Send the commands in chunks without waiting, and return their replies in order."""
        replies: list[object] = []
        for s in range(0, len(commands), chunk):
            part = commands[s : s + chunk]
            self.sock.sendall(b"".join(self._encode(c) for c in part))
            replies += [self._read() for _ in part]
        return replies

    def _line(self) -> bytes:
        while b"\r\n" not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\r\n", 1)
        return line

    def _exact(self, n: int) -> bytes:
        while len(self.buf) < n + 2:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("redis closed the connection")
            self.buf += chunk
        data, self.buf = self.buf[:n], self.buf[n + 2 :]
        return data

    def _read(self) -> object:
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self._exact(n).decode()
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._read() for _ in range(n)]
        raise RuntimeError(f"unexpected RESP reply {line!r}")

    def info(self) -> dict[str, str]:
        text = self.call("INFO", "everything")
        assert isinstance(text, str)
        fields = {}
        for row in text.splitlines():
            if row and not row.startswith("#") and ":" in row:
                k, v = row.split(":", 1)
                fields[k] = v
        return fields


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """``redis-server`` on a free port in ``workdir``.

    ``appendfsync`` (``"always"``, ``"everysec"`` or ``"no"``) turns on AOF persistence
    with that fsync policy; ``None`` runs with no persistence at all. RDB snapshots are
    always off. The first ``start`` picks the port; later ones reuse it.
    """

    def __init__(
        self, workdir: Path, binary: str = "redis-server", appendfsync: str | None = None
    ) -> None:
        self.workdir = workdir
        self.binary = binary
        self.appendfsync = appendfsync
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.client: RespClient | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def _persistence_args(self) -> list[str]:
        if self.appendfsync is None:
            return ["--appendonly", "no"]
        return ["--appendonly", "yes", "--appendfsync", self.appendfsync]

    def start(self) -> None:
        restart = self.port != 0
        for _ in range(1 if restart else 5):
            if not restart:
                self.port = free_port()
            log = open(self.workdir / "redis-server.log", "ab")  # noqa: SIM115 - lives with proc
            self.proc = subprocess.Popen(
                [
                    self.binary,
                    "--port",
                    str(self.port),
                    "--bind",
                    "127.0.0.1",
                    "--save",
                    "",
                    *self._persistence_args(),
                    "--dir",
                    str(self.workdir),
                    "--protected-mode",
                    "yes",
                    "--daemonize",
                    "no",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and self.proc.poll() is None:
                try:
                    self.client = RespClient(self.port)
                    if self.client.call("PING") == "PONG":
                        return
                except (OSError, RuntimeError):  # not listening yet, or -LOADING the AOF
                    if self.client is not None:
                        self.client.close()
                        self.client = None
                    time.sleep(0.05)
            self.stop()  # port race or slow start: try another port
        raise RuntimeError(f"could not start redis-server (see {self.workdir}/redis-server.log)")

    def kill(self) -> None:
        """SIGKILL the server, as a crash would; the port and the data stay for ``start``."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None
        if self.client is not None:
            self.client.close()
            self.client = None

    def stop(self) -> None:
        if self.client is not None:
            with contextlib.suppress(OSError, RuntimeError, ConnectionError):
                self.client.call("SHUTDOWN", "NOSAVE")
            self.client.close()
            self.client = None
        if self.proc is not None:
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None

    def flushall(self) -> None:
        assert self.client is not None
        self.client.call("FLUSHALL")

    def snapshot(self) -> dict[str, float]:
        """CPU seconds and commands processed so far, for before/after deltas."""
        assert self.client is not None
        info = self.client.info()
        return {
            "cpu_s": float(info["used_cpu_sys"]) + float(info["used_cpu_user"]),
            "commands": float(info["total_commands_processed"]),
        }

    def commandstats(self) -> dict[str, dict[str, float]]:
        """``INFO commandstats``: calls and CPU µs per command so far (for deltas)."""
        assert self.client is not None
        text = self.client.call("INFO", "commandstats")
        assert isinstance(text, str)
        out = {}
        for row in text.splitlines():
            if row.startswith("cmdstat_"):
                name, _, rest = row[len("cmdstat_") :].partition(":")
                kv = dict(x.split("=", 1) for x in rest.split(","))
                out[name] = {"calls": float(kv["calls"]), "usec": float(kv["usec"])}
        return out

    def version(self) -> str:
        assert self.client is not None
        return self.client.info()["redis_version"]
