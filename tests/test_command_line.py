"""The command line's first-contact errors: each is one line that says what to do, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest

import subagent_tracker.dashboard
from subagent_tracker import __main__ as command_line
from subagent_tracker._loopback import free_port


def test_help_lists_the_public_commands_and_nothing_hidden(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        command_line.main(["--help"])
    assert exited.value.code == 0
    shown = capsys.readouterr().out
    assert "{demo,serve}" in shown
    assert "SUPPRESS" not in shown and "_demo-worker" not in shown


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
    assert command_line._without_password(url) == shown


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
    assert "pip install 'subagent-tracker[server]'" in message
    assert "'uvicorn'" in message


def test_another_missing_module_is_not_blamed_on_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(*_: object, **__: object) -> None:
        raise ModuleNotFoundError("No module named 'elsewhere'", name="elsewhere")

    monkeypatch.setattr(command_line, "_run", missing)
    with pytest.raises(ModuleNotFoundError, match="elsewhere"):
        command_line.main(["serve"])
