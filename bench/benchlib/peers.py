"""The peers: where each adapter lives, how its environment is built, how it is run.

Each Python peer gets ``bench/.venvs/<venv>`` built from ``bench/requirements/<venv>.txt``
(rebuilt when that file changes; a stamp file records its hash). echomq's venv also
installs the repository itself (with its ``uvloop`` extra) on every run, so the benchmark
always measures the working tree. The Node peer is ``bench/node`` installed with ``npm ci`` from its
lockfile.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import queue
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent
REPO = BENCH.parent
PREFIX = "@@bench "


@dataclass(frozen=True)
class Peer:
    name: str  # as shown in tables and given to --peers
    kind: str  # "python" or "node"
    venv: str = ""  # python: bench/.venvs/<venv>, bench/requirements/<venv>.txt
    script: str = ""  # python: bench/peers/<script>
    extra_args: tuple[str, ...] = field(default=())
    installs_repo: bool = False
    flows: bool = False  # has a bulk flow API (parent/child jobs): runs the flow phase
    schedulers: bool = False  # has job schedulers (every): runs the scheduler phase

    @property
    def python(self) -> Path:
        return BENCH / ".venvs" / self.venv / "bin" / "python"

    def command(self, role: str, *args: str) -> list[str]:
        if self.kind == "node":
            return ["node", str(BENCH / "node" / "bullmq_peer.mjs"), role, *args]
        return [str(self.python), str(BENCH / "peers" / self.script), role, *args, *self.extra_args]


REFERENCE = "bullmq-node"
PEERS: dict[str, Peer] = {
    p.name: p
    for p in [
        Peer("bullmq-node", "node", flows=True, schedulers=True),
        Peer(
            "echomq",
            "python",
            "echomq",
            "echomq_peer.py",
            installs_repo=True,
            flows=True,
            schedulers=True,
        ),
        Peer("bullmq-py", "python", "bullmq_py", "bullmq_py.py"),
        Peer("saq", "python", "saq", "saq_peer.py"),
        Peer("arq", "python", "arq", "arq_peer.py"),
        Peer("taskiq", "python", "taskiq", "taskiq_peer.py"),
        Peer("dramatiq", "python", "dramatiq", "dramatiq_peer.py"),
        Peer("rq", "python", "rq", "rq_peer.py"),
        Peer("celery", "python", "celery", "celery_peer.py"),
    ]
}
UVLOOP_PEER = Peer(
    "echomq+uvloop",
    "python",
    "echomq",
    "echomq_peer.py",
    ("--uvloop",),
    installs_repo=True,
    flows=True,
    schedulers=True,
)
#: Celery runs when named (``--peers ...,celery``): the published all-peers tables before it
#: came without it.
DEFAULT_PEERS = [name for name in PEERS if name != "celery"]


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _run(cmd: list[str], log: Path, cwd: Path | None = None) -> None:
    with open(log, "ab") as out:
        out.write(("\n$ " + " ".join(cmd) + "\n").encode())
        out.flush()
        rc = subprocess.call(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=cwd)
    if rc != 0:
        raise RuntimeError(f"`{' '.join(cmd)}` failed (exit {rc}); see {log}")


def setup_python(peer: Peer, log: Path, python: str = sys.executable) -> None:
    """Create or refresh the peer's virtualenv."""
    reqs = BENCH / "requirements" / f"{peer.venv}.txt"
    venv = BENCH / ".venvs" / peer.venv
    stamp = venv / ".bench-requirements.sha256"
    want = _sha(reqs)
    if not (peer.python.exists() and stamp.exists() and stamp.read_text() == want):
        print(f"  building {venv.relative_to(REPO)} from {reqs.relative_to(REPO)}", flush=True)
        _run([python, "-m", "venv", "--clear", str(venv)], log)
        _run([str(peer.python), "-m", "pip", "install", "-q", "-r", str(reqs)], log)
        stamp.write_text(want)
    if peer.installs_repo:
        # The working tree keeps its version number, so force the reinstall, then let pip
        # add any dependency the package declares, within the pins of the requirements file.
        pip = [str(peer.python), "-m", "pip", "install", "-q"]
        _run([*pip, "--no-deps", "--force-reinstall", str(REPO)], log)
        _run([*pip, "-c", str(reqs), f"{REPO}[uvloop]"], log)


def setup_node(log: Path) -> None:
    node_dir = BENCH / "node"
    stamp = node_dir / "node_modules" / ".bench-lock.sha256"
    want = _sha(node_dir / "package-lock.json")
    if stamp.exists() and stamp.read_text() == want:
        return
    print("  installing bench/node with npm ci", flush=True)
    _run(["npm", "ci", "--no-audit", "--no-fund"], log, cwd=node_dir)
    stamp.write_text(want)


def setup(peer: Peer, log: Path) -> None:
    if peer.kind == "node":
        setup_node(log)
    else:
        setup_python(peer, log)


class AdapterError(RuntimeError):
    """An adapter process failed, timed out or broke the protocol."""


class Adapter:
    """One running adapter process speaking the ``@@bench`` line protocol."""

    def __init__(self, peer: Peer, role: str, args: list[str], log: Path) -> None:
        self.peer = peer
        self.role = role
        self.log = log
        self.cmd = peer.command(role, *args)
        self._err = open(log, "ab")  # noqa: SIM115 - closed in wait()
        self._err.write(("\n$ " + " ".join(self.cmd) + "\n").encode())
        self._err.flush()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            self.cmd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._err,
            cwd=REPO,
            env=env,
        )
        self.messages: queue.Queue[dict | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode(errors="replace")
            if line.startswith(PREFIX):
                try:
                    self.messages.put(json.loads(line[len(PREFIX) :]))
                except ValueError:
                    self.messages.put({"protocol_error": f"bad line ({len(line)} chars)"})
            else:
                self._err.write(raw)
        self.messages.put(None)  # EOF

    def next_message(self, timeout: float) -> dict:
        try:
            msg = self.messages.get(timeout=timeout)
        except queue.Empty:
            self.kill()
            raise AdapterError(
                f"{self.peer.name} {self.role}: no answer in {timeout:.0f}s (log: {self.log})"
            ) from None
        if msg is None:
            rc = self.proc.wait()
            raise AdapterError(
                f"{self.peer.name} {self.role}: exited {rc} without a result (log: {self.log})"
            )
        if "protocol_error" in msg:
            self.kill()
            raise AdapterError(
                f"{self.peer.name} {self.role}: {msg['protocol_error']} (log: {self.log})"
            )
        return msg

    def close_stdin(self) -> None:
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def wait(self, timeout: float = 30) -> None:
        self.close_stdin()
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AdapterError(
                f"{self.peer.name} {self.role}: did not exit (log: {self.log})"
            ) from None
        finally:
            self._err.flush()
        if rc != 0:
            raise AdapterError(f"{self.peer.name} {self.role}: exit {rc} (log: {self.log})")


def run_once(peer: Peer, role: str, args: list[str], log: Path, timeout: float) -> dict:
    """Run a role that answers with one result (or ``unsupported``) and exits."""
    a = Adapter(peer, role, args, log)
    a.close_stdin()
    msg = a.next_message(timeout)
    a.wait()
    return msg


@dataclass(frozen=True)
class SourcePeer(Peer):
    """echomq's adapter run with ``src`` first on ``PYTHONPATH`` (a checkout of its own)."""

    src: str = ""

    def command(self, role: str, *args: str) -> list[str]:
        return ["env", f"PYTHONPATH={self.src}", *super().command(role, *args)]


def echomq_peer(spec: str) -> SourcePeer:
    label, sep, src = spec.partition("=")
    if not sep or not label or not src:
        raise argparse.ArgumentTypeError(f"--echomq wants LABEL=SRC, got {spec!r}")
    path = Path(src).resolve()
    if not (path / "echomq" / "__init__.py").is_file():
        raise argparse.ArgumentTypeError(f"--echomq {spec}: no echomq package in {path}")
    base = PEERS["echomq"]
    return SourcePeer(label, "python", base.venv, base.script, installs_repo=True, src=str(path))
