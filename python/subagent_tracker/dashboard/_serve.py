"""``python -m subagent_tracker serve``: the dashboard on its own, under uvicorn."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import os
import socket
from collections.abc import Iterator
from typing import Any

import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from subagent_tracker._command_errors import CommandError, connect_redis
from subagent_tracker._ctrl_c import ctrl_c_sets, set_before_done
from subagent_tracker.dashboard._app import app
from subagent_tracker.dashboard._security import LOOPBACK_HOSTS

#: Where ``serve`` reads a token from when ``--token`` is not given (a token on a command line is visible to
#: every user of the machine in the process list).
TOKEN_VARIABLE = "SUBAGENT_TRACKER_TOKEN"
#: How long a stopping server may take to close its sockets before it is cancelled.
STOP_SECONDS = 0.5


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_binding(host: str, token: str | None) -> None:
    """Refuses to serve on an address other machines can reach unless a token guards it."""
    if token is None and not is_loopback(host):
        raise ValueError(
            f"refusing to serve the dashboard on {host} without a token: anyone who reaches it could cancel "
            f"work. Set --token (or {TOKEN_VARIABLE}), or bind 127.0.0.1"
        )


#: What the page and the start-up line say when ``serve`` has no Redis: its in-memory registry is its own.
IN_MEMORY_NOTICE = (
    "This dashboard shows an in-memory registry of its own, which no other process can reach, so it stays "
    "empty. Serve a fleet's sessions with `python -m subagent_tracker serve --redis URL`, or watch the demo "
    "with `python -m subagent_tracker demo --web`."
)


class ServeError(Exception):
    """The dashboard could not serve: its address could not be bound (its port in use, a port that needs
    privileges, an address that is not this machine's), or its server stopped before it started."""


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to ``host``:``port`` (``0``: a free port), for ``start_serving``: bound here, before any
    connection to Redis, so that a port in use is one clear error rather than uvicorn's exit from its task."""
    shown = f"[{host.strip('[]')}]:{port}" if ":" in host else f"{host}:{port}"
    try:
        family, kind, protocol, _, address = socket.getaddrinfo(
            host.strip("[]"), port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as unknown:
        raise ServeError(f"cannot serve the dashboard on {shown}: {unknown.strerror}") from None
    listener = socket.socket(family, kind, protocol)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
    except OSError as refused:
        listener.close()
        why = "the port is in use" if refused.errno == errno.EADDRINUSE else refused.strerror
        raise ServeError(f"cannot serve the dashboard on {shown}: {why}") from None
    return listener


def address(host: str, listener: socket.socket) -> str:
    """The page's address: ``host`` as given, with the port ``listener`` bound (the one picked for port 0)."""
    shown_host = f"[{host.strip('[]')}]" if ":" in host else host
    return f"http://{shown_host}:{listener.getsockname()[1]}/"


class DashboardServer(uvicorn.Server):
    """uvicorn's server, without its own signal handling: the command line stops it on Ctrl-C with
    ``stop_serving``, which ends the open live streams, where uvicorn would wait for them to end for ever and
    then raise the signal again as a traceback."""

    def __init__(self, config: uvicorn.Config, stopping: asyncio.Event) -> None:
        super().__init__(config)
        #: Set by ``stop_serving``: every open request reads a disconnect (see ``_EndsRequestsOnStop``).
        self.stopping = stopping

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def server(
    registry: Any,
    *,
    host: str,
    port: int,
    token: str | None,
    details: bool,
    first_request: asyncio.Event | None = None,
    notice: str | None = None,
) -> DashboardServer:
    """A uvicorn server of the dashboard over ``registry``; ``start_serving`` runs it. With ``first_request``,
    the event is set when the first HTTP request arrives (a page or an API call); ``notice`` is shown on the
    page."""
    check_binding(host, token)
    allowed = None if token is not None else {*LOOPBACK_HOSTS, f"[{host}]" if ":" in host else host}
    dashboard: ASGIApp = app(registry, token=token, details=details, allowed_hosts=allowed, notice=notice)
    if first_request is not None:
        dashboard = _SignalsFirstRequest(dashboard, first_request)
    stopping = asyncio.Event()
    ends_on_stop = _EndsRequestsOnStop(dashboard, stopping)
    config = uvicorn.Config(ends_on_stop, host=host, port=port, log_level="warning", lifespan="on")
    return DashboardServer(config, stopping)


class _EndsRequestsOnStop:
    """ASGI middleware: once ``stopping`` is set, each open request reads a disconnect and its response is
    completed, so that the live streams end and the server's graceful shutdown, the app's own included, is
    over at once."""

    def __init__(self, inner: ASGIApp, stopping: asyncio.Event) -> None:
        self.inner = inner
        self.stopping = stopping

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return
        # One read of the server's messages at a time, kept across calls: Starlette asks whether a client
        # left with a read it cancels at once, and a read left behind each time would take the next message.
        pending: asyncio.Future[Message] | None = None
        response = {"started": False, "complete": False}

        async def receive_until_stop() -> Message:
            nonlocal pending
            if self.stopping.is_set():
                return {"type": "http.disconnect"}
            if pending is None:
                pending = asyncio.ensure_future(receive())
            if await set_before_done(self.stopping, pending):
                return {"type": "http.disconnect"}
            received, pending = pending, None
            return received.result()

        async def send_noting(message: Message) -> None:
            response["started"] = True
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                response["complete"] = True
            await send(message)

        try:
            await self.inner(scope, receive_until_stop, send_noting)
        finally:
            if pending is not None:
                pending.cancel()
        if self.stopping.is_set() and response["started"] and not response["complete"]:
            # A stream the stop cut short: its last chunk, without which the server reports a broken app.
            await send({"type": "http.response.body", "body": b"", "more_body": False})


class _SignalsFirstRequest:
    """ASGI middleware: sets ``arrived`` on the first HTTP request, then passes every call on unchanged."""

    def __init__(self, inner: ASGIApp, arrived: asyncio.Event) -> None:
        self.inner = inner
        self.arrived = arrived

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.arrived.set()
        await self.inner(scope, receive, send)


def serve(*, redis_url: str | None, host: str, port: int, token: str | None, details: bool) -> bool:
    """Serves the dashboard of a Redis registry (every process's sessions) or, without one, of an empty
    in-memory registry (useful only to try the page), until Ctrl-C; true if Ctrl-C stopped it. Raises
    ``ValueError`` for a binding ``check_binding`` refuses and ``ServeError`` for an address it cannot bind,
    before it connects to anything; ``CommandError`` for a Redis it cannot use."""
    check_binding(host, token)
    listener = bind(host, port)
    try:
        if redis_url is not None:
            worker_id = f"dashboard-{socket.gethostname()}-{os.getpid()}"
            registry: Any = connect_redis(redis_url, worker_id=worker_id)
            notice = None
        else:
            from subagent_tracker import Registry

            registry, notice = Registry(), IN_MEMORY_NOTICE
    except BaseException:
        listener.close()
        raise
    running = server(registry, host=host, port=port, token=token, details=details, notice=notice)
    return asyncio.run(_serve_until_ctrl_c(running, listener, address(host, listener), notice))


async def _serve_until_ctrl_c(
    running: DashboardServer, listener: socket.socket, page: str, notice: str | None
) -> bool:
    pressed = asyncio.Event()
    with ctrl_c_sets(pressed):
        serving = await start_serving(running, listener)
        print(f"subagent-tracker dashboard: {page}  (Ctrl-C stops it)", flush=True)
        if notice is not None:
            print(notice, flush=True)
        interrupted = await set_before_done(pressed, serving)
        await stop_serving(running, serving)
    if not interrupted and not serving.cancelled() and serving.exception() is not None:
        raise CommandError(f"the dashboard's server stopped: {serving.exception()}")
    return interrupted


async def start_serving(running: DashboardServer, listener: socket.socket) -> asyncio.Future[None]:
    """Starts ``running`` on ``listener`` and returns once it accepts connections (so the address printed next
    can be opened at once); the returned future ends when it stops."""
    serving = asyncio.ensure_future(running.serve(sockets=[listener]))
    while not running.started and not serving.done():
        await asyncio.sleep(0.02)
    if serving.done():
        failure = None if serving.cancelled() else serving.exception()
        raise ServeError(f"the dashboard's server stopped before it started ({failure or 'no error given'})")
    return serving


async def stop_serving(running: DashboardServer, serving: asyncio.Future[None]) -> None:
    """Stops ``running``: its open requests end (a page's live stream among them), then it shuts down as
    uvicorn does, or, past ``STOP_SECONDS``, at once."""
    running.stopping.set()
    running.should_exit = True
    await asyncio.wait({serving}, timeout=STOP_SECONDS)
    if not serving.done():
        running.force_exit = True
        await asyncio.wait({serving}, timeout=STOP_SECONDS)
        serving.cancel()
