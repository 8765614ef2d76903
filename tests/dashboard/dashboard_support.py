"""A live dashboard for the tests: uvicorn serving ``dashboard.app`` on 127.0.0.1 on a free port, in a thread
of its own, stopped by its owner; and a reader of its live stream."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from subagent_tracker._loopback import free_port
from subagent_tracker.dashboard import ACTION_HEADER, app

#: Where the browser tests leave their screenshots and figures.
ARTIFACTS = Path(__file__).resolve().parents[2] / "target" / "dashboard-artifacts"


class ServedDashboard:
    """``dashboard.app(registry, **settings)`` under uvicorn on 127.0.0.1."""

    def __init__(self, registry: Any, **settings: Any) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            app(registry, **settings), host="127.0.0.1", port=self.port, log_level="warning", lifespan="on"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=lambda: asyncio.run(self.server.serve()), daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "the dashboard did not start within 10 s"
            time.sleep(0.01)

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {ACTION_HEADER: "1"}
        if token is not None:
            headers["authorization"] = f"Bearer {token}"
        return httpx.Client(base_url=self.url, headers=headers, timeout=10)

    def stop(self) -> None:
        self.server.should_exit = True
        # A page's event stream stays open until the page closes: waiting for it would hold every stop for the
        # join's whole timeout.
        self.server.force_exit = True
        self.thread.join(10)


def stream_events(
    client: httpx.Client, path: str, until: Callable[[str, Any], bool], timeout: float = 10
) -> list[tuple[str, Any]]:
    """Reads the live stream at ``path`` until ``until(event, data)`` is true; returns every event read."""
    seen: list[tuple[str, Any]] = []
    deadline = time.monotonic() + timeout
    with client.stream("GET", path, timeout=timeout) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        for block in _blocks(response.iter_lines()):
            seen.append(block)
            if until(*block):
                return seen
            assert time.monotonic() < deadline, f"not seen within {timeout} s; saw {[e for e, _ in seen]}"
    raise AssertionError(f"the stream ended first; saw {[event for event, _ in seen]}")


def _blocks(lines: Iterator[str]) -> Iterator[tuple[str, Any]]:
    event, data = "message", None
    for line in lines:
        if line.startswith("event: "):
            event = line[len("event: ") :]
        elif line.startswith("data: "):
            data = json.loads(line[len("data: ") :])
        elif line == "" and data is not None:
            yield event, data
            event, data = "message", None
