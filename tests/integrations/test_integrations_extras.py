"""Each framework adapter is installed by an extra: importing it without its framework raises an
``ImportError`` that names the extra to install, and nothing half-imported is left behind. Every entry point
checks its ``timeout`` as the session would, when it is made, before any run could start a task."""

from __future__ import annotations

import asyncio
import importlib
import sys
from collections.abc import Callable
from typing import Any

import pytest

from subagent_tracker import Session

ADAPTERS = [
    ("pydantic_ai", "pydantic_ai", "pydantic-ai"),
    ("openai_agents", "agents", "openai-agents"),
    ("langgraph", "langgraph", "langgraph"),
    ("strands", "strands", "strands"),
    ("agno", "agno", "agno"),
    ("adk", "google.adk", "adk"),
    ("otel", "opentelemetry", "otel"),
    ("crewai", "crewai", "crewai"),
]
#: CrewAI's pins keep it out of the main environment: its adapter imports in .venv-crewai, where its own tests
#: check so.
INSTALLED_HERE = [adapter for adapter in ADAPTERS if adapter[0] != "crewai"]


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

    message = str(raised.value)
    assert message.splitlines() == [message]
    # The form that works from a clone comes first, each form labelled.
    assert f"from a clone, pip install '.[{extra}]'" in message
    assert f"./scripts/add_extra.sh {extra}" in message
    assert f"from the package index, pip install 'subagent-tracker[{extra}]'" in message
    assert message.index("from a clone") < message.index("from the package index")
    assert module not in sys.modules


@pytest.mark.parametrize(("adapter", "framework", "extra"), INSTALLED_HERE)
def test_an_adapter_imports_with_its_framework(adapter: str, framework: str, extra: str) -> None:
    module = importlib.import_module(f"subagent_tracker.integrations.{adapter}")
    assert module.__all__, f"{extra}: the adapter declares its public names"
    for name in module.__all__:
        assert getattr(module, name).__doc__, f"{name} is documented"


def _pydantic_ai(session: Session, timeout: Any) -> object:
    from subagent_tracker.integrations.pydantic_ai import SubagentTracking

    return SubagentTracking(session, timeout=timeout)


def _openai_tool(session: Session, timeout: Any) -> object:
    from openai_agents_fakes import scripted_agent, text_step

    from subagent_tracker.integrations.openai_agents import tracked_as_tool

    agent = scripted_agent("researcher", [text_step("never said")])
    return tracked_as_tool(agent, session, tool_name="research", tool_description="d", timeout=timeout)


def _openai_run(session: Session, timeout: Any) -> object:
    from openai_agents_fakes import scripted_agent, text_step

    from subagent_tracker.integrations.openai_agents import tracked_run_streamed

    agent = scripted_agent("talker", [text_step("never said")])

    async def call() -> object:
        return tracked_run_streamed(session, agent, "go", timeout=timeout)

    return asyncio.run(call())


def _langgraph_tool(session: Session, timeout: Any) -> object:
    from langgraph_fakes import agent_graph, scripted_model

    from subagent_tracker.integrations.langgraph import tracked_subgraph_tool

    graph = agent_graph(scripted_model(["never said"]))
    return tracked_subgraph_tool(graph, session, name="researcher", description="d", timeout=timeout)


def _langgraph_stream(session: Session, timeout: Any) -> object:
    from langgraph_fakes import agent_graph, scripted_model

    from subagent_tracker.integrations.langgraph import tracked_astream

    graph = agent_graph(scripted_model(["never said"]))
    # The call itself refuses it: nothing is iterated, so no run could have started.
    return tracked_astream(session, graph, {"messages": []}, timeout=timeout)


def _strands(session: Session, timeout: Any) -> object:
    from subagent_tracker.integrations.strands import SubagentHooks

    return SubagentHooks(session, timeout=timeout)


def _agno(session: Session, timeout: Any) -> object:
    from subagent_tracker.integrations.agno import SubagentCancellationManager

    return SubagentCancellationManager(session, timeout=timeout)


def _adk(session: Session, timeout: Any) -> object:
    from subagent_tracker.integrations.adk import SubagentTrackerPlugin

    return SubagentTrackerPlugin(session, timeout=timeout)


ENTRY_POINTS: dict[str, Callable[[Session, Any], object]] = {
    "pydantic_ai.SubagentTracking": _pydantic_ai,
    "openai_agents.tracked_as_tool": _openai_tool,
    "openai_agents.tracked_run_streamed": _openai_run,
    "langgraph.tracked_subgraph_tool": _langgraph_tool,
    "langgraph.tracked_astream": _langgraph_stream,
    "strands.SubagentHooks": _strands,
    "agno.SubagentCancellationManager": _agno,
    "adk.SubagentTrackerPlugin": _adk,
}


@pytest.mark.parametrize(("timeout", "error"), [(-1, ValueError), ("1", TypeError)])
@pytest.mark.parametrize("entry_point", list(ENTRY_POINTS))
def test_a_bad_timeout_is_refused_at_construction_before_any_task_starts(
    entry_point: str, timeout: Any, error: type[Exception]
) -> None:
    session = Session()
    with pytest.raises(error, match="timeout"):
        ENTRY_POINTS[entry_point](session, timeout)
    assert session.subagent_tasks() == []


@pytest.mark.parametrize(
    ("adapter", "framework", "distribution"),
    [("pydantic_ai", "pydantic_ai", "pydantic-ai"), ("adk", "google.adk", "google-adk")],
)
def test_an_adapter_whose_framework_needs_python_3_11_says_so_on_3_10(
    monkeypatch: pytest.MonkeyPatch, adapter: str, framework: str, distribution: str
) -> None:
    # The framework needs 3.11: on 3.10 its extra installs nothing, its import fails, the adapter says why.
    for name in [name for name in sys.modules if name == framework or name.startswith(f"{framework}.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, framework, None)
    monkeypatch.delitem(sys.modules, f"subagent_tracker.integrations.{adapter}", raising=False)
    monkeypatch.setattr(sys, "version_info", (3, 10, 14, "final", 0))

    with pytest.raises(
        ImportError, match=rf"needs Python 3\.11 or later, as {distribution} does \(this is Python 3\.10\)"
    ):
        importlib.import_module(f"subagent_tracker.integrations.{adapter}")
