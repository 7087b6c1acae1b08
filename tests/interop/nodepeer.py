"""Python side of the Node (real BullMQ 6.7.6) interop peer.

Every call runs ``node tests/interop/node/driver.mjs <command>`` with the JSON
arguments on stdin. The driver prints JSON lines on stdout; the last one is the
result envelope ``{"ok": true, "result": ...}`` or
``{"ok": false, "error": ..., "name": ...}``. Long-running commands (``work``,
``events``) also print progress lines such as ``{"event": "started", "jobId": "1"}``
before the envelope.

The driver needs ``tests/node_modules`` (``npm ci --prefix tests``). When it is
missing, :class:`NodeModulesMissing` is raised instead of skipping silently.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = [
    "DRIVER_PATH",
    "NODE_MODULES",
    "TESTS_DIR",
    "BULLMQ_VERSION",
    "NodeCommandError",
    "NodeModulesMissing",
    "NodePeer",
    "NodePeerError",
    "NodeProcess",
    "node_available",
    "node_binary",
    "require_node_modules",
]

TESTS_DIR: Path = Path(__file__).resolve().parent.parent
DRIVER_PATH: Path = Path(__file__).resolve().parent / "node" / "driver.mjs"
NODE_MODULES: Path = TESTS_DIR / "node_modules"
BULLMQ_VERSION = "6.7.6"

DEFAULT_CALL_TIMEOUT = 30.0

JsonDict = dict[str, Any]
LinePredicate = Callable[[JsonDict], bool]


class NodePeerError(RuntimeError):
    """The driver could not be run, or ended without a result envelope."""

    def __init__(self, message: str, *, stderr: str = "", returncode: int | None = None) -> None:
        details = message
        if returncode is not None:
            details += f" (exit code {returncode})"
        if stderr.strip():
            details += f"\n--- node stderr ---\n{stderr.strip()}"
        super().__init__(details)
        self.stderr = stderr
        self.returncode = returncode


class NodeModulesMissing(NodePeerError):
    """tests/node_modules is absent or holds the wrong bullmq."""


class NodeCommandError(NodePeerError):
    """The driver ran and reported ``{"ok": false}``: BullMQ itself raised."""

    def __init__(self, command: str, envelope: JsonDict, *, stderr: str = "") -> None:
        self.command = command
        self.error: str = str(envelope.get("error"))
        self.name: str = str(envelope.get("name"))
        self.node_stack: str | None = envelope.get("stack")
        super().__init__(f"node {command} failed: {self.name}: {self.error}", stderr=stderr)


def node_binary() -> str | None:
    """The node executable to use (``$ECHOMQ_NODE`` overrides PATH lookup)."""
    override = os.environ.get("ECHOMQ_NODE")
    if override:
        return override
    return shutil.which("node")


def node_available() -> bool:
    """True when a node executable of major version 20 or later runs here."""
    binary = node_binary()
    if binary is None:
        return False
    try:
        out = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return False
    try:
        major = int(out.lstrip("v").split(".")[0])
    except ValueError:
        return False
    return major >= 20


def require_node_modules() -> None:
    """Raise :class:`NodeModulesMissing` unless tests/node_modules holds bullmq 6.7.6."""
    pkg = NODE_MODULES / "bullmq" / "package.json"
    hint = "run `npm ci --prefix tests` from the repository root to install the Node peer"
    if not pkg.is_file():
        raise NodeModulesMissing(f"{NODE_MODULES} has no bullmq: {hint}")
    if not (NODE_MODULES / "ioredis" / "package.json").is_file():
        raise NodeModulesMissing(f"{NODE_MODULES} has no ioredis: {hint}")
    version = json.loads(pkg.read_text(encoding="utf-8")).get("version")
    if version != BULLMQ_VERSION:
        raise NodeModulesMissing(
            f"{NODE_MODULES} holds bullmq {version}, expected {BULLMQ_VERSION}: {hint}"
        )


def _parse_line(raw: bytes) -> JsonDict | None:
    text = raw.decode("utf-8", errors="replace").strip()
    if not text:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return {"event": "non-json", "text": text}
    return value if isinstance(value, dict) else {"event": "non-json", "text": text}


def _is_envelope(line: JsonDict) -> bool:
    return "ok" in line and "event" not in line


class NodeProcess:
    """A running driver process (``work``, ``events``, or any command)."""

    def __init__(self, command: str, proc: asyncio.subprocess.Process) -> None:
        self.command = command
        self.proc = proc
        self.lines: list[JsonDict] = []
        self.envelope: JsonDict | None = None
        self._stderr_chunks: list[bytes] = []
        self._changed = asyncio.Condition()
        self._eof = False
        self._stdout_task = asyncio.ensure_future(self._read_stdout())
        self._stderr_task = asyncio.ensure_future(self._read_stderr())

    # -- background readers -------------------------------------------------

    async def _read_stdout(self) -> None:
        assert self.proc.stdout is not None
        try:
            while True:
                raw = await self.proc.stdout.readline()
                if not raw:
                    break
                line = _parse_line(raw)
                if line is None:
                    continue
                async with self._changed:
                    if _is_envelope(line):
                        self.envelope = line
                    else:
                        self.lines.append(line)
                    self._changed.notify_all()
        finally:
            async with self._changed:
                self._eof = True
                self._changed.notify_all()

    async def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        while True:
            chunk = await self.proc.stderr.read(65536)
            if not chunk:
                break
            self._stderr_chunks.append(chunk)

    @property
    def stderr(self) -> str:
        return b"".join(self._stderr_chunks).decode("utf-8", errors="replace")

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    @property
    def pid(self) -> int:
        return self.proc.pid

    # -- waiting ------------------------------------------------------------

    async def wait_for_line(
        self, pred: LinePredicate, timeout: float = 10.0, *, start: int = 0
    ) -> JsonDict:
        """Return the first progress line (from index ``start``) for which ``pred`` holds.

        Lines already received count, so calling this after the line arrived is fine.
        Raises :class:`TimeoutError` on timeout and :class:`NodePeerError` when the
        process ends without such a line.
        """

        async def scan() -> JsonDict:
            seen = start
            async with self._changed:
                while True:
                    while seen < len(self.lines):
                        line = self.lines[seen]
                        seen += 1
                        if pred(line):
                            return line
                    if self._eof:
                        raise NodePeerError(
                            f"node {self.command} ended before the awaited line; "
                            f"envelope={self.envelope!r}",
                            stderr=self.stderr,
                            returncode=self.proc.returncode,
                        )
                    await self._changed.wait()

        try:
            return await asyncio.wait_for(scan(), timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(
                f"node {self.command}: no matching line within {timeout}s; lines={self.lines!r}"
            ) from None

    async def wait_for_event(
        self, event: str, job_id: str | None = None, timeout: float = 10.0
    ) -> JsonDict:
        """Shortcut: wait for ``{"event": event}`` (and ``jobId`` when given)."""

        def pred(line: JsonDict) -> bool:
            if line.get("event") != event:
                return False
            return job_id is None or str(line.get("jobId")) == str(job_id)

        return await self.wait_for_line(pred, timeout)

    async def wait_ready(self, timeout: float = 10.0) -> JsonDict:
        """Wait for the driver's ``{"event": "ready"}`` line (work / events)."""
        return await self.wait_for_event("ready", timeout=timeout)

    async def wait(self, timeout: float = 30.0) -> int:
        """Wait for the process to exit; return its exit code."""
        try:
            await asyncio.wait_for(self.proc.wait(), timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"node {self.command} still running after {timeout}s") from None
        await asyncio.gather(self._stdout_task, self._stderr_task, return_exceptions=True)
        code = self.proc.returncode
        assert code is not None
        return code

    async def result_envelope(self, timeout: float = 30.0) -> JsonDict:
        """Wait for exit and return the raw envelope (``ok`` true or false)."""
        try:
            await self.wait(timeout)
        except TimeoutError:
            self.kill()
            await self.wait(5.0)
            raise NodePeerError(
                f"node {self.command} did not finish within {timeout}s (killed)",
                stderr=self.stderr,
                returncode=self.proc.returncode,
            ) from None
        if self.envelope is None:
            raise NodePeerError(
                f"node {self.command} exited without a result",
                stderr=self.stderr,
                returncode=self.proc.returncode,
            )
        return self.envelope

    async def result(self, timeout: float = 30.0) -> Any:
        """Wait for exit and return ``result``; raise :class:`NodeCommandError` if not ok."""
        envelope = await self.result_envelope(timeout)
        if not envelope.get("ok"):
            raise NodeCommandError(self.command, envelope, stderr=self.stderr)
        return envelope.get("result")

    # -- stopping -------------------------------------------------------------

    def _signal(self, sig: int) -> None:
        if self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL: a hard crash, nothing is cleaned up and no result is printed."""
        self._signal(signal.SIGKILL)

    def terminate(self) -> None:
        """SIGTERM: work/events stop early, close cleanly and still print their result."""
        self._signal(signal.SIGTERM)

    async def stop(self, timeout: float = 15.0) -> Any:
        """terminate() then result()."""
        self.terminate()
        return await self.result(timeout)

    async def aclose(self) -> None:
        """Make sure the process is gone (kill if needed) and readers are done."""
        if self.proc.returncode is None:
            self.kill()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self.proc.wait(), 5.0)
        await asyncio.gather(self._stdout_task, self._stderr_task, return_exceptions=True)


class NodePeer:
    """Runs BullMQ 6.7.6 commands against one queue through the Node driver."""

    def __init__(
        self,
        url: str,
        queue: str,
        prefix: str = "bull",
        *,
        call_timeout: float = DEFAULT_CALL_TIMEOUT,
    ) -> None:
        self.url = url
        self.queue = queue
        self.prefix = prefix
        self.call_timeout = call_timeout
        self._processes: list[NodeProcess] = []

    async def __aenter__(self) -> NodePeer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _args(self, args: dict[str, Any]) -> JsonDict:
        merged: JsonDict = {"url": self.url, "queue": self.queue, "prefix": self.prefix}
        merged.update(args)
        return merged

    async def start(self, command: str, **args: Any) -> NodeProcess:
        """Start the driver for ``command`` and return at once (for work / events)."""
        require_node_modules()
        binary = node_binary()
        if binary is None:
            raise NodePeerError("node executable not found on PATH (set ECHOMQ_NODE)")
        payload = json.dumps(self._args(args)).encode("utf-8")
        proc = await asyncio.create_subprocess_exec(
            binary,
            str(DRIVER_PATH),
            command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=str(DRIVER_PATH.parent),
        )
        assert proc.stdin is not None
        proc.stdin.write(payload)
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            await proc.stdin.drain()
        proc.stdin.close()
        handle = NodeProcess(command, proc)
        self._processes.append(handle)
        return handle

    def _timeout_for(self, timeout: float | None, args: dict[str, Any]) -> float:
        if timeout is not None:
            return timeout
        # Commands with their own timeoutMs (work, events, waitUntilFinished) get
        # that plus a margin for start-up and closing.
        own = args.get("timeoutMs")
        if isinstance(own, (int, float)):
            return max(self.call_timeout, own / 1000.0 + 15.0)
        return self.call_timeout

    async def call_envelope(
        self, command: str, *, timeout: float | None = None, **args: Any
    ) -> JsonDict:
        """Run a command to completion and return its raw envelope."""
        handle = await self.start(command, **args)
        try:
            return await handle.result_envelope(self._timeout_for(timeout, args))
        finally:
            await handle.aclose()
            with contextlib.suppress(ValueError):
                self._processes.remove(handle)

    async def call(self, command: str, *, timeout: float | None = None, **args: Any) -> Any:
        """Run a command to completion and return its ``result``.

        Raises :class:`NodeCommandError` when BullMQ raised (``ok: false``) and
        :class:`NodePeerError` when the driver itself failed.
        """
        handle = await self.start(command, **args)
        try:
            envelope = await handle.result_envelope(self._timeout_for(timeout, args))
            if not envelope.get("ok"):
                raise NodeCommandError(command, envelope, stderr=handle.stderr)
            return envelope.get("result")
        finally:
            await handle.aclose()
            with contextlib.suppress(ValueError):
                self._processes.remove(handle)

    async def batch(
        self, calls: list[tuple[str, dict[str, Any]]], *, timeout: float | None = None
    ) -> list[Any]:
        """Run several short commands in one Node process; return their results in order.

        Raises :class:`NodeCommandError` for the first call that failed (the
        calls are run in order and stop there).
        """
        payload = [{"command": c, "args": a} for c, a in calls]
        envelopes: list[JsonDict] = await self.call(
            "batch", timeout=timeout, calls=payload, stopOnError=True
        )
        results: list[Any] = []
        for (command, _), envelope in zip(calls, envelopes):
            if not envelope.get("ok"):
                raise NodeCommandError(command, envelope)
            results.append(envelope.get("result"))
        return results

    # -- thin typed helpers for the common commands --------------------------

    async def add(self, name: str, data: Any = None, opts: dict[str, Any] | None = None) -> str:
        ids = await self.call("add", jobs=[{"name": name, "data": data, "opts": opts or {}}])
        return str(ids[0])

    async def add_many(self, jobs: list[dict[str, Any]], *, bulk: bool = False) -> list[str]:
        ids = await self.call("add", jobs=jobs, bulk=bulk)
        return [str(i) for i in ids]

    async def get_job(self, job_id: str) -> JsonDict | None:
        result: JsonDict | None = await self.call("getJob", id=str(job_id))
        return result

    async def counts(self, *types: str) -> dict[str, int]:
        result: dict[str, int] = await self.call("counts", types=list(types))
        return result

    async def work(self, *, timeout: float | None = None, **args: Any) -> JsonDict:
        """Run a worker to completion (see driver ``work``) and return its report."""
        args.setdefault("timeoutMs", 30000)
        result: JsonDict = await self.call("work", timeout=timeout, **args)
        return result

    async def aclose(self) -> None:
        """Kill every process started by this peer that is still running."""
        procs, self._processes = self._processes, []
        for handle in procs:
            await handle.aclose()
