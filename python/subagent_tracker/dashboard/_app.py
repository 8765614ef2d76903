"""The dashboard's ASGI app: the page, the JSON API, the live stream and ``/metrics``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from subagent_tracker._errors import RegistryUnavailableError
from subagent_tracker._native import (
    SubagentTask,
    _quoted,  # how every message quotes an id: the core's rule
)
from subagent_tracker._protocols import SessionProtocol
from subagent_tracker._status import SubagentStatus
from subagent_tracker.dashboard._security import Guard
from subagent_tracker.dashboard._views import (
    RegistryLike,
    pending_in_subtree,
    session_view,
    task_view,
)
from subagent_tracker.dashboard._watch import PageFeed, Watch

#: The reason recorded on cancels made from the dashboard when the request names none.
DASHBOARD_CANCEL_REASON = "cancelled from the dashboard"
#: How long a page's stream gathers changes before it sends them: one message per tick, however many changed.
STREAM_TICK_SECONDS = 0.1
#: Beyond this many changed tasks in one tick, one listing is cheaper than a snapshot per task.
_LIST_BEYOND = 64

_STATIC = Path(__file__).parent / "static"


class _Problem(Exception):
    """An API error: answered as ``{"error": message}`` with ``status``."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Dashboard:
    """The state behind one dashboard app: the registry, the settings and the followers of its sessions."""

    def __init__(self, registry: RegistryLike, details: bool, notice: str | None = None) -> None:
        self.registry = registry
        self.details = details
        self.notice = notice
        self.watch = Watch(registry)
        self._overview: tuple[float, list[dict[str, Any]]] | None = None
        self._overview_lock = asyncio.Lock()
        self.watch.metrics.registry.register(_TaskGauges(self))

    # --- reading the registry (in a worker thread: a Redis registry blocks on the network)

    async def session(self, session_id: str) -> SessionProtocol:
        session = await run_in_threadpool(self.registry.get_session, session_id)
        if session is None:
            raise _Problem(404, f"no session {_quoted(session_id)}")
        return session  # type: ignore[no-any-return]

    async def tasks(self, session: SessionProtocol) -> list[SubagentTask]:
        return await run_in_threadpool(session.subagent_tasks)

    async def sessions(self) -> list[dict[str, Any]]:
        """Every session with its counts by status; read at most once per 0.5 s, however many ask."""
        async with self._overview_lock:
            if self._overview is not None and time.monotonic() - self._overview[0] < 0.5:
                return self._overview[1]
            views = await run_in_threadpool(self.read_sessions)
            self._overview = (time.monotonic(), views)
            return views

    def read_sessions(self) -> list[dict[str, Any]]:
        """Every session with its counts by status, read now (a Redis registry blocks on the network)."""
        views = []
        for session_id in sorted(self.registry.sessions()):
            session = self.registry.get_session(session_id)
            if session is not None:
                views.append(session_view(session_id, session.subagent_tasks()))
        return views

    def views(self, tasks: Iterable[SubagentTask]) -> list[dict[str, Any]]:
        return [task_view(task, self.details) for task in tasks]

    # --- the API

    async def list_sessions(self, _request: Request) -> Response:
        return JSONResponse({"now": time.time(), "sessions": await self.sessions()})

    async def list_tasks(self, request: Request) -> Response:
        session = await self.session(_id(request, "session_id"))
        # In a worker thread: for 10,000 tasks, views and JSON take tens of milliseconds.
        return await run_in_threadpool(self._listing, session)

    def _listing(self, session: SessionProtocol) -> Response:
        tasks = session.subagent_tasks()
        return JSONResponse(
            {"now": time.time(), "session_id": session.session_id, "tasks": self.views(tasks)}
        )

    async def get_task(self, request: Request) -> Response:
        session = await self.session(_id(request, "session_id"))
        return JSONResponse(task_view(await self._task(session, _id(request, "task_id")), self.details))

    async def subtree(self, request: Request) -> Response:
        session = await self.session(_id(request, "session_id"))
        task_id = _id(request, "task_id")
        await self._task(session, task_id)
        return JSONResponse({"pending": pending_in_subtree(await self.tasks(session), task_id)})

    async def cancel_task(self, request: Request) -> Response:
        session = await self.session(_id(request, "session_id"))
        task_id = _id(request, "task_id")
        reason = await _reason(request)
        if await run_in_threadpool(session.cancel_subagent_task, task_id, reason):
            return JSONResponse({"cancelled": True})
        task = await self._task(session, task_id)
        raise _Problem(409, f"task {_quoted(task_id)} is not pending: it is {task.status.value}")

    async def cancel_session(self, request: Request) -> Response:
        session = await self.session(_id(request, "session_id"))
        reason = await _reason(request)
        return JSONResponse({"cancelled": await run_in_threadpool(session.cancel, reason)})

    async def metrics(self, _request: Request) -> Response:
        # The gauges' collector reads the registry: in a worker thread, with the rest of the scrape.
        body = await run_in_threadpool(generate_latest, self.watch.metrics.registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    async def _task(self, session: SessionProtocol, task_id: str) -> SubagentTask:
        task = await run_in_threadpool(session.subagent_task, task_id)
        if task is None:
            raise _Problem(404, f"no task {_quoted(task_id)} in session {_quoted(session.session_id)}")
        return task

    # --- the live stream

    async def stream(self, request: Request) -> Response:
        session_id = request.query_params.get("session") or None
        session = await self.session(session_id) if session_id is not None else None
        return StreamingResponse(
            self._stream(request, session),
            media_type="text/event-stream",
            headers={"cache-control": "no-store", "x-accel-buffering": "no"},
        )

    async def _stream(self, request: Request, session: SessionProtocol | None) -> AsyncIterator[str]:
        feed = self.watch.subscribe(session.session_id) if session is not None else None
        try:
            yield await self._overview_or_unavailable()
            if feed is not None:
                feed.resync = True
            next_overview = time.monotonic() + 1.0
            while not await request.is_disconnected():
                if feed is not None and session is not None:
                    message = await self._feed_message(feed, session)
                    if message is not None:
                        yield message
                    if feed.gone:
                        return
                if time.monotonic() >= next_overview:
                    yield await self._overview_or_unavailable()
                    next_overview = time.monotonic() + 1.0
                wake = feed.wake.wait() if feed is not None else asyncio.sleep(3600)
                # asyncio's own class: on Python 3.10 it is not the builtin TimeoutError.
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(wake, max(0.0, next_overview - time.monotonic()))
                # Gather what else changes meanwhile: one message per tick, however many tasks changed.
                await asyncio.sleep(STREAM_TICK_SECONDS)
        finally:
            if feed is not None:
                self.watch.unsubscribe(feed)

    async def _feed_message(self, feed: PageFeed, session: SessionProtocol) -> str | None:
        feed.wake.clear()
        if feed.gone:
            return _event("gone", {"session_id": session.session_id})
        resync, changed = feed.resync, feed.changed
        feed.resync, feed.changed = False, set()
        try:
            if resync:
                return await run_in_threadpool(self._snapshot_message, session)
            if changed:
                return await run_in_threadpool(self._changes_message, session, changed)
        except Exception as failure:
            # Redis unreachable: send everything once it is back.
            feed.resync = True
            return _unavailable_message(failure)
        return None

    # Messages are built in a worker thread: for 10,000 tasks, views and JSON take tens of milliseconds that
    # the event loop would otherwise stall for.

    def _snapshot_message(self, session: SessionProtocol) -> str:
        tasks = session.subagent_tasks()
        return _event(
            "snapshot", {"now": time.time(), "session_id": session.session_id, "tasks": self.views(tasks)}
        )

    def _changes_message(self, session: SessionProtocol, changed: set[str]) -> str:
        """The changed tasks' snapshots; those no longer retained are listed as `removed`."""
        if len(changed) > _LIST_BEYOND:
            tasks = [task for task in session.subagent_tasks() if task.task_id in changed]
        else:
            tasks = [task for task in map(session.subagent_task, changed) if task is not None]
        removed = sorted(changed - {task.task_id for task in tasks})
        return _event("tasks", {"now": time.time(), "tasks": self.views(tasks), "removed": removed})

    async def _overview_or_unavailable(self) -> str:
        """The overview, or while the registry cannot be read an ``unavailable`` event that says why: the page
        shows its stream as connected only while what it shows is live. Nothing may escape a stream whose
        response has started (the server could only log it)."""
        try:
            return await self._overview_message()
        except Exception as failure:
            return _unavailable_message(failure)

    async def _overview_message(self) -> str:
        sessions = await self.sessions()
        chart = self.watch.chart()
        overview = {"now": time.time(), "sessions": sessions, "chart": chart, "notice": self.notice}
        return await run_in_threadpool(_event, "overview", overview)

    # --- the page

    async def page(self, _request: Request) -> Response:
        return FileResponse(_STATIC / "index.html", headers={"cache-control": "no-store"})


class _TaskGauges(Collector):
    """Tasks by status and the number of sessions, read from the registry at each scrape."""

    def __init__(self, dashboard: Dashboard) -> None:
        self.dashboard = dashboard

    def collect(self) -> Iterable[GaugeMetricFamily]:
        sessions = self.dashboard.read_sessions()
        tasks = GaugeMetricFamily(
            "subagent_tracker_tasks", "Tasks retained in the registry, by status.", labels=["status"]
        )
        for status in SubagentStatus:
            tasks.add_metric([status.value], sum(view["counts"][status.value] for view in sessions))
        yield tasks
        yield GaugeMetricFamily("subagent_tracker_sessions", "Sessions in the registry.", value=len(sessions))


#: The query parameter that carries each id in the query forms of the routes (``api/task?session=&task=``),
#: which the page uses: browsers remove a path segment of ``.`` or ``..`` before a request is sent, even
#: percent-encoded, so an id in the path cannot be any string.
_QUERY_NAMES = {"session_id": "session", "task_id": "task"}


def _id(request: Request, name: str) -> str:
    """The id ``name`` of a request: from the path (``api/sessions/{session_id}/...``), or from the query."""
    if name in request.path_params:
        return unquote(request.path_params[name])
    value = request.query_params.get(_QUERY_NAMES[name])
    if value is None:
        raise _Problem(400, f"the query needs ?{_QUERY_NAMES[name]}=<id>")
    return value


def _unavailable_message(failure: Exception) -> str:
    return _event("unavailable", {"error": str(failure)})


def _event(name: str, data: object) -> str:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


async def _reason(request: Request) -> str:
    """The ``reason`` of a cancel's JSON body, or the dashboard's default."""
    raw = await request.body()
    if not raw:
        return DASHBOARD_CANCEL_REASON
    try:
        body = json.loads(raw)
    except ValueError:
        raise _Problem(400, 'the body must be JSON: {"reason": "..."}') from None
    if not isinstance(body, dict):
        raise _Problem(400, 'the body must be a JSON object: {"reason": "..."}')
    reason = body.get("reason", DASHBOARD_CANCEL_REASON)
    if not isinstance(reason, str) or not reason.strip():
        raise _Problem(400, "'reason' must be a non-empty string")
    return reason


async def _problem(_request: Request, problem: Exception) -> Response:
    status = problem.status if isinstance(problem, _Problem) else 503
    return JSONResponse({"error": str(problem)}, status_code=status)


async def _bad_id(_request: Request, error: Exception) -> Response:
    """An id the registry refuses outright (too long, say): nothing can have it."""
    return JSONResponse({"error": str(error)}, status_code=400)


def app(
    registry: RegistryLike,
    *,
    token: str | None = None,
    details: bool = False,
    allowed_hosts: Iterable[str] | None = None,
    notice: str | None = None,
) -> Starlette:
    """The dashboard over ``registry`` (a ``Registry`` or a ``RedisRegistry``), as an ASGI app that a
    Starlette or FastAPI server can mount, or that ``python -m subagent_tracker serve`` serves on its own.

    - ``token``: when set, every API call, the live stream and ``/metrics`` need ``Authorization: Bearer
      <token>``; the page asks for it once.
    - ``details``: show tasks' metadata, results and errors (off by default: they can hold user data).
    - ``allowed_hosts``: the host names requests may be addressed to. Without a token it defaults to the
      loopback names only; with a token, to any.
    - ``notice``: a sentence the page shows in place of "No sessions yet." (``serve`` without Redis says there
      why its page stays empty).

    Cancels go through the session's own ``cancel_subagent_task`` and ``cancel``, so the contract's rules hold
    as they do for code.
    """
    if token is not None and not token.strip():
        raise ValueError("token must be a non-empty string, or None for no token")
    dashboard = Dashboard(registry, details, notice)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        dashboard.watch.ensure_started()
        yield
        await dashboard.watch.stop()

    session_path = "/api/sessions/{session_id}"
    routes = [
        Route("/", dashboard.page),
        Route("/api/sessions", dashboard.list_sessions),
        Route("/api/stream", dashboard.stream),
        Route(session_path + "/tasks", dashboard.list_tasks),
        Route(session_path + "/tasks/{task_id}", dashboard.get_task),
        Route(session_path + "/tasks/{task_id}/subtree", dashboard.subtree),
        Route(session_path + "/tasks/{task_id}/cancel", dashboard.cancel_task, methods=["POST"]),
        Route(session_path + "/cancel", dashboard.cancel_session, methods=["POST"]),
        # The same, with the ids in the query: any id works, `.` and `..` included.
        Route("/api/session/tasks", dashboard.list_tasks),
        Route("/api/session/cancel", dashboard.cancel_session, methods=["POST"]),
        Route("/api/task", dashboard.get_task),
        Route("/api/task/subtree", dashboard.subtree),
        Route("/api/task/cancel", dashboard.cancel_task, methods=["POST"]),
        Route("/metrics", dashboard.metrics),
        Mount("/static", StaticFiles(directory=_STATIC), name="static"),
    ]
    application = Starlette(
        routes=routes,
        exception_handlers={_Problem: _problem, RegistryUnavailableError: _problem, ValueError: _bad_id},
        lifespan=lifespan,
    )
    application.add_middleware(_RouteOnRawPath)
    application.add_middleware(Guard, token=token, allowed_hosts=allowed_hosts)
    application.add_middleware(_StartWatching, dashboard=dashboard)
    return application


class _StartWatching:
    """Starts following the registry's sessions on the first request: a mounted app gets no lifespan."""

    def __init__(self, app: ASGIApp, *, dashboard: Dashboard) -> None:
        self.app = app
        self.dashboard = dashboard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.dashboard.watch.ensure_started()
        await self.app(scope, receive, send)


class _RouteOnRawPath:
    """Routes on the path as sent, still percent-encoded, so that an id holding ``/`` (sent as ``%2F``) stays
    one path segment; the handlers decode their ids (``_id``)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw_path = scope.get("raw_path")
        if scope["type"] == "http" and raw_path:
            encoded = raw_path.decode("latin-1")
            mounted_at = scope.get("root_path", "")
            # A mounted app's raw path starts with its mount point, which `path` keeps too.
            if mounted_at and not encoded.startswith(mounted_at):
                encoded = mounted_at + encoded
            scope = dict(scope, path=encoded)
        await self.app(scope, receive, send)
