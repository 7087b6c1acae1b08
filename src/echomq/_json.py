"""JSON text for Redis, checked: the protocol's encoding (:data:`echomq.protocol.fields.encode`)
raising :class:`~echomq.errors.PayloadError` for a value that has no JSON text."""

from __future__ import annotations

from typing import Any

from .errors import PayloadError
from .protocol.fields import encode as _encode


def dumps(value: Any, what: str = "value") -> str:
    """Encode ``value`` as compact JSON text; raise :class:`PayloadError` naming ``what``."""
    try:
        return _encode(value)
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"{what} is not JSON-serialisable: {exc}") from None
