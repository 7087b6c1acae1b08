#!/usr/bin/env python3
"""Generate echomq's sync API from its async source, or check that the generated files are current.

The async code is the one definition of the producer API (module functions, ``Queue``, ``Job``)
and of the Redis I/O beneath it (running ops, the connection owner, the server checks); each
file in ``SOURCES`` is rewritten token by token into its blocking twin (the API under
``src/echomq/sync/``, the I/O beside its source as ``NAME_sync.py``): ``async def`` -> ``def``,
``await x`` -> ``x``, ``async with`` -> ``with``, ``AsyncConn`` -> ``SyncConn``,
``redis.asyncio`` -> ``redis`` and so on (``SUBS``). Lines between ``# unasync: async-only``
and ``# unasync: end`` are left out (what only an event loop can do).
Relative imports of the files generated into ``sync/`` gain a dot, except those of other
generated modules, which stay siblings; ``variants.NAME(`` becomes ``variants.NAME_sync(``, the
few steps where redis-py's async and sync APIs differ.
The result is then sorted and formatted by ruff, so it passes ``scripts/check`` as written.

Usage:
    python scripts/unasync.py           rewrite the generated files
    python scripts/unasync.py --check   exit 1 naming each generated file that is stale
"""

from __future__ import annotations

import difflib
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "src/echomq"

#: The Redis I/O written once for asyncio, each generated beside its source as NAME_sync.py.
REDIS_IO = ("run", "connection", "server_checks")

#: Async source -> generated sync file (paths relative to the repository root): the producer
#: API, mirrored file for file under ``sync/``, and the Redis I/O beneath it.
SOURCES = {
    f"{PACKAGE}/queue.py": f"{PACKAGE}/sync/_api.py",
    f"{PACKAGE}/_queue.py": f"{PACKAGE}/sync/_queue.py",
    f"{PACKAGE}/_job.py": f"{PACKAGE}/sync/_job.py",
    f"{PACKAGE}/flows.py": f"{PACKAGE}/sync/_flows.py",
    **{f"{PACKAGE}/_redis/{name}.py": f"{PACKAGE}/_redis/{name}_sync.py" for name in REDIS_IO},
}

#: Modules imported as ``from .NAME import`` that are generated under the same name in
#: ``sync/``: their imports stay siblings in the generated files.
GENERATED = {
    Path(s).stem
    for s, t in SOURCES.items()
    if Path(s).stem == Path(t).stem and Path(t).parent.name == "sync"
}

#: Token rewrites, applied in order to every line (code, comments and docstrings alike).
SUBS: list[tuple[str, str]] = [
    (r"\bredis\.asyncio\.cluster\b", "redis.cluster"),
    (r"\bredis\.asyncio\b", "redis"),
    (r"\basync def\b", "def"),
    (r"\basync with\b", "with"),
    (r"\basync for\b", "for"),
    (r"\bawait ", ""),
    (r"\b__aenter__\b", "__enter__"),
    (r"\b__aexit__\b", "__exit__"),
    (r"\baclose\b", "close"),
    (r"\bAsyncIterator\b", "Iterator"),
    (r"\bAsyncGenerator\b", "Generator"),
    (r"\bAwaitable\[None\]", "None"),
    (r"\basynccontextmanager\b", "contextmanager"),
    (r"\bAsyncConnection\b", "SyncConnection"),
    (r"\bAsyncConn\b", "SyncConn"),
    (r"\basync_client_from_url\b", "sync_client_from_url"),
    # The connection rule gives the sync API sync clients (``_redis/default.py``).
    (r"\bis_async=True\b", "is_async=False"),
    (r"\bcheck_on_first_use\b", "check_on_first_use_sync"),
    # A sync connection has no pipelined channel: its calls are plain blocking redis-py.
    (r"\bpipelined=True, ", ""),
    # The Redis I/O modules import their generated twins, and the steps where redis-py's two
    # APIs differ have a sync counterpart each (``_redis/variants.py``).
    (rf"(\b_redis\.|from \.)({'|'.join(REDIS_IO)})( import)", r"\1\2_sync\3"),
    (r"\bvariants\.(\w+)\(", r"variants.\1_sync("),
]
_SUBS = [(re.compile(pattern), repl) for pattern, repl in SUBS]
_RELATIVE = re.compile(r"^(\s*from )\.([\w.]*)( import )")
_SKIP_START = "# unasync: async-only"
_SKIP_END = "# unasync: end"


def _header(source: str) -> str:
    return (
        f"# Generated from {source} by scripts/unasync.py: do not edit.\n"
        "# Edit the source, then run `python scripts/unasync.py` (scripts/check fails while this\n"
        "# file is stale).\n"
    )


def _relative(match: re.Match[str]) -> str:
    start, module, end = match.groups()
    if module.split(".")[0] in GENERATED:
        return f"{start}.{module}{end}"
    return f"{start}..{module}{end}"


def unasync_text(text: str, beside: bool = False) -> str:
    """The sync twin of async source ``text`` (before sorting and formatting); ``beside``:
    generated in the source's own folder, so relative imports stay as they are."""
    out: list[str] = []
    skipping = False
    for line in text.splitlines(keepends=True):
        stripped = line.strip()
        if stripped == _SKIP_START:
            if skipping:
                raise ValueError("nested '# unasync: async-only'")
            skipping = True
            continue
        if stripped == _SKIP_END:
            if not skipping:
                raise ValueError("'# unasync: end' without '# unasync: async-only'")
            skipping = False
            continue
        if skipping:
            continue
        if not beside:
            line = _RELATIVE.sub(_relative, line)
        for pattern, repl in _SUBS:
            line = pattern.sub(repl, line)
        out.append(line)
    if skipping:
        raise ValueError("'# unasync: async-only' without '# unasync: end'")
    return "".join(out)


def _ruff(args: list[str], text: str, filename: str) -> str:
    result = subprocess.run(
        [sys.executable, "-m", "ruff", *args, "--stdin-filename", filename, "-"],
        input=text,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    if result.returncode != 0:
        raise SystemExit(f"ruff {args[0]} failed on generated {filename}:\n{result.stderr}")
    return result.stdout


def generate(source: str, target: str) -> str:
    """The full text of generated file ``target`` from ``source``."""
    beside = Path(source).parent == Path(target).parent
    text = _header(source) + unasync_text((ROOT / source).read_text(encoding="utf-8"), beside)
    # Imports only the async-only parts used, and the order of rewritten relative imports.
    text = _ruff(["check", "--fix", "--exit-zero", "--select", "I,F401", "--quiet"], text, target)
    return _ruff(["format", "--quiet"], text, target)


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for source, target in SOURCES.items():
        expected = generate(source, target)
        path = ROOT / target
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current == expected:
            continue
        stale.append(target)
        if check:
            diff = difflib.unified_diff(
                current.splitlines(keepends=True),
                expected.splitlines(keepends=True),
                f"{target} (checked in)",
                f"{target} (generated from {source})",
            )
            sys.stdout.writelines(diff)
        else:
            path.write_text(expected, encoding="utf-8")
            print(f"wrote {target}")
    if check and stale:
        print(
            f"\n{', '.join(stale)}: stale; run `python scripts/unasync.py` and commit the result",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
