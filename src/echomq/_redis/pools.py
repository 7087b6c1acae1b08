"""Taking one connection out of a redis-py pool, on every redis-py echomq supports.

redis-py before 5.3 requires a command name (``get_connection("_")``); later versions deprecate
it (a warning) and take none. :func:`take` and :func:`take_sync` pass it only where it is
required.
"""

from __future__ import annotations

import inspect
from typing import Any

_NEEDS_NAME: dict[Any, bool] = {}  # by pool class


def _args(pool: Any) -> tuple[str, ...]:
    kind = type(pool)
    needs = _NEEDS_NAME.get(kind)
    if needs is None:
        parameter = inspect.signature(kind.get_connection).parameters.get("command_name")
        needs = parameter is not None and parameter.default is inspect.Parameter.empty
        _NEEDS_NAME[kind] = needs
    return ("_",) if needs else ()


async def take(pool: Any) -> Any:
    """A connection of an async pool (give it back with ``pool.release``)."""
    return await pool.get_connection(*_args(pool))


def take_sync(pool: Any) -> Any:
    """A connection of a sync pool (give it back with ``pool.release``)."""
    return pool.get_connection(*_args(pool))
