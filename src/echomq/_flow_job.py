"""``FlowJob``: one node of a flow, the description a FlowProducer adds (async and sync alike).

A flow is a tree: each node is a job, in any queue (and under any prefix), whose children must
all finish before it runs. The node holds no connection; it is validated when it is built (its
options, as :class:`~echomq.JobOptions` validates them) and again, as a whole tree, before a
FlowProducer writes anything (see :mod:`echomq._ops.flow_tree`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from typing_extensions import Unpack

from ._keys import validate_queue_name
from .errors import ValidationError
from .options import UNSET, JobOptions, JobOptionsDict


class FlowJob:
    """One node of a flow: a job and the children it waits for.

    Args:
        name: the job name.
        queue_name: the queue the job goes to (no ``:``).
        data: the payload, any JSON-serialisable value (``{}`` when omitted, as in Node).
        children: the child nodes; the job runs once all of them have finished.
        prefix: the key prefix of this node's queue; ``None`` takes the FlowProducer's (for
            the root) or the parent node's (for a child).
        **options: job options, as for ``Queue.add`` (``job_id``, ``delay``, ``priority``,
            ``attempts``, the failure policies...). ``parent=`` is allowed on the root only:
            it attaches the whole flow under an existing job.

    Raises:
        ValidationError: a bad name, queue name, child or option (nothing is written).
    """

    __slots__ = ("children", "data", "name", "options", "prefix", "queue_name")

    def __init__(
        self,
        name: str,
        queue_name: str,
        data: Any = UNSET,
        *,
        children: Iterable[FlowJob] = (),
        prefix: str | None = None,
        **options: Unpack[JobOptionsDict],
    ) -> None:
        if not isinstance(name, str):
            raise ValidationError(f"flow job name must be a str, got {type(name).__name__}")
        validate_queue_name(queue_name)
        if prefix is not None and (not isinstance(prefix, str) or not prefix):
            raise ValidationError(f"prefix must be a non-empty str or None, got {prefix!r}")
        if isinstance(children, (str, bytes, FlowJob)):
            raise ValidationError("children must be a list of FlowJob")
        kids = tuple(children)
        for index, child in enumerate(kids):
            if not isinstance(child, FlowJob):
                raise ValidationError(
                    f"child {index} of flow job {name!r} must be a FlowJob, "
                    f"got {type(child).__name__}"
                )
        self.name = name
        self.queue_name = queue_name
        self.data = data
        self.children: tuple[FlowJob, ...] = kids
        self.prefix = prefix
        self.options: JobOptions = JobOptions.build(options)

    def __repr__(self) -> str:
        return (
            f"FlowJob({self.name!r}, {self.queue_name!r}, children={len(self.children)}, "
            f"prefix={self.prefix!r})"
        )
