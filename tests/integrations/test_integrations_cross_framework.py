"""A subagent of one framework run by a tool of another's orchestrator, cancelled by id mid stream, answers
the tool call with its reason and partial output (``cancelled_run_text``), and the orchestrator's run goes
on: every ordered pair of the six frameworks (docs/integrations.md). The regression test of a defect a
hostile run found: a Strands subagent under a pydantic-ai tool returned Strands' generic "Cancelled by user",
and five more pairs lost the report too. An OpenAI Agents orchestrator run with ``tracked_run_streamed``
answers for its function tools itself; a LangGraph or Agno tool opts in with ``answers_for_subagents``, since
no adapter reaches a graph's or an Agno agent's tools."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import AsyncIterable, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from subagent_tracker import Session, SubagentStatus
from subagent_tracker.integrations import answers_for_subagents, cancelled_run_text

# Each framework is imported by the functions that build its agents: the frameworks tested are those of the
# environment the test runs in (CrewAI's pins keep it out of the main one).
pytestmark = pytest.mark.timeout(60)


#: The frameworks of the main environment; ``.venv-crewai`` names its own in ``SUBAGENT_TRACKER_FRAMEWORKS``.
MAIN_ENVIRONMENT = "pydantic_ai,openai_agents,langgraph,strands,agno,adk"
FRAMEWORKS = os.environ.get("SUBAGENT_TRACKER_FRAMEWORKS", MAIN_ENVIRONMENT).split(",")
PAIRS = [(x, y) for x in FRAMEWORKS for y in FRAMEWORKS if x != y]


@pytest.fixture(autouse=True)
def _agno_manager_restored() -> Iterator[None]:
    """Agno's manager is the process's: each test that installs one gives Agno its own back after."""
    if "agno" not in FRAMEWORKS:
        yield
        return
    from agno.run.cancel import get_cancellation_manager, set_cancellation_manager

    installed = get_cancellation_manager()
    yield
    set_cancellation_manager(installed)


WORDS = [f"w{index}" for index in range(300)]
DELAY = 0.01  # 300 words x 10 ms = 3 s: only the cancel ends the subagent within the test
CHUNKS_BEFORE_THE_CANCEL = 5
REASON = "stop the sub"
SUB = "sub"  # the subagent's task id, and its agent name as the tracker records it


# --- subagents (Y): a coroutine that runs the subagent and returns its output, and a streaming counter ------


@dataclass
class Subagent:
    ask: Callable[[], Awaitable[str]]
    chunks: Callable[[], int]


def pydantic_ai_subagent(session: Session) -> Subagent:
    from pydantic_ai import Agent as PydanticAgent
    from pydantic_ai_fakes import slow_text

    from subagent_tracker.integrations.pydantic_ai import SubagentTracking

    streamed = [0]
    sub = PydanticAgent(
        slow_text(len(WORDS), delay=DELAY, prefix="w", streamed=lambda n: streamed.__setitem__(0, n)),
        name=SUB,
        capabilities=[SubagentTracking(session, task_id=SUB)],
    )

    async def drain(_ctx: Any, events: AsyncIterable[Any]) -> None:
        async for _ in events:
            pass

    async def ask() -> str:
        # raises pydantic_ai.exceptions.RunCancelled when cancelled
        return (await sub.run("research", event_stream_handler=drain)).output

    return Subagent(ask, lambda: streamed[0])


def openai_agents_subagent(session: Session) -> Subagent:
    from agents import AgentToolStreamEvent, RawResponsesStreamEvent
    from agents.tool_context import ToolContext
    from openai.types.responses import ResponseTextDeltaEvent
    from openai_agents_fakes import scripted_agent, slow_text_step

    from subagent_tracker.integrations.openai_agents import tracked_as_tool

    deltas = [0]

    def count(payload: AgentToolStreamEvent) -> None:
        event = payload["event"]
        if isinstance(event, RawResponsesStreamEvent) and isinstance(event.data, ResponseTextDeltaEvent):
            deltas[0] += 1

    sub_tool = tracked_as_tool(
        scripted_agent(SUB, [slow_text_step(WORDS, delay=DELAY)]),
        session,
        tool_name=SUB,
        tool_description="Researches.",
        task_id=SUB,
        on_stream=count,
    )

    async def ask() -> str:
        arguments = json.dumps({"input": "research"})
        context = ToolContext(context=None, tool_name=SUB, tool_call_id="sub-1", tool_arguments=arguments)
        return str(await sub_tool.on_invoke_tool(context, arguments))

    return Subagent(ask, lambda: deltas[0])


def langgraph_subagent(session: Session) -> Subagent:
    from langgraph_fakes import agent_graph, scripted_model

    from subagent_tracker.integrations.langgraph import tracked_subgraph_tool

    model = scripted_model([" ".join(WORDS)], token_delay=DELAY)
    sub_tool = tracked_subgraph_tool(
        agent_graph(model, name=SUB), session, name=SUB, description="Researches.", task_id=SUB
    )

    async def ask() -> str:
        return str(await sub_tool.ainvoke({"input": "research"}))

    return Subagent(ask, lambda: model.chunks_streamed)


def strands_subagent(session: Session) -> Subagent:
    from strands import Agent as StrandsAgent
    from strands_fakes import Reply, ScriptedModel

    from subagent_tracker.integrations.strands import SubagentHooks

    model = ScriptedModel([Reply(" ".join(WORDS), chunk_delay=DELAY)])
    sub = StrandsAgent(
        model=model, name=SUB, hooks=[SubagentHooks(session, task_id=SUB)], callback_handler=None
    )

    async def ask() -> str:
        # returns normally, stop_reason "cancelled", when cancelled
        return str(await sub.invoke_async("research"))

    return Subagent(ask, lambda: model.text_chunks)


def agno_subagent(session: Session) -> Subagent:
    from agno.agent import Agent as AgnoAgent
    from agno.run.cancel import set_cancellation_manager
    from agno_fakes import SlowStreamingModel

    from subagent_tracker.integrations.agno import SubagentCancellationManager

    set_cancellation_manager(SubagentCancellationManager(session))
    model = SlowStreamingModel(words=WORDS, delay=DELAY)
    sub = AgnoAgent(name=SUB, model=model, telemetry=False)

    async def ask() -> str:
        # a delegated run that ends cancelled answers with cancelled_run_text itself
        output: Any = None
        async for event in sub.arun("research", run_id=SUB, stream=True, yield_run_output=True):
            output = event
        return str(output.content)

    return Subagent(ask, lambda: model.streamed)


async def _adk_run(agent: Any, plugin: Any) -> list[Any]:
    """Runs ADK's ``agent`` as an app of its own, with ``plugin``, on one message; the events of its saved
    session."""
    from google.adk.apps import App
    from google.adk.runners import Runner
    from google.adk.sessions import InMemorySessionService
    from google.genai import types as adk_types

    app = App(name="cross_framework", root_agent=agent, plugins=[plugin])
    service = InMemorySessionService()
    created = await service.create_session(app_name=app.name, user_id="user")
    message = adk_types.Content(role="user", parts=[adk_types.Part.from_text(text="go")])
    async for _ in Runner(app=app, session_service=service).run_async(
        user_id="user", session_id=created.id, new_message=message
    ):
        pass
    saved = await service.get_session(app_name=app.name, user_id="user", session_id=created.id)
    assert saved is not None
    return list(saved.events)


def adk_subagent(session: Session) -> Subagent:
    from adk_fakes import SlowStreamingLlm
    from google.adk.agents import LlmAgent

    from subagent_tracker.integrations.adk import SubagentTrackerPlugin

    model = SlowStreamingLlm(words=WORDS, delay=DELAY)
    sub = LlmAgent(name=SUB, model=model)

    async def ask() -> str:
        # an aborted run ends normally, its last text the answer: the run reports its cancel itself
        events = await _adk_run(sub, SubagentTrackerPlugin(session, task_id=SUB))
        texts = [
            part.text for event in events if event.content for part in event.content.parts or [] if part.text
        ]
        return texts[-1] if texts else ""

    return Subagent(ask, lambda: model.streamed)


def crewai_subagent(session: Session) -> Subagent:
    from crewai.tools import tool as crewai_tool
    from crewai_fakes import crew_of

    from subagent_tracker.integrations.crewai import tracked_kickoff_async

    # CrewAI stops between steps, not mid stream: a first task answers the first words (the partial output a
    # cancel keeps), and a second ticks through the rest, one tool call a word.
    ticks = [0]

    @crewai_tool("tick")  # type: ignore[untyped-decorator,unused-ignore]  # typed where CrewAI is installed
    def tick(word: str) -> str:
        """Writes one word."""
        time.sleep(DELAY)
        ticks[0] += 1
        return word

    first = " ".join(WORDS[:CHUNKS_BEFORE_THE_CANCEL])
    rest: list[Any] = [("tick", {"word": word}) for word in WORDS[CHUNKS_BEFORE_THE_CANCEL:]]
    crew = crew_of(SUB, ("opener", [first], []), ("writer", [*rest, " ".join(WORDS)], [tick]))

    async def ask() -> str:
        # raises TaskCancelledError when cancelled
        return str((await tracked_kickoff_async(session, crew, task_id=SUB)).raw)

    return Subagent(ask, lambda: CHUNKS_BEFORE_THE_CANCEL + ticks[0] if ticks[0] else 0)


SUBAGENTS: dict[str, Callable[[Session], Subagent]] = {
    "pydantic_ai": pydantic_ai_subagent,
    "openai_agents": openai_agents_subagent,
    "langgraph": langgraph_subagent,
    "strands": strands_subagent,
    "agno": agno_subagent,
    "adk": adk_subagent,
    "crewai": crewai_subagent,
}

# --- orchestrators (X): one tool, "ask", whose body is ``ask``; returns the text that answers its call -----

Orchestrator = Callable[[Session, Callable[[], Awaitable[str]]], Awaitable[str]]


async def pydantic_ai_orchestrator(session: Session, ask: Callable[[], Awaitable[str]]) -> str:
    from pydantic_ai import Agent as PydanticAgent
    from pydantic_ai_fakes import all_tool_results, calls_then_text

    from subagent_tracker.integrations.pydantic_ai import SubagentTracking

    orchestrator = PydanticAgent(
        calls_then_text([("ask", {})]),
        name="orchestrator",
        capabilities=[SubagentTracking(session, task_id="orchestrator")],
    )

    @orchestrator.tool_plain(name="ask")
    async def ask_tool() -> str:
        return await ask()

    result = await orchestrator.run("go")
    answer = str(all_tool_results(result.all_messages())["call-0"].content)
    assert result.output == f"ask: {answer}", "the orchestrator's model read the answer and finished"
    return answer


async def openai_agents_orchestrator(session: Session, ask: Callable[[], Awaitable[str]]) -> str:
    from agents import ToolCallOutputItem, function_tool
    from openai_agents_fakes import calls_step, scripted_agent, text_step

    from subagent_tracker.integrations.openai_agents import tracked_run_streamed

    async def ask_body() -> str:
        """Asks the subagent."""
        return await ask()

    # No opt-in: tracked_run_streamed makes each function tool answer for the subagents it runs.
    ask_tool = function_tool(ask_body, name_override="ask")

    orchestrator = scripted_agent(
        "orchestrator", [calls_step(("ask", {}, "call-ask")), text_step("orchestrator done")], [ask_tool]
    )
    result = tracked_run_streamed(session, orchestrator, "go", task_id="orchestrator")
    async for _ in result.stream_events():
        pass
    assert result.final_output == "orchestrator done"
    return next(str(item.output) for item in result.new_items if isinstance(item, ToolCallOutputItem))


async def langgraph_orchestrator(session: Session, ask: Callable[[], Awaitable[str]]) -> str:
    from langchain_core.messages import HumanMessage, ToolMessage
    from langchain_core.tools import tool as langchain_tool
    from langgraph_fakes import agent_graph, scripted_model, tool_calls

    from subagent_tracker.integrations.langgraph import tracked_astream

    async def ask_body() -> str:
        """Asks the subagent."""
        return await ask()

    ask_tool = langchain_tool("ask")(answers_for_subagents(ask_body))

    graph = agent_graph(
        scripted_model([tool_calls(("call-ask", "ask", {})), "orchestrator done"]),
        [ask_tool],
        name="orchestrator",
    )
    last: Any = None
    async for state in tracked_astream(
        session, graph, {"messages": [HumanMessage("go")]}, task_id="orchestrator", stream_mode="values"
    ):
        last = state
    messages = last["messages"]
    assert messages[-1].content == "orchestrator done"
    return next(str(message.content) for message in messages if isinstance(message, ToolMessage))


async def strands_orchestrator(session: Session, ask: Callable[[], Awaitable[str]]) -> str:
    from strands import Agent as StrandsAgent
    from strands import tool as strands_tool
    from strands_fakes import Reply, ScriptedModel, ToolCall

    from subagent_tracker.integrations.strands import SubagentHooks

    @strands_tool(name="ask")
    async def ask_tool() -> str:
        """Asks the subagent."""
        return await ask()

    orchestrator = StrandsAgent(
        model=ScriptedModel([Reply("Asking.", (ToolCall("ask", {}),)), "orchestrator done"]),
        name="orchestrator",
        tools=[ask_tool],
        hooks=[SubagentHooks(session, task_id="orchestrator")],
        callback_handler=None,
    )
    result = await orchestrator.invoke_async("go")
    assert str(result).strip() == "orchestrator done"
    results = [
        block["toolResult"]
        for message in orchestrator.messages
        for block in message["content"]
        if "toolResult" in block
    ]
    return str(results[0]["content"][0]["text"])


async def agno_orchestrator(session: Session, ask: Callable[[], Awaitable[str]]) -> str:
    from agno.agent import Agent as AgnoAgent
    from agno.run.cancel import set_cancellation_manager
    from agno.tools import tool as agno_tool
    from agno_fakes import ScriptedModel as AgnoScriptedModel

    from subagent_tracker.integrations.agno import SubagentCancellationManager

    # No adapter reaches an Agno agent's tools: the tool opts in, as a LangGraph tool does.
    async def ask_body() -> str:
        """Asks the subagent."""
        return await ask()

    set_cancellation_manager(SubagentCancellationManager(session))
    orchestrator = AgnoAgent(
        name="orchestrator",
        model=AgnoScriptedModel(steps=[("ask", {}), "orchestrator done"]),
        tools=[agno_tool(name="ask")(answers_for_subagents(ask_body))],
        telemetry=False,
    )
    output = await orchestrator.arun("go", run_id="orchestrator")
    assert output.content == "orchestrator done"
    return next(str(message.content) for message in output.messages or [] if message.role == "tool")


async def adk_orchestrator(session: Session, ask_subagent: Callable[[], Awaitable[str]]) -> str:
    from adk_fakes import ScriptedLlm as AdkScriptedLlm
    from google.adk.agents import LlmAgent

    from subagent_tracker.integrations.adk import SubagentTrackerPlugin

    # No opt-in: the plugin makes each tool call answer for the subagents it runs.
    async def ask() -> str:
        """Asks the subagent."""
        return await ask_subagent()

    orchestrator = LlmAgent(
        name="orchestrator", model=AdkScriptedLlm(steps=[("ask", {}), "orchestrator done"]), tools=[ask]
    )
    events = await _adk_run(orchestrator, SubagentTrackerPlugin(session, task_id="orchestrator"))
    texts = [
        part.text for event in events if event.content for part in event.content.parts or [] if part.text
    ]
    assert texts[-1] == "orchestrator done"
    return next(
        str(response.response["result"])
        for event in events
        for response in event.get_function_responses()
        if response.response is not None
    )


async def crewai_orchestrator(session: Session, ask: Callable[[], Awaitable[str]]) -> str:
    from crewai.tools import tool as crewai_tool
    from crewai_fakes import crew_of

    from subagent_tracker.integrations.crewai import tracked_kickoff_async

    # No adapter reaches a CrewAI tool, which runs in the crew's thread: the tool opts in, and runs the
    # subagent on an event loop of its own there.
    answers: list[str] = []

    @crewai_tool("ask")  # type: ignore[untyped-decorator,unused-ignore]  # typed where CrewAI is installed
    def ask_tool() -> str:
        """Asks the subagent."""
        answers.append(str(asyncio.run(answers_for_subagents(ask)())))
        return answers[-1]

    crew = crew_of("orchestrator", ("orchestrator", [("ask", {}), "orchestrator done"], [ask_tool]))
    output = await tracked_kickoff_async(session, crew, task_id="orchestrator")
    assert output.raw == "orchestrator done"
    return answers[0]


ORCHESTRATORS: dict[str, Orchestrator] = {
    "pydantic_ai": pydantic_ai_orchestrator,
    "openai_agents": openai_agents_orchestrator,
    "langgraph": langgraph_orchestrator,
    "strands": strands_orchestrator,
    "agno": agno_orchestrator,
    "adk": adk_orchestrator,
    "crewai": crewai_orchestrator,
}


async def _until_streaming(session: Session, subagent: Subagent) -> None:
    """Waits until the subagent's task runs and its model has streamed a few chunks (bounded)."""
    deadline = time.monotonic() + 10
    while True:
        task = session.subagent_task(SUB)
        if task is not None and task.status == SubagentStatus.RUNNING:
            if subagent.chunks() >= CHUNKS_BEFORE_THE_CANCEL:
                return
        assert time.monotonic() < deadline, "the subagent did not stream within 10 s"
        await asyncio.sleep(0.005)


@pytest.mark.parametrize(("x", "y"), PAIRS, ids=[f"{x}-runs-{y}" for x, y in PAIRS])
def test_a_subagent_cancelled_by_id_answers_the_tool_call_of_another_framework(x: str, y: str) -> None:
    session = Session()
    subagent = SUBAGENTS[y](session)

    async def scenario() -> str:
        running = asyncio.ensure_future(ORCHESTRATORS[x](session, subagent.ask))
        await _until_streaming(session, subagent)
        assert session.cancel_subagent_task(SUB, reason=REASON)
        return await asyncio.wait_for(running, 10)

    answer = asyncio.run(scenario())
    sub, orchestrator = session.subagent_task(SUB), session.subagent_task("orchestrator")
    assert sub is not None and orchestrator is not None
    assert (sub.status, sub.cancel_reason, sub.parent_id) == (
        SubagentStatus.CANCELLED,
        REASON,
        "orchestrator",
    )
    assert str(sub.result).startswith("w0 w1 w2"), sub.result
    assert "w299" not in str(sub.result), "stopped mid stream"
    expected = cancelled_run_text(agent=SUB, task_id=SUB, reason=REASON, partial=sub.result)
    assert answer == expected
    assert orchestrator.status == SubagentStatus.COMPLETED, "the delegating run went on"
    assert session.pending_subagent_tasks() == []


def test_answers_for_subagents_leaves_a_call_without_a_cancelled_subagent_alone() -> None:
    async def add_one(value: int) -> int:
        return value + 1

    async def broken() -> None:
        raise ValueError("the tool's own error")

    wrapped = answers_for_subagents(add_one)
    assert answers_for_subagents(wrapped) is wrapped, "applied twice, it wraps once"
    assert wrapped.__name__ == "add_one"
    assert asyncio.run(wrapped(1)) == 2
    with pytest.raises(ValueError, match="the tool's own error"):
        asyncio.run(answers_for_subagents(broken)())

    async def cancelled_itself() -> None:
        raise asyncio.CancelledError

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(answers_for_subagents(cancelled_itself)())
