"""Negative integer replies of the protocol's scripts (docs/protocol/scripts.md#error-codes)."""

from __future__ import annotations

JOB_NOT_EXIST = -1
JOB_LOCK_NOT_EXIST = -2
JOB_NOT_IN_STATE = -3
JOB_PENDING_CHILDREN = -4
PARENT_JOB_NOT_EXIST = -5
JOB_LOCK_MISMATCH = -6
PARENT_JOB_CANNOT_BE_REPLACED = -7
JOB_BELONGS_TO_JOB_SCHEDULER = -8
JOB_HAS_FAILED_CHILDREN = -9
SCHEDULER_JOB_ID_COLLISION = -10
SCHEDULER_JOB_SLOTS_BUSY = -11

#: finishAndFetch, resent after a lost reply: the lost send had already recorded this item.
RECORDED_BEFORE = 1

#: Rate-limiter value written by a manual rate limit (Number.MAX_SAFE_INTEGER).
MANUAL_RATE_LIMIT = "9007199254740991"

#: Reason written into ``defa`` by the stalled checker.
STALLED_TOO_MANY = "job stalled more than allowable limit"
#: Reason used when ``ats`` exceeds the worker's ``max_started_attempts``.
STARTED_TOO_MANY = "job started more than allowable limit"
#: Error message Node uses to signal a manual rate limit from a processor.
RATE_LIMIT_MESSAGE = "bullmq:rateLimitExceeded"
UNRECOVERABLE_MESSAGE = "bullmq:unrecoverable"
DELAYED_MESSAGE = "bullmq:movedToDelayed"
WAITING_CHILDREN_MESSAGE = "bullmq:movedToWaitingChildren"
