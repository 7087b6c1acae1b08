"""Worker processes of one scenario: echomq CLI workers or BullMQ (Node) workers.

Both kinds run the same processor (``faultkit/proc.py`` and ``faultkit/node_worker.mjs``) and
write to the same ledger. Each process gets a unique worker name ``w<n>``, which both
implementations put in the name of their blocking connection
(``<prefix>:<base64(queue)>:w:<name>``), so :meth:`WorkerGroup.wait_ready` can see it in
``CLIENT LIST``. :meth:`WorkerGroup.supervise` restarts processes that die, as systemd or a
container runtime would. Every process is killed and reaped when the group closes.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import redis.asyncio

FAULTS_DIR = Path(__file__).resolve().parent.parent
NODE_WORKER = Path(__file__).resolve().parent / "node_worker.mjs"
NODE_MODULES = FAULTS_DIR.parent / "node_modules"
IMPLS = ("echomq", "node")
#: An echomq CLI log record at WARNING or above (``<time> <LEVEL> <logger>: ...``), or a line
#: node_worker.mjs writes for the worker's ``error`` event.
_ERROR_LINE = re.compile(r"^\S+ \S+ (WARNING|ERROR|CRITICAL) |^worker error: ")


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    """How the workers of a scenario run (durations in seconds)."""

    impl: str
    queue: str
    url: str
    concurrency: int = 2
    lock: float = 1.0
    stalled: float = 0.5
    max_stalled: int = 1
    drain_delay: float = 0.5
    close_grace: float = 10.0
    #: The BullMQ worker's Sentinel or Cluster connection (see node_worker.mjs), else None.
    node_options: dict[str, Any] | None = None


def node_problem() -> str | None:
    """Why the Node baseline cannot run here, or None."""
    node = os.environ.get("ECHOMQ_NODE") or shutil.which("node")
    if node is None:
        return "node (>= 20) is not on PATH"
    if not (NODE_MODULES / "bullmq" / "package.json").is_file():
        return f"{NODE_MODULES} has no bullmq: run `npm ci --prefix tests`"
    return None


class WorkerProc:
    """One worker process."""

    def __init__(self, name: str, impl: str, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.name = name
        self.impl = impl
        self.proc = proc
        self.log_path = log
        self.started = time.monotonic()

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def errors(self, limit: int | None = 1 << 18) -> list[str]:
        """The error lines among the first ``limit`` bytes of the log (all with None): an
        echomq record at WARNING or above, a BullMQ worker's ``error`` event. A worker that
        fails in a loop can write megabytes a second, hence the limit."""
        with open(self.log_path, "rb") as handle:
            head = handle.read(-1 if limit is None else limit).decode(errors="replace")
        return [line for line in head.splitlines() if _ERROR_LINE.search(line)]

    def kill(self) -> None:
        """SIGKILL and reap."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)

    def terminate(self) -> None:
        """SIGTERM (a graceful stop); see :meth:`wait_exit`."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    async def wait_exit(self, timeout: float) -> int:
        """Wait for the process to end; its exit code."""
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                raise AssertionError(f"worker {self.name} (pid {self.pid}) still runs")
            await asyncio.sleep(0.02)
        return self.proc.returncode

    def __repr__(self) -> str:
        state = "alive" if self.alive else f"exit {self.proc.returncode}"
        return f"<{self.impl} worker {self.name} pid {self.pid} {state}>"


class WorkerGroup:
    """Starts, kills, supervises and finally reaps the worker processes of one run."""

    def __init__(self, config: WorkerConfig, ledger: Path, log_dir: Path) -> None:
        self.config = config
        self._ledger = ledger
        self._log_dir = log_dir
        self.procs: list[WorkerProc] = []
        self.restarts = 0
        self._supervisor: asyncio.Task[None] | None = None

    def blocking_name(self, name: str) -> str:
        encoded = base64.b64encode(self.config.queue.encode()).decode()
        return f"bull:{encoded}:w:{name}"

    def alive(self) -> list[WorkerProc]:
        return [p for p in self.procs if p.alive]

    def start(self, **overrides: Any) -> WorkerProc:
        """Start one more worker (``overrides`` change fields of the group's config)."""
        config = replace(self.config, **overrides)
        name = f"w{len(self.procs)}"
        log = self._log_dir / f"{config.impl}-{name}.log"
        env = {k: v for k, v in os.environ.items() if k != "ECHOMQ_REDIS_URL"}
        env["FAULTS_LEDGER"] = str(self._ledger)
        argv = self._argv(config, name)
        with open(log, "wb") as handle:
            proc = subprocess.Popen(
                argv,
                cwd=FAULTS_DIR,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=handle,
            )
        worker = WorkerProc(name, config.impl, proc, log)
        self.procs.append(worker)
        return worker

    def _argv(self, c: WorkerConfig, name: str) -> list[str]:
        if c.impl == "echomq":
            argv = [sys.executable, "-m", "echomq.cli", "worker", "faultkit.proc:process"]
            argv += ["--queue", c.queue, "--url", c.url, "--name", name]
            argv += ["--concurrency", str(c.concurrency), "--lock-duration", str(c.lock)]
            argv += [
                "--stalled-interval",
                str(c.stalled),
                "--max-stalled-count",
                str(c.max_stalled),
            ]
            argv += ["--drain-delay", str(c.drain_delay), "--close-grace", str(c.close_grace)]
            return argv
        if c.impl == "node":
            options = {
                "url": c.url,
                "queue": c.queue,
                "name": name,
                "concurrency": c.concurrency,
                "lockDuration": round(c.lock * 1000),
                "stalledInterval": round(c.stalled * 1000),
                "maxStalledCount": c.max_stalled,
                "drainDelay": max(1, round(c.drain_delay)),
                "ledger": str(self._ledger),
                **(c.node_options or {}),
            }
            node = os.environ.get("ECHOMQ_NODE") or shutil.which("node") or "node"
            return [node, str(NODE_WORKER), json.dumps(options)]
        raise ValueError(f"unknown worker implementation {c.impl!r}")

    async def wait_ready(
        self,
        clients: list[redis.asyncio.Redis],
        workers: list[WorkerProc],
        timeout: float = 20.0,
    ) -> None:
        """Wait until each worker's blocking connection shows in ``CLIENT LIST`` of one of
        ``clients`` (the nodes it may be on)."""
        wanted = {self.blocking_name(w.name): w for w in workers}
        deadline = time.monotonic() + timeout
        while True:
            names = {c["name"] for client in clients for c in await client.client_list()}
            missing = [w for n, w in wanted.items() if n not in names]
            if not missing:
                return
            dead = [w for w in missing if not w.alive]
            if dead or time.monotonic() > deadline:
                logs = "\n".join(f"--- {w!r}\n{w.log()[-3000:]}" for w in missing)
                raise AssertionError(f"workers never connected: {missing}\n{logs}")
            await asyncio.sleep(0.05)

    def kill(self, worker: WorkerProc) -> None:
        worker.kill()

    def supervise(self, size: int, interval: float = 0.05) -> None:
        """Keep ``size`` workers alive: start a new one whenever one dies."""

        async def loop() -> None:
            while True:
                for _ in range(size - len(self.alive())):
                    self.start()
                    self.restarts += 1
                await asyncio.sleep(interval)

        self._supervisor = asyncio.create_task(loop(), name="faults-supervisor")

    async def stop_supervising(self) -> None:
        task, self._supervisor = self._supervisor, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def aclose(self) -> None:
        """Stop supervising, then SIGKILL and reap every process still running."""
        await self.stop_supervising()
        for worker in self.procs:
            worker.kill()

    def logs(self, tail: int = 4000) -> str:
        return "\n".join(f"--- {w!r}\n{w.log()[-tail:]}" for w in self.procs)
