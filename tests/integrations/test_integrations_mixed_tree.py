"""A tree that mixes frameworks: a pydantic-ai orchestrator whose tools run an OpenAI Agents subagent
(``tracked_as_tool``), a LangGraph subgraph (``tracked_subgraph_tool``) and an Agno agent (its runs tracked by
``SubagentCancellationManager``). The dashboard shows one tree, and cancelling the orchestrator there stops
the three subagents mid stream, with their partial output kept."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from agents import AgentToolStreamEvent, RawResponsesStreamEvent
from agents.tool_context import ToolContext
from agno.agent import Agent as AgnoAgent
from agno.run.cancel import get_cancellation_manager, set_cancellation_manager
from agno_fakes import SlowStreamingModel
from dashboard_support import ServedDashboard
from langgraph_fakes import agent_graph, scripted_model
from openai.types.responses import ResponseTextDeltaEvent
from openai_agents_fakes import scripted_agent, slow_text_step
from pydantic_ai import Agent
from pydantic_ai.exceptions import RunCancelled
from pydantic_ai_fakes import all_tool_results, calls_then_text, unanswered_tool_calls

from subagent_tracker import Registry, SubagentStatus
from subagent_tracker.integrations import cancelled_run_text
from subagent_tracker.integrations.agno import SubagentCancellationManager
from subagent_tracker.integrations.langgraph import tracked_subgraph_tool
from subagent_tracker.integrations.openai_agents import tracked_as_tool
from subagent_tracker.integrations.pydantic_ai import SubagentTracking

WORDS = [f"word{index}" for index in range(400)]
#: How many chunks each subagent streams before the cancel: well into its stream, far from its end.
CHUNKS_BEFORE_THE_CANCEL = 10


@pytest.fixture
def registry() -> Registry:
    return Registry()


@pytest.fixture
def served(registry: Registry) -> Iterator[ServedDashboard]:
    dashboard = ServedDashboard(registry, details=True)
    yield dashboard
    dashboard.stop()


@pytest.fixture
def agno_manager_restored() -> Iterator[None]:
    installed = get_cancellation_manager()
    yield
    set_cancellation_manager(installed)


@pytest.mark.usefixtures("agno_manager_restored")
def test_one_tree_across_four_frameworks_stops_from_the_dashboard(
    registry: Registry, served: ServedDashboard
) -> None:
    session = registry.session("mixed")
    openai_deltas = _TextDeltas()
    openai_tool = tracked_as_tool(
        scripted_agent("openai-researcher", [slow_text_step(WORDS, delay=0.01)]),
        session,
        tool_name="research",
        tool_description="Researches a question.",
        task_id="openai-researcher",
        on_stream=openai_deltas,
    )
    graph_model = scripted_model([" ".join(WORDS)], token_delay=0.01)
    graph = agent_graph(graph_model, name="graph-researcher")
    graph_tool = tracked_subgraph_tool(
        graph, session, name="graph_researcher", description="Researches too.", task_id="graph-researcher"
    )
    set_cancellation_manager(SubagentCancellationManager(session))
    agno_model = SlowStreamingModel(words=WORDS, delay=0.01)
    agno_researcher = AgnoAgent(name="agno-researcher", model=agno_model, telemetry=False)
    orchestrator = Agent(
        calls_then_text([("ask_openai", {}), ("ask_graph", {}), ("ask_agno", {})]),
        name="orchestrator",
        capabilities=[SubagentTracking(session, task_id="orchestrator")],
    )

    @orchestrator.tool_plain
    async def ask_openai() -> str:
        arguments = json.dumps({"input": "what is new?"})
        context = ToolContext(
            context=None, tool_name=openai_tool.name, tool_call_id="openai-1", tool_arguments=arguments
        )
        return str(await openai_tool.on_invoke_tool(context, arguments))

    @orchestrator.tool_plain
    async def ask_graph() -> str:
        return str(await graph_tool.ainvoke({"input": "what else?"}))

    @orchestrator.tool_plain
    async def ask_agno() -> str:
        output: Any = None
        stream = agno_researcher.arun("and what else?", run_id="agno-researcher", stream=True)
        async for event in stream:
            output = event
        return str(output)

    async def run() -> RunCancelled:
        running = asyncio.ensure_future(orchestrator.run("research everything"))
        await _streaming(
            session,
            ("openai-researcher", "graph-researcher", "agno-researcher"),
            lambda: (
                min(openai_deltas.count, graph_model.chunks_streamed, agno_model.streamed)
                >= CHUNKS_BEFORE_THE_CANCEL
            ),
        )
        tree = await asyncio.to_thread(_cancel_root_from_the_dashboard, served)
        assert tree == {
            "orchestrator": (None, "orchestrator"),
            "openai-researcher": ("orchestrator", "openai-researcher"),
            "graph-researcher": ("orchestrator", "graph_researcher"),
            "agno-researcher": ("orchestrator", "agno-researcher"),
        }
        with pytest.raises(RunCancelled) as raised:
            await asyncio.wait_for(running, 5)
        return raised.value

    cancelled = asyncio.run(run())

    for task_id in ("orchestrator", "openai-researcher", "graph-researcher", "agno-researcher"):
        task = session.subagent_task(task_id)
        assert task is not None and task.status == SubagentStatus.CANCELLED, task_id
        assert task.cancel_reason == "stop the whole tree"
    for task_id in ("openai-researcher", "graph-researcher", "agno-researcher"):
        task = session.subagent_task(task_id)
        assert task is not None and task.cancel_cause == "parent"
        partial = str(task.result)
        assert partial.startswith("word0 word1"), f"{task_id} keeps its partial output: {partial!r}"
        assert "word399" not in partial, f"{task_id} was stopped mid stream"
    history = cancelled.all_messages()
    assert unanswered_tool_calls(history) == []
    answers = {part.tool_name: str(part.content) for part in all_tool_results(history).values()}
    assert set(answers) == {"ask_openai", "ask_graph", "ask_agno"}
    # Each call is answered with its subagent's reason and partial output, though the orchestrator's own
    # cancel tore the calls down and neither subagent's framework answered them.
    for tool_name, task_id, agent in (
        ("ask_openai", "openai-researcher", "openai-researcher"),
        ("ask_graph", "graph-researcher", "graph_researcher"),
        ("ask_agno", "agno-researcher", "agno-researcher"),
    ):
        task = session.subagent_task(task_id)
        assert task is not None
        text = cancelled_run_text(
            agent=agent, task_id=task_id, reason="stop the whole tree", partial=task.result
        )
        assert answers[tool_name] == text, (tool_name, answers[tool_name])
    assert session.pending_subagent_tasks() == []


class _TextDeltas:
    """The OpenAI subagent's ``on_stream``: counts the text deltas its model has streamed."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, payload: AgentToolStreamEvent) -> None:
        event = payload["event"]
        if isinstance(event, RawResponsesStreamEvent) and isinstance(event.data, ResponseTextDeltaEvent):
            self.count += 1


async def _streaming(session: Any, task_ids: tuple[str, ...], streamed_enough: Callable[[], bool]) -> None:
    """Waits until every subagent's task runs and each has streamed some of its answer (a bounded wait)."""
    deadline = time.monotonic() + 10
    while True:
        tasks = [session.subagent_task(task_id) for task_id in task_ids]
        running = all(task is not None and task.status == SubagentStatus.RUNNING for task in tasks)
        if running and streamed_enough():
            return
        assert time.monotonic() < deadline, "the subagents did not start streaming within 10 s"
        await asyncio.sleep(0.01)


def _cancel_root_from_the_dashboard(served: ServedDashboard) -> dict[str, tuple[str | None, str | None]]:
    """Reads the tree as the dashboard shows it, then cancels its root there, as a user pressing stop."""
    with served.client() as client:
        listed = client.get("/api/sessions/mixed/tasks").json()["tasks"]
        assert client.get("/api/sessions/mixed/tasks/orchestrator/subtree").json() == {"pending": 4}
        answer = client.post(
            "/api/sessions/mixed/tasks/orchestrator/cancel", json={"reason": "stop the whole tree"}
        )
        assert answer.json() == {"cancelled": True}
    return {task["task_id"]: (task["parent_id"], task["agent"]) for task in listed}
