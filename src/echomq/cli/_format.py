"""Plain-text tables, times and JSON conversion for command output (no dependency)."""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from ..options import UNSET


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """Left-aligned columns (numbers right-aligned), two spaces apart, with a header row."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    numeric = [all(isinstance(r[i], int) for r in rows) and bool(rows) for i in range(len(headers))]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = []
    for row in cells:
        parts = [
            cell.rjust(width) if is_num else cell.ljust(width)
            for cell, width, is_num in zip(row, widths, numeric)
        ]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def when(moment: datetime | None) -> str:
    """A datetime in local time to the second, or ``-``."""
    if moment is None:
        return "-"
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def jsonable(value: Any) -> Any:
    """``value`` with dataclasses, datetimes, timedeltas and enums turned into JSON values.

    Dataclass fields left at :data:`~echomq.UNSET` are dropped.
    """
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: jsonable(getattr(value, f.name))
            for f in dataclasses.fields(value)
            if getattr(value, f.name) is not UNSET and not f.name.startswith("_")
        }
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    return value


def dumps(value: Any, *, indent: int | None = 2) -> str:
    """JSON text of :func:`jsonable` ``(value)``, keys in insertion order."""
    return json.dumps(jsonable(value), indent=indent, ensure_ascii=False, default=str)
