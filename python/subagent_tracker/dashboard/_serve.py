"""``python -m subagent_tracker serve``: the dashboard on its own, under uvicorn."""

from __future__ import annotations

import asyncio
import ipaddress
import os
import socket
from typing import Any

import uvicorn
from starlette.types import ASGIApp, Receive, Scope, Send

from subagent_tracker.dashboard._app import app
from subagent_tracker.dashboard._security import LOOPBACK_HOSTS

#: Where ``serve`` reads a token from when ``--token`` is not given (a token on a command line is visible to
#: every user of the machine in the process list).
TOKEN_VARIABLE = "SUBAGENT_TRACKER_TOKEN"


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


def server(
    registry: Any,
    *,
    host: str,
    port: int,
    token: str | None,
    details: bool,
    first_request: asyncio.Event | None = None,
) -> uvicorn.Server:
    """A uvicorn server of the dashboard over ``registry``; ``await server.serve()`` runs it. With
    ``first_request``, the event is set when the first HTTP request arrives (a page or an API call)."""
    check_binding(host, token)
    allowed = None if token is not None else {*LOOPBACK_HOSTS, f"[{host}]" if ":" in host else host}
    dashboard: ASGIApp = app(registry, token=token, details=details, allowed_hosts=allowed)
    if first_request is not None:
        dashboard = _SignalsFirstRequest(dashboard, first_request)
    config = uvicorn.Config(dashboard, host=host, port=port, log_level="warning", lifespan="on")
    return uvicorn.Server(config)


class _SignalsFirstRequest:
    """ASGI middleware: sets ``arrived`` on the first HTTP request, then passes every call on unchanged."""

    def __init__(self, inner: ASGIApp, arrived: asyncio.Event) -> None:
        self.inner = inner
        self.arrived = arrived

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            self.arrived.set()
        await self.inner(scope, receive, send)


def serve(*, redis_url: str | None, host: str, port: int, token: str | None, details: bool) -> None:
    """Serves the dashboard of a Redis registry (every process's sessions) or, without one, of an empty
    in-memory registry (useful only to try the page). Raises ``ValueError`` for a binding ``check_binding``
    refuses, before it connects to anything."""
    check_binding(host, token)
    if redis_url is not None:
        from subagent_tracker import RedisRegistry

        registry: Any = RedisRegistry(redis_url, worker_id=f"dashboard-{socket.gethostname()}-{os.getpid()}")
    else:
        from subagent_tracker import Registry

        registry = Registry()
    running = server(registry, host=host, port=port, token=token, details=details)
    shown_host = f"[{host}]" if ":" in host else host
    asyncio.run(_serve_announced(running, f"http://{shown_host}:{port}/"))


async def _serve_announced(running: uvicorn.Server, address: str) -> None:
    serving = await start_serving(running)
    print(f"subagent-tracker dashboard: {address}  (Ctrl-C stops it)", flush=True)
    await serving


async def start_serving(running: uvicorn.Server) -> asyncio.Future[None]:
    """Starts ``running`` and returns once its socket listens (so the address printed next can be opened at
    once); the returned future ends when it stops. Raises ``SystemExit`` (uvicorn's) if it could not bind."""
    serving = asyncio.ensure_future(running.serve())
    while not running.started and not serving.done():
        await asyncio.sleep(0.02)
    if serving.done():
        serving.result()
        raise SystemExit("the dashboard stopped before it started")
    return serving
