"""The script registry: reads each ``lua/*.lua`` once, inlines includes, runs it by SHA1.

Each script file starts with a header comment listing ``KEYS[i]`` lines (their count is the
script's key count, checked on every call), ``ARGV[i]`` lines, its return value and error codes.
``--@include "name"`` lines are replaced by ``lua/includes/<name>.lua`` (each include once, in
first-use order), so the text and therefore the SHA1 are the same in every process.

Calls go out as EVALSHA; a NOSCRIPT reply (a restarted or flushed server) loads the script and
retries once. Inside a pipeline or MULTI/EXEC a NOSCRIPT would surface only at EXEC, after other
commands ran, so :func:`ensure_loaded` loads the scripts a pipeline uses before it executes.
Works with sync and async clients and with any ``decode_responses`` setting.
"""

from __future__ import annotations

import functools
import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster
from redis.exceptions import NoScriptError

from .._redis.wire import Channel, send
from ..errors import ValidationError

Arg = str | bytes | int | float

_CLUSTERS = (
    redis.asyncio.cluster.RedisCluster,
    redis.cluster.RedisCluster,
    redis.asyncio.cluster.ClusterPipeline,
    redis.cluster.ClusterPipeline,
)

_CLUSTER_CLASSES: dict[type, bool] = {}


def _is_cluster(kind: type) -> bool:
    """Whether clients of class ``kind`` talk to Redis Cluster (remembered per class: an
    ``isinstance`` against the cluster classes goes through ``typing`` and costs µs a call)."""
    known = _CLUSTER_CLASSES.get(kind)
    if known is None:
        known = _CLUSTER_CLASSES[kind] = issubclass(kind, _CLUSTERS)
    return known


def has_hash_tag(key: str) -> bool:
    """Whether ``key`` carries a Redis Cluster hash tag (a non-empty ``{...}``)."""
    start = key.find("{")
    return start >= 0 and key.find("}", start + 1) > start + 1


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
        if keys and _is_cluster(type(client)) and not has_hash_tag(keys[0]):
            raise ValidationError(
                f"key {keys[0]!r} has no hash tag, so a queue's keys would land in different "
                "Redis Cluster slots; use a prefix like '{bull}' or a queue name like '{emails}'"
            )

    async def run(
        self,
        client: redis.asyncio.Redis,
        keys: Sequence[str],
        args: Sequence[Arg],
        channel: Channel | None = None,
    ) -> Any:
        """EVALSHA on an async client (through ``channel`` when given), loading the script
        on NOSCRIPT."""
        self.check(keys, client)
        command = ("EVALSHA", self.sha, self.numkeys, *keys, *args)
        try:
            return await send(client, channel, command)
        except NoScriptError:
            if channel is not None:
                await channel.call(("SCRIPT", "LOAD", self.text))
            else:  # redis-py's script_load also loads on every node of a Cluster
                await client.script_load(self.text)
            return await send(client, channel, command)

    def run_sync(self, client: redis.Redis, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        """EVALSHA on a sync client, loading the script on NOSCRIPT."""
        self.check(keys, client)
        try:
            return client.evalsha(self.sha, self.numkeys, *keys, *args)
        except NoScriptError:
            client.script_load(self.text)
            return client.evalsha(self.sha, self.numkeys, *keys, *args)

    def queue(self, pipe: Any, keys: Sequence[str], args: Sequence[Arg]) -> None:
        """Queue an EVALSHA on a (sync or async) pipeline; call :func:`ensure_loaded` first."""
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


async def ensure_loaded(client: redis.asyncio.Redis, scripts: Iterable[Script]) -> None:
    """Make sure every script in ``scripts`` is cached on the server (before a MULTI/EXEC)."""
    unique = list({s.sha: s for s in scripts}.values())
    if not unique:
        return
    present = await client.script_exists(*(s.sha for s in unique))
    for script, ok in zip(unique, present):
        if not ok:
            await client.script_load(script.text)


def ensure_loaded_sync(client: redis.Redis, scripts: Iterable[Script]) -> None:
    """Sync twin of :func:`ensure_loaded`."""
    unique = list({s.sha: s for s in scripts}.values())
    if not unique:
        return
    present = client.script_exists(*(s.sha for s in unique))
    for script, ok in zip(unique, present):
        if not ok:
            client.script_load(script.text)


def all_script_names() -> list[str]:
    """Names of every shipped script (used by tests and by the loader self-check)."""
    return sorted(
        p.name[:-4]
        for p in (resources.files("echomq") / "lua").iterdir()
        if p.name.endswith(".lua")
    )
