"""Sans-I/O protocol operations: each builds a script call or commands and parses the reply.

Every operation is a function returning an :class:`Op`; ``await op.run(client)`` runs it on an
async client and ``op.run_sync(client)`` on a sync one, so the async and sync APIs stay thin
shells. Validation happens while an op is built, so a refused call never reaches Redis.

Modules: ``_base`` (Op types, reply decoding), ``add`` (adding jobs), ``jobs`` (getters and
single-job operations), ``admin`` (queue-wide operations), ``worker`` (fetching and finishing).
This package is internal.
"""

from ._base import (
    CommandOp,
    Op,
    ScriptOp,
    check_code,
    flat_to_dict,
    hash_to_dict,
    now_ms,
    to_str,
)
from .add import PreparedJob, add_job, get_job_hash, prepare_job, validate_job_id

__all__ = [
    "CommandOp",
    "Op",
    "PreparedJob",
    "ScriptOp",
    "add_job",
    "check_code",
    "flat_to_dict",
    "get_job_hash",
    "hash_to_dict",
    "now_ms",
    "prepare_job",
    "to_str",
    "validate_job_id",
]
