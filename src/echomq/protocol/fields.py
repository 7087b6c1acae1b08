"""Job-hash field names, option short codes and JSON encoding (docs/protocol/job-hash.md#fields,
docs/protocol/options.md#option-names, docs/protocol/job-hash.md#encodings).

This is the only module that spells the wire names: ``removeOnComplete``, ``kl``, ``atm`` and so
on. Like all of ``protocol/`` it imports nothing above it: :mod:`echomq.options` converts
:class:`~echomq.options.JobOptions` to the stored ``opts`` object and back with the names of
:data:`OPTION_NAMES` (durations become milliseconds there, on the way to the wire).
"""

from __future__ import annotations

import json
from types import MappingProxyType
from typing import Any, Final

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

#: Keys of the stored ``opts`` object, by :class:`~echomq.options.JobOptions` field (BullMQ's
#: names). Every field has one; a test checks the two agree.
OPTION_NAMES: Final = MappingProxyType(
    {
        "job_id": "jobId",
        "delay": "delay",
        "priority": "priority",
        "lifo": "lifo",
        "attempts": "attempts",
        "backoff": "backoff",
        "remove_on_complete": "removeOnComplete",
        "remove_on_fail": "removeOnFail",
        "keep_logs": "kl",
        "stacktrace_limit": "stackTraceLimit",
        "size_limit": "sizeLimit",
        "timestamp": "timestamp",
        "parent": "parent",
        "fail_parent_on_failure": "fpof",
        "continue_parent_on_failure": "cpof",
        "ignore_dependency_on_failure": "idof",
        "remove_dependency_on_failure": "rdof",
        "deduplication": "de",
        # echomq's own: BullMQ 6 has no such option and passes unknown keys through untouched.
        "timeout": "emqTimeout",
        # {metadata, omitContext}: metadata is stored under this name, omitContext under
        # OMIT_CONTEXT (docs/operations.md, "OpenTelemetry").
        "telemetry": "tm",
    }
)

#: The ``opts`` key of the telemetry option's ``omitContext`` (its ``metadata`` is ``tm``).
OMIT_CONTEXT: Final = "omc"

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
