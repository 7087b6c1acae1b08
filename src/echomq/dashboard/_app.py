"""The dashboard's routes and its state (kept on the app, never in module globals).

Routes (all under wherever the app is mounted):

- ``GET /``: the queues under the prefix (found with SCAN, refreshed in the background when
  older than 10 s; ``?refresh`` waits for a new scan), or the fixed list given.
- ``GET /queues/{queue}?state=failed&page=2``: one state tab of a queue, with its
  schedulers and global limits (without ``state``: the first tab, in the page's order, that
  holds jobs); ``?state=groups&page=2`` its groups (most waiting jobs first),
  ``?state=groups&group=ID&page=2`` one group's waiting jobs.
- ``GET /queues/{queue}/jobs/{job_id}``: one job; ``GET /queues/{queue}/find?id=...`` goes
  there.
- ``GET /queues/{queue}/workers``: the queue's workers (``get_workers``) and the jobs each runs.
- ``POST /queues/{queue}/actions/{action}``: ``pause``, ``resume``, ``retry-failed``,
  ``promote-delayed``, ``clean``, ``add``, ``pause-group`` and ``resume-group`` (the group id
  in the form's ``group``).
- ``POST /queues/{queue}/jobs/{job_id}/actions/{action}``: ``retry``, ``promote``, ``remove``.
- ``GET /metrics``: Prometheus text of every queue (with the group series of each queue's
  ``metrics_groups`` busiest groups); ``GET /healthz``: ``ok`` when Redis answers.
- ``GET /static/...``: the stylesheet and script, served from the package.

A queue in a path must be one found under the configured prefix (a queue name holds no ``:``,
so no path reaches another prefix); anything else is a 404, for reads and actions alike. While
Redis cannot be reached, every page answers 503 saying so, with Redis's address (its password
masked).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote

import jinja2
import redis.asyncio
import redis.exceptions
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from .._discovery import find_queues, prometheus_text, queue_exists
from .._job import Job
from .._ops.groups import check_group
from .._ops.prometheus import DEFAULT_GROUP_LIMIT, check_group_limit
from .._redis import topology
from .._redis.fail_fast import redact_url, server_address
from ..errors import EchoMQError, InvalidOptionError
from ..protocol.keys import DEFAULT_PREFIX
from ..queue import Queue, client_from_url
from . import _views as views
from ._security import CSRF_FIELD, Access, AuthMiddleware, check_post, csrf_token, remember_csrf

logger = logging.getLogger("echomq.dashboard")

HERE = Path(__file__).parent
FLASH_COOKIE = "echomq_flash"
#: Seconds a list of queues found with SCAN is reused before the next SCAN.
DISCOVERY_TTL = 10.0
#: The most bytes an action's form may hold (the add-job form carries JSON).
MAX_FORM_BYTES = 1 << 20
PROMETHEUS_TYPE = "text/plain; version=0.0.4; charset=utf-8"


#: Errors that mean Redis cannot be reached (refused, timed out, unresolvable, reset): the
#: pages answer 503 "Redis at ADDRESS cannot be reached".
UNREACHABLE = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError)


class NotFound(Exception):
    """A queue or job that the dashboard does not show."""


class Dashboard:
    """The state of one dashboard app: its client, prefix, access rules and caches."""

    def __init__(
        self,
        connection: redis.asyncio.Redis | str,
        prefix: str,
        access: Access,
        queues: Sequence[str] | None = None,
        metrics_groups: int = DEFAULT_GROUP_LIMIT,
    ) -> None:
        if isinstance(connection, str):
            self.client = client_from_url(connection)
            self.owns_client = True
            #: where Redis is, as the error pages name it (a URL's password shown as ***)
            self.address = redact_url(connection)
        else:
            self.client = connection
            self.owns_client = False
            self.address = server_address(connection)
        self.prefix = prefix
        self.access = access
        self.fixed = None if queues is None else sorted(set(queues))
        self.metrics_groups = metrics_groups
        self._names: list[str] = []
        self._found_at: float | None = None
        self._rescan: asyncio.Task[None] | None = None
        self._queues: dict[str, Queue] = {}

    async def queue_names(self, fresh: bool = False) -> list[str]:
        """The queues to list: the fixed list when one was given, else those found with SCAN.

        The first call scans; later calls answer the last scan at once and, when it is older
        than :data:`DISCOVERY_TTL`, start one scan in the background (a scan walks every key
        under the prefix: seconds with millions of jobs, which no request should wait for).
        ``fresh`` waits for a new scan.
        """
        if self.fixed is not None:
            return self.fixed
        if fresh or self._found_at is None:
            await self._scan()
        elif time.monotonic() - self._found_at >= DISCOVERY_TTL and self._rescan is None:
            self._rescan = asyncio.create_task(self._scan_in_background())
        return self._names

    async def _scan(self) -> None:
        started = time.monotonic()
        self._names = await find_queues(self.client, self.prefix)
        self._found_at = started

    async def _scan_in_background(self) -> None:
        try:
            await self._scan()
        except (redis.exceptions.RedisError, OSError, EchoMQError):
            logger.warning("queue discovery failed; the last list stays", exc_info=True)
        finally:
            self._rescan = None

    async def queue(self, name: str) -> Queue:
        """The :class:`Queue` named ``name`` under the prefix.

        Raises:
            NotFound: ``name`` is not a queue found under the prefix.
        """
        if self.fixed is not None:
            known = name in self.fixed
        else:
            known = await queue_exists(self.client, self.prefix, name)
        if not known:
            raise NotFound(f"no queue {name!r} under prefix {self.prefix!r}")
        queue = self._queues.get(name)
        if queue is None:
            queue = self._queues[name] = Queue(name, connection=self.client, prefix=self.prefix)
        return queue

    async def job(self, queue: Queue, job_id: str) -> Job:
        """The job ``job_id`` of ``queue``.

        Raises:
            NotFound: there is no such job.
        """
        job = await queue.get_job(job_id)
        if job is None:
            raise NotFound(f"no job {job_id!r} in queue {queue.name!r}")
        return job

    async def aclose(self) -> None:
        """Close the queues' connections, and the client when the app made it."""
        if self._rescan is not None:
            self._rescan.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._rescan
        for queue in self._queues.values():
            await queue.aclose()
        self._queues.clear()
        if self.owns_client:
            await topology.aclose(self.client)  # with a Sentinel URL's Sentinel connections


def create_app(
    *,
    connection: redis.asyncio.Redis | str,
    prefix: str = DEFAULT_PREFIX,
    read_only: bool = False,
    auth: str | None = None,
    token: str | None = None,
    queues: Sequence[str] | None = None,
    metrics_groups: int = DEFAULT_GROUP_LIMIT,
) -> Starlette:
    """The dashboard as an ASGI app.

    Serve it (``uvicorn`` or any ASGI server) or mount it: ``app.mount("/queues",
    create_app(connection=redis))`` under FastAPI or Starlette. Its links follow the mount
    point.

    Args:
        connection: a ``redis.asyncio.Redis`` you own (never closed by the app) or a URL
            (the app makes the client and closes it when it shuts down).
        prefix: the key prefix whose queues it shows and acts on; no other.
        read_only: hide every action and refuse every POST (403).
        auth: ``"user:password"`` for HTTP basic authentication.
        token: a bearer token (``Authorization: Bearer ...``, or ``?token=`` once in a
            browser, which keeps it in a cookie). With ``auth`` too, either one is enough.
        queues: show and act on these queues only, and never scan for others. None (the
            default): every queue found under the prefix with ``SCAN`` (see
            docs/operations.md, "Queue discovery").
        metrics_groups: ``/metrics`` exports the jobs of each queue's this many groups with
            the most waiting jobs, and its number of groups (docs/operations.md#prometheus);
            0: no group series.

    Raises:
        ValueError: ``auth`` is not ``user:password``, ``token`` is empty, ``queues``
            holds something that is not a queue name, or ``metrics_groups`` is not an int
            >= 0.
    """
    access = Access.build(read_only, auth, token)
    check_group_limit(metrics_groups)
    if queues is not None:
        bad = [q for q in queues if not isinstance(q, str) or not q or ":" in q]
        if bad or isinstance(queues, str):
            raise ValueError(f"queues must be a list of queue names without ':'; got {queues!r}")
    dash = Dashboard(connection, prefix, access, queues, metrics_groups)
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True, enable_async=False
    )
    templates = Jinja2Templates(env=env)
    templates.env.globals.update(
        path_for=_path_for,
        when=views.when,
        pretty=views.pretty,
        percent=views.percent,
        sparkline=views.sparkline,
        allowed_attempts=views.allowed_attempts,
        given_options=views.given_options,
    )

    def render(request: Request, name: str, context: dict[str, Any], status: int = 200) -> Response:
        flash = request.cookies.get(FLASH_COOKIE)
        context.update(
            prefix=dash.prefix,
            read_only=access.read_only,
            csrf=csrf_token(request),
            csrf_field=CSRF_FIELD,
            flash=_read_flash(flash),
            states=views.STATES,
            groups_tab=views.GROUPS,
        )
        response: Response = templates.TemplateResponse(request, name, context, status_code=status)
        remember_csrf(request, response)
        if flash:
            response.delete_cookie(FLASH_COOKIE, path=_root(request))
        return response

    def error(
        request: Request, title: str, message: str, status: int, unreachable: bool = False
    ) -> Response:
        context = {"title": title, "message": message, "unreachable": unreachable}
        return render(request, "error.html", context, status)

    def page(
        handler: Callable[[Request], Awaitable[Response]],
    ) -> Callable[[Request], Awaitable[Response]]:
        async def wrapped(request: Request) -> Response:
            try:
                return await handler(request)
            except NotFound as exc:
                return error(request, "Not found", str(exc), 404)
            except UNREACHABLE as exc:
                message = f"Redis at {dash.address} cannot be reached: {exc}"
                return error(request, "Redis unreachable", message, 503, unreachable=True)
            except (redis.exceptions.RedisError, OSError, EchoMQError) as exc:
                message = f"Redis at {dash.address} could not be read: {exc}"
                return error(request, "Redis error", message, 503)

        return wrapped

    @page
    async def queue_list(request: Request) -> Response:
        names = await dash.queue_names(fresh="refresh" in request.query_params)
        rows = await views.summaries(dash.client, dash.prefix, names)
        return render(request, "queues.html", {"queues": rows})

    @page
    async def queue_view(request: Request) -> Response:
        queue = await dash.queue(request.path_params["queue"])
        state = request.query_params.get("state") or None  # None: the first tab with jobs
        if state is not None and state not in views.STATES and state != views.GROUPS:
            tabs = ", ".join((*views.STATES, views.GROUPS))
            raise NotFound(f"no state {state!r}; one of {tabs}")
        group = request.query_params.get("group") or None
        if state == views.GROUPS and group is not None:
            try:
                check_group(group)
            except InvalidOptionError as exc:
                raise NotFound(f"no group {group!r}: {exc}") from None
        else:
            group = None
        number = _int(request.query_params.get("page"), 1)
        data = await views.queue_page(queue, dash.client, state, number, group)
        return render(request, "queue.html", {"q": data, "queue": queue.name})

    @page
    async def job_view(request: Request) -> Response:
        queue = await dash.queue(request.path_params["queue"])
        job = await dash.job(queue, request.path_params["job_id"])
        data = await views.job_page(queue, job)
        return render(request, "job.html", {"j": data, "queue": queue.name})

    @page
    async def workers_view(request: Request) -> Response:
        queue = await dash.queue(request.path_params["queue"])
        rows = await views.workers_page(queue)
        return render(request, "workers.html", {"workers": rows, "queue": queue.name})

    @page
    async def find_job(request: Request) -> Response:
        queue = await dash.queue(request.path_params["queue"])
        job_id = request.query_params.get("id", "").strip()
        if not job_id:
            raise NotFound("give a job id")
        job = await dash.job(queue, job_id)
        return RedirectResponse(path_of(request, "job", queue=queue.name, job_id=job.id), 303)

    async def queue_action(request: Request) -> Response:
        return await _act(request, dash, _QUEUE_ACTIONS)

    async def job_action(request: Request) -> Response:
        return await _act(request, dash, _JOB_ACTIONS)

    async def metrics(request: Request) -> Response:
        try:
            text = await prometheus_text(dash.client, dash.prefix, group_limit=dash.metrics_groups)
        except (redis.exceptions.RedisError, OSError, EchoMQError) as exc:
            return PlainTextResponse(f"redis unavailable: {exc}\n", status_code=503)
        return Response(text, media_type=PROMETHEUS_TYPE)

    async def healthz(request: Request) -> Response:
        try:
            await dash.client.ping()
        except (redis.exceptions.RedisError, OSError) as exc:
            return PlainTextResponse(f"redis unavailable: {exc}\n", status_code=503)
        return PlainTextResponse("ok\n")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await dash.aclose()

    routes = [
        Route("/", queue_list, name="queues"),
        Route("/queues/{queue}", queue_view, name="queue"),
        Route(
            "/queues/{queue}/jobs/{job_id:path}/actions/{action}",
            job_action,
            methods=["POST"],
            name="job_action",
        ),
        Route("/queues/{queue}/jobs/{job_id:path}", job_view, name="job"),
        Route("/queues/{queue}/find", find_job, name="find_job"),
        Route("/queues/{queue}/workers", workers_view, name="workers"),
        Route(
            "/queues/{queue}/actions/{action}", queue_action, methods=["POST"], name="queue_action"
        ),
        Route("/metrics", metrics, name="metrics"),
        Route("/healthz", healthz, name="healthz"),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.dashboard = dash
    app.add_middleware(AuthMiddleware, access=access)
    return app


def path_of(request: Request, name: str, /, **params: Any) -> str:
    """The path of a route under the mount point, its parameters percent-encoded (a job id
    may hold ``?``, ``#`` or spaces). No scheme or host: right behind any proxy."""
    quoted = {k: quote(str(v), safe="/") for k, v in params.items()}
    return str(request.url_for(name, **quoted).path)


@jinja2.pass_context
def _path_for(context: Mapping[str, Any], name: str, /, **params: Any) -> str:
    """:func:`path_of` for templates."""
    return path_of(context["request"], name, **params)


def _write_flash(kind: str, message: str) -> str:
    """A message for the next page, as a cookie-safe value."""
    return base64.urlsafe_b64encode(json.dumps([kind, message]).encode()).decode()


def _read_flash(value: str | None) -> list[str] | None:
    """The message :func:`_write_flash` stored, or None."""
    if not value:
        return None
    try:
        kind, message = json.loads(base64.urlsafe_b64decode(value.encode()))
    except (ValueError, TypeError):
        return None
    return [str(kind), str(message)]


def _root(request: Request) -> str:
    return str(request.scope.get("root_path") or "") or "/"


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


Action = Callable[[Dashboard, Queue, Request, dict[str, str]], Awaitable[str]]


async def _pause(dash: Dashboard, queue: Queue, request: Request, form: dict[str, str]) -> str:
    await queue.pause()
    return f"queue {queue.name} paused"


async def _resume(dash: Dashboard, queue: Queue, request: Request, form: dict[str, str]) -> str:
    await queue.resume()
    return f"queue {queue.name} resumed"


async def _retry_failed(
    dash: Dashboard, queue: Queue, request: Request, form: dict[str, str]
) -> str:
    count = (await queue.get_job_counts("failed"))["failed"]
    await queue.retry_jobs("failed")
    return f"{count} failed job(s) sent back to wait"


async def _promote_delayed(
    dash: Dashboard, queue: Queue, request: Request, form: dict[str, str]
) -> str:
    count = (await queue.get_job_counts("delayed"))["delayed"]
    await queue.promote_jobs()
    return f"{count} delayed job(s) promoted"


async def _clean(dash: Dashboard, queue: Queue, request: Request, form: dict[str, str]) -> str:
    state = form.get("state", "completed")
    try:
        grace = float(form.get("grace", "0") or 0)
        limit = int(form.get("limit", "0") or 0)
    except ValueError as exc:
        raise ValueError("grace (seconds) and limit must be numbers") from exc
    removed = await queue.clean(grace, limit, state)
    return f"{len(removed)} {state} job(s) older than {grace:g} s removed"


async def _add(dash: Dashboard, queue: Queue, request: Request, form: dict[str, str]) -> str:
    name = form.get("name", "").strip()
    if not name:
        raise ValueError("a job needs a name")
    data = _json_field(form, "data", None)
    options = _json_field(form, "options", {})
    if not isinstance(options, dict):
        raise ValueError('options must be a JSON object, e.g. {"delay": 5, "attempts": 3}')
    job = await queue.add(name, data, **options)
    return f"job {job.id} added to {queue.name}"


def _json_field(form: dict[str, str], field: str, empty: Any) -> Any:
    text = form.get(field, "").strip()
    if not text:
        return empty
    try:
        return json.loads(text)
    except ValueError as exc:
        raise ValueError(f"{field} is not valid JSON: {exc}") from exc


def _group_of(form: dict[str, str]) -> str:
    group = form.get("group", "")
    if not group:
        raise ValueError("give a group id")
    return group


async def _pause_group(
    dash: Dashboard, queue: Queue, request: Request, form: dict[str, str]
) -> str:
    group = _group_of(form)
    await queue.pause_group(group)
    return f"group {group} of {queue.name} paused"


async def _resume_group(
    dash: Dashboard, queue: Queue, request: Request, form: dict[str, str]
) -> str:
    group = _group_of(form)
    await queue.resume_group(group)
    return f"group {group} of {queue.name} resumed"


async def _job_retry(dash: Dashboard, queue: Queue, request: Request, form: dict[str, str]) -> str:
    job = await dash.job(queue, request.path_params["job_id"])
    await job.retry(await job.get_state())
    return f"job {job.id} sent back to wait"


async def _job_promote(
    dash: Dashboard, queue: Queue, request: Request, form: dict[str, str]
) -> str:
    job = await dash.job(queue, request.path_params["job_id"])
    await job.promote()
    return f"job {job.id} promoted"


async def _job_remove(dash: Dashboard, queue: Queue, request: Request, form: dict[str, str]) -> str:
    job = await dash.job(queue, request.path_params["job_id"])
    if not await job.remove():
        raise ValueError(f"job {job.id} is locked by a worker and was not removed")
    return f"job {job.id} removed"


_QUEUE_ACTIONS: dict[str, Action] = {
    "pause": _pause,
    "resume": _resume,
    "retry-failed": _retry_failed,
    "promote-delayed": _promote_delayed,
    "clean": _clean,
    "add": _add,
    "pause-group": _pause_group,
    "resume-group": _resume_group,
}
_JOB_ACTIONS: dict[str, Action] = {
    "retry": _job_retry,
    "promote": _job_promote,
    "remove": _job_remove,
}


async def _act(request: Request, dash: Dashboard, actions: dict[str, Action]) -> Response:
    """Run one POSTed action and send the browser back with a message."""
    if dash.access.read_only:
        return PlainTextResponse("the dashboard is read-only", status_code=403)
    body = await request.body()
    if len(body) > MAX_FORM_BYTES:
        return PlainTextResponse("form too large", status_code=413)
    form = dict(parse_qsl(body.decode(errors="replace"), keep_blank_values=True))
    refused = check_post(request, form)
    if refused:
        return PlainTextResponse(refused, status_code=403)
    action = actions.get(request.path_params["action"])
    if action is None:
        return PlainTextResponse("no such action", status_code=404)
    try:
        queue = await dash.queue(request.path_params["queue"])
        message, ok = await action(dash, queue, request, form), True
    except NotFound as exc:
        return PlainTextResponse(str(exc), status_code=404)
    except (EchoMQError, ValueError, TypeError) as exc:
        message, ok = str(exc), False
    response = RedirectResponse(_back(request, form), status_code=303)
    response.set_cookie(
        FLASH_COOKIE,
        _write_flash("ok" if ok else "error", message),
        max_age=60,
        httponly=True,
        samesite="strict",
        path=_root(request),
    )
    return response


def _back(request: Request, form: dict[str, str]) -> str:
    """Where to go after an action: the form's ``next`` when it is a path of this app."""
    root = str(request.scope.get("root_path") or "")
    target = form.get("next", "")
    if target.startswith(root + "/") and not target.startswith("//") and "\\" not in target:
        return target
    return path_of(request, "queue", queue=request.path_params["queue"])
