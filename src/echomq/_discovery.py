"""Finding the queues under a prefix, and reading them all for Prometheus.

Queues are found with ``SCAN`` (never ``KEYS``, which blocks the server) over
``<prefix>:*``: a queue is a name that has one of the keys every queue that ever held a job or
a job scheduler has (``meta``, ``id``, ``events``, ``repeat``). Keys of jobs never end that way,
and a queue name holds no ``:``. There is no registry of queues: a queue made by any runtime
(BullMQ for Node included) is found the same way. The cost of a ``SCAN`` grows with the keys
under the prefix, not with the queues, so callers that list often (the dashboard) cache the
answer for a few seconds.

Whether one name is a queue is a single ``EXISTS`` over the same four keys. Used by
``echomq queues``, ``echomq metrics`` and the dashboard (whose ``/metrics`` and ``echomq
metrics`` add the group series of each queue's busiest groups to BullMQ's families).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import redis.asyncio

from ._keys import queue_keys
from ._ops import prometheus as prom
from ._redis.run import run_plan

#: Key suffixes that name a queue (``<prefix>:<queue>:<suffix>``).
QUEUE_SUFFIXES = ("meta", "id", "events", "repeat")
_GLOB_SPECIAL = re.compile(r"([*?\[\]\\])")


def glob_escape(text: str) -> str:
    """``text`` as a literal in a Redis ``MATCH`` pattern."""
    return _GLOB_SPECIAL.sub(r"\\\1", text)


async def find_queues(client: redis.asyncio.Redis, prefix: str) -> list[str]:
    """The names of the queues under ``prefix``, sorted, found with ``SCAN``."""
    head = f"{prefix}:"
    names: set[str] = set()
    # The character classes keep most job keys (numeric ids, ``:logs``, ``:lock``...) on the
    # server: fewer replies to decode. The suffix is still checked exactly below.
    pattern = glob_escape(head) + "*:[eimr][dev]*"
    async for raw in client.scan_iter(match=pattern, count=2000):
        key = raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)
        rest, sep, suffix = key[len(head) :].rpartition(":")
        if sep and rest and ":" not in rest and suffix in QUEUE_SUFFIXES:
            names.add(rest)
    return sorted(names)


async def queue_exists(client: redis.asyncio.Redis, prefix: str, name: str) -> bool:
    """Whether ``name`` is a queue under ``prefix`` (one ``EXISTS``, no scan)."""
    if not name or ":" in name:
        return False
    keys = [f"{prefix}:{name}:{suffix}" for suffix in QUEUE_SUFFIXES]
    return bool(await client.exists(*keys))


async def prometheus_text(
    client: redis.asyncio.Redis,
    prefix: str,
    global_labels: Mapping[str, str] | None = None,
    group_limit: int = prom.DEFAULT_GROUP_LIMIT,
) -> str:
    """The Prometheus exposition text of every queue under ``prefix``, each family once, read
    over ``client`` (its connection pool: no connection of its own per queue); with the group
    series of each queue's ``group_limit`` busiest groups (0: no group series).

    Raises:
        InvalidOptionError: ``group_limit`` is not an int >= 0, or a global label is invalid
            (before anything is read).
    """
    prom.check_group_limit(group_limit)
    prom.check_global_labels(global_labels, groups=group_limit > 0)
    samples = [
        await run_plan(client, prom.sample_plan(queue_keys(name, prefix), group_limit))
        for name in await find_queues(client, prefix)
    ]
    return prom.render(samples, global_labels)
