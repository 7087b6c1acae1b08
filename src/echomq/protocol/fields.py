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
#: echomq extension: set by the stalled check on a job past the max stalled count that stalled
#: beside others; it runs alone from then on (docs/protocol/worker-rules.md#isolation)
ISOLATED = "iso"
PROGRESS = "progress"
RETURN_VALUE = "returnvalue"
FAILED_REASON = "failedReason"
STACKTRACE = "stacktrace"
PARENT_KEY = "parentKey"
PARENT = "parent"
REPEAT_JOB_KEY = "rjk"
DEDUP_ID = "deid"
#: echomq's groups (docs/protocol/groups.md#groups-keys): the job's group id.
GROUP = "gid"

#: Encode a value as the protocol's JSON text: compact, UTF-8 (no ``\u`` escapes), no NaN or
#: infinities. Raises ``TypeError`` or ``ValueError`` for a value that has no JSON text;
#: ``echomq._json.dumps`` turns those into the package's ``PayloadError``.
encode = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode


loads = json.loads


def loads_or(text: str | None, default: Any) -> Any:
    """Decode JSON ``text``; ``default`` when it is missing or not valid JSON (as Node reads)."""
    if text is None:
        return default
    try:
        return json.loads(text)
    except ValueError:
        return default
