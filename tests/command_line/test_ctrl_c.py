"""Ctrl-C stops every command at once: the demo cancels its session through the library, with a reason its
last lines show, the dashboard closes with its pages' streams open, and nothing prints a traceback. Each case
sends SIGINT to a real child process; the bound on the time to exit is looser than the 1 s aimed at (shared
cores)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import httpx
import pytest

#: The longest a command may take to exit after Ctrl-C here: 1 s is the aim, on cores other tests share.
EXIT_BOUND_SECONDS = 5.0
pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child is a POSIX signal")


@dataclass
class Stopped:
    status: int
    output: str
    errors: str
    seconds: float


class Command:
    """``python -m subagent_tracker ...`` in a child process, read line by line until Ctrl-C is sent."""

    def __init__(self, *arguments: str) -> None:
        # A session of its own, whose process group plays the terminal's: Ctrl-C at a terminal signals the
        # whole foreground group, the command's own children included.
        self.process = subprocess.Popen(
            [sys.executable, "-m", "subagent_tracker", *arguments],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.lines: list[str] = []

    def wait_for(self, text: str, timeout: float = 60) -> str:
        """Reads lines until one holds ``text``; returns it."""
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.process.stdout.readline()
            if not line:
                raise AssertionError(f"the command ended first: {''.join(self.lines)}{self.errors()}")
            self.lines.append(line)
            if text in line:
                return line
        raise AssertionError(f"no line with {text!r} within {timeout} s: {''.join(self.lines)}")

    def errors(self) -> str:
        assert self.process.stderr is not None
        return self.process.stderr.read() if self.process.poll() is not None else ""

    def ctrl_c(self) -> Stopped:
        sent = time.monotonic()
        os.killpg(self.process.pid, signal.SIGINT)
        try:
            output, errors = self.process.communicate(timeout=30)
        finally:
            self.process.kill()
        return Stopped(self.process.returncode, "".join(self.lines) + output, errors, time.monotonic() - sent)


def assert_stopped_cleanly(stopped: Stopped) -> None:
    assert stopped.status == 130, stopped.output + stopped.errors
    assert "Traceback" not in stopped.output + stopped.errors
    assert stopped.errors == "", stopped.errors
    assert stopped.seconds < EXIT_BOUND_SECONDS


def assert_the_session_was_cancelled(stopped: Stopped) -> None:
    assert "Ctrl-C: cancelled the session" in stopped.output
    last = stopped.output.strip().splitlines()[-2:]
    assert last == [
        "  every task finished: yes",
        '  stopped by Ctrl-C: the session was cancelled with reason "stopped by Ctrl-C"',
    ], last


def test_the_demo_cancels_its_session_on_ctrl_c() -> None:
    demo = Command("demo", "--plain")
    demo.wait_for("fanned out")
    stopped = demo.ctrl_c()
    assert_stopped_cleanly(stopped)
    assert_the_session_was_cancelled(stopped)
    cancelled = re.search(r"cancelled\s+(\d+)", stopped.output.split("summary")[1])
    assert cancelled is not None and int(cancelled.group(1)) > 100


def test_the_web_demo_stops_on_ctrl_c_before_it_starts() -> None:
    demo = Command("demo", "--web", "--start-wait", "60")
    demo.wait_for("the demo starts when the page connects")
    stopped = demo.ctrl_c()
    assert_stopped_cleanly(stopped)
    assert "stopped by Ctrl-C before the demo started" in stopped.output


def test_the_web_demo_cancels_its_session_on_ctrl_c_with_a_page_open() -> None:
    demo = Command("demo", "--web", "--start-wait", "60")
    address = demo.wait_for("dashboard: http://").split()[1]
    page_stream = threading.Thread(target=read_the_stream_until_it_ends, args=(address,), daemon=True)
    page_stream.start()
    demo.wait_for("fanned out")
    stopped = demo.ctrl_c()
    assert_stopped_cleanly(stopped)
    assert_the_session_was_cancelled(stopped)
    page_stream.join(EXIT_BOUND_SECONDS)
    assert not page_stream.is_alive(), "the page's stream stayed open"


def test_the_web_demo_closes_its_dashboard_on_ctrl_c_after_the_demo() -> None:
    demo = Command("demo", "--web", "--start-wait", "0", "--speed", "20", "--subagents", "20")
    demo.wait_for("the dashboard stays up until Ctrl-C")
    stopped = demo.ctrl_c()
    assert_stopped_cleanly(stopped)
    assert stopped.output.strip().splitlines()[-1] == "stopped by Ctrl-C: the dashboard is closed"


def test_serve_announces_the_port_it_bound_and_stops_on_ctrl_c_with_a_page_open() -> None:
    serve = Command("serve", "--port", "0")
    announced = serve.wait_for("subagent-tracker dashboard: http://")
    address = announced.split()[2]
    port = int(address.rstrip("/").rsplit(":", 1)[1])
    assert port != 0
    assert httpx.get(address, timeout=10).status_code == 200
    page_stream = threading.Thread(target=read_the_stream_until_it_ends, args=(address,), daemon=True)
    page_stream.start()
    time.sleep(0.3)
    stopped = serve.ctrl_c()
    assert_stopped_cleanly(stopped)
    page_stream.join(EXIT_BOUND_SECONDS)
    assert not page_stream.is_alive(), "the page's stream stayed open"
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_the_multi_process_demo_cancels_its_session_and_stops_its_workers_and_redis_on_ctrl_c() -> None:
    demo = Command("demo", "--workers", "2")
    started = demo.wait_for("started a redis-server of its own at redis://")
    redis_port = int(started.split("redis://127.0.0.1:")[1].split("/")[0])
    demo.wait_for("cancel a running subagent by id")
    stopped = demo.ctrl_c()
    assert_stopped_cleanly(stopped)
    last = stopped.output.strip().splitlines()[-1]
    assert "stopped by Ctrl-C: cancelled the session" in last and 'with reason "stopped by Ctrl-C"' in last
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", redis_port), timeout=1).close()


def test_serve_stops_on_ctrl_c_while_it_connects_to_a_silent_redis() -> None:
    """A Redis that accepts the connection and never answers: the connect waits for its timeout, and Ctrl-C
    stops it at once."""
    with socket.create_server(("127.0.0.1", 0)) as silent:
        serve = Command("serve", "--port", "0", "--redis", f"redis://127.0.0.1:{silent.getsockname()[1]}/0")
        time.sleep(1.0)
        stopped = serve.ctrl_c()
    assert stopped.status == 130, stopped.output + stopped.errors
    assert stopped.errors == "python -m subagent_tracker serve: stopped by Ctrl-C\n"
    assert stopped.seconds < EXIT_BOUND_SECONDS


def read_the_stream_until_it_ends(address: str) -> None:
    """A page's live stream: read until the server ends it."""
    with httpx.Client(base_url=address, timeout=30) as client, client.stream("GET", "api/stream") as stream:
        assert stream.status_code == 200
        for _ in stream.iter_lines():
            pass
