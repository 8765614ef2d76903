"""Every framework adapter on a session of the asyncio API: an ``AsyncRedisSession`` (a real redis-server on
loopback, a session of its own per test) and an ``AwaitableSession`` over an in-memory ``Session``. For
pydantic-ai (``SubagentTracking``), the OpenAI Agents SDK (``tracked_as_tool``, and ``tracked_run_streamed``,
whose task starts and ends through the session's blocking twin), LangGraph (``tracked_subgraph_tool`` and
``tracked_astream``) and Strands (``SubagentHooks``) it proves that a tracked subagent run completes with the
result that adapter's own tests expect, and that one cancelled by id, awaited
(``await session.cancel_subagent_task(...)``), while it streams ends ``CANCELLED`` with that reason, its
delegating run's tool call gets :func:`~subagent_tracker.integrations.cancelled_run_text` and goes on; and
that nothing is left pending. Offline fakes only, every run bounded by ``asyncio.wait_for``."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeAlias, TypeVar

import pytest
from agents import AgentToolStreamEvent, RawResponsesStreamEvent, Runner
from agents.testing import ScriptedModel as OpenAIScriptedModel
from langchain_core.messages import BaseMessage, HumanMessage, ToolMessage
from langgraph.graph import MessagesState
from langgraph_fakes import agent_graph, scripted_model, tool_calls
from openai.types.responses import ResponseTextDeltaEvent
from openai_agents_fakes import calls_step, scripted_agent, slow_text_step, text_step
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai_fakes import calls_then_text, slow_text
from redis_support import RedisServer
from strands import Agent as StrandsAgent
from strands.types.content import Messages
from strands_fakes import Reply, ToolCall
from strands_fakes import ScriptedModel as StrandsScriptedModel

from subagent_tracker import (
    AsyncRedisRegistry,
    AsyncRedisSession,
    AwaitableSession,
    Session,
    SubagentStatus,
    SubagentTask,
)
from subagent_tracker.integrations import cancelled_run_text, tracked
from subagent_tracker.integrations.langgraph import tracked_astream, tracked_subgraph_tool
from subagent_tracker.integrations.openai_agents import tracked_as_tool, tracked_run_streamed
from subagent_tracker.integrations.pydantic_ai import SubagentTracking
from subagent_tracker.integrations.strands import SubagentHooks

_T = TypeVar("_T")

#: A session of the asyncio API: every call is awaited.
AsyncSession: TypeAlias = AsyncRedisSession | AwaitableSession
#: Makes a fresh asyncio session: awaited inside the test's own event loop (``AsyncRedisRegistry.connect``
#: needs a running loop).
MakeSession: TypeAlias = Callable[[], Awaitable[AsyncSession]]

#: How long a whole scenario may take: far more than any needs, so a hang fails instead of stalling the run.
SCENARIO_TIMEOUT = 10.0

_SESSION_IDS = itertools.count()


@pytest.fixture(params=["asyncio-redis", "awaitable-memory"])
def make_session(request: pytest.FixtureRequest) -> MakeSession:
    """An async factory of the session under test: an ``AsyncRedisSession`` of its own on the module's
    redis-server, or an ``AwaitableSession`` over a new in-memory ``Session``."""
    if request.param == "awaitable-memory":

        async def in_memory() -> AsyncSession:
            return AwaitableSession(Session(max_finished_tasks=10_000))

        return in_memory
    server: RedisServer = request.getfixturevalue("module_redis_server")

    async def on_redis() -> AsyncSession:
        registry = await AsyncRedisRegistry.connect(server.url, reconcile_interval=0.1)
        return await registry.session(f"asyncio-integrations-{next(_SESSION_IDS)}")

    return on_redis


def _run(main: Callable[[], Coroutine[Any, Any, _T]]) -> _T:
    async def bounded() -> _T:
        return await asyncio.wait_for(main(), SCENARIO_TIMEOUT)

    return asyncio.run(bounded())


async def _task(session: AsyncSession, task_id: str) -> SubagentTask:
    snapshot = await session.subagent_task(task_id)
    assert snapshot is not None, f"no task {task_id!r}"
    return snapshot


async def _until(condition: Callable[[], bool]) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the condition never held")


async def _nothing_pending(session: AsyncSession) -> None:
    assert await session.pending_subagent_tasks() == [], "nothing stays pending"


# pydantic-ai: SubagentTracking


def _pydantic_orchestrator(
    session: AsyncSession, researchers: dict[str, PydanticAgent[None, str]]
) -> PydanticAgent[None, str]:
    """An agent that calls one tool per researcher at once (``ask_<name>``, each streaming that researcher
    through ``run_stream``), then answers with one line per tool result."""
    orchestrator = PydanticAgent(
        calls_then_text([(f"ask_{name}", {}) for name in researchers]),
        name="orchestrator",
        capabilities=[SubagentTracking(session, task_id="root")],
    )
    for name, researcher in researchers.items():
        orchestrator.tool_plain(name=f"ask_{name}")(_asking(researcher))
    return orchestrator


def _asking(researcher: PydanticAgent[None, str]) -> Callable[[], Awaitable[str]]:
    async def ask() -> str:
        async with researcher.run_stream("research this") as streamed:
            return await streamed.get_output()

    return ask


def test_pydantic_ai_a_subagent_run_completes_with_its_output(make_session: MakeSession) -> None:
    async def main() -> None:
        session = await make_session()
        quick = PydanticAgent(
            slow_text(5, delay=0.01, prefix="b"),
            name="quick",
            capabilities=[SubagentTracking(session, task_id="quick")],
        )
        orchestrator = _pydantic_orchestrator(session, {"quick": quick})

        output = (await orchestrator.run("go")).output
        assert output == "ask_quick: b0 b1 b2 b3 b4 "
        quick_task, root = await _task(session, "quick"), await _task(session, "root")
        assert (quick_task.status, quick_task.result, quick_task.agent, quick_task.parent_id) == (
            SubagentStatus.COMPLETED,
            "b0 b1 b2 b3 b4 ",
            "quick",
            "root",
        )
        assert (root.status, root.result, root.parent_id) == (SubagentStatus.COMPLETED, output, None)
        await _nothing_pending(session)

    _run(main)


def test_pydantic_ai_a_subagent_cancelled_by_id_mid_stream_answers_its_tool_call(
    make_session: MakeSession,
) -> None:
    async def main() -> None:
        session = await make_session()
        slow_streamed = asyncio.Event()

        def streamed(words: int) -> None:
            if words >= 3:
                slow_streamed.set()

        slow = PydanticAgent(
            slow_text(200, delay=0.02, prefix="a", streamed=streamed),
            name="slow",
            capabilities=[SubagentTracking(session, task_id="slow")],
        )
        quick = PydanticAgent(
            slow_text(5, delay=0.01, prefix="b"),
            name="quick",
            capabilities=[SubagentTracking(session, task_id="quick")],
        )
        orchestrator = _pydantic_orchestrator(session, {"slow": slow, "quick": quick})
        running = asyncio.ensure_future(orchestrator.run("go"))
        await asyncio.wait_for(slow_streamed.wait(), 5)
        assert await session.cancel_subagent_task("slow", reason="enough of that") is True
        output = (await asyncio.wait_for(running, 5)).output

        slow_task, root = await _task(session, "slow"), await _task(session, "root")
        assert (slow_task.status, slow_task.cancel_reason, slow_task.parent_id) == (
            SubagentStatus.CANCELLED,
            "enough of that",
            "root",
        )
        assert slow_task.result.startswith("a0 a1 a2 "), "the streamed words are the partial output"
        assert "a199" not in slow_task.result, "stopped mid stream"
        answer = cancelled_run_text(
            agent="slow", task_id="slow", reason="enough of that", partial=slow_task.result
        )
        assert output == f"ask_slow: {answer}\nask_quick: b0 b1 b2 b3 b4 ", "the delegating run went on"
        assert (await _task(session, "quick")).status is SubagentStatus.COMPLETED
        assert (root.status, root.result) == (SubagentStatus.COMPLETED, output)
        await _nothing_pending(session)

    _run(main)


# OpenAI Agents SDK: tracked_as_tool and tracked_run_streamed

WORDS = [f"w{index}" for index in range(400)]
DONE = "orchestrator done"


class _Deltas:
    """An ``on_stream`` for the nested run: counts its text deltas, and says when enough came."""

    def __init__(self, enough: int) -> None:
        self.count = 0
        self.enough = asyncio.Event()
        self._wanted = enough

    def __call__(self, payload: AgentToolStreamEvent) -> None:
        event = payload["event"]
        if isinstance(event, RawResponsesStreamEvent) and isinstance(event.data, ResponseTextDeltaEvent):
            self.count += 1
            if self.count >= self._wanted:
                self.enough.set()


def _outputs(history: list[Any]) -> dict[str, str]:
    return {item["call_id"]: item["output"] for item in history if item.get("type") == "function_call_output"}


def _assert_partial(partial: str, at_least: int) -> None:
    assert len(partial.split()) >= at_least, "the text streamed before the cancel"
    assert " ".join(WORDS).startswith(partial) and partial != " ".join(WORDS), "and not the whole of it"


def test_openai_agents_a_subagent_tool_run_completes_with_its_output(make_session: MakeSession) -> None:
    async def main() -> None:
        session = await make_session()
        helper = scripted_agent("helper", [text_step("one")])
        orchestrator = scripted_agent(
            "orchestrator",
            [calls_step(("help", {"input": "a"}, "call-1")), text_step(DONE)],
            [tracked_as_tool(helper, session, tool_name="help", tool_description="d", task_id="first")],
        )

        async with tracked(session, agent="orchestrator", task_id="root"):
            result = await Runner.run(orchestrator, "go")
        assert result.final_output == DONE
        assert _outputs(result.to_input_list()) == {"call-1": "one"}
        first, root = await _task(session, "first"), await _task(session, "root")
        assert (first.status, first.result, first.agent, first.parent_id) == (
            SubagentStatus.COMPLETED,
            "one",
            "helper",
            "root",
        )
        assert root.status is SubagentStatus.COMPLETED
        await _nothing_pending(session)

    _run(main)


def test_openai_agents_a_subagent_tool_cancelled_by_id_mid_stream_answers_its_call(
    make_session: MakeSession,
) -> None:
    async def main() -> None:
        session = await make_session()
        deltas = _Deltas(enough=3)
        slow = scripted_agent("researcher", [slow_text_step(WORDS, delay=0.01)])
        quick = scripted_agent("summarizer", [slow_text_step(["a", "b", "c"], delay=0.01)])
        orchestrator_model = OpenAIScriptedModel(
            [
                calls_step(
                    ("research", {"input": "x"}, "call-slow"), ("summarize", {"input": "y"}, "call-quick")
                ),
                text_step(DONE),
            ]
        )
        tools = [
            tracked_as_tool(
                slow, session, tool_name="research", tool_description="d", task_id="slow", on_stream=deltas
            ),
            tracked_as_tool(quick, session, tool_name="summarize", tool_description="d", task_id="quick"),
        ]
        orchestrator = scripted_agent("orchestrator", [], tools)
        orchestrator.model = orchestrator_model

        async with tracked(session, agent="orchestrator", task_id="root"):
            running = asyncio.ensure_future(Runner.run(orchestrator, "go"))
            await asyncio.wait_for(deltas.enough.wait(), 5)
            assert await session.cancel_subagent_task("slow", reason="enough research") is True
            result = await asyncio.wait_for(running, 5)
        assert result.final_output == DONE, "the delegating run went on and finished its turn"

        slow_task, quick_task = await _task(session, "slow"), await _task(session, "quick")
        assert (slow_task.status, slow_task.cancel_reason, slow_task.parent_id) == (
            SubagentStatus.CANCELLED,
            "enough research",
            "root",
        )
        _assert_partial(slow_task.result, at_least=3)
        expected = cancelled_run_text(
            agent="researcher", task_id="slow", reason="enough research", partial=slow_task.result
        )
        assert _outputs(result.to_input_list()) == {"call-slow": expected, "call-quick": "a b c"}
        assert (quick_task.status, quick_task.result) == (SubagentStatus.COMPLETED, "a b c")
        assert (await _task(session, "root")).status is SubagentStatus.COMPLETED
        await _nothing_pending(session)

    _run(main)


def test_openai_agents_a_tracked_run_streamed_goes_on_past_its_subagent_cancelled_by_id(
    make_session: MakeSession,
) -> None:
    async def main() -> None:
        session = await make_session()
        deltas = _Deltas(enough=3)
        slow = scripted_agent("researcher", [slow_text_step(WORDS, delay=0.01)])
        quick = scripted_agent("summarizer", [slow_text_step(["a", "b", "c"], delay=0.01)])
        orchestrator = scripted_agent(
            "orchestrator",
            [
                calls_step(
                    ("research", {"input": "x"}, "call-slow"), ("summarize", {"input": "y"}, "call-quick")
                ),
                text_step(DONE),
            ],
            [
                tracked_as_tool(
                    slow,
                    session,
                    tool_name="research",
                    tool_description="d",
                    task_id="slow",
                    on_stream=deltas,
                ),
                tracked_as_tool(quick, session, tool_name="summarize", tool_description="d", task_id="quick"),
            ],
        )

        result = tracked_run_streamed(session, orchestrator, "go", task_id="root")

        async def cancel_mid_stream() -> None:
            await deltas.enough.wait()
            assert await session.cancel_subagent_task("slow", reason="enough research") is True

        canceller = asyncio.ensure_future(cancel_mid_stream())
        async for _event in result.stream_events():
            pass
        await asyncio.wait_for(canceller, 5)
        assert result.final_output == DONE, "the delegating run went on and finished its turn"

        slow_task, quick_task = await _task(session, "slow"), await _task(session, "quick")
        root = await _task(session, "root")
        assert (slow_task.status, slow_task.cancel_reason, slow_task.parent_id) == (
            SubagentStatus.CANCELLED,
            "enough research",
            "root",
        )
        _assert_partial(slow_task.result, at_least=3)
        expected = cancelled_run_text(
            agent="researcher", task_id="slow", reason="enough research", partial=slow_task.result
        )
        assert _outputs(result.to_input_list()) == {"call-slow": expected, "call-quick": "a b c"}
        assert (quick_task.status, quick_task.result, quick_task.parent_id) == (
            SubagentStatus.COMPLETED,
            "a b c",
            "root",
        )
        assert (root.status, root.result, root.agent) == (SubagentStatus.COMPLETED, DONE, "orchestrator")
        await _nothing_pending(session)

    _run(main)


# LangGraph: tracked_subgraph_tool and tracked_astream

#: A reply long enough, streamed slowly enough (3 s), that only a cancel ends it within a test.
LONG_REPLY = "slow " * 300


def _ask(text: str) -> MessagesState:
    return {"messages": [HumanMessage(text)]}


def _answers(messages: list[BaseMessage]) -> dict[str, ToolMessage]:
    return {message.tool_call_id: message for message in messages if isinstance(message, ToolMessage)}


def test_langgraph_a_subgraph_run_completes_with_its_last_message(make_session: MakeSession) -> None:
    async def main() -> None:
        session = await make_session()
        researcher = tracked_subgraph_tool(
            agent_graph(scripted_model(["first answer"])),
            session,
            name="researcher",
            description="Researches.",
            task_id="research-1",
        )
        calls = tool_calls(("c1", "researcher", {"input": "a"}))
        orchestrator = agent_graph(scripted_model([calls, "all done"]), [researcher], name="orchestrator")

        updates = [
            chunk async for chunk in tracked_astream(session, orchestrator, _ask("go"), task_id="root")
        ]
        assert [next(iter(update)) for update in updates] == ["model", "tools", "model"]
        (answer,) = _answers(updates[1]["tools"]["messages"]).values()
        assert (answer.status, answer.text) == ("success", "first answer")
        sub, root = await _task(session, "research-1"), await _task(session, "root")
        assert (sub.status, sub.result, sub.agent, sub.parent_id) == (
            SubagentStatus.COMPLETED,
            "first answer",
            "researcher",
            "root",
        )
        assert (root.status, root.result, root.agent, root.parent_id) == (
            SubagentStatus.COMPLETED,
            "all done",
            "orchestrator",
            None,
        )
        await _nothing_pending(session)

    _run(main)


def test_langgraph_a_subagent_cancelled_by_id_mid_stream_answers_its_call(make_session: MakeSession) -> None:
    async def main() -> None:
        session = await make_session()
        slow_model = scripted_model([LONG_REPLY], token_delay=0.01)
        slow = tracked_subgraph_tool(
            agent_graph(slow_model), session, name="slow_researcher", description="Digs deep.", task_id="slow"
        )
        quick = tracked_subgraph_tool(
            agent_graph(scripted_model(["the quick answer"], token_delay=0.01)),
            session,
            name="quick_researcher",
            description="Looks it up.",
            task_id="quick",
        )
        calls = tool_calls(
            ("call-slow", "slow_researcher", {"input": "dig"}),
            ("call-quick", "quick_researcher", {"input": "look"}),
        )
        orchestrator = agent_graph(scripted_model([calls, "both asked"]), [slow, quick], name="orchestrator")

        async with tracked(session, agent="orchestrator", task_id="root"):
            running = asyncio.ensure_future(orchestrator.ainvoke(_ask("research this")))
            await _until(lambda: slow_model.chunks_streamed >= 3)
            assert await session.cancel_subagent_task("slow", reason="stop digging") is True
            messages = list((await asyncio.wait_for(running, 5))["messages"])

        slow_task, quick_task = await _task(session, "slow"), await _task(session, "quick")
        assert (slow_task.status, slow_task.cancel_reason, slow_task.agent, slow_task.parent_id) == (
            SubagentStatus.CANCELLED,
            "stop digging",
            "slow_researcher",
            "root",
        )
        assert slow_task.result.startswith("slow slow "), "the tokens streamed before the cancel"
        assert len(slow_task.result) < len(LONG_REPLY), "stopped mid stream"
        answers = _answers(messages)
        assert answers["call-slow"].status == "error"
        assert answers["call-slow"].content == cancelled_run_text(
            agent="slow_researcher", task_id="slow", reason="stop digging", partial=slow_task.result
        )
        assert (answers["call-quick"].status, answers["call-quick"].content) == (
            "success",
            "the quick answer",
        )
        assert (quick_task.status, quick_task.result) == (SubagentStatus.COMPLETED, "the quick answer")
        assert messages[-1].text == "both asked", "the delegating graph finished its turn"
        assert (await _task(session, "root")).status is SubagentStatus.COMPLETED
        await _nothing_pending(session)

    _run(main)


# Strands: SubagentHooks


def _strands_agent(
    session: AsyncSession, name: str, script: list[Reply | str], *, tools: list[Any] | None = None
) -> StrandsAgent:
    return StrandsAgent(
        model=StrandsScriptedModel(script),
        name=name,
        tools=tools or [],
        hooks=[SubagentHooks(session, task_id=name)],
        callback_handler=None,
    )


def _tool_results(messages: Messages) -> dict[str, Any]:
    """Each tool call of the history, by id, with the result that answers it (``None`` when none does)."""
    results: dict[str, Any] = {}
    for message in messages:
        for block in message["content"]:
            if "toolUse" in block:
                results.setdefault(block["toolUse"]["toolUseId"], None)
            if "toolResult" in block:
                results[block["toolResult"]["toolUseId"]] = block["toolResult"]
    return results


def _text(result: Any) -> str:
    return str(result["content"][0]["text"])


def _strands_model(agent: StrandsAgent) -> StrandsScriptedModel:
    assert isinstance(agent.model, StrandsScriptedModel)
    return agent.model


def test_strands_a_subagent_run_completes_with_its_output(make_session: MakeSession) -> None:
    async def main() -> None:
        session = await make_session()
        helper = _strands_agent(session, "helper", ["helped"])
        lead = _strands_agent(
            session,
            "lead",
            [Reply("Let me check.", (ToolCall("helper", {"input": "help"}),)), "All done."],
            tools=[helper.as_tool()],
        )

        result = await lead.invoke_async("go")
        assert (result.stop_reason, str(result).strip()) == ("end_turn", "All done.")
        lead_task, helper_task = await _task(session, "lead"), await _task(session, "helper")
        assert (lead_task.status, lead_task.result, lead_task.agent, lead_task.parent_id) == (
            SubagentStatus.COMPLETED,
            "All done.",
            "lead",
            None,
        )
        assert (helper_task.status, helper_task.result, helper_task.parent_id) == (
            SubagentStatus.COMPLETED,
            "helped",
            "lead",
        )
        await _nothing_pending(session)

    _run(main)


def test_strands_a_subagent_cancelled_by_id_mid_stream_answers_its_tool_call(
    make_session: MakeSession,
) -> None:
    async def main() -> None:
        session = await make_session()
        slow = _strands_agent(
            session, "slow", [Reply("alpha beta gamma delta epsilon zeta eta theta", chunk_delay=0.1)]
        )
        quick = _strands_agent(session, "quick", ["the quick answer"])
        orchestrator = _strands_agent(
            session,
            "orchestrator",
            [
                Reply(
                    "Asking both.", (ToolCall("slow", {"input": "dig"}), ToolCall("quick", {"input": "look"}))
                ),
                "Summary of what came back.",
            ],
            tools=[slow.as_tool(), quick.as_tool()],
        )

        turn = asyncio.ensure_future(orchestrator.invoke_async("research this"))
        await _until(lambda: _strands_model(slow).text_chunks >= 3)
        assert await session.cancel_subagent_task("slow", reason="the user stopped it") is True
        result = await asyncio.wait_for(turn, 5)

        assert (result.stop_reason, str(result).strip()) == ("end_turn", "Summary of what came back.")
        slow_task = await _task(session, "slow")
        assert (slow_task.status, slow_task.cancel_reason, slow_task.parent_id) == (
            SubagentStatus.CANCELLED,
            "the user stopped it",
            "orchestrator",
        )
        assert slow_task.result.startswith("alpha beta") and "theta" not in slow_task.result
        answers = list(_tool_results(orchestrator.messages).values())
        assert answers[0]["status"] == "error"
        assert _text(answers[0]) == cancelled_run_text(
            agent="slow", task_id="slow", reason="the user stopped it", partial=slow_task.result
        )
        assert (answers[1]["status"], _text(answers[1]).strip()) == ("success", "the quick answer")
        quick_task, turn_task = await _task(session, "quick"), await _task(session, "orchestrator")
        assert (quick_task.status, quick_task.result, quick_task.parent_id) == (
            SubagentStatus.COMPLETED,
            "the quick answer",
            "orchestrator",
        )
        assert (turn_task.status, turn_task.result) == (
            SubagentStatus.COMPLETED,
            "Summary of what came back.",
        )
        await _nothing_pending(session)

    _run(main)
