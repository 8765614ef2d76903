"""A real HTTP client against the real SSE example server on loopback: a disconnect cancels the subagent."""

from __future__ import annotations

import asyncio
import importlib.util
import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import httpx
import pytest
import uvicorn

from subagent_tracker import SubagentStatus


def _load_example() -> ModuleType:
    path = Path(__file__).parents[2] / "examples" / "sse_server.py"
    spec = importlib.util.spec_from_file_location("sse_server_example", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[ModuleType, str]]:
    example = _load_example()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = uvicorn.Config(example.app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    uvicorn_server = uvicorn.Server(config)
    thread = threading.Thread(target=lambda: asyncio.run(uvicorn_server.serve()), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not uvicorn_server.started:
        assert time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    yield example, f"http://127.0.0.1:{port}"
    uvicorn_server.should_exit = True
    thread.join(timeout=10)


def _wait_finished(example: ModuleType, task_id: str) -> object:
    deadline = time.monotonic() + 10
    while True:
        task = example.session.subagent_task(task_id)
        if task is not None and task.finished:
            return task
        assert time.monotonic() < deadline, f"task {task_id} did not finish: {task}"
        time.sleep(0.01)


def _disconnect_mid_stream(base_url: str, task_id: str) -> None:
    received = []
    with httpx.Client(timeout=10) as client:
        with client.stream("GET", f"{base_url}/agents/{task_id}/stream?words=200&delay=0.02") as response:
            assert response.status_code == 200
            for line in response.iter_lines():
                if line.startswith("data: "):
                    received.append(line)
                if len(received) == 3:
                    break  # leaving the block closes the connection mid-stream


def test_a_client_disconnect_mid_stream_cancels_the_task_and_keeps_the_partial_output(
    server: tuple[ModuleType, str],
) -> None:
    example, base_url = server
    _disconnect_mid_stream(base_url, "mid-stream")
    task = _wait_finished(example, "mid-stream")
    assert task.status is SubagentStatus.CANCELLED  # type: ignore[attr-defined]
    assert task.cancel_reason == "client disconnected"  # type: ignore[attr-defined]
    assert task.result.startswith("Subagents stream their ")  # type: ignore[attr-defined]


def test_a_client_disconnect_during_silence_still_cancels(server: tuple[ModuleType, str]) -> None:
    example, base_url = server
    with httpx.Client(timeout=10) as client:
        with client.stream("GET", f"{base_url}/agents/silent/stream?words=2&delay=0.01") as response:
            # range first: zip stops on it before pulling a fifth line that will never come.
            lines = [line for _, line in zip(range(4), response.iter_lines(), strict=False)]
            assert sum(line.startswith("data: ") for line in lines) == 2
            time.sleep(0.1)  # the model has gone silent; no write would reveal the disconnect
    task = _wait_finished(example, "silent")
    assert task.status is SubagentStatus.CANCELLED  # type: ignore[attr-defined]
    assert task.result == "Subagents stream "  # type: ignore[attr-defined]


def test_the_snapshot_endpoint_reports_tasks(server: tuple[ModuleType, str]) -> None:
    example, base_url = server
    assert httpx.get(f"{base_url}/agents/unknown", timeout=10).status_code == 404
    # A task of its own: under xdist this test may run in a process where no other test made one.
    _disconnect_mid_stream(base_url, "snapshot")
    _wait_finished(example, "snapshot")
    body = httpx.get(f"{base_url}/agents/snapshot", timeout=10).json()
    assert body["status"] == "cancelled" and body["cancel_cause"] == "requested" and body["finished"]
