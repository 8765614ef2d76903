"""Who may reach the dashboard: the page can stop work, so the API is closed to everyone who should not.

- With a token, every API call, the live stream and ``/metrics`` need ``Authorization: Bearer <token>``.
- Without one, only requests addressed to a loopback name are served, so a web page that rebinds its own DNS
  name to 127.0.0.1 cannot read or cancel anything.
- A cancel is a POST that must carry the ``X-Subagent-Tracker-Action`` header: a cross-site form cannot set
  it, and a cross-site script cannot without a CORS preflight, which this app never grants. A POST whose
  ``Origin`` is not this host is refused too.
- Every response forbids framing and inline script (a strict Content-Security-Policy).
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Iterable

from starlette.types import ASGIApp, Message, Receive, Scope, Send

#: The header that every state-changing request must carry.
ACTION_HEADER = "x-subagent-tracker-action"

#: The names a request may be addressed to when no token guards the dashboard (as ``_host_name`` gives them).
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]"})

_SECURITY_HEADERS = [
    (
        b"content-security-policy",
        b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        b"connect-src 'self'; frame-ancestors 'none'; base-uri 'self'; form-action 'none'",
    ),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
]


class Guard:
    """ASGI middleware that keeps the rules above for every request of the dashboard."""

    def __init__(self, app: ASGIApp, *, token: str | None, allowed_hosts: Iterable[str] | None) -> None:
        self.app = app
        self.token = token.encode() if token is not None else None
        hosts = allowed_hosts if allowed_hosts is not None else (() if token is not None else LOOPBACK_HOSTS)
        self.allowed_hosts = frozenset(host.lower() for host in hosts)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self._refusal(scope)
        if refusal is not None:
            status, message = refusal
            await _send_json(send, status, {"error": message}, bearer=status == 401)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *_SECURITY_HEADERS]
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _refusal(self, scope: Scope) -> tuple[int, str] | None:
        headers = {
            name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]
        }
        host = headers.get("host", "")
        if self.allowed_hosts and _host_name(host) not in self.allowed_hosts:
            allowed = ", ".join(sorted(self.allowed_hosts))
            return 403, f"this dashboard only answers requests addressed to {allowed}"
        path, mounted_at = scope["path"], scope.get("root_path", "")
        if mounted_at and path.startswith(mounted_at):
            path = path[len(mounted_at) :]
        protected = path.startswith("/api/") or path == "/metrics"
        if protected and self.token is not None:
            presented = headers.get("authorization", "")
            scheme, _, credential = presented.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(credential.strip().encode(), self.token):
                return 401, "this dashboard needs its token: send 'Authorization: Bearer <token>'"
        if scope["method"] not in ("GET", "HEAD"):
            if ACTION_HEADER not in headers:
                return 403, f"a request that changes state must carry the '{ACTION_HEADER}' header"
            origin = headers.get("origin")
            if origin is not None and origin.split("://", 1)[-1].lower() != host.lower():
                return 403, "a request that changes state must come from the dashboard's own origin"
        return None


def _host_name(host: str) -> str:
    """The name part of a Host header: ``127.0.0.1:8000`` → ``127.0.0.1``, ``[::1]:8000`` → ``[::1]``."""
    host = host.lower()
    if host.startswith("["):
        return host.split("]", 1)[0] + "]"
    return host.rsplit(":", 1)[0] if ":" in host else host


async def _send_json(send: Send, status: int, body: object, *, bearer: bool) -> None:
    payload = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())]
    if bearer:
        headers.append((b"www-authenticate", b'Bearer realm="subagent-tracker"'))
    await send({"type": "http.response.start", "status": status, "headers": [*headers, *_SECURITY_HEADERS]})
    await send({"type": "http.response.body", "body": payload})
