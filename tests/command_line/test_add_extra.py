"""``scripts/add_extra.sh``: adds extras to the ``.venv`` that ``demo.sh`` made, from the installed package's
own metadata, without rebuilding; a name that is not an extra is refused with the list of those there are."""

from __future__ import annotations

import hashlib
import importlib.util
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def add_extra(*extras: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ROOT / "scripts" / "add_extra.sh"), *extras],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_an_extra_the_venv_has_is_added_again_without_a_build() -> None:
    extension = Path(importlib.util.find_spec("subagent_tracker._native").origin or "")  # type: ignore[union-attr]
    before = hashlib.sha256(extension.read_bytes()).hexdigest()
    added = add_extra("server")
    assert added.returncode == 0, added.stderr
    assert added.stdout == "added to .venv: server\n"
    assert hashlib.sha256(extension.read_bytes()).hexdigest() == before, "the extension was rebuilt"


def test_a_name_that_is_no_extra_is_refused_with_the_extras_there_are() -> None:
    refused = add_extra("server", "pydantic_ai")
    assert refused.returncode == 2
    assert refused.stderr.startswith("add_extra.sh: no extra 'pydantic_ai': the extras are: ")
    for extra in ("server", "pydantic-ai", "openai-agents", "langgraph", "strands"):
        assert extra in refused.stderr


def test_no_extra_is_a_usage_line() -> None:
    refused = add_extra()
    assert refused.returncode == 2
    assert refused.stderr.startswith("usage: ./scripts/add_extra.sh EXTRA...")
