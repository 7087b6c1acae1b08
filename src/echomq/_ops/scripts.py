"""The script registry: reads each ``lua/*.lua`` once, inlines includes, runs it by SHA1.

Each script file starts with a header comment listing ``KEYS[i]`` lines (their count is the
script's key count, checked on every call), ``ARGV[i]`` lines, its return value and error codes.
``--@include "name"`` lines are replaced by ``lua/includes/<name>.lua`` (each include once, in
first-use order), so the text and therefore the SHA1 are the same in every process.

A :class:`Script` is called by SHA1 (``_redis.run.call_script``, which loads it on NOSCRIPT)
or queued on a pipeline (:meth:`Script.queue`, after ``_redis.run.ensure_loaded``).
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

from .._redis.topology import has_hash_tag, is_cluster
from ..errors import ValidationError

Arg = str | bytes | int | float

_INCLUDE = re.compile(r'^--@include "([\w-]+)"\s*$', re.MULTILINE)
_KEY_DECL = re.compile(r"^\s*(?:--)?\s*KEYS\[(\d+)\]", re.MULTILINE)
_KEY_USE = re.compile(r"\bKEYS\[(\d+)\]")


@dataclass(frozen=True, slots=True)
class Script:
    """One loaded script: its name, full text (includes inlined), SHA1 and key count."""

    name: str
    text: str
    sha: str
    numkeys: int

    def check(self, keys: Sequence[str], client: object = None) -> None:
        """Refuse a call whose key count differs from the header's declaration, and on
        Redis Cluster a call whose keys carry no hash tag (they would span slots)."""
        if len(keys) != self.numkeys:
            raise AssertionError(
                f"script {self.name} declares {self.numkeys} KEYS, called with {len(keys)}"
            )
        if keys and is_cluster(type(client)) and not has_hash_tag(keys[0]):
            raise ValidationError(
                f"key {keys[0]!r} has no hash tag, so a queue's keys would land in different "
                "Redis Cluster slots; use a prefix like '{bull}' or a queue name like '{emails}'"
            )

    def queue(self, pipe: Any, keys: Sequence[str], args: Sequence[Arg]) -> None:
        """Queue an EVALSHA on a (sync or async) pipeline (``_redis.run.ensure_loaded`` first)."""
        self.check(keys, pipe)
        # execute_command, not pipe.evalsha: redis-py's cluster pipeline blocks the method name
        pipe.execute_command("EVALSHA", self.sha, self.numkeys, *keys, *args)


def _read(name: str) -> str:
    return (resources.files("echomq") / "lua" / name).read_text(encoding="utf-8")


def _inline(text: str, seen: set[str]) -> str:
    def replace(match: re.Match[str]) -> str:
        include = match.group(1)
        if include in seen:
            return f"-- (include {include} already inlined)"
        seen.add(include)
        return _inline(_read(f"includes/{include}.lua"), seen).rstrip("\n")

    return _INCLUDE.sub(replace, text)


def _header(text: str) -> str:
    """The leading comment block of a script (where KEYS are declared)."""
    end = text.find("]]")
    return text[: end + 2] if text.lstrip().startswith("--[[") and end >= 0 else ""


@functools.cache
def get(name: str) -> Script:
    """The script ``lua/<name>.lua``, read and prepared once per process."""
    raw = _read(f"{name}.lua")
    keys = [int(k) for k in _KEY_DECL.findall(_header(raw))]
    numkeys = max(keys, default=0)
    if sorted(keys) != list(range(1, numkeys + 1)):
        raise AssertionError(f"script {name}: header must declare KEYS[1..n] once each")
    text = _inline(raw, set())
    used = [int(k) for k in _KEY_USE.findall(text[len(_header(raw)) :])]
    if max(used, default=0) > numkeys:
        raise AssertionError(f"script {name} uses KEYS[{max(used)}], its header declares {numkeys}")
    sha = hashlib.sha1(text.encode("utf-8")).hexdigest()
    return Script(name=name, text=text, sha=sha, numkeys=numkeys)


def all_script_names() -> list[str]:
    """Names of every shipped script (used by tests and by the loader self-check)."""
    return sorted(
        p.name[:-4]
        for p in (resources.files("echomq") / "lua").iterdir()
        if p.name.endswith(".lua")
    )
