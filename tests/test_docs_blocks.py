"""Every code block of README.md and docs/**/*.md, run as written against a real Redis.

Each fenced block is one test, named ``PAGE:LINE`` (the line of its opening fence). By language:

- ``python`` / ``py``: checked first (it compiles, with top-level ``await`` only in a block
  marked ``repl``; ruff finds no undefined name but the placeholders and the names its setups
  give), then run in a fresh interpreter, ``sys.executable`` (a block that imports Django runs
  in the Django 6 interpreter that tests/test_django_backend.py uses, and is skipped, saying
  so, only when there is none), in a directory of its own. It must exit 0 without printing a
  traceback, and each ``print(...)  # text`` (or a ``# text`` line right after the print) must
  print ``text``, ``...`` matching anything. A block defining ``test_*`` functions is run by
  pytest (``asyncio_mode=auto``).
- ``sh`` / ``bash`` / ``console``: every ``echomq`` command must parse with the real CLI's
  parser, every ``pip install`` may name only extras pyproject.toml defines, every ``bench/``
  or ``scripts/`` command must exist (a ``bench/*.py`` must list each option it is given in
  its ``--help``), and ``pytest`` may name only test paths that exist. Those last three are
  checked, never run; a block of only such commands passes on the checks. Any other block
  runs through ``bash -e``: only ``echomq``, ``python`` on a script (``examples/``,
  ``manage.py``), ``printf``, ``echo`` and ``cat`` may run; any other command fails the test
  until the block is marked ``skip``. In a transcript
  (``$ `` before each command) the output shown must be printed: an id written as a UUID
  matches any UUID, a ``...`` line any lines.
- ``json``: must parse. Other languages (ini, dockerfile, js, yaml, promql) are not run, and an
  unlabeled block (a diagram, a tree, a signature) must not hold commands or Python.

Markers: an HTML comment on the line before the fence, ``<!-- docs-test: WORD... -->``. The
words (CONTRIBUTING.md, "Code blocks in the docs", says the same for writers):

- ``repl``: an interactive snippet; top-level ``await`` is allowed, and the block runs on one
  event loop as ``python -m asyncio`` would run it.
- ``setup=NAME``: run the named setup of tests/docs_prelude/docs_prelude.py first (``client``,
  ``queue``, ``worker``, ``quickstart``, ``django``), which defines the names the snippet takes
  from its page (``client``, ``queue``, ...).
- ``continues``: the block goes on from the page's previous Python block (both run as one).
- ``file=NAME``: the block is also saved as NAME in the directory of every later block of the
  page (a module a later block imports).
- ``stop=SECONDS``: the block runs until it is stopped (an events loop, a program waiting for
  SIGTERM): the test sends SIGTERM that long after the block first connects to its Redis
  database (so its handlers are in place), which a ``repl`` block takes as Ctrl-C. It must
  exit 0.
- ``skip reason="..."``: the block cannot run here (at most :data:`MAX_EXEMPTIONS` in all). Its
  ``echomq`` and ``pip install`` lines are still checked.

Placeholders that stand for the user's code (``send_email``, ``call_api``, ``heavy``,
``create_user``, ``database``, ``http``, ``metrics``, ``resize``, the packages ``myapp`` and
``app``) and the stop rule for workers that run until stopped (``await worker.run()``,
``echomq worker``: stopped once their queue has been empty for a second) live in
tests/docs_prelude/, which is on every block's ``PYTHONPATH``.

Redis: the module starts its own server; block N gets database N through its environment,
``ECHOMQ_REDIS_URL=redis://127.0.0.1:PORT/N``, as a reader with their own Redis sets it. Its
text is run as written: a block that needs Redis finds it by the connection rule (no
``connection=``, or ``echomq.default_redis_url()`` for a client of its own), so it runs the
same for a reader who only ran README's "Try it" (the embedded Redis;
tests/test_connection_rule.py runs the main examples that way). A block that names a Redis on
port 6379 (``redis://localhost:6379``, ``Redis()`` without arguments) fails: nothing listens
there for that reader. Only the Cluster addresses ``node-1:7000``, ``node-2:7001``,
``node-3:7002`` and the Sentinels ``sentinel-1:26379`` ... ``sentinel-3:26379``, which a block
shows on purpose, become the suite's cluster and Sentinels, started only when a block that
names them gets that far. A block that starts the CLI's embedded server fails. The blocks
run in parallel, in a fixture that runs those of the selected tests once.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import tokenize
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from redis import Redis as SyncRedis

from echomq.embedded import RedisServer, find_redis_server

ROOT = Path(__file__).resolve().parents[1]
PRELUDE = ROOT / "tests" / "docs_prelude"
DJANGO_PROJECT = ROOT / "tests" / "django_project"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

#: At most this many blocks may be marked ``skip``: today a virtualenv and PyPI install
#: (README), a job id printed by an earlier run (flows), three servers on fixed ports
#: (operations), and systemd and Docker (deployment).
MAX_EXEMPTIONS = 7
#: Blocks run at once (each is a process, mostly waiting on Redis or a worker's idle second).
PARALLEL = 4
#: Seconds a block may run before it is killed.
BLOCK_TIMEOUT = 90.0

PYTHON_LANGS = {"python", "py"}
SHELL_LANGS = {"sh", "bash", "console", "shell"}
JSON_LANGS = {"json"}
KNOWN_SETUPS = {"client", "django", "queue", "quickstart", "worker"}
CHECKED_ONLY = {"pip", "repo", "pytest"}  # shell commands that are checked, never run
RUNNABLE = {"echomq", "python", "printf", "echo", "cat"}

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<lang>[\w+-]*)\s*$")
MARKER = re.compile(r"^\s*<!--\s*docs-test:(?P<body>.*?)-->\s*$")
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
PYTHON_EXE = re.compile(r"python(\d+(\.\d+)?)?$")
DJANGO_IMPORT = re.compile(r"^\s*(?:from|import)\s+django\b", re.MULTILINE)
TEST_FUNCTION = re.compile(r"^(?:async\s+)?def\s+test_", re.MULTILINE)
CLUSTER_NODES = ("node-1:7000", "node-2:7001", "node-3:7002")
SENTINELS = ("sentinel-1", "sentinel-2", "sentinel-3")
TRACEBACK = "Traceback (most recent call last)"


# -- reading the pages ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Marker:
    """The words of a ``<!-- docs-test: ... -->`` marker."""

    repl: bool = False
    setups: tuple[str, ...] = ()
    continues: bool = False
    file: str | None = None
    stop: float | None = None
    skip: str | None = None
    errors: tuple[str, ...] = ()


def parse_marker(body: str) -> Marker:
    """The marker's words; unknown or malformed ones are listed in ``errors``."""
    try:
        words = shlex.split(body)
    except ValueError as exc:
        return Marker(errors=(f"unreadable marker {body!r}: {exc}",))
    fields: dict[str, Any] = {"setups": [], "errors": []}
    skip = False
    for word in words:
        key, eq, value = word.partition("=")
        if word in ("repl", "continues"):
            fields[word] = True
        elif word == "skip":
            skip = True
        elif key == "setup" and value in KNOWN_SETUPS:
            fields["setups"].append(value)
        elif key == "file" and re.fullmatch(r"[\w/]+\.py", value):
            fields["file"] = value
        elif key == "stop" and re.fullmatch(r"\d+(\.\d+)?", value):
            fields["stop"] = float(value)
        elif key == "reason" and eq:
            fields["skip"] = value
        else:
            fields["errors"].append(f"unknown marker word {word!r}")
    if skip != ("skip" in fields):
        fields["errors"].append('`skip` needs `reason="..."`, and `reason=` needs `skip`')
        fields.pop("skip", None)
    fields["setups"] = tuple(fields["setups"])
    fields["errors"] = tuple(fields["errors"])
    return Marker(**fields)


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its text and its marker."""

    page: Path
    line: int
    lang: str
    text: str
    marker: Marker
    number: int = 0  # its place among all blocks: its Redis database

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT).as_posix()}:{self.line}"

    @property
    def kind(self) -> str:
        if self.lang in PYTHON_LANGS:
            return "python"
        if self.lang in SHELL_LANGS:
            return "shell"
        if self.lang in JSON_LANGS:
            return "json"
        return "text" if self.lang else "unlabeled"


def read_page(page: Path) -> tuple[list[Block], list[str]]:
    """The page's blocks, and the problems of its markers (one not right before a fence)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    problems: list[str] = []
    rel = page.relative_to(ROOT).as_posix()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        marked = MARKER.match(lines[i])
        if marked and not (i + 1 < len(lines) and FENCE.match(lines[i + 1])):
            problems.append(f"{rel}:{i + 1}: a docs-test marker must be right before a fence")
        if not opening:
            i += 1
            continue
        indent, fence = opening["indent"], opening["fence"]
        end = i + 1
        while end < len(lines) and lines[end].strip() != fence:
            end += 1
        body = [
            line[len(indent) :] if line.startswith(indent) else line for line in lines[i + 1 : end]
        ]
        before = MARKER.match(lines[i - 1]) if i else None
        marker = parse_marker(before["body"]) if before else Marker()
        problems += [f"{rel}:{i}: {error}" for error in marker.errors]
        blocks.append(Block(page, i + 1, opening["lang"].lower(), "\n".join(body) + "\n", marker))
        i = end + 1
    return blocks, problems


def read_all() -> tuple[list[Block], list[str]]:
    blocks: list[Block] = []
    problems: list[str] = []
    for page in PAGES:
        found, wrong = read_page(page)
        blocks += found
        problems += wrong
    numbered = [
        Block(b.page, b.line, b.lang, b.text, b.marker, number)
        for number, b in enumerate(blocks, 1)
    ]
    return numbered, problems


ALL_BLOCKS, MARKER_PROBLEMS = read_all()
TESTED = [block for block in ALL_BLOCKS if block.kind in ("python", "shell", "json")]


def page_blocks(block: Block) -> list[Block]:
    return [other for other in ALL_BLOCKS if other.page == block.page]


def python_source(block: Block) -> str:
    """The block's code, after the page's previous Python block when it ``continues``."""
    if not block.marker.continues:
        return block.text
    earlier = [b for b in page_blocks(block) if b.kind == "python" and b.line < block.line]
    if not earlier:
        return block.text
    return python_source(earlier[-1]) + "\n" + block.text


def page_files(block: Block) -> list[tuple[str, str]]:
    """``file=`` blocks before this one on its page: (name, code)."""
    return [
        (b.marker.file, b.text)
        for b in page_blocks(block)
        if b.marker.file is not None and b.line < block.line
    ]


@cache
def prelude_names() -> tuple[list[str], dict[str, tuple[str, ...]]]:
    """The placeholders and the names each setup defines, read from the prelude's source."""
    tree = ast.parse((PRELUDE / "docs_prelude.py").read_text(encoding="utf-8"))
    found: dict[str, Any] = {}
    for node in tree.body:
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id in ("PLACEHOLDERS", "SETUP_NAMES")
            and node.value is not None
        ):
            found[node.target.id] = node.value
    placeholders = [ast.literal_eval(key) for key in found["PLACEHOLDERS"].keys]
    setups = ast.literal_eval(found["SETUP_NAMES"])
    return placeholders, setups


# -- what a Python block promises to print --------------------------------------------------------


def expected_prints(source: str) -> list[str]:
    """The text after ``#`` on each ``print(...)`` statement's last line (or the next line)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    comments: dict[int, str] = {}
    with contextlib.suppress(tokenize.TokenError):
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.COMMENT:
                comments[token.start[0]] = token.string.lstrip("#").strip()
    lines = source.splitlines()
    promised: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
            continue
        func = node.value.func
        if not (isinstance(func, ast.Name) and func.id == "print") or node.end_lineno is None:
            continue
        last = node.end_lineno
        text = comments.get(last)
        if text is None and last < len(lines) and lines[last].strip().startswith("#"):
            text = comments.get(last + 1)
        if text:
            promised.append((node.lineno, text))
    return [text for _, text in sorted(promised)]


def pattern_of(text: str) -> str:
    """A regex for one promised line: ``...`` matches anything, a UUID any UUID."""
    parts = []
    for piece in re.split(r"(\.\.\.|" + UUID.pattern + ")", text):
        if piece == "...":
            parts.append(".*")
        elif UUID.fullmatch(piece):
            parts.append(UUID.pattern)
        else:
            parts.append(re.escape(piece))
    return "".join(parts)


def missing_prints(promised: list[str], stdout: str) -> list[str]:
    """The promised lines not printed, in order (each may follow other output)."""
    lines = [line.strip() for line in stdout.splitlines()]
    at = 0
    missing = []
    for text in promised:
        pattern = re.compile(pattern_of(text))
        for index in range(at, len(lines)):
            if pattern.fullmatch(lines[index]):
                at = index + 1
                break
        else:
            missing.append(text)
    return missing


def transcript_matches(expected: list[str], stdout: str) -> bool:
    """Whether ``stdout`` is the transcript's output (a ``...`` line matches any lines)."""
    regex = ""
    for line in expected:
        if line.strip() == "...":
            regex += r"(?:[^\n]*\n)*?"
        else:
            regex += pattern_of(line.rstrip()) + r"[ \t]*\n"
    return re.fullmatch(regex, stdout if stdout.endswith("\n") else stdout + "\n") is not None


# -- shell commands -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Command:
    """One simple command of a shell block: its words and what the test does with it."""

    words: tuple[str, ...]
    kind: str  # echomq, pip, repo, python, printf/echo/cat, or refused
    line: str


def shell_lines(text: str) -> tuple[list[str], list[list[str]] | None]:
    """The block's command lines, and for a ``$`` transcript the output shown after each."""
    raw = text.splitlines()
    if any(line.startswith("$ ") for line in raw):
        commands: list[str] = []
        outputs: list[list[str]] = []
        for line in raw:
            if line.startswith("$ "):
                commands.append(line[2:])
                outputs.append([])
            elif outputs:
                outputs[-1].append(line)
        return commands, outputs
    logical: list[str] = []
    pending = ""
    for line in raw:
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        logical.append(pending + line)
        pending = ""
    return [line for line in logical if line.strip()], None


def classify(words: list[str]) -> str:
    prog = os.path.basename(words[0])
    if prog == "echomq":
        return "echomq"
    if prog in ("pip", "pip3") or words[1:3] == ["-m", "pip"]:
        return "pip"
    if words[0].startswith(("bench/", "scripts/")):
        return "repo"
    if prog == "pytest" or words[1:3] == ["-m", "pytest"]:
        return "pytest"
    if PYTHON_EXE.match(prog):
        script = words[1] if len(words) > 1 else ""
        if script.startswith("bench/"):
            return "repo"
        return "python" if script.endswith(".py") else "refused"
    return prog if prog in RUNNABLE else "refused"


def simple_commands(line: str) -> list[Command]:
    """The simple commands of one command line (split at ``&&``, ``||``, ``;``, ``|``)."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        tokens = list(lexer)
    except ValueError:
        return [Command((line,), "refused", line)]
    commands: list[Command] = []
    words: list[str] = []
    skip_next = False
    for token in [*tokens, ";"]:
        if skip_next:
            skip_next = False
        elif token in ("&&", "||", ";", "|", "&"):
            while words and re.fullmatch(r"\w+=.*", words[0]):
                words.pop(0)
            if words:
                commands.append(Command(tuple(words), classify(words), line))
            words = []
        elif token in (">", ">>", "<", "2>"):
            skip_next = True
        else:
            words.append(token)
    return commands


@cache
def pyproject_extras() -> frozenset[str]:
    """The extras of pyproject.toml (read without tomllib, which Python 3.10 lacks)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    section = text.split("[project.optional-dependencies]", 1)[1].split("\n[", 1)[0]
    return frozenset(re.findall(r"^([\w-]+)\s*=", section, re.MULTILINE))


@cache
def script_help(script: str) -> str:
    done = subprocess.run(
        [sys.executable, str(ROOT / script), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    return done.stdout + done.stderr


def check_command(command: Command) -> list[str]:
    """What is wrong with a command, without running it."""
    words = list(command.words)
    shown = f"`{command.line.strip()}`"
    if command.kind == "echomq":
        from echomq.cli import build_parser

        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                build_parser().parse_args(words[1:])
            except SystemExit as exc:
                if exc.code:
                    last = (err.getvalue().strip().splitlines() or ["?"])[-1]
                    return [f"{shown}: the echomq CLI refuses it: {last}"]
        return []
    if command.kind == "pip":
        wrong = []
        for word in words:
            for extras in re.findall(r"\[([^\]]*)\]", word):
                for extra in extras.split(","):
                    if extra.strip() not in pyproject_extras():
                        wrong.append(f"{shown}: pyproject.toml has no extra {extra.strip()!r}")
        return wrong
    if command.kind == "repo":
        at = 1 if PYTHON_EXE.match(os.path.basename(words[0])) else 0
        script = "bench/run.py" if words[at] == "bench/run" else words[at]  # it execs run.py
        if not (ROOT / script).is_file():
            return [f"{shown}: {script} does not exist"]
        options = {word.split("=")[0] for word in words[at + 1 :] if word.startswith("--")}
        if script.endswith(".py") and options:
            help_text = script_help(script)
            return [
                f"{shown}: {script} --help does not list {option}"
                for option in sorted(options)
                if not re.search(re.escape(option) + r"\b", help_text)
            ]
        return []
    if command.kind == "pytest":
        paths = [word for word in words[1:] if not word.startswith("-") and word != "pytest"]
        return [f"{shown}: {path} does not exist" for path in paths if not (ROOT / path).exists()]
    return []


# -- running blocks -------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What became of one block: problems (none: it passed), or why it was skipped."""

    problems: list[str] = field(default_factory=list)
    skip: str | None = None
    seconds: float = 0.0


@dataclass(frozen=True)
class Servers:
    """Where the blocks' Redis is: the module's server, and the cluster and Sentinels if used."""

    base_url: str
    cluster: tuple[str, ...] = ()
    sentinels: tuple[tuple[str, int], ...] = ()

    def url(self, block: Block) -> str:
        return self.base_url.rsplit("/", 1)[0] + f"/{block.number}"

    def rewrite(self, text: str) -> str:
        """A block's text with the Cluster and Sentinel addresses it shows made the suite's
        (nothing else is rewritten: its Redis comes from ``ECHOMQ_REDIS_URL``)."""
        for placeholder, node in zip(CLUSTER_NODES, self.cluster):
            text = text.replace(placeholder, node.split("://")[1].split("/")[0])
        for name, (host, port) in zip(SENTINELS, self.sentinels):
            text = text.replace(f'("{name}", 26379)', f'("{host}", {port})')
            text = text.replace(f"{name}:26379", f"{host}:{port}")
        return text


def needs_cluster(text: str) -> bool:
    return any(node in text for node in CLUSTER_NODES)


def needs_sentinels(text: str) -> bool:
    return any(f"{name}:26379" in text or f'"{name}"' in text for name in SENTINELS)


def django_python() -> str | None:
    """The interpreter with Django 6 (as tests/test_django_backend.py finds it), or None."""
    given = os.environ.get("ECHOMQ_DJANGO_PYTHON")
    path = Path(given) if given else ROOT / ".venv-django" / "bin" / "python"
    return str(path) if path.exists() else None


def block_env(url: str, data_dir: Path, python: str, django: bool) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PYTEST_", "DJANGO_"))
        and key not in ("ECHOMQ_REDIS_URL", "ECHOMQ_DATA_DIR", "ECHOMQ_DURABILITY", "PYTHONPATH")
    }
    paths = [str(PRELUDE), *([str(DJANGO_PROJECT)] if django else [])]
    # A run against the source tree (PYTHONPATH=src) runs the blocks on it too.
    paths += [path for path in os.environ.get("PYTHONPATH", "").split(os.pathsep) if path]
    env |= {
        "ECHOMQ_REDIS_URL": url,
        "ECHOMQ_DOCS_TEST": "1",
        "ECHOMQ_DATA_DIR": str(data_dir),
        "PYTHONPATH": os.pathsep.join(paths),
        "PATH": os.pathsep.join([str(Path(python).parent), env.get("PATH", "")]),
        "COLUMNS": "100",
    }
    return env


def connected(url: str) -> bool:
    """Whether some client is connected to the database of ``url``."""
    db = url.rsplit("/", 1)[1]
    client = SyncRedis.from_url(url.rsplit("/", 1)[0] + "/0")
    try:
        return any(str(entry.get("db")) == db for entry in client.client_list())
    finally:
        client.close()


def run_process(
    argv: list[str], *, cwd: Path, env: dict[str, str], stop: float | None
) -> tuple[int | None, str, str]:
    """Run ``argv`` in a process group of its own. With ``stop``, SIGTERM the group that long
    after the block first connected to its Redis database (so its handlers are in place)."""
    with subprocess.Popen(
        argv,
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    ) as proc:
        if stop is not None:
            deadline = time.monotonic() + BLOCK_TIMEOUT
            while not connected(env["ECHOMQ_REDIS_URL"]) and time.monotonic() < deadline:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    out, err = proc.communicate(timeout=0.05)
                    return proc.returncode, out, err
            try:
                out, err = proc.communicate(timeout=stop)
                return proc.returncode, out, err
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=BLOCK_TIMEOUT)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
            return None, out, err
        return proc.returncode, out, err


def tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def process_problems(block: Block, code: int | None, out: str, err: str) -> list[str]:
    if code is None:
        return [f"still running after {BLOCK_TIMEOUT:.0f}s (killed)\n{tail(out)}\n{tail(err)}"]
    if code != 0:
        return [f"exit code {code}\n--- stdout\n{tail(out)}\n--- stderr\n{tail(err)}"]
    if TRACEBACK in err:
        return [f"exit code 0, but a traceback on stderr:\n{tail(err, 40)}"]
    return []


def prepare_dir(block: Block, base: Path, servers: Servers, django: bool) -> tuple[Path, Path]:
    """The block's working directory (with the page's files and the repository's script
    folders) and the embedded server's data directory it must leave empty."""
    cwd = base / f"block-{block.number}"
    data_dir = base / f"data-{block.number}"
    cwd.mkdir()
    data_dir.mkdir()
    for name in ("examples", "bench", "scripts"):
        (cwd / name).symlink_to(ROOT / name)
    if django:
        (cwd / "manage.py").symlink_to(DJANGO_PROJECT / "manage.py")
    for name, text in page_files(block):
        target = cwd / name
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(servers.rewrite(text), encoding="utf-8")
    return cwd, data_dir


def check_embedded(data_dir: Path, env: dict[str, str], python: str) -> list[str]:
    """Fail a block that started the CLI's embedded server (and stop that server)."""
    if not any(data_dir.iterdir()):
        return []
    echomq = str(Path(python).parent / "echomq")
    subprocess.run([echomq, "server", "stop", "--force"], env=env, capture_output=True, timeout=60)
    return ["it started the embedded Redis server: it must use ECHOMQ_REDIS_URL"]


def compile_problems(block: Block) -> list[str]:
    """The block compiles (top-level ``await`` only when it is marked ``repl``)."""
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT if block.marker.repl else 0
    try:
        compile(python_source(block), block.id, "exec", flags=flags, dont_inherit=True)
    except SyntaxError as exc:
        outside = re.search(r"\b(await|async \w+)\b.* outside", str(exc.msg))
        if outside and not block.marker.repl:
            return [
                f"line {exc.lineno}: {exc.msg}: a top-level `await` (or `async with` / `async "
                "for`) belongs in a function run by asyncio.run(), or in a block marked "
                "<!-- docs-test: repl -->"
            ]
        return [f"does not compile: {exc}"]
    return []


def static_problems(blocks: list[Block], workdir: Path) -> dict[str, list[str]]:
    """Compile each Python block, then let ruff look for undefined names (F821): one ruff run
    per set of known names (the placeholders, and the names of the block's setups)."""
    placeholders, setup_names = prelude_names()
    found: dict[str, list[str]] = {}
    groups: dict[tuple[str, ...], dict[str, Block]] = {}
    workdir.mkdir(parents=True, exist_ok=True)
    for block in blocks:
        if block.kind != "python":
            continue
        found[block.id] = compile_problems(block)
        if found[block.id]:
            continue
        names = {*placeholders, *(n for s in block.marker.setups for n in setup_names[s])}
        path = workdir / f"block_{block.number}.py"
        path.write_text(python_source(block), encoding="utf-8")
        groups.setdefault(tuple(sorted(names)), {})[str(path)] = block
    for known, members in groups.items():
        done = subprocess.run(
            [sys.executable, "-m", "ruff", "check", "--isolated", "--select", "F821"]
            + ["--target-version", "py310", "--output-format", "concise", "--no-cache"]
            + ["--config", f"builtins = {list(known)!r}", *members],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if done.returncode not in (0, 1):
            for block in members.values():
                found[block.id].append(f"ruff failed: {done.stdout}{done.stderr}")
        for line in done.stdout.splitlines():
            where = re.match(r"(.*?\.py):(\d+):(\d+): (F821 .*)", line)
            if where and where[1] in members:
                found[members[where[1]].id].append(f"line {where[2]}: {where[4]}")
    return found


def default_server_problems(text: str) -> list[str]:
    """Nothing may point at port 6379 (``redis://localhost:6379``, ``Redis()``, ``Redis(host=
    ...)``): nothing listens there for a reader who ran only "Try it", nor here."""
    if re.search(r"(localhost|127\.0\.0\.1):6379|\bRedis\(\s*(\)|host\s*=|port\s*=)", text):
        return [
            'names a Redis on port 6379, where nothing listens for a reader of "Try it": '
            "drop connection= (the connection rule finds Redis), or use "
            "echomq.default_redis_url() for a client of your own"
        ]
    return []


def run_python(block: Block, base: Path, servers: Servers, static: list[str]) -> Outcome:
    problems = list(static)
    if problems:
        return Outcome(problems)
    if block.marker.skip:
        return Outcome(skip=block.marker.skip)
    source = python_source(block)
    problems = default_server_problems(servers.rewrite(source))
    if problems:
        return Outcome(problems)
    django = bool(DJANGO_IMPORT.search(source)) or "django" in block.marker.setups
    python = django_python() if django else sys.executable
    if python is None:
        return Outcome(skip="needs Django 6: no .venv-django/bin/python (nor ECHOMQ_DJANGO_PYTHON)")
    cwd, data_dir = prepare_dir(block, base, servers, django)
    name = block.marker.file or "block.py"
    (cwd / name).parent.mkdir(parents=True, exist_ok=True)
    (cwd / name).write_text(servers.rewrite(source), encoding="utf-8")
    if TEST_FUNCTION.search(source):
        argv = [python, "-m", "pytest", name, "-q", "-p", "no:cacheprovider"]
        argv += ["-o", "asyncio_mode=auto"]
    elif block.marker.repl or block.marker.setups:
        argv = [python, "-c", "import docs_prelude, sys; docs_prelude.main(sys.argv[1:])"]
        argv += ["--repl"] * block.marker.repl
        argv += [f"--setup={setup}" for setup in block.marker.setups] + [name]
    else:
        argv = [python, name]
    env = block_env(servers.url(block), data_dir, python, django)
    code, out, err = run_process(argv, cwd=cwd, env=env, stop=block.marker.stop)
    problems = process_problems(block, code, out, err)
    if not problems:
        missing = missing_prints(expected_prints(source), out)
        problems += [f"did not print {text!r}; stdout:\n{tail(out)}" for text in missing]
    return Outcome(problems + check_embedded(data_dir, env, python))


def run_shell(block: Block, base: Path, servers: Servers) -> Outcome:
    lines, outputs = shell_lines(block.text)
    commands = [command for line in lines for command in simple_commands(line)]
    problems = [problem for command in commands for problem in check_command(command)]
    refused = sorted({command.words[0] for command in commands if command.kind == "refused"})
    kinds = {command.kind for command in commands}
    if block.marker.skip:
        return Outcome(problems, skip=None if problems else block.marker.skip)
    if refused:
        problems.append(
            f"runs {', '.join(refused)}, which the test cannot run here: mark the block "
            '<!-- docs-test: skip reason="..." --> if it cannot be made to run'
        )
    if kinds & CHECKED_ONLY and kinds - CHECKED_ONLY:
        problems.append(
            "mixes commands that are only checked (pip install, bench/, scripts/) with commands "
            "that run: split the block"
        )
    if problems or kinds <= CHECKED_ONLY:
        return Outcome(problems)
    django = any("manage.py" in command.words for command in commands)
    python = django_python() if django else sys.executable
    if python is None:
        return Outcome(skip="needs Django 6: no .venv-django/bin/python (nor ECHOMQ_DJANGO_PYTHON)")
    script = servers.rewrite("\n".join(lines) + "\n")
    problems = default_server_problems(script)
    if problems:
        return Outcome(problems)
    cwd, data_dir = prepare_dir(block, base, servers, django)
    env = block_env(servers.url(block), data_dir, python, django)
    argv = ["bash", "-e", "-o", "pipefail", "-c", script]
    code, out, err = run_process(argv, cwd=cwd, env=env, stop=block.marker.stop)
    problems = process_problems(block, code, out, err)
    if not problems and outputs is not None:
        shown = [line for output in outputs for line in output]
        if not transcript_matches(shown, out):
            problems.append("printed:\n" + out + "\nbut the block shows:\n" + "\n".join(shown))
    return Outcome(problems + check_embedded(data_dir, env, python))


def run_json(block: Block) -> Outcome:
    try:
        json.loads(block.text)
    except ValueError as exc:
        return Outcome([f"not JSON: {exc}"])
    return Outcome()


def run_block(block: Block, base: Path, servers: Servers, static: list[str]) -> Outcome:
    started = time.monotonic()
    if block.kind == "python":
        outcome = run_python(block, base, servers, static)
    elif block.kind == "shell":
        outcome = run_shell(block, base, servers)
    else:
        outcome = run_json(block)
    outcome.seconds = time.monotonic() - started
    return outcome


# -- fixtures and tests ---------------------------------------------------------------------------


def selected_blocks(request: pytest.FixtureRequest) -> list[Block]:
    chosen = []
    for item in request.session.items:
        callspec = getattr(item, "callspec", None)
        module = getattr(item, "module", None)
        if callspec is not None and getattr(module, "__name__", None) == __name__:
            block = callspec.params.get("block")
            if isinstance(block, Block):
                chosen.append(block)
    return chosen


@pytest.fixture(scope="module")
def docs_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """This module's own server, with a database for every block."""
    server = RedisServer(
        executable=find_redis_server(),
        data_dir=tmp_path_factory.mktemp("docs-redis"),
        appendonly=False,
        extra_args=["--databases", str(len(ALL_BLOCKS) + 1)],
    )
    server.start()
    try:
        yield server.url
    finally:
        server.stop()


def cost(block: Block) -> float:
    """A guess at how long a block runs, so the longest start first."""
    return block.text.count("echomq ") * 2 + (block.marker.stop or 0) + (block.kind == "shell")


@pytest.fixture(scope="module")
def docs_runs(
    request: pytest.FixtureRequest, docs_redis: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Outcome]:
    """Run every selected block once, several at a time; their outcomes by block id.

    Blocks that name the Cluster or the Sentinels start once those are up, the others at once.
    """
    blocks = sorted(selected_blocks(request), key=cost, reverse=True)
    base = tmp_path_factory.mktemp("docs-blocks")
    static = static_problems(blocks, base / "static")
    texts = {b.id: python_source(b) if b.kind == "python" else b.text for b in blocks}
    later = [
        block
        for block in blocks
        if not static.get(block.id)
        and (needs_cluster(texts[block.id]) or needs_sentinels(texts[block.id]))
    ]
    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        servers = Servers(docs_redis)
        futures = {
            block.id: pool.submit(run_block, block, base, servers, static.get(block.id, []))
            for block in blocks
            if block not in later
        }
        if later:
            cluster: tuple[str, ...] = ()
            sentinels: tuple[tuple[str, int], ...] = ()
            if any(needs_cluster(texts[block.id]) for block in later):
                cluster = tuple(request.getfixturevalue("redis_cluster"))
            if any(needs_sentinels(texts[block.id]) for block in later):
                sentinels = tuple(request.getfixturevalue("redis_sentinel").sentinels)
            servers = Servers(docs_redis, cluster, sentinels)
            for block in later:
                futures[block.id] = pool.submit(run_block, block, base, servers, [])
        return {block_id: future.result() for block_id, future in futures.items()}


@pytest.mark.timeout(900)
@pytest.mark.parametrize("block", TESTED, ids=[block.id for block in TESTED])
def test_block(block: Block, docs_runs: dict[str, Outcome]) -> None:
    outcome = docs_runs[block.id]
    if outcome.problems:
        head = f"{block.id} (after {outcome.seconds:.1f}s):\n"
        pytest.fail(head + "\n".join(outcome.problems), pytrace=False)
    if outcome.skip is not None:
        pytest.skip(outcome.skip)


def test_markers_sit_on_blocks_and_use_known_words() -> None:
    problems = list(MARKER_PROBLEMS)
    for block in ALL_BLOCKS:
        marker = block.marker
        python_only = marker.repl or marker.setups or marker.continues or marker.file
        if python_only and block.kind != "python":
            problems.append(f"{block.id}: repl, setup, continues and file are for Python blocks")
    assert not problems, "\n".join(problems)


def test_exemptions_are_few_and_each_says_why() -> None:
    skipped = [block for block in ALL_BLOCKS if block.marker.skip is not None]
    vague = [block.id for block in skipped if len((block.marker.skip or "").split()) < 3]
    assert not vague, f"say why these blocks cannot run, in a few words: {vague}"
    assert len(skipped) <= MAX_EXEMPTIONS, (
        f"{len(skipped)} blocks are marked skip (at most {MAX_EXEMPTIONS}): "
        + ", ".join(f"{b.id} ({b.marker.skip})" for b in skipped)
    )


def test_unlabeled_blocks_hold_no_code() -> None:
    code = re.compile(r"^(\$ |echomq |import |from \w+ import |await |async def |def )")
    wrong = [
        block.id
        for block in ALL_BLOCKS
        if block.kind == "unlabeled" and any(code.match(line) for line in block.text.splitlines())
    ]
    assert not wrong, f"label these blocks (```python, ```sh) so the test runs them: {wrong}"
