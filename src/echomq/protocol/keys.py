"""Every Redis key of a queue, built in one place.

A queue is addressed by ``(prefix, name)``. Its keys are ``<prefix>:<name>:<suffix>`` and a job's
hash is ``<prefix>:<name>:<job id>``. The strings are built exactly as BullMQ builds them: braces in
the prefix (``{bull}``) or in the name (``{emails}``) are kept as given, which is how all keys of a
queue land in one Redis Cluster hash slot; nothing is added or stripped.
"""

from __future__ import annotations

import base64

#: Suffixes that name queue-level keys; a custom job id may not take one of these names.
RESERVED_SUFFIXES: frozenset[str] = frozenset(
    {
        "",
        "wait",
        "paused",
        "active",
        "prioritized",
        "pc",
        "delayed",
        "completed",
        "failed",
        "waiting-children",
        "id",
        "meta",
        "events",
        "stalled",
        "stalled-check",
        "limiter",
        "marker",
        "repeat",
        "delay",
        "priority",
        "metrics",
        "de",
        "dn",
        "groups",
        "workers",
    }
)

DEFAULT_PREFIX = "bull"

#: The keys every script that stores and places a new job writes, in its KEYS order: the id
#: counter, meta, events and each structure the job may be placed in (``includes/enqueue.lua``).
_ADD_KEYS: tuple[str, ...] = (
    "id",
    "meta",
    "events",
    "wait",
    "active",
    "prioritized",
    "pc",
    "delayed",
    "marker",
)

#: The keys a script that removes jobs with ``remove_job_tree`` (``includes/remove_job.lua``)
#: passes it, in its KEYS order: every structure a job may sit in (searched in this order), and
#: what a released parent in the same queue needs.
_REMOVE_KEYS: tuple[str, ...] = (
    "completed",
    "waiting_children",
    "delayed",
    "failed",
    "prioritized",
    "wait",
    "paused",
    "active",
    "meta",
    "events",
    "marker",
)

#: The KEYS of the scripts that take their queue's keys in one fixed layout, as
#: :class:`QueueKeys` attribute names; ``base`` is the prefix key ``P:Q:`` from which a script
#: builds job keys (``lua/includes/job_keys.lua``). Each script's header lists the same keys in
#: the same order. :attr:`QueueKeys.script_keys` holds them built once per queue, so a call
#: costs no key building.
SCRIPT_KEY_LAYOUTS: dict[str, tuple[str, ...]] = {
    "addJob": ("base", *_ADD_KEYS, "completed"),
    # The first node's queue; other queues of a flow are derived from their node's prefix.
    "addFlow": ("base", *_ADD_KEYS, "waiting_children", "completed"),
    "finishAndFetch": (
        "base",
        "wait",
        "active",
        "prioritized",
        "pc",
        "delayed",
        "meta",
        "events",
        "marker",
        "stalled",
        "limiter",
        "id",
        "waiting_children",
        "completed",
        "failed",
        "metrics_completed",
        "metrics_completed_data",
        "metrics_failed",
        "metrics_failed_data",
    ),
    "continueScheduler": ("base", "repeat", *_ADD_KEYS),
    "addJobScheduler": ("base", "repeat", *_ADD_KEYS),
    "removeJobScheduler": ("base", "repeat", "delayed", "events"),
    "extendLocks": ("base", "stalled"),
    "extendLocksByToken": ("base", "stalled", "active"),
    "moveStalledJobsToWait": (
        "base",
        "stalled",
        "wait",
        "active",
        "stalled_check",
        "meta",
        "marker",
        "events",
        "repeat",
    ),
    "moveJobFromActiveToWait": (
        "base",
        "active",
        "wait",
        "stalled",
        "meta",
        "limiter",
        "prioritized",
        "marker",
        "events",
    ),
    # The three states it moves from are all declared; ARGV names the one a call takes.
    "moveJobsToWait": (
        "base",
        "wait",
        "meta",
        "active",
        "marker",
        "events",
        "completed",
        "failed",
        "delayed",
    ),
    "removeJob": ("base", "repeat", *_REMOVE_KEYS),
    # waiting-children: a hard removal takes a parent of the same queue out of it.
    "drain": ("base", "wait", "paused", "delayed", "prioritized", "repeat", "waiting_children"),
    # Every state clean accepts is declared; ARGV names the one a call cleans.
    "cleanJobsInSet": (
        "base",
        "events",
        "repeat",
        "waiting_children",
        "completed",
        "failed",
        "wait",
        "paused",
        "active",
        "delayed",
        "prioritized",
    ),
    # Flow operations on one job (docs/protocol/scripts.md#script-moveToWaitingChildren and
    # the three after it); a parent or child in another queue has its keys derived.
    "moveToWaitingChildren": ("base", "active", "waiting_children", "stalled", "events"),
    "getDependencyCounts": ("base",),
    "removeChildDependency": (
        "base",
        "waiting_children",
        "wait",
        "meta",
        "active",
        "marker",
        "events",
    ),
    "removeUnprocessedChildren": ("base", *_REMOVE_KEYS),
    # Groups (docs/protocol/groups.md#groups-admin): the group keys are built from the prefix.
    "setGroupSetting": ("base", "marker"),
    "removeGroupJobs": ("base", "repeat", "waiting_children"),
    "countGroupDelayed": ("base",),
    "obliterate": (
        "base",
        "meta",
        "active",
        "delayed",
        "repeat",
        "completed",
        "wait",
        "paused",
        "prioritized",
        "failed",
        "events",
        "marker",
        "waiting_children",
        "delay",
        "stalled_check",
        "stalled",
        "id",
        "pc",
        "metrics_completed",
        "metrics_completed_data",
        "metrics_failed",
        "metrics_failed_data",
    ),
}


def queue_name_problem(name: object) -> str | None:
    """What makes ``name`` unusable as a queue name, or ``None`` when it is usable.

    The protocol only says what is wrong; ``echomq._keys`` raises it as an exception.
    """
    if not isinstance(name, str):
        return f"queue name must be a str, got {type(name).__name__}"
    if not name:
        return "queue name must not be empty"
    if ":" in name:
        return (
            f"queue name {name!r} contains ':'; choose a name without colons "
            "(use braces, e.g. '{emails}', to pin a queue to one Redis Cluster slot)"
        )
    return None


def prefix_problem(prefix: object) -> str | None:
    """What makes ``prefix`` unusable as a key prefix, or ``None`` when it is usable."""
    if not isinstance(prefix, str) or not prefix:
        return "prefix must be a non-empty str"
    return None


class QueueKeys:
    """The key names of one queue. Instances are immutable.

    Built as given, without checks: ``echomq._keys.queue_keys`` refuses a bad name or prefix
    (:func:`queue_name_problem`, :func:`prefix_problem`) and caches one instance per
    (prefix, name).
    """

    __slots__ = (
        "active",
        "base",
        "completed",
        "delay",
        "delayed",
        "events",
        "failed",
        "groups",
        "groups_active",
        "groups_delayed",
        "groups_limited",
        "groups_ready",
        "groups_stalled",
        "groups_state",
        "groups_waiting",
        "id",
        "limiter",
        "marker",
        "meta",
        "metrics_completed",
        "metrics_completed_data",
        "metrics_failed",
        "metrics_failed_data",
        "name",
        "paused",
        "pc",
        "prefix",
        "prioritized",
        "qualified",
        "repeat",
        "script_keys",
        "stalled",
        "stalled_check",
        "wait",
        "waiting_children",
        "workers",
    )

    def __init__(self, name: str, prefix: str = DEFAULT_PREFIX) -> None:
        self.name = name
        self.prefix = prefix
        self.qualified = f"{prefix}:{name}"
        b = self.base = f"{prefix}:{name}:"
        self.wait = b + "wait"
        self.paused = b + "paused"
        self.active = b + "active"
        self.prioritized = b + "prioritized"
        self.pc = b + "pc"
        self.delayed = b + "delayed"
        self.completed = b + "completed"
        self.failed = b + "failed"
        self.waiting_children = b + "waiting-children"
        self.id = b + "id"
        self.meta = b + "meta"
        self.events = b + "events"
        self.stalled = b + "stalled"
        self.stalled_check = b + "stalled-check"
        self.limiter = b + "limiter"
        self.marker = b + "marker"
        self.repeat = b + "repeat"
        #: a BullMQ 1-4 key, never written; obliterate deletes it
        self.delay = b + "delay"
        self.metrics_completed = b + "metrics:completed"
        self.metrics_failed = b + "metrics:failed"
        self.metrics_completed_data = self.metrics_completed + ":data"
        self.metrics_failed_data = self.metrics_failed + ":data"
        #: echomq's groups (docs/protocol/groups.md#groups-keys); the scripts build these from
        #: the prefix key (lua/includes/job_keys.lua, group_keys), the getters read them here
        self.groups = b + "groups"
        self.groups_ready = self.groups + ":ready"
        self.groups_active = self.groups + ":active"
        self.groups_stalled = self.groups + ":stalled"
        self.groups_delayed = self.groups + ":delayed"
        self.groups_waiting = self.groups + ":waiting"
        self.groups_state = self.groups + ":state"
        self.groups_limited = self.groups + ":limited"
        #: echomq's worker registry (docs/protocol/workers.md#workers-keys): the index ZSET;
        #: each worker's entry is :meth:`worker`
        self.workers = b + "workers"
        #: script name -> its KEYS (see :data:`SCRIPT_KEY_LAYOUTS`)
        self.script_keys: dict[str, tuple[str, ...]] = {
            script: tuple(getattr(self, attr) for attr in layout)
            for script, layout in SCRIPT_KEY_LAYOUTS.items()
        }

    def state(self, suffix: str) -> str:
        """The key of a state set or list, by its suffix (``wait``, ``completed``, ...)."""
        return self.base + suffix

    def job(self, job_id: str) -> str:
        """The hash of job ``job_id``."""
        return self.base + job_id

    def scheduler(self, scheduler_id: str) -> str:
        """The hash of job scheduler ``scheduler_id`` (or of a legacy repeatable job)."""
        return f"{self.base}repeat:{scheduler_id}"

    def lock(self, job_id: str) -> str:
        """The lock key of job ``job_id``."""
        return f"{self.base}{job_id}:lock"

    def logs(self, job_id: str) -> str:
        """The log list of job ``job_id``."""
        return f"{self.base}{job_id}:logs"

    def dependencies(self, job_id: str) -> str:
        """The SET of job ``job_id``'s pending children (full child job keys)."""
        return f"{self.base}{job_id}:dependencies"

    def processed(self, job_id: str) -> str:
        """The HASH of job ``job_id``'s completed children: child key -> return value JSON."""
        return f"{self.base}{job_id}:processed"

    def ignored_failures(self, job_id: str) -> str:
        """The HASH ``<job>:failed``: children whose final failure was ignored (``idof`` /
        ``cpof``) -> failed reason. Not the children that fail the job: see
        :meth:`unsuccessful`."""
        return f"{self.base}{job_id}:failed"

    def unsuccessful(self, job_id: str) -> str:
        """The ZSET ``<job>:unsuccessful``: children whose failure fails job ``job_id``
        (``fpof``), scored by the failure time (ms)."""
        return f"{self.base}{job_id}:unsuccessful"

    def group_wait(self, gid: str) -> str:
        """The LIST ``groups:wait:<gid>``: group ``gid``'s waiting jobs without a priority, in
        the order it runs them (from the head)."""
        return f"{self.groups}:wait:{gid}"

    def group_prioritized(self, gid: str) -> str:
        """The ZSET ``groups:prioritized:<gid>``: group ``gid``'s waiting jobs with a priority
        (run once its ``groups:wait:<gid>`` is empty), scored ``priority * 2^32 + order``."""
        return f"{self.groups}:prioritized:{gid}"

    def group_run(self, gid: str) -> str:
        """The counter ``groups:run:<gid>``: twice group ``gid``'s active jobs, plus 1 while it
        is in the rotation."""
        return f"{self.groups}:run:{gid}"

    def group_limit(self, gid: str) -> str:
        """The ZSET ``groups:limit:<gid>``: group ``gid``'s rate entries (a slot per start,
        free a window after its job ends)."""
        return f"{self.groups}:limit:{gid}"

    def worker(self, worker_id: str) -> str:
        """The STRING ``workers:<id>``: worker ``worker_id``'s registry entry (JSON), which
        expires unless the worker's heartbeat refreshes it."""
        return f"{self.workers}:{worker_id}"

    def dedup(self, dedup_id: str) -> str:
        """The STRING ``de:<dedupId>``: the id of the job that owns that deduplication window."""
        return f"{self.base}de:{dedup_id}"

    def worker_client_name(self, worker_name: str | None = None) -> str:
        """The CLIENT SETNAME value by which Node's ``getWorkers`` recognises a worker."""
        encoded = base64.b64encode(self.name.encode()).decode()
        base = f"{self.prefix}:{encoded}"
        return f"{base}:w:{worker_name}" if worker_name else base

    def control_channel(self) -> str:
        """The pub/sub channel of echomq's worker control messages (cancel requests): not a
        key, so Node never sees it; it carries the queue's hash tag like the keys do."""
        return self.base + "echomq:control"

    def events_client_name(self) -> str:
        """The CLIENT SETNAME value of a QueueEvents reader."""
        return self.worker_client_name() + ":qe"

    def __repr__(self) -> str:
        return f"QueueKeys({self.name!r}, prefix={self.prefix!r})"
