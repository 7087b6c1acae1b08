"""A queue's keys, checked: the validating entry points over :mod:`echomq.protocol.keys`.

The protocol builds key names and says what makes a name or prefix unusable; this module
refuses those with :class:`~echomq.errors.InvalidQueueNameError` before any key is built, and
caches one :class:`~echomq.protocol.keys.QueueKeys` per ``(name, prefix)``.
"""

from __future__ import annotations

import functools

from .errors import InvalidQueueNameError
from .protocol.keys import DEFAULT_PREFIX, QueueKeys, prefix_problem, queue_name_problem


def validate_queue_name(name: str) -> None:
    """Raise :class:`InvalidQueueNameError` unless ``name`` is usable as a queue name."""
    problem = queue_name_problem(name)
    if problem is not None:
        raise InvalidQueueNameError(problem)


@functools.lru_cache(maxsize=1024)
def queue_keys(name: str, prefix: str = DEFAULT_PREFIX) -> QueueKeys:
    """Return the (cached) :class:`QueueKeys` of queue ``name`` under ``prefix``.

    Raises:
        InvalidQueueNameError: ``name`` is not a usable queue name, or ``prefix`` is not a
            non-empty str.
    """
    validate_queue_name(name)
    problem = prefix_problem(prefix)
    if problem is not None:
        raise InvalidQueueNameError(problem)
    return QueueKeys(name, prefix)
