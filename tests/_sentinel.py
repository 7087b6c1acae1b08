"""A Redis Sentinel setup the suite starts itself: one primary, one replica, three Sentinels.

Everything listens on free loopback ports in a temporary directory and is stopped by
:meth:`SentinelSetup.stop`. The Sentinels monitor the primary as ``SERVICE`` with a quorum of
2 and a down-after of ``DOWN_AFTER_MS``, so a failover test can kill the primary and wait for a
promotion within a few seconds.
"""

from __future__ import annotations

import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from redis import Redis as SyncRedis

from echomq.embedded import EmbeddedRedisError, RedisServer, find_redis_server

SERVICE = "mymaster"
DOWN_AFTER_MS = 1000
SENTINELS = 3
STARTUP_TIMEOUT = 30.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class SentinelSetup:
    """A started primary, replica and Sentinels; ``sentinels`` are (host, port) pairs."""

    base: Path
    primary: RedisServer | None = None
    replica: RedisServer | None = None
    sentinels: list[tuple[str, int]] = field(default_factory=list)
    _processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def start(self) -> None:
        # no delay before the replica's first (diskless) sync: Redis waits 5 s by default
        self.primary = RedisServer(
            data_dir=self.base / "primary",
            appendonly=False,
            extra_args=["--repl-diskless-sync-delay", "0"],
        )
        self.primary.start()
        self.replica = RedisServer(
            data_dir=self.base / "replica",
            appendonly=False,
            extra_args=["--replicaof", "127.0.0.1", str(self.primary.port)],
        )
        self.replica.start()
        executable = find_redis_server()
        for i in range(SENTINELS):
            port = _free_port()
            directory = self.base / f"sentinel-{i}"
            directory.mkdir(parents=True)
            config = directory / "sentinel.conf"
            config.write_text(
                f"port {port}\nbind 127.0.0.1\ndir {directory}\n"
                f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary.port} 2\n"
                f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {SERVICE} 10000\n"
                f"sentinel parallel-syncs {SERVICE} 1\n"
            )
            log = open(directory / "sentinel.log", "wb")  # noqa: SIM115
            self._processes.append(
                subprocess.Popen(
                    [executable, str(config), "--sentinel"],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                )
            )
            log.close()
            self.sentinels.append(("127.0.0.1", port))
        self._wait_ready()
        self._wait_synced()

    def url(self, service: str = SERVICE) -> str:
        """``redis+sentinel://host:port,.../service`` for these Sentinels."""
        hosts = ",".join(f"{host}:{port}" for host, port in self.sentinels)
        return f"redis+sentinel://{hosts}/{service}"

    def _wait_synced(self) -> None:
        """Wait until the replica has finished its first sync: a failover before it would
        promote an empty replica."""
        assert self.replica is not None
        client = SyncRedis.from_url(self.replica.url, socket_timeout=1, decode_responses=True)
        deadline = time.monotonic() + STARTUP_TIMEOUT
        try:
            while True:
                info = client.info("replication")
                if info.get("master_link_status") == "up" and not info.get(
                    "master_sync_in_progress"
                ):
                    return
                if time.monotonic() > deadline:
                    raise EmbeddedRedisError(f"the replica never synced: {info}")
                time.sleep(0.02)
        finally:
            client.close()

    def _wait_ready(self) -> None:
        """Every Sentinel knows the primary, its replica and the other Sentinels."""
        deadline = time.monotonic() + STARTUP_TIMEOUT
        pending = list(self.sentinels)
        while pending:
            host, port = pending[0]
            try:
                client = SyncRedis(host=host, port=port, decode_responses=True)
                try:
                    master = client.execute_command("SENTINEL", "MASTER", SERVICE)  # type: ignore[no-untyped-call]
                finally:
                    client.close()
            except Exception:  # not listening yet
                master = None
            if isinstance(master, list):
                info = dict(zip(master[::2], master[1::2]))
            else:
                info = master or {}
            ready = (
                int(info.get("num-slaves", 0)) >= 1
                and int(info.get("num-other-sentinels", 0)) >= SENTINELS - 1
            )
            if ready:
                pending.pop(0)
                continue
            if time.monotonic() > deadline:
                raise EmbeddedRedisError(f"sentinel {host}:{port} not ready: {info}")
            time.sleep(0.1)

    def stop(self) -> None:
        for process in self._processes:
            if process.poll() is None:
                process.kill()
            process.wait()
        for server in (self.replica, self.primary):
            if server is not None:
                server.stop()
