"""Running the real ``echomq`` command in tests: its process, an environment in which it cannot
fall back to the developer's embedded Redis, and a deadline poll to wait on what it does.

- :data:`DEADLINE`: seconds a CLI test waits for anything.
- :func:`base_env`: this process's environment without any ``ECHOMQ_*`` variable, with
  ``ECHOMQ_DATA_DIR`` set to a path that cannot be created (:data:`UNUSABLE_DATA_DIR`), so a
  command that should not start the embedded server fails loudly instead of using the user's.
- :func:`cli`: ``python -m echomq.cli ARGS`` to completion, output captured as text.
- :func:`wait_until`: poll a condition until it holds or the deadline passes.
- :func:`queue_call`: run one call on an ``echomq.Queue`` of a given server, from sync code.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from echomq import Queue

DEADLINE = 20.0
UNUSABLE_DATA_DIR = "/nonexistent/echomq-tests-must-not-start-a-server"


def base_env(**extra: str) -> dict[str, str]:
    """The environment of a CLI process: no ``ECHOMQ_*`` of ours, then ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ECHOMQ_")}
    env["ECHOMQ_DATA_DIR"] = UNUSABLE_DATA_DIR
    env.update(extra)
    return env


def cli(
    *args: str, env: dict[str, str], cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``echomq ARGS`` as its own process, to completion (60 s at most)."""
    return subprocess.run(
        [sys.executable, "-m", "echomq.cli", *args],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


def wait_until(condition: Callable[[], bool], what: str, timeout: float = DEADLINE) -> None:
    """Poll ``condition`` every 50 ms until it holds; AssertionError naming ``what`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def queue_call(
    url: str, queue: str, fn: Callable[[Queue], Awaitable[Any]], prefix: str = "bull"
) -> Any:
    """``await fn(queue)`` on a ``Queue`` of the server at ``url``, from sync test code."""

    async def go() -> Any:
        async with Queue(queue, connection=url, prefix=prefix) as q:
            return await fn(q)

    return asyncio.run(go())
