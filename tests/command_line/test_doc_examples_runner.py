"""``scripts/run_doc_examples.py``: a block that needs an extra this interpreter lacks is skipped with the
extra and the command that adds it, and ``--strict`` (CI's) counts the skip as a failure; a block that hangs
is named."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "run_doc_examples.py"


@pytest.fixture
def runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location("run_doc_examples", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    ("code", "extra", "module"),
    [
        ("from pydantic_ai import Agent", "pydantic-ai", "pydantic_ai"),
        ("import agents", "openai-agents", "agents"),
        ("from subagent_tracker.integrations import strands", "strands", "strands"),
        ("from subagent_tracker.integrations.langgraph import tracked_astream", "langgraph", "langgraph"),
        ("from subagent_tracker.dashboard import app", "server", "starlette"),
    ],
)
def test_a_block_names_the_extra_it_lacks(
    runner: ModuleType, monkeypatch: pytest.MonkeyPatch, code: str, extra: str, module: str
) -> None:
    found = importlib.util.find_spec
    monkeypatch.setattr(
        runner.importlib.util, "find_spec", lambda name: None if name == module else found(name)
    )
    assert runner.missing_extra(code) == (extra, module)


def test_a_block_with_every_module_it_imports_lacks_nothing(runner: ModuleType) -> None:
    assert runner.missing_extra("import asyncio\nfrom subagent_tracker import Session") is None


def test_a_skip_says_how_to_add_the_extra_and_strict_fails_it(
    runner: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(runner, "missing_extra", lambda _code: ("strands", "strands"))
    assert runner.run_block("README.md", 12, "import strands", strict=False) is True
    shown = capsys.readouterr().out
    assert shown == (
        "README.md line 12: skipped: it needs the 'strands' extra (no module 'strands' here); add it with "
        "./scripts/add_extra.sh strands\n"
    )
    assert runner.run_block("README.md", 12, "import strands", strict=True) is False
    assert "skipped" in capsys.readouterr().err


def test_a_block_that_hangs_is_named(
    runner: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(runner, "TIMEOUT_SECONDS", 0.5)
    assert runner.run_block("docs/x.md", 40, "import time\ntime.sleep(30)", strict=True) is False
    assert capsys.readouterr().err == "docs/x.md line 40: the block ran longer than 0.5 s\n"
