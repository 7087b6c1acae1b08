"""Worker subprocesses for crash tests: ``python -m echomq.cli worker procs.recording:process``.

:class:`WorkerProcs` starts CLI workers (cwd ``tests/``, stderr to a log file each), and kills
every one still alive when it is closed. :func:`runs` reads what ``procs.recording`` recorded.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import TracebackType

import redis.asyncio

TESTS_DIR = Path(__file__).resolve().parent
PROCESSOR = "procs.recording:process"


class WorkerProc:
    """One CLI worker subprocess."""

    def __init__(self, proc: subprocess.Popen[bytes], log_path: Path) -> None:
        self.proc = proc
        self.log_path = log_path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        """What the worker has logged so far."""
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL: a crash; jobs it holds stay active with their locks."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)

    def terminate(self, timeout: float = 20.0) -> int:
        """SIGTERM (graceful stop); returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)


class WorkerProcs:
    """Factory of CLI worker subprocesses against one server; closes (kills) them all."""

    def __init__(self, log_dir: Path, url: str) -> None:
        self._log_dir = log_dir
        self._url = url
        self._started: list[WorkerProc] = []

    def start(
        self,
        queue: str,
        *,
        name: str | None = None,
        concurrency: int = 1,
        lock_duration: float = 1.0,
        stalled_interval: float = 0.5,
        drain_delay: float = 0.2,
        extra: tuple[str, ...] = (),
        processor: str = PROCESSOR,
    ) -> WorkerProc:
        """Start ``echomq worker procs.recording:process`` (or ``processor``) on ``queue``."""
        args = [sys.executable, "-m", "echomq.cli", "worker", processor, "--queue", queue]
        args += ["--url", self._url, "--concurrency", str(concurrency)]
        args += ["--lock-duration", str(lock_duration), "--stalled-interval", str(stalled_interval)]
        args += ["--drain-delay", str(drain_delay), "--close-grace", "2"]
        if name is not None:
            args += ["--name", name]
        env = {k: v for k, v in os.environ.items() if k != "ECHOMQ_REDIS_URL"}
        env["ECHOMQ_TEST_URL"] = self._url
        log_path = self._log_dir / f"worker-{len(self._started)}.log"
        with open(log_path, "wb") as log:
            proc = subprocess.Popen(
                [*args, *extra],
                cwd=TESTS_DIR,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        worker = WorkerProc(proc, log_path)
        self._started.append(worker)
        return worker

    def close(self) -> None:
        for worker in self._started:
            worker.kill()

    def __enter__(self) -> WorkerProcs:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


async def runs(r: redis.asyncio.Redis, queue: str) -> list[tuple[str, int]]:
    """Every recorded execution of ``queue``'s jobs as ``(job id, pid)``, in order."""
    raw = await r.lrange(f"rec:{queue}:runs", 0, -1)
    out = []
    for entry in raw:
        text = entry.decode() if isinstance(entry, bytes) else str(entry)
        job_id, _, pid = text.rpartition(":")
        out.append((job_id, int(pid)))
    return out


async def run_counts(r: redis.asyncio.Redis, queue: str) -> Counter[str]:
    """How many times each job of ``queue`` was executed."""
    return Counter(job_id for job_id, _ in await runs(r, queue))
