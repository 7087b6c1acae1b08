"""``FlowProducer``: add trees of parent and child jobs atomically, and read them back.

``scripts/unasync.py`` generates ``echomq/sync/_flows.py`` (the blocking
``echomq.sync.FlowProducer``) from this module, the one definition of both: edit this one.

A flow is a tree of :class:`~echomq.FlowJob` nodes. Each parent waits in ``waiting-children``
until every child has finished, then runs like any job (and reads its children's results with
``job.get_children_values()``). Children may live in other queues and under other prefixes; on
Redis Cluster every queue of a flow must share one hash tag. A whole tree (or every tree of
``add_bulk``) is checked before anything is written and lands in one script call: all of it
or nothing. With ``wait_replicas``, that script call is followed by Redis ``WAIT`` on its
connection, as for :func:`echomq.add`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from types import TracebackType

from ._flow_job import FlowJob
from ._job import Job
from ._keys import queue_keys
from ._ops.flow_tree import FlowNode, RawNode, add_flow, flow_queues, get_flow_plan, prepare_flows
from ._ops.replicated import ReplicaWait, check_replicated
from ._queue import Acked, _added, _run_add
from ._redis.connection import AsyncConn, AsyncConnection, resolve_connection
from ._redis.fail_fast import DEFAULT_CONNECT_TIMEOUT, connect_budget
from ._redis.server_checks import check_on_first_use
from ._redis.topology import check_cluster_flow
from .errors import ValidationError
from .options import Duration
from .protocol.keys import DEFAULT_PREFIX


@dataclasses.dataclass(slots=True)
class JobNode:
    """A job of a flow and the nodes of its children (as added, or as read back)."""

    job: Job
    children: list[JobNode] = dataclasses.field(default_factory=list)


class FlowProducer:
    """Adds flows (trees of jobs) and reads them back.

    It holds no job: like a Queue it remembers a connection and a default prefix.
    ``async with FlowProducer(...)`` or ``await producer.aclose()`` closes it, and the client
    if it opened it from a URL; a client you pass is never closed.

    Args:
        connection: a ``redis.asyncio.Redis`` you own, or a URL. None (default): the connection
            rule, see :func:`echomq.set_default_connection`.
        prefix: the key prefix of nodes that do not set their own.
        connect_timeout: with a URL, seconds (or a timedelta) each connection has to connect
            before :class:`~echomq.RedisUnavailableError`.
    """

    def __init__(
        self,
        *,
        connection: AsyncConnection | None = None,
        prefix: str = DEFAULT_PREFIX,
        connect_timeout: Duration = DEFAULT_CONNECT_TIMEOUT,
    ) -> None:
        if not isinstance(prefix, str) or not prefix:
            raise ValidationError(f"prefix must be a non-empty str, got {prefix!r}")
        self._prefix = prefix
        budget = connect_budget(connect_timeout)
        self._conn = AsyncConn(
            resolve_connection(connection), pipelined=True, connect_timeout=budget
        )
        check_on_first_use(self._conn)

    @property
    def prefix(self) -> str:
        """The default key prefix."""
        return self._prefix

    async def add(
        self, flow: FlowJob, *, wait_replicas: int = 0, wait_timeout: Duration = 1.0
    ) -> JobNode:
        """Add one tree atomically: every job of it, or none.

        Each parent waits in ``waiting-children`` until all its children have finished. A
        node with a custom ``job_id`` that already exists is not added again: as in BullMQ,
        the existing job is kept (a ``duplicated`` event is written) and, under a parent,
        attached to it. A root without children may have ``deduplication``: when it is
        deduplicated nothing is added and its node's job is the owner of the window, with
        ``deduplicated`` set (docs/dedup.md).

        Args:
            flow: the root node of the tree.
            wait_replicas: after the add, wait until this many replicas have the tree (Redis
                ``WAIT`` on the connection that wrote it); 0 (default) waits for none.
            wait_timeout: how long to wait for those replicas (seconds or a timedelta).

        Returns:
            The tree of added jobs.

        Raises:
            ValidationError: a bad node, option, duplicate id in the tree, a tree deeper than
                1000 levels, ``deduplication`` on a node with a parent or children, or (on
                Redis Cluster) queues without one shared hash tag.
            ParentNotFoundError: the root's ``parent=`` job does not exist.
            ParentCannotBeReplacedError: a custom id names a job that belongs to another
                parent.
            RedisUnavailableError: Redis could not be reached or did not answer.
            ReplicationError: the tree *was* added on the primary, but fewer than
                ``wait_replicas`` replicas acknowledged it within ``wait_timeout``; the
                error's ``result`` is the tree (a JobNode), ``job`` its root job.

        Nothing is written when any of these but ReplicationError is raised.
        """
        if not isinstance(flow, FlowJob):
            raise ValidationError(f"add() takes a FlowJob, got {type(flow).__name__}")
        wait = ReplicaWait.build(wait_replicas, wait_timeout)
        trees, jobs, acked = await self._add_trees([flow], wait)
        check_replicated(wait, acked, jobs, trees[0])
        return trees[0]

    async def add_bulk(
        self,
        flows: Sequence[FlowJob],
        *,
        wait_replicas: int = 0,
        wait_timeout: Duration = 1.0,
    ) -> list[JobNode]:
        """Add several trees in one transaction: all of them, or none (see :meth:`add`).

        With ``wait_replicas``, one ``WAIT`` follows; a :class:`~echomq.ReplicationError`
        then holds the list of trees as its ``result``, and the first root's job as ``job``.
        """
        wait = ReplicaWait.build(wait_replicas, wait_timeout)
        trees, jobs, acked = await self._add_trees(flows, wait)
        if trees:
            check_replicated(wait, acked, jobs, trees)
        return trees

    async def _add_trees(
        self, flows: Sequence[FlowJob], wait: ReplicaWait
    ) -> tuple[list[JobNode], list[Job], Acked]:
        """Write ``flows`` in one script call (then ``WAIT`` as ``wait`` asks): their trees,
        every job of them (parents first) and what ``WAIT`` answered."""
        nodes = prepare_flows(flows, self._prefix)
        if not nodes:
            return [], [], 0
        check_cluster_flow(self._conn.client, flow_queues(nodes))
        outcomes, acked = await _run_add(self._conn, add_flow(nodes), wait)
        jobs = [await _added(self._conn, n.keys, o, n.job) for n, o in zip(nodes, outcomes)]
        return self._trees(nodes, jobs), jobs, acked

    def _trees(self, nodes: list[FlowNode], jobs: list[Job]) -> list[JobNode]:
        built = [JobNode(job) for job in jobs]
        is_child = set()
        for node, job_node in zip(nodes, built):
            job_node.children = [built[i] for i in node.children]
            is_child.update(node.children)
        return [job_node for i, job_node in enumerate(built) if i not in is_child]

    async def get_flow(
        self,
        job_id: str,
        queue_name: str,
        *,
        prefix: str | None = None,
        depth: int = 10,
        max_children: int = 20,
    ) -> JobNode | None:
        """Read a job and the children recorded on it, as a tree.

        Args:
            job_id: the job at the top of the tree to read (any job, not only a root).
            queue_name: its queue.
            prefix: its queue's prefix (the producer's by default).
            depth: how many levels to read, the job's own included (as BullMQ's ``getFlow``:
                1 reads the job alone, 2 adds its children, ...).
            max_children: how many children of each kind (processed, pending, failed,
                ignored) to read per job, at least (small sets come whole).

        Returns:
            The tree, or None when the job does not exist. Children removed since they were
            recorded are left out.
        """
        keys = queue_keys(queue_name, prefix or self._prefix)
        raw = await self._conn.run_plan(get_flow_plan(keys, job_id, depth, max_children))
        return None if raw is None else self._read_node(raw)

    def _read_node(self, raw: RawNode) -> JobNode:
        job = Job.from_hash(raw.job_id, raw.hash, raw.keys, self._conn)
        return JobNode(job, [self._read_node(child) for child in raw.children])

    async def aclose(self) -> None:
        """Close the client if this producer opened it from a URL."""
        await self._conn.aclose()

    async def __aenter__(self) -> FlowProducer:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"FlowProducer(prefix={self._prefix!r})"


__all__ = ["FlowJob", "FlowProducer", "JobNode"]
