"""The written protocol (docs/protocol/) agrees with the scripts and with the code that cites it.

- Every ``src/echomq/lua/*.lua`` has a section ``<a id="script-<name>">`` in
  ``docs/protocol/scripts.md`` whose KEYS and ARGV tables list the same slots and names, in the
  same order, as the script's header (and every section names an existing script).
- Every ``docs/protocol/<file>.md#<anchor>`` cited in src, tests, bench or docs exists, and every
  relative link between the protocol documents resolves.
- Nothing cites the retired external protocol notes any more.

Header entries are read in two styles: one per line (``KEYS[1] wait``, ``ARGV[3..] pairs: ...``)
or a list (``KEYS: 1 wait, 2 active``). An entry's *name* is the start of its description, up to
the first ``;``, ``, ``, `` (``, ``: ``, `` "`` or `` {``; names are compared without quotes or
backticks, ignoring case and repeated spaces (docs/protocol/scripts.md#header-format).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LUA = ROOT / "src" / "echomq" / "lua"
DOCS = ROOT / "docs" / "protocol"
SCRIPTS_MD = DOCS / "scripts.md"

Entry = tuple[str, str]  # (slot index such as "1" or "3..", normalised name)

_LINE_ENTRY = re.compile(r"^\s*(?:--)?\s*(KEYS|ARGV)\[(\d+(?:\.\.\d*)?)\]\s+(.*)$")
_LIST_START = re.compile(r"^\s*(?:--)?\s*(KEYS|ARGV)\s*:\s*(.*)$")
_LIST_ITEM = re.compile(r"(?:^|,)\s*(\d+(?:\.\.\d*)?)\s+([^,]+)")
_NAME_END = re.compile(r";|, | \(|: | \"| \{")
_TABLE_ROW = re.compile(r"^\|\s*(KEYS|ARGV)\[(\d+(?:\.\.\d*)?)\]\s*\|\s*([^|]*?)\s*\|")
_ANCHOR = re.compile(r'<a id="([^"]+)"></a>')
_SECTION = re.compile(r'<a id="script-([^"]+)"></a>')
_CITATION = re.compile(r"docs/protocol/([\w-]+\.md)(?:#([\w-]+))?")
_MD_LINK = re.compile(r"\]\(([^)\s]+)\)")


def normalise(name: str) -> str:
    """A header or table name, compared without quotes, backticks, case or repeated spaces."""
    name = re.sub(r"[\"`]", "", name).lower()
    return " ".join(name.split()).rstrip(".:,")


def entry_name(description: str) -> str:
    """The name of a header entry: its description up to the first separator."""
    match = _NAME_END.search(description)
    return normalise(description[: match.start()] if match else description)


def header(text: str) -> str:
    """The leading ``--[[ ... ]]`` comment of a script."""
    if not text.lstrip().startswith("--[["):
        return ""
    return text[: text.find("]]") + 2]


def parse_header(text: str) -> dict[str, list[Entry]]:
    """The KEYS and ARGV entries a script header declares, in order of appearance."""
    out: dict[str, list[Entry]] = {"KEYS": [], "ARGV": []}
    lines = header(text).splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        entry = _LINE_ENTRY.match(line)
        listed = _LIST_START.match(line)
        if entry:
            out[entry.group(1)].append((entry.group(2), entry_name(entry.group(3))))
        elif listed and re.match(r"\d", listed.group(2).strip() or "x"):
            # "KEYS: 1 a, 2 b," possibly continued on the following non-blank lines
            body = listed.group(2)
            while i + 1 < len(lines) and lines[i + 1].strip() and re.match(r"^\s*\d", lines[i + 1]):
                i += 1
                body += " " + lines[i].strip()
            for item in _LIST_ITEM.finditer(body):
                out[listed.group(1)].append((item.group(1), entry_name(item.group(2))))
        i += 1
    return out


def doc_sections(text: str) -> dict[str, str]:
    """The text of each ``script-<name>`` section of scripts.md, up to the next section."""
    marks = list(_SECTION.finditer(text))
    sections = {}
    for n, mark in enumerate(marks):
        end = marks[n + 1].start() if n + 1 < len(marks) else len(text)
        rest = text[mark.end() : end]
        # a section also ends at the next top-level part of the page
        cut = re.search(r'^<a id="(?!script-)[^"]+"></a>\n## ', rest, re.MULTILINE)
        sections[mark.group(1)] = rest[: cut.start()] if cut else rest
    return sections


def parse_tables(section: str) -> dict[str, list[Entry]]:
    """The KEYS and ARGV rows (slot, name) of a script section, in order."""
    out: dict[str, list[Entry]] = {"KEYS": [], "ARGV": []}
    for line in section.splitlines():
        row = _TABLE_ROW.match(line)
        if row:
            out[row.group(1)].append((row.group(2), entry_name(row.group(3))))
    return out


def anchors_of(path: Path) -> set[str]:
    """Explicit anchors and GitHub heading anchors of a markdown file."""
    text = path.read_text(encoding="utf-8")
    found = set(_ANCHOR.findall(text))
    for heading in re.findall(r"^#+\s+(.*)$", text, re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


SCRIPT_NAMES = sorted(p.stem for p in LUA.glob("*.lua"))


def test_parse_both_header_styles() -> None:
    text = (
        '--[[\n  x: y\n\n  KEYS[1]  prefix "P:Q:": derived\n  KEYS[2] wait\n\n'
        '  ARGV: 1 job id, 2 the new delay (ms), 3 "1" for lifo, else "0"\n'
        "  ARGV[4..] pairs: jobId, token\n]]\nreturn 0\n"
    )
    assert parse_header(text) == {
        "KEYS": [("1", "prefix"), ("2", "wait")],
        "ARGV": [("1", "job id"), ("2", "the new delay"), ("3", "1 for lifo"), ("4..", "pairs")],
    }


def test_every_script_has_a_section_and_every_section_a_script() -> None:
    sections = doc_sections(SCRIPTS_MD.read_text(encoding="utf-8"))
    missing = sorted(set(SCRIPT_NAMES) - set(sections))
    stray = sorted(set(sections) - set(SCRIPT_NAMES))
    assert not missing, f"scripts without a section in docs/protocol/scripts.md: {missing}"
    assert not stray, f"sections of scripts.md naming no src/echomq/lua script: {stray}"


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_script_header_matches_its_section(name: str) -> None:
    declared = parse_header((LUA / f"{name}.lua").read_text(encoding="utf-8"))
    section = doc_sections(SCRIPTS_MD.read_text(encoding="utf-8")).get(name)
    assert section is not None, f"no script-{name} section in docs/protocol/scripts.md"
    documented = parse_tables(section)
    for kind in ("KEYS", "ARGV"):
        slots = [slot for slot, _ in declared[kind]]
        assert len(slots) == len(set(slots)), f"{name}.lua declares a {kind} slot twice: {slots}"
        assert declared[kind] == documented[kind], (
            f"{name}: {kind} in the .lua header and in docs/protocol/scripts.md#script-{name} "
            f"differ.\n  header: {declared[kind]}\n  docs:   {documented[kind]}"
        )
    assert declared["KEYS"], f"{name}.lua declares no KEYS"


def _cited_files() -> list[Path]:
    roots = [ROOT / "src", ROOT / "tests", ROOT / "docs", ROOT / "bench"]
    skip = {"node_modules", ".venvs", ".venv", "results", "__pycache__"}
    files = [ROOT / "README.md", ROOT / "CONTRIBUTING.md"]
    for root in roots:
        for path in root.rglob("*"):
            if (
                path.is_file()
                and path.suffix in {".py", ".lua", ".md", ".js", ".mjs", ".toml"}
                and not skip.intersection(path.relative_to(ROOT).parts)
            ):
                files.append(path)
    return [f for f in files if f.exists()]


def test_cited_protocol_anchors_exist() -> None:
    anchors: dict[str, set[str]] = {p.name: anchors_of(p) for p in DOCS.glob("*.md")}
    broken = []
    for path in _cited_files():
        if path.name == "test_protocol_docs.py":  # its messages build citations from names
            continue
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for match in _CITATION.finditer(line):
                doc, anchor = match.group(1), match.group(2)
                where = f"{path.relative_to(ROOT)}:{lineno}"
                if doc not in anchors:
                    broken.append(f"{where}: no file docs/protocol/{doc}")
                elif anchor and anchor not in anchors[doc]:
                    broken.append(f"{where}: no anchor #{anchor} in docs/protocol/{doc}")
    assert not broken, "\n".join(broken)


def test_links_between_protocol_documents_resolve() -> None:
    broken = []
    for path in sorted(DOCS.glob("*.md")):
        for target in _MD_LINK.findall(path.read_text(encoding="utf-8")):
            if "://" in target or target.startswith("mailto:"):
                continue
            file_part, _, anchor = target.partition("#")
            doc = (path.parent / file_part).resolve() if file_part else path
            if not doc.exists():
                broken.append(f"{path.name}: {target} (no such file)")
            elif anchor and doc.suffix == ".md" and anchor not in anchors_of(doc):
                broken.append(f"{path.name}: {target} (no such anchor)")
    assert not broken, "\n".join(broken)


def test_no_citation_of_the_retired_protocol_notes() -> None:
    old = re.compile(r"\b(?:CORE|ADVANCED)\.md\b")
    hits = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in _cited_files()
        if path.name != "test_protocol_docs.py"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if old.search(line)
    ]
    assert not hits, "cite docs/protocol/ instead:\n" + "\n".join(hits)
