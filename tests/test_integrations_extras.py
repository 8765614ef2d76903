"""Each framework adapter is installed by an extra: importing it without its framework raises an
``ImportError`` that names the extra to install, and nothing half-imported is left behind."""

from __future__ import annotations

import importlib
import sys

import pytest

ADAPTERS = [
    ("pydantic_ai", "pydantic_ai", "pydantic-ai"),
    ("openai_agents", "agents", "openai-agents"),
    ("langgraph", "langgraph", "langgraph"),
    ("strands", "strands", "strands"),
]


@pytest.mark.parametrize(("adapter", "framework", "extra"), ADAPTERS)
def test_importing_an_adapter_without_its_framework_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, adapter: str, framework: str, extra: str
) -> None:
    module = f"subagent_tracker.integrations.{adapter}"
    for name in [name for name in sys.modules if name == framework or name.startswith(f"{framework}.")]:
        monkeypatch.delitem(sys.modules, name)
    # None in sys.modules makes every import of the framework fail, as if it were not installed.
    monkeypatch.setitem(sys.modules, framework, None)
    monkeypatch.delitem(sys.modules, module, raising=False)

    with pytest.raises(ImportError) as raised:
        importlib.import_module(module)

    assert f"pip install 'subagent-tracker[{extra}]'" in str(raised.value)
    assert module not in sys.modules


@pytest.mark.parametrize(("adapter", "framework", "extra"), ADAPTERS)
def test_an_adapter_imports_with_its_framework(adapter: str, framework: str, extra: str) -> None:
    module = importlib.import_module(f"subagent_tracker.integrations.{adapter}")
    assert module.__all__, f"{extra}: the adapter declares its public names"
    for name in module.__all__:
        assert getattr(module, name).__doc__, f"{name} is documented"
