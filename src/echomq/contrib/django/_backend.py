"""``EchoMQBackend``: Django's ``BaseTaskBackend`` contract on echomq queues.

The backend is a producer and a reader: ``enqueue`` adds one job through :mod:`echomq.sync`
(one script call, no event loop), ``get_result`` reads the job and its state. Workers run the
jobs (:mod:`echomq.contrib.django.worker`, started by ``manage.py echomq_worker``).

Django makes one backend instance per thread (``task_backends`` is a connection handler); each
opens one ``redis.Redis`` client on first use, closed by :meth:`EchoMQBackend.close`.

With ``ENQUEUE_ON_COMMIT``, ``enqueue`` checks the task and its arguments at once and returns
its result, but writes the job from ``transaction.on_commit``: a transaction that rolls back
enqueues nothing, and no worker can take the job before the rows it needs are committed.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any

import redis
from asgiref.sync import sync_to_async
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.tasks import DEFAULT_TASK_QUEUE_NAME
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued
from django.utils.crypto import get_random_string

from ..._keys import queue_keys
from ..._redis import topology
from ..._redis.default import default_redis_url
from ...errors import EchoMQError
from ...options import JobOptions
from ...protocol.keys import DEFAULT_PREFIX
from ...sync import Queue, client_from_url
from ._results import (
    build_result,
    result_id,
    result_of,
    split_result_id,
    to_echomq_priority,
)

_OPTION_NAMES = ("url", "prefix", "queue", "job_options")


class EchoMQBackend(BaseTaskBackend):  # type: ignore[misc]  # Django ships no types
    """A ``django.tasks`` backend whose tasks are echomq jobs in Redis.

    ``OPTIONS``:
        url: the Redis URL; without it, echomq's connection rule
            (:func:`echomq.default_redis_url`: ``$ECHOMQ_REDIS_URL``, else a running embedded
            Redis), read when the first queue is opened.
        prefix: the key prefix (default ``bull``).
        queue: the echomq queue of Django's default queue name ``"default"`` (default
            ``"default"``); any other ``queue_name`` is an echomq queue of that name.
        job_options: echomq job options for every job (``attempts``, ``backoff``,
            ``remove_on_complete``, ...; see :class:`echomq.JobOptions`). A job removed on
            completion has no result to read.

    ``ENQUEUE_ON_COMMIT`` (next to ``BACKEND``, ``QUEUES`` and ``OPTIONS``; default False):
    True writes each job when the default database's current transaction commits
    (``transaction.on_commit``; at once outside a transaction); a rollback enqueues nothing.
    The returned result has its id at once, its ``enqueued_at`` once the job is written.

    Raises:
        ImproperlyConfigured: an unknown option, ``ENQUEUE_ON_COMMIT`` not a bool, or a queue
            name echomq refuses.
    """

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: Mapping[str, Any]) -> None:
        super().__init__(alias, params)
        options: Mapping[str, Any] = self.options
        unknown = sorted(set(options) - set(_OPTION_NAMES))
        if unknown:
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}]['OPTIONS'] has unknown option(s) {', '.join(unknown)}; "
                f"EchoMQBackend takes {', '.join(_OPTION_NAMES)}"
            )
        on_commit = params.get("ENQUEUE_ON_COMMIT", False)
        if not isinstance(on_commit, bool):
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}]['ENQUEUE_ON_COMMIT'] must be True or False, got {on_commit!r}"
            )
        self.enqueue_on_commit: bool = on_commit
        self.url: str | None = options.get("url") or None
        self.prefix: str = options.get("prefix") or DEFAULT_PREFIX
        self.default_queue: str = options.get("queue") or DEFAULT_TASK_QUEUE_NAME
        try:
            self.job_options = JobOptions.build(dict(options.get("job_options") or {}))
            for name in {self.default_queue, *self.queues}:
                queue_keys(name, self.prefix)
        except EchoMQError as exc:
            raise ImproperlyConfigured(f"TASKS[{alias!r}]: {exc}") from exc
        if self.default_queue != DEFAULT_TASK_QUEUE_NAME and self.default_queue in self.queues:
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}]: OPTIONS['queue'] {self.default_queue!r} is also in QUEUES; "
                "it is where Django's 'default' queue goes, so give it another name"
            )
        self._lock = threading.Lock()
        self._client: redis.Redis | None = None
        self._queues: dict[str, Queue] = {}

    # -- queues

    def echomq_queue_name(self, queue_name: str) -> str:
        """The echomq queue that jobs of Django queue ``queue_name`` go to."""
        return self.default_queue if queue_name == DEFAULT_TASK_QUEUE_NAME else queue_name

    def django_queue_name(self, echomq_queue: str) -> str:
        """The Django queue name of echomq queue ``echomq_queue``."""
        return DEFAULT_TASK_QUEUE_NAME if echomq_queue == self.default_queue else echomq_queue

    def get_queue(self, queue_name: str) -> Queue:
        """The :class:`echomq.sync.Queue` behind Django queue ``queue_name`` (kept open)."""
        name = self.echomq_queue_name(queue_name)
        with self._lock:
            queue = self._queues.get(name)
            if queue is None:
                if self._client is None:
                    self._client = client_from_url(self.url or default_redis_url())
                queue = Queue(
                    name,
                    connection=self._client,
                    prefix=self.prefix,
                    default_job_options=self.job_options,
                )
                self._queues[name] = queue
            return queue

    def close(self) -> None:
        """Close the queues and the Redis client this backend opened."""
        with self._lock:
            queues, self._queues = list(self._queues.values()), {}
            client, self._client = self._client, None
        for queue in queues:
            queue.close()
        if client is not None:
            topology.close(client)  # with a Sentinel URL's Sentinel connections

    # -- Django's contract

    def validate_task(self, task: Any) -> None:
        """Django's checks, plus echomq's rule for queue names (no ``:``, not empty).

        Raises:
            InvalidTask: the task cannot run on this backend.
        """
        super().validate_task(task)
        try:
            queue_keys(self.echomq_queue_name(task.queue_name), self.prefix)
        except EchoMQError as exc:
            raise InvalidTask(str(exc)) from exc

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """Add the task as one echomq job and return its ``TaskResult`` (status ``READY``);
        with ``ENQUEUE_ON_COMMIT``, add it when the current transaction commits.

        Raises:
            InvalidTask: the task does not pass :meth:`validate_task`.
            TypeError: an argument is not JSON (Django's "Unsupported type"); nothing is
                written.
            echomq.RedisUnavailableError: Redis did not answer in time.
        """
        self.validate_task(task)
        queue = self.get_queue(task.queue_name)
        job_id = get_random_string(32)
        result = build_result(
            task, rid=result_id(queue.name, job_id), args=args, kwargs=kwargs, backend=self.alias
        )
        write = functools.partial(self._write, queue, task, job_id, result)
        if self.enqueue_on_commit:
            transaction.on_commit(write)
        else:
            write()
        return result

    def _write(self, queue: Queue, task: Any, job_id: str, result: Any) -> None:
        job = queue.add(
            task.module_path,
            {"args": result.args, "kwargs": result.kwargs},
            job_id=job_id,
            priority=to_echomq_priority(task.priority),
            delay=_delay(task.run_after),
        )
        object.__setattr__(result, "enqueued_at", job.timestamp)
        task_enqueued.send(type(self), task_result=result)

    async def aenqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """:meth:`enqueue` in a worker thread (any thread: the client is thread-safe; with
        ``ENQUEUE_ON_COMMIT``, the thread of the caller's database connection)."""
        return await sync_to_async(self.enqueue, thread_sensitive=self.enqueue_on_commit)(
            task, args, kwargs
        )

    def get_result(self, result_id: Any) -> Any:
        """Read a task's result from Redis.

        Raises:
            TaskResultDoesNotExist: no such job (never enqueued, or removed), or an id this
                backend did not make.
        """
        queue_name, job_id = split_result_id(result_id)
        try:
            queue = self.get_queue(self.django_queue_name(queue_name))
        except EchoMQError:
            raise TaskResultDoesNotExist(result_id) from None
        state = queue.get_state(job_id)
        job = queue.get_job(job_id)
        if job is None:
            raise TaskResultDoesNotExist(result_id)
        return result_of(
            job, state, backend=self.alias, queue_name=self.django_queue_name(queue_name)
        )

    async def aget_result(self, result_id: Any) -> Any:
        """:meth:`get_result` in a worker thread."""
        return await sync_to_async(self.get_result, thread_sensitive=False)(result_id)


def _delay(run_after: datetime | None) -> float:
    if run_after is None:
        return 0.0
    now = datetime.now(timezone.utc) if run_after.tzinfo is not None else datetime.now()
    return max(0.0, (run_after - now).total_seconds())
