"""The pydantic-ai adapter, ``SubagentTracking``: every run of an agent that carries it is a task, nested
under the run that started it; a cancel by id, by cascade or by deadline stops the run mid-stream or
mid-tool; a cancelled subagent answers its delegating tool call with the reason and its partial output
while the delegating run goes on; a cancelled top-level run raises ``RunCancelled`` with every tool call
answered. Each test runs on the in-memory session and on a Redis session, and drives the agents every way
users do."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from typing import Any, Literal

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, RunContext
from pydantic_ai.exceptions import RunCancelled
from pydantic_ai.messages import AgentStreamEvent, ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel
from pydantic_ai.models.test import TestModel
from pydantic_ai_fakes import (
    all_tool_results,
    calls_then_text,
    slow_text,
    tool_results,
    unanswered_tool_calls,
)

from subagent_tracker import DEADLINE_REASON, Session, SubagentStatus
from subagent_tracker.integrations import cancelled_run_text, current_task, tracked
from subagent_tracker.integrations._support import BlockingSession
from subagent_tracker.integrations.pydantic_ai import SubagentTracking

Drive = Literal["run", "run_events", "run_stream", "iter"]
#: The ways of driving a run that stream the model's response (``run`` alone sends unstreamed requests).
STREAMING_DRIVES: list[Drive] = ["run_events", "run_stream", "iter"]


@pytest.fixture
def session(tracked_session: BlockingSession) -> BlockingSession:
    return tracked_session


async def _drain(ctx: RunContext[None], events: AsyncIterable[AgentStreamEvent]) -> None:
    async for _ in events:
        pass


async def drive(agent: Agent[None, str], prompt: str, how: Drive) -> str:
    """Runs ``agent`` as users do: ``run()`` (with an event stream handler, ``run()`` streams),
    ``run_stream()``, or ``iter()`` streaming each model request node; returns the output."""
    if how == "run":
        return (await agent.run(prompt)).output
    if how == "run_events":
        return (await agent.run(prompt, event_stream_handler=_drain)).output
    if how == "run_stream":
        async with agent.run_stream(prompt) as streamed:
            return await streamed.get_output()
    async with agent.iter(prompt) as run:
        async for node in run:
            if Agent.is_model_request_node(node):
                async with node.stream(run.ctx) as events:
                    async for _ in events:
                        pass
    assert run.result is not None
    return run.result.output


def _task(session: BlockingSession, task_id: str) -> Any:
    snapshot = session.subagent_task(task_id)
    assert snapshot is not None, task_id
    return snapshot


def _words_streamed(count: int) -> tuple[asyncio.Event, Callable[[int], None]]:
    """An event set once a model has streamed ``count`` words, and the ``slow_text`` callback that sets it."""
    event = asyncio.Event()

    def streamed(words: int) -> None:
        if words >= count:
            event.set()

    return event, streamed


def _orchestrator(
    session: BlockingSession, researchers: dict[str, Agent[None, str]], how: Drive, **tracking: Any
) -> Agent[None, str]:
    """An agent that calls one tool per researcher at once (``ask_<name>``, each running that researcher
    ``how``), then answers with one line per tool result."""
    orchestrator = Agent(
        calls_then_text([(f"ask_{name}", {}) for name in researchers]),
        name="orchestrator",
        capabilities=[SubagentTracking(session, **tracking)],
    )
    for name, researcher in researchers.items():
        orchestrator.tool_plain(name=f"ask_{name}")(_asking(researcher, how))
    return orchestrator


def _asking(researcher: Agent[None, str], how: Drive) -> Callable[[], Awaitable[str]]:
    """A tool that runs ``researcher`` (driven ``how``) and returns its output."""

    async def ask() -> str:
        return await drive(researcher, "research this", how)

    return ask


@pytest.mark.parametrize("how", STREAMING_DRIVES)
def test_a_subagent_cancelled_by_id_mid_stream_answers_its_tool_call_and_its_sibling_finishes(
    session: BlockingSession, how: Drive
) -> None:
    async def run() -> str:
        slow_streamed, streamed = _words_streamed(3)
        slow = Agent(
            slow_text(200, delay=0.02, prefix="a", streamed=streamed),
            name="slow",
            capabilities=[SubagentTracking(session, task_id="slow")],
        )
        quick = Agent(
            slow_text(5, delay=0.01, prefix="b"),
            name="quick",
            capabilities=[SubagentTracking(session, task_id="quick")],
        )
        orchestrator = _orchestrator(session, {"slow": slow, "quick": quick}, how, task_id="root")
        running = asyncio.ensure_future(drive(orchestrator, "go", how))
        await asyncio.wait_for(slow_streamed.wait(), 10)
        assert session.cancel_subagent_task("slow", reason="enough of that")
        return await asyncio.wait_for(running, 10)

    output = asyncio.run(run())
    slow, quick, root = _task(session, "slow"), _task(session, "quick"), _task(session, "root")
    assert (slow.status, slow.cancel_reason, slow.parent_id, slow.agent) == (
        SubagentStatus.CANCELLED,
        "enough of that",
        "root",
        "slow",
    )
    assert slow.result.startswith("a0 a1 a2 "), "the streamed words are the partial output"
    assert "a199" not in slow.result
    answer = cancelled_run_text(agent="slow", task_id="slow", reason="enough of that", partial=slow.result)
    assert output == f"ask_slow: {answer}\nask_quick: b0 b1 b2 b3 b4 ", "the delegating run went on"
    assert (quick.status, quick.result, quick.parent_id) == (
        SubagentStatus.COMPLETED,
        "b0 b1 b2 b3 b4 ",
        "root",
    )
    assert (root.status, root.result, root.parent_id) == (SubagentStatus.COMPLETED, output, None)
    assert session.pending_subagent_tasks() == []


@pytest.mark.parametrize("how", ["run", *STREAMING_DRIVES])
def test_a_cancelled_top_level_run_raises_run_cancelled_with_every_tool_call_answered(
    session: BlockingSession, how: Drive
) -> None:
    async def run() -> list[ModelMessage]:
        slow_streamed, streamed = _words_streamed(3)
        slow = Agent(
            slow_text(200, delay=0.02, prefix="a", streamed=streamed),
            name="slow",
            capabilities=[SubagentTracking(session, task_id="slow")],
        )
        quick = Agent(
            slow_text(2, delay=0.01, prefix="b"), name="quick", capabilities=[SubagentTracking(session)]
        )
        orchestrator = _orchestrator(session, {"slow": slow, "quick": quick}, "run_stream", task_id="root")
        running = asyncio.ensure_future(drive(orchestrator, "go", how))
        await asyncio.wait_for(slow_streamed.wait(), 10)
        # From another thread, as a cancel from a dashboard or a Redis listener arrives.
        assert await asyncio.to_thread(session.cancel_subagent_task, "root", reason="the user stopped it")
        with pytest.raises(RunCancelled) as cancelled:
            await asyncio.wait_for(running, 10)
        return cancelled.value.all_messages()

    history = asyncio.run(run())
    assert unanswered_tool_calls(history) == []
    results = all_tool_results(history)
    slow = _task(session, "slow")
    assert (slow.status, slow.cancel_reason, slow.cancel_cause, slow.parent_id) == (
        SubagentStatus.CANCELLED,
        "the user stopped it",
        "parent",
        "root",
    )
    assert slow.result.startswith("a0 a1 a2 ")
    assert results["call-0"].content == cancelled_run_text(
        agent="slow", task_id="slow", reason="the user stopped it", partial=slow.result
    )
    assert results["call-1"].content == "b0 b1 ", "a tool that finished keeps its result"
    root = _task(session, "root")
    assert (root.status, root.cancel_reason, root.finished) == (
        SubagentStatus.CANCELLED,
        "the user stopped it",
        True,
    )
    assert session.pending_subagent_tasks() == []


def test_a_cancel_mid_stream_of_a_tool_call_answers_the_call_that_never_ran(session: BlockingSession) -> None:
    called = asyncio.Event()

    async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise AssertionError("the run streams")

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        yield "Let me look that up. "
        yield {0: DeltaToolCall(name="look_up", json_args='{"topic": "cats"}', tool_call_id="call-0")}
        called.set()
        await asyncio.sleep(30)  # the response never ends: the run stops before its tool runs

    agent = Agent(
        FunctionModel(respond, stream_function=stream),
        name="looker",
        capabilities=[SubagentTracking(session, task_id="looker")],
    )
    ran: list[str] = []

    @agent.tool_plain
    async def look_up(topic: str) -> str:
        ran.append(topic)
        return topic

    async def run() -> list[ModelMessage]:
        running = asyncio.ensure_future(drive(agent, "cats?", "run_stream"))
        await asyncio.wait_for(called.wait(), 10)
        assert session.cancel_subagent_task("looker", reason="too slow")
        with pytest.raises(RunCancelled) as cancelled:
            await asyncio.wait_for(running, 10)
        return cancelled.value.all_messages()

    history = asyncio.run(run())
    assert ran == []
    assert unanswered_tool_calls(history) == []
    assert "too slow" in str(all_tool_results(history)["call-0"].content)
    looker = _task(session, "looker")
    assert (looker.status, looker.result) == (SubagentStatus.CANCELLED, "Let me look that up. ")
    assert session.pending_subagent_tasks() == []


def test_a_deadline_cancels_a_subagent_and_the_delegating_run_goes_on(session: BlockingSession) -> None:
    # A deadline of a second, for a stream of ten: it lands mid stream even if a loaded machine is slow to
    # set the run up.
    slow = Agent(
        slow_text(500, delay=0.02, prefix="a"),
        name="slow",
        capabilities=[SubagentTracking(session, task_id="slow", timeout=1.0)],
    )
    orchestrator = _orchestrator(session, {"slow": slow}, "run_stream", task_id="root")

    output = asyncio.run(asyncio.wait_for(drive(orchestrator, "go", "run"), 10))
    slow_task = _task(session, "slow")
    assert (slow_task.status, slow_task.cancel_reason) == (SubagentStatus.CANCELLED, DEADLINE_REASON)
    assert slow_task.result.startswith("a0 a1 a2 "), "the text streamed before the deadline"
    assert "a499" not in slow_task.result, "stopped mid stream"
    answer = cancelled_run_text(
        agent="slow", task_id="slow", reason=DEADLINE_REASON, partial=slow_task.result
    )
    assert output == f"ask_slow: {answer}"
    assert _task(session, "root").status is SubagentStatus.COMPLETED
    assert session.pending_subagent_tasks() == []


def test_a_deadline_cancels_a_top_level_run_inside_its_tool(session: BlockingSession) -> None:
    agent = Agent(
        calls_then_text([("wait", {})]),
        name="waiter",
        capabilities=[SubagentTracking(session, task_id="waiter", timeout=0.2)],
    )

    @agent.tool_plain
    async def wait() -> str:
        await asyncio.sleep(30)
        return "waited"

    async def run() -> list[ModelMessage]:
        with pytest.raises(RunCancelled) as cancelled:
            await asyncio.wait_for(agent.run("go"), 10)
        return cancelled.value.all_messages()

    history = asyncio.run(run())
    assert unanswered_tool_calls(history) == []
    assert DEADLINE_REASON in str(all_tool_results(history)["call-0"].content)
    waiter = _task(session, "waiter")
    assert (waiter.status, waiter.cancel_reason, waiter.finished) == (
        SubagentStatus.CANCELLED,
        DEADLINE_REASON,
        True,
    )
    assert session.pending_subagent_tasks() == []


class Verdict(BaseModel):
    verdict: str
    confidence: float


@pytest.mark.parametrize("how", ["run", *STREAMING_DRIVES])
def test_a_run_that_returns_completes_with_its_output_as_the_result(
    session: BlockingSession, how: Drive
) -> None:
    agent = Agent(
        TestModel(custom_output_text="all done"), name="writer", capabilities=[SubagentTracking(session)]
    )

    assert asyncio.run(drive(agent, "write", how)) == "all done"
    (writer,) = session.subagent_tasks()
    assert (writer.status, writer.result, writer.agent, writer.parent_id) == (
        SubagentStatus.COMPLETED,
        "all done",
        "writer",
        None,
    )
    assert session.pending_subagent_tasks() == []


def test_structured_output_is_the_result_as_json(session: BlockingSession) -> None:
    agent = Agent(
        TestModel(custom_output_args={"verdict": "yes", "confidence": 0.5}),
        name="judge",
        output_type=Verdict,
        capabilities=[SubagentTracking(session, task_id="judge")],
    )

    assert asyncio.run(agent.run("judge")).output == Verdict(verdict="yes", confidence=0.5)
    assert _task(session, "judge").result == '{"verdict":"yes","confidence":0.5}'


def test_a_raising_subagent_fails_its_task(session: BlockingSession) -> None:
    def broken(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise RuntimeError("the model broke")

    researcher = Agent(
        FunctionModel(broken),
        name="researcher",
        capabilities=[SubagentTracking(session, task_id="researcher")],
    )
    orchestrator = _orchestrator(session, {"researcher": researcher}, "run", task_id="root")

    with pytest.raises(RuntimeError, match="the model broke"):
        asyncio.run(orchestrator.run("go"))
    researcher_task, root = _task(session, "researcher"), _task(session, "root")
    assert (researcher_task.status, researcher_task.error, researcher_task.parent_id) == (
        SubagentStatus.FAILED,
        "RuntimeError: the model broke",
        "root",
    )
    assert root.status is SubagentStatus.FAILED, "pydantic-ai ends a run whose tool raises"
    assert session.pending_subagent_tasks() == []


def test_task_ids_come_from_a_string_a_callable_or_are_generated_per_run(session: BlockingSession) -> None:
    ids = itertools.count(1)
    numbered = Agent(
        TestModel(),
        name="numbered",
        capabilities=[SubagentTracking(session, task_id=lambda: f"run-{next(ids)}")],
    )
    named = Agent(TestModel(), name="named", capabilities=[SubagentTracking(session, task_id="the-one")])
    generated = Agent(TestModel(), name="generated", capabilities=[SubagentTracking(session)])

    async def run() -> None:
        for agent in (numbered, numbered, named, generated, generated):
            await agent.run("go")

    asyncio.run(run())
    by_agent: dict[str | None, list[str]] = {}
    for task in session.subagent_tasks():
        by_agent.setdefault(task.agent, []).append(task.task_id)
    assert sorted(by_agent["numbered"]) == ["run-1", "run-2"]
    assert by_agent["named"] == ["the-one"]
    assert len(set(by_agent["generated"])) == 2, "a generated id is unique per run"


def test_runs_nest_through_the_context_across_the_core_s_tracked(session: BlockingSession) -> None:
    seen_in_tool: list[str | None] = []
    inner = Agent(TestModel(), name="inner", capabilities=[SubagentTracking(session, task_id="inner")])
    middle = Agent(
        calls_then_text([("delegate", {})]),
        name="middle",
        capabilities=[SubagentTracking(session, task_id="middle")],
    )

    @middle.tool_plain
    async def delegate() -> str:
        run = current_task()
        seen_in_tool.append(None if run is None else run.task_id)
        # Another framework's run inside a pydantic-ai tool, running a pydantic-ai agent in turn.
        async with tracked(session, agent="other-framework", task_id="other"):
            return (await inner.run("go")).output

    async def run() -> None:
        async with tracked(session, agent="outer", task_id="outer"):
            await middle.run("go")

    asyncio.run(run())
    assert seen_in_tool == ["middle"]
    parents = {
        task_id: _task(session, task_id).parent_id for task_id in ("outer", "middle", "other", "inner")
    }
    assert parents == {"outer": None, "middle": "outer", "other": "middle", "inner": "other"}
    assert current_task() is None
    assert session.pending_subagent_tasks() == []


def test_a_run_inside_another_session_s_run_is_linked_to_it(session: BlockingSession) -> None:
    elsewhere = Session()
    slow_streamed, streamed = _words_streamed(2)
    agent = Agent(
        slow_text(500, delay=0.02, streamed=streamed),
        name="slow",
        capabilities=[SubagentTracking(session, task_id="slow")],
    )

    async def run() -> None:
        async with tracked(elsewhere, agent="outer", task_id="outer"):
            running = asyncio.ensure_future(drive(agent, "go", "run_stream"))
            await asyncio.wait_for(slow_streamed.wait(), 10)
            assert elsewhere.cancel_subagent_task("outer", reason="from the other session")
            with pytest.raises(RunCancelled):
                await asyncio.wait_for(running, 10)

    asyncio.run(run())
    slow = _task(session, "slow")
    assert (slow.parent_id, slow.status, slow.cancel_cause, slow.cancel_reason) == (
        None,
        SubagentStatus.CANCELLED,
        "linked",
        "from the other session",
    )
    assert slow.result.startswith("word0 word1 ")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [({"session": object()}, "session must be"), ({"task_id": 7}, "task_id must be")],
)
def test_bad_arguments_are_type_errors_at_construction(arguments: dict[str, Any], message: str) -> None:
    call: dict[str, Any] = {"session": Session(), **arguments}
    with pytest.raises(TypeError, match=message):
        SubagentTracking(**call)


def test_a_cancel_during_a_tool_stops_the_next_tool_and_the_next_model_request(
    session: BlockingSession,
) -> None:
    model_requests: list[int] = []
    tools_run: list[str] = []

    async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        model_requests.append(len(messages))
        if tool_results(messages):
            return ModelResponse(parts=[TextPart("both done")])
        return ModelResponse(
            parts=[
                ToolCallPart("first", {}, tool_call_id="call-0"),
                ToolCallPart("second", {}, tool_call_id="call-1"),
            ]
        )

    agent = Agent(
        FunctionModel(respond), name="worker", capabilities=[SubagentTracking(session, task_id="worker")]
    )

    @agent.tool_plain(sequential=True)
    async def first() -> str:
        tools_run.append("first")
        # A cancel that lands while the tool runs, without an await for the run to notice it in.
        assert session.cancel_subagent_task("worker", reason="stop after the first")
        return "first done"

    @agent.tool_plain(sequential=True)
    async def second() -> str:
        tools_run.append("second")
        return "second done"

    async def run() -> list[ModelMessage]:
        with pytest.raises(RunCancelled) as cancelled:
            await asyncio.wait_for(agent.run("go"), 10)
        return cancelled.value.all_messages()

    history = asyncio.run(run())
    assert tools_run == ["first"], "the tool after the cancel never started"
    assert model_requests == [1], "nor did another model request"
    results = {call_id: part.content for call_id, part in all_tool_results(history).items()}
    assert results == {
        "call-0": "first done",
        "call-1": "The tool 'second' was cancelled before it started: stop after the first.",
    }
    assert _task(session, "worker").status is SubagentStatus.CANCELLED
    assert session.pending_subagent_tasks() == []
