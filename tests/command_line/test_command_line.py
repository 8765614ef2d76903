"""The command line's first-contact errors: each is one line that says what to do, never a traceback."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading

import pytest

import subagent_tracker.dashboard
from subagent_tracker import __main__ as command_line
from subagent_tracker._command_errors import without_password
from subagent_tracker._loopback import free_port


def run(*arguments: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "subagent_tracker", *arguments],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def one_line(finished: subprocess.CompletedProcess[str]) -> str:
    """The one line a command printed on stderr, after checking it printed nothing else."""
    assert "Traceback" not in finished.stderr, finished.stderr
    lines = finished.stderr.strip().splitlines()
    assert len(lines) == 1, finished.stderr
    return lines[0]


@pytest.mark.parametrize("command", [[], ["demo"], ["serve"]], ids=["top", "demo", "serve"])
def test_help_lists_the_public_commands_and_the_exit_statuses(
    command: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        command_line.main([*command, "--help"])
    assert exited.value.code == 0
    shown = " ".join(capsys.readouterr().out.split())
    if not command:
        assert "{demo,serve}" in shown
    assert "SUPPRESS" not in shown and "_demo-worker" not in shown
    assert "exit status: 0 done; 1 failed while running" in shown
    assert "2 a usage mistake" in shown and "130 stopped by Ctrl-C" in shown


def test_serve_help_says_what_it_shows_without_redis(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        command_line.main(["serve", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    assert "Without --redis it shows an in-memory registry of its own" in shown
    assert "give --redis URL" in shown


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (
            ["demo", "--workers", "2", "--redis", "not a url"],
            '"not a url" is not a Redis URL: expected redis://',
        ),
        (["serve", "--redis", "bogus"], '"bogus" is not a Redis URL'),
        (["serve", "--port", "99999"], "--port: expected a whole number from 0 to 65535, got '99999'"),
        (["serve", "--port", "http"], "--port: expected a whole number from 0 to 65535, got 'http'"),
        (["serve", "--host", "0.0.0.0"], "refusing to serve the dashboard on 0.0.0.0 without a token"),
        (["demo", "--workers", "0"], "--workers: expected a whole number from 2 to 64, got '0'"),
        (["demo", "--workers", "1"], "--workers: expected a whole number from 2 to 64, got '1'"),
        (["demo", "--subagents", "5"], "--subagents: expected a whole number from 10 to 100000, got '5'"),
        (["demo", "--speed", "0"], "--speed: expected a number above 0 and at most 100, got '0'"),
        (["demo", "--speed", "nan"], "--speed: expected a number above 0 and at most 100, got 'nan'"),
        (["demo", "--speed", "9" * 400], "number above 0 and at most 100, got '99999999…"),
        (["demo", "--subagents", "9" * 5000], "got '99999999…9999 (5000 characters)'"),
        (["demo", "--seed", "-" + "9" * 5000], "--seed: expected a whole number from"),
        (["demo", "--redis", "redis://127.0.0.1:6379/0"], "--redis is the Redis of --workers"),
        (["demo", "--web", "--workers", "2"], "--web runs the in-memory demo"),
        (["demo", "--workers", "2", "--subagents", "500"], "--workers runs at most 200 subagents, got 500"),
        (["demo", "--port", "8000"], "--port goes with --web"),
        (["demo", "--linger", "1"], "--linger goes with --web"),
        (["demo", "--start-wait", "1"], "--start-wait goes with --web"),
        (["demo", "--bogus"], "unrecognized arguments: --bogus"),
        (["deploy"], "invalid choice: 'deploy' (choose from 'demo', 'serve')"),
        (["_demo-worker"], "invalid choice: '_demo-worker' (choose from 'demo', 'serve')"),
    ],
)
def test_a_usage_mistake_is_one_line_with_status_2(arguments: list[str], expected: str) -> None:
    finished = run(*arguments)
    assert finished.returncode == 2, finished.stderr
    assert finished.stdout == ""
    line = one_line(finished)
    assert line.startswith("python -m subagent_tracker"), line
    assert expected in line
    assert "_demo-worker" not in line.replace("'_demo-worker' (choose", "")


def test_a_server_that_does_not_speak_redis_is_one_line() -> None:
    with socket.create_server(("127.0.0.1", 0)) as listener:

        def answer_as_http() -> None:
            with contextlib.suppress(OSError):
                for _ in range(4):
                    connection, _ = listener.accept()
                    with connection:
                        connection.sendall(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n<html>\n")

        threading.Thread(target=answer_as_http, daemon=True).start()
        port = listener.getsockname()[1]
        finished = run("serve", "--port", "0", "--redis", f"redis://127.0.0.1:{port}/0")
    assert finished.returncode == 2
    assert "does not speak Redis's protocol" in one_line(finished)


@pytest.mark.parametrize("command", [["serve"], ["demo", "--web"]], ids=["serve", "demo-web"])
def test_a_port_in_use_is_one_line_with_status_1(command: list[str]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        finished = run(*command, "--port", str(port))
    assert finished.returncode == 1
    expected = f"cannot serve the dashboard on 127.0.0.1:{port}: the port is in use"
    assert one_line(finished) == f"python -m subagent_tracker {command[0]}: {expected}"


@pytest.mark.parametrize(
    "arguments",
    [["serve", "--redis"], ["demo", "--workers", "3", "--redis"]],
    ids=["serve", "demo-workers"],
)
def test_an_unreachable_redis_is_one_line_that_names_its_url(arguments: list[str]) -> None:
    # Nothing listens on a port just found free: the connection is refused at once.
    url = f"redis://127.0.0.1:{free_port()}/0"
    finished = subprocess.run(
        [sys.executable, "-m", "subagent_tracker", *arguments, url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert finished.returncode == 1
    assert finished.stdout == ""
    lines = finished.stderr.strip().splitlines()
    assert len(lines) == 1, finished.stderr
    assert f"cannot reach Redis at {url}" in lines[0]
    assert "Traceback" not in finished.stderr


def test_the_unreachable_url_is_shown_without_its_password() -> None:
    url = f"redis://:hunter2@127.0.0.1:{free_port()}/0"
    finished = subprocess.run(
        [sys.executable, "-m", "subagent_tracker", "serve", "--redis", url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert finished.returncode == 1
    assert "hunter2" not in finished.stderr
    assert "cannot reach Redis at redis://:***@127.0.0.1:" in finished.stderr


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("redis://user:pw@host/0?protocol=resp3", "redis://user:***@host/0?protocol=resp3"),
        ("unix:///run/redis.sock?db=1&pass=secret", "unix:///run/redis.sock?db=1&pass=***"),
        ("redis+unix:///s?password=p&db=2", "redis+unix:///s?password=***&db=2"),
    ],
)
def test_a_shown_url_keeps_everything_but_its_passwords(url: str, shown: str) -> None:
    assert without_password(url) == shown


def test_a_missing_server_extra_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # As if the extra were not installed: importing uvicorn fails, and the dashboard's server module is
    # imported afresh.
    monkeypatch.setitem(sys.modules, "uvicorn", None)
    monkeypatch.delitem(sys.modules, "subagent_tracker.dashboard._serve", raising=False)
    monkeypatch.delattr(subagent_tracker.dashboard, "_serve", raising=False)
    with pytest.raises(SystemExit) as exited:
        command_line.main(["serve", "--port", str(free_port())])
    assert exited.value.code == 1
    message = capsys.readouterr().err.strip()
    assert message.splitlines() == [message]
    assert "from a clone, pip install '.[server]'" in message
    assert "./scripts/add_extra.sh server" in message
    assert "from the package index, pip install 'subagent-tracker[server]'" in message
    assert "'uvicorn'" in message


def test_another_missing_module_is_not_blamed_on_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(*_: object, **__: object) -> None:
        raise ModuleNotFoundError("No module named 'elsewhere'", name="elsewhere")

    monkeypatch.setattr(command_line, "_run", missing)
    with pytest.raises(ModuleNotFoundError, match="elsewhere"):
        command_line.main(["serve"])
