"""Sans-I/O protocol operations: each builds a script call or commands and parses the reply.

Every operation is a function returning an :class:`Op`; ``await op.run(client)`` runs it on an
async client and ``op.run_sync(client)`` on a sync one, so the async and sync APIs stay thin
shells. Validation happens while an op is built, so a refused call never reaches Redis.

Modules: ``_base`` (Op types, reply decoding), ``add`` (adding jobs), ``jobs`` (getters and
single-job operations), ``admin`` (queue-wide operations), ``worker`` (fetching and finishing).
This package is internal. It must not import :mod:`echomq.job`: the job model imports it to
bind its methods to these builders.
"""

from ._base import (
    CommandOp,
    Op,
    Plan,
    ScriptOp,
    check_code,
    flat_to_dict,
    hash_to_dict,
    now_ms,
    run_plan,
    run_plan_sync,
    to_str,
)
from .add import PreparedJob, add_job, get_job_hash, prepare_job, validate_job_id
from .admin import (
    CleanBatch,
    clean_batch,
    clean_plan,
    drain_batch,
    drain_plan,
    move_jobs_to_wait,
    obliterate_batch,
    obliterate_plan,
    promote_jobs_plan,
    remove_job,
    retry_jobs_plan,
)
from .jobs import (
    DEFAULT_COUNT_TYPES,
    JOB_TYPES,
    PENDING_TYPES,
    add_log,
    change_delay,
    change_priority,
    get_counts,
    get_job_hashes,
    get_jobs_plan,
    get_logs,
    get_ranges,
    get_state,
    get_workers,
    is_paused,
    normalize_types,
    pause_queue,
    promote_job,
    reprocess_job,
    trim_events,
    update_data,
    update_progress,
)

__all__ = [
    "CleanBatch",
    "CommandOp",
    "DEFAULT_COUNT_TYPES",
    "JOB_TYPES",
    "Op",
    "PENDING_TYPES",
    "Plan",
    "PreparedJob",
    "ScriptOp",
    "add_job",
    "add_log",
    "change_delay",
    "change_priority",
    "check_code",
    "clean_batch",
    "clean_plan",
    "drain_batch",
    "drain_plan",
    "flat_to_dict",
    "get_counts",
    "get_job_hash",
    "get_jobs_plan",
    "get_job_hashes",
    "get_logs",
    "get_ranges",
    "get_state",
    "get_workers",
    "hash_to_dict",
    "is_paused",
    "move_jobs_to_wait",
    "normalize_types",
    "now_ms",
    "obliterate_batch",
    "obliterate_plan",
    "pause_queue",
    "prepare_job",
    "promote_job",
    "promote_jobs_plan",
    "remove_job",
    "reprocess_job",
    "retry_jobs_plan",
    "run_plan",
    "run_plan_sync",
    "to_str",
    "trim_events",
    "update_data",
    "update_progress",
    "validate_job_id",
]
