"""The package's layers: every module imports on its own, imports form no cycle, and no
module imports a layer above its own (the diagram of CONTRIBUTING.md, :data:`LAYERS`).

A cycle hidden by a function-level import (or by the order modules happen to be imported in)
breaks the first program that imports the modules in another order, so the graph is built from
the source: every ``import`` in a module, at any depth, except under ``if TYPE_CHECKING:``
(those never run). Importing a submodule runs its packages' ``__init__`` first, so an edge to
``echomq.a.b`` is also an edge to the package ``echomq.a`` (but not to the root ``echomq``,
whose ``__init__`` only re-exports, nor to a package the importer is itself inside).
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import echomq

ROOT = Path(echomq.__file__).parent


def module_files() -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its ``__init__.py``)."""
    found: dict[str, Path] = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = ("echomq", *path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__main__":
            continue
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = module_files()


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported(tree: ast.AST, name: str, is_package: bool) -> set[str]:
    """Names of echomq modules that module ``name`` imports, wherever in its body."""
    package = name if is_package else name.rpartition(".")[0]
    targets: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            targets.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            submodules = {f"{source}.{alias.name}" for alias in node.names} & MODULES.keys()
            targets.update(submodules)  # `from . import ops` imports echomq._ops
            if len(submodules) < len(node.names):  # names defined in `source` itself
                targets.add(source)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {t for t in targets if t in MODULES and t != name}


def import_graph() -> dict[str, set[str]]:
    """Each module's echomq imports, with the packages that importing them initialises."""
    graph: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        edges: set[str] = set()
        for target in _imported(tree, name, path.name == "__init__.py"):
            edges.add(target)
            parts = target.split(".")
            for depth in range(2, len(parts)):
                parent = ".".join(parts[:depth])
                if not (name == parent or name.startswith(parent + ".")):
                    edges.add(parent)
        graph[name] = edges
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected group of modules (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return groups


def test_the_graph_sees_function_level_imports_and_skips_type_checking() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from .queue import Queue\n"
        "def f():\n    from ._ops import _base\n    import echomq._ops.scripts\n"
    )
    found = _imported(ast.parse(source), "echomq.queue", is_package=False)
    assert found == {"echomq._ops._base", "echomq._ops.scripts"}
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles_among_echomq_modules() -> None:
    cycles = find_cycles(import_graph())
    assert cycles == [], f"modules importing each other (directly or through others): {cycles}"


#: The layers of CONTRIBUTING.md's diagram, lowest first: a module imports modules of its own
#: layer or of layers below, never above. Each entry is a layer's name and the module names (a
#: name ending in ``.*`` covers a package and everything in it) it holds.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("facts", ("echomq.protocol.*", "echomq.errors")),
    (
        "values",
        (
            "echomq._keys",
            "echomq._json",
            "echomq.options",
            "echomq.schedulers",
            "echomq._flow_job",
            "echomq._cron",
            "echomq._run_state",
            "echomq._tracebacks",
            "echomq.telemetry",
        ),
    ),
    ("embedded", ("echomq.embedded",)),
    (
        "redis-wire",
        (
            "echomq._redis",
            "echomq._redis.wire",
            "echomq._redis.client_settings",
            "echomq._redis.fail_fast",
            "echomq._redis.topology",
            "echomq._redis.urls",
            "echomq._redis.retry",
            "echomq._redis.restricted",
            "echomq._redis.sentinel_watch",
            "echomq._redis.batched",
            "echomq._redis.pools",
            "echomq._redis.variants",
            "echomq._redis.server_reports",
            "echomq._redis.default",
        ),
    ),
    ("ops", ("echomq._ops.*",)),
    (
        "redis-run",
        (
            "echomq._redis.run",
            "echomq._redis.run_sync",
            "echomq._redis.connection",
            "echomq._redis.connection_sync",
            "echomq._redis.server_checks",
            "echomq._redis.server_checks_sync",
        ),
    ),
    (
        "api",
        (
            "echomq._job_model",
            "echomq._job",
            "echomq.job",
            "echomq._event_types",
            "echomq._discovery",
            "echomq._queue",
            "echomq.queue",
            "echomq.flows",
            "echomq.events",
        ),
    ),
    ("sync", ("echomq.sync.*",)),
    ("tasks", ("echomq.tasks.*",)),
    ("worker", ("echomq.worker.*",)),
    ("package", ("echomq",)),
    ("dashboard", ("echomq.dashboard.*",)),
    ("cli", ("echomq.cli.*",)),
    ("integrations", ("echomq.contrib.*", "echomq.testing.*")),
]


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of the layer holding ``module``."""
    found = [
        rank
        for rank, (_, patterns) in enumerate(LAYERS)
        for pattern in patterns
        if module == pattern
        or (pattern.endswith(".*") and (module == pattern[:-2] or module.startswith(pattern[:-1])))
    ]
    assert len(found) == 1, f"{module} is in {len(found)} layers of LAYERS; put it in one"
    return found[0]


def test_every_module_has_a_layer() -> None:
    for name in MODULES:
        layer_of(name)


def test_no_module_imports_a_layer_above_its_own() -> None:
    upward = []
    for name, targets in import_graph().items():
        here = layer_of(name)
        for target in sorted(targets):
            there = layer_of(target)
            if there > here:
                upward.append(f"{name} ({LAYERS[here][0]}) imports {target} ({LAYERS[there][0]})")
    assert upward == []


def test_protocol_depends_on_nothing_above_it() -> None:
    # Transitively, through the graph, with no exception: the protocol says what is wrong with
    # a name or a value (keys.queue_name_problem, fields.encode's TypeError), and the values
    # layer above it (echomq._keys, echomq._json) raises the package's errors.
    graph = import_graph()
    reached: set[str] = set()
    todo = [name for name in graph if name.startswith("echomq.protocol")]
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo.extend(graph[name])
    above = {n for n in reached if not n.startswith("echomq.protocol")}
    assert above == set()


def _import_alone(name: str) -> tuple[str, str]:
    done = subprocess.run(
        [sys.executable, "-W", "error", "-c", f"import {name}"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return name, "" if done.returncode == 0 else done.stderr.strip().splitlines()[-1]


def _extra_missing(error: str) -> bool:
    """An optional integration whose framework is not installed here may only fail with an
    ImportError that names the ``pip install 'echomq[...]'`` command to run (the rule for every
    optional extra); tests/test_django_backend.py imports the Django ones where Django 6 is
    installed."""
    return error.startswith("ImportError:") and "pip install 'echomq[" in error


@pytest.mark.timeout(300)  # one interpreter per module; slow on a loaded machine
def test_each_module_imports_first_in_a_fresh_interpreter() -> None:
    with ThreadPoolExecutor(max_workers=4) as pool:
        failed = {
            name: error
            for name, error in pool.map(_import_alone, MODULES)
            if error and not _extra_missing(error)
        }
    assert failed == {}


def test_no_module_imports_a_private_part_of_redis_py() -> None:
    private: dict[str, list[str]] = {}
    for name, path in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                sources = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                sources = [node.module or ""]
            else:
                continue
            for source in sources:
                parts = source.split(".")
                if parts[0] in ("redis", "hiredis") and any(p.startswith("_") for p in parts):
                    private.setdefault(name, []).append(source)
    assert private == {}, "only redis-py's and hiredis's public modules may be imported"


#: Where CONTRIBUTING.md's diagram draws a layer of :data:`LAYERS` that has no row of its own.
DRAWN_IN = {
    "sync": "api",
    "package": "outside",
    "dashboard": "outside",
    "cli": "outside",
    "integrations": "outside",
}


def diagram_rows() -> dict[str, str]:
    """The rows of CONTRIBUTING.md's layer diagram, in order: each row's name (the word at the
    start of a line) and its text."""
    text = (Path(__file__).resolve().parents[1] / "CONTRIBUTING.md").read_text()
    block = text.split("## How the layers fit", 1)[1].split("```", 2)[1]
    rows: dict[str, str] = {}
    name = ""
    for line in block.splitlines():
        if line[:1].isalpha():
            name, _, line = line.partition(" ")
            rows[name] = ""
        if name:
            rows[name] += " " + line
    return rows


def drawn_as(pattern: str) -> str:
    """How the diagram names a module of :data:`LAYERS`: ``wire.py``, a package as ``sync/``,
    the package itself as ``__init__.py``, a generated ``*_sync.py`` twin by that pattern."""
    if pattern == "echomq":
        return "__init__.py"
    if pattern.endswith(".*"):
        return pattern[:-2].rpartition(".")[2] + "/"
    last = pattern.rpartition(".")[2]
    if last.endswith("_sync"):  # the generated twins: "*_sync.py beside each"
        return "*_sync.py"
    spec = importlib.util.find_spec(pattern)
    assert spec is not None, pattern
    return f"{last}/" if spec.submodule_search_locations is not None else f"{last}.py"


def test_the_contributing_diagram_draws_every_module_in_its_layer_and_order() -> None:
    rows = diagram_rows()
    drawn = [DRAWN_IN.get(layer, layer) for layer, _ in LAYERS]
    assert list(rows) == list(dict.fromkeys(drawn)), "the diagram's rows are not LAYERS' order"
    missing = [
        f"{pattern} (as {drawn_as(pattern)!r} in the row {row!r})"
        for (layer, patterns), row in zip(LAYERS, drawn)
        for pattern in patterns
        if drawn_as(pattern) not in rows[row]
    ]
    assert missing == [], f"CONTRIBUTING.md's diagram omits: {missing}"
