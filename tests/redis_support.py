"""A real ``redis-server`` and worker processes for the Redis tests. The server runs on 127.0.0.1 on a free
port (without persistence, or with an append-only file for the restart tests) and is stopped by its owner."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

WORKER = Path(__file__).with_name("redis_worker.py")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class RedisServer:
    """A ``redis-server`` on 127.0.0.1, on a free port: with no persistence, or with an append-only file in
    ``aof_directory`` written before each answer."""

    def __init__(self, aof_directory: Path | None = None, port: int | None = None) -> None:
        self.port = port or _free_port()
        self.aof_directory = aof_directory
        persistence = (
            ["--appendonly", "no"]
            if aof_directory is None
            else ["--appendonly", "yes", "--appendfsync", "always", "--dir", str(aof_directory)]
        )
        command = [
            "redis-server",
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--save",
            "",
            *persistence,
        ]
        try:
            self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        except FileNotFoundError:
            pytest.fail(
                "redis-server is missing: ./scripts/check.sh installs it (Debian's redis-server package)"
            )
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.01)
        self.url = f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        self.process.kill()
        self.process.wait(timeout=10)

    def restart(self) -> RedisServer:
        """Kills the server (no shutdown save) and starts it again on its port, from its append-only file."""
        self.stop()
        return RedisServer(self.aof_directory, self.port)

    def signal(self, number: int) -> None:
        os.kill(self.process.pid, number)


class Worker:
    """Another OS process, a worker of the registry, driven by JSON commands."""

    def __init__(self, url: str, worker_id: str, lease: float | None = None) -> None:
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER), url, worker_id, *([] if lease is None else [str(lease)])],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._read() == {"ready": worker_id}

    def _read(self) -> Any:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, "the worker process died"
        return json.loads(line)

    def send(self, **command: object) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()

    def answer(self) -> Any:
        return self._read()["answer"]

    def ask(self, **command: object) -> Any:
        self.send(**command)
        return self.answer()

    def stop(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.close()
        self.process.wait(timeout=10)

    def signal(self, number: int) -> None:
        os.kill(self.process.pid, number)
