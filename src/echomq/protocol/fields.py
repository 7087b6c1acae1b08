"""Job-hash field names and JSON encoding (docs/protocol/job-hash.md#fields,
docs/protocol/job-hash.md#encodings).

This is the only module that spells the job hash's field names: ``atm``, ``stc``,
``returnvalue`` and so on. The keys of the stored ``opts`` object (``removeOnComplete``, ``kl``,
docs/protocol/options.md#option-names) are spelled once each, in the field of
:class:`echomq.options.JobOptions` that defines the option; :data:`echomq.options.OPTION_NAMES`
lists them.
"""

from __future__ import annotations

import json
from typing import Any

from ..errors import PayloadError

# Job hash fields.
NAME = "name"
DATA = "data"
OPTS = "opts"
TIMESTAMP = "timestamp"
DELAY = "delay"
PRIORITY = "priority"
PROCESSED_ON = "processedOn"
FINISHED_ON = "finishedOn"
PROCESSED_BY = "pb"
ATTEMPTS_STARTED = "ats"
ATTEMPTS_MADE = "atm"
LEGACY_ATTEMPTS_MADE = "attemptsMade"
STALLED_COUNTER = "stc"
DEFERRED_FAILURE = "defa"
PROGRESS = "progress"
RETURN_VALUE = "returnvalue"
FAILED_REASON = "failedReason"
STACKTRACE = "stacktrace"
PARENT_KEY = "parentKey"
PARENT = "parent"
REPEAT_JOB_KEY = "rjk"
DEDUP_ID = "deid"

_encoder = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
_encode = _encoder.encode


def dumps(value: Any, what: str = "value") -> str:
    """Encode ``value`` as compact JSON text; raise :class:`PayloadError` naming ``what``."""
    try:
        return _encode(value)
    except (TypeError, ValueError) as exc:
        raise PayloadError(f"{what} is not JSON-serialisable: {exc}") from None


loads = json.loads


def loads_or(text: str | None, default: Any) -> Any:
    """Decode JSON ``text``; ``default`` when it is missing or not valid JSON (as Node reads)."""
    if text is None:
        return default
    try:
        return json.loads(text)
    except ValueError:
        return default
