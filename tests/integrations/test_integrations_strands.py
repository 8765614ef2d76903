"""The Strands Agents adapter, ``subagent_tracker.integrations.strands.SubagentHooks``: every invocation of an
agent carrying it is a task; a cancel stops the run at strands' checkpoints and at the adapter's own (a silent
model, a running async tool); a delegating agent gets the cancelled subagent's reason and partial output and
finishes its turn. Offline: the agents run on ``strands_fakes.ScriptedModel``. Every test runs against the
in-memory session and a Redis session."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import AsyncGenerator, Callable, Iterable
from typing import Any

import pytest
from strands import Agent, tool
from strands.hooks import AfterInvocationEvent, HookOrder
from strands.middleware import InvokeModelContext, InvokeModelStage
from strands.types.content import Messages
from strands.types.events import ModelStopReason
from strands_fakes import Reply, ScriptedModel, ToolCall

from subagent_tracker import DEADLINE_REASON, Session, SubagentStatus
from subagent_tracker.integrations import (
    STREAM_CLOSED_REASON,
    cancelled_run_text,
    current_task,
    tracked,
)
from subagent_tracker.integrations._support import BlockingSession
from subagent_tracker.integrations.strands import SubagentHooks

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def session(tracked_session: BlockingSession) -> BlockingSession:
    return tracked_session


@tool
async def wait_for(seconds: float) -> str:
    """Waits, as a slow async tool does (an API call, a sandbox run)."""
    await asyncio.sleep(seconds)
    return f"waited {seconds}s"


def _agent(
    session: BlockingSession,
    name: str,
    script: Iterable[Reply | str],
    *,
    tools: Iterable[Any] = (),
    timeout: float | None = None,
    chunk_delay: float = 0.0,
) -> Agent:
    return Agent(
        model=ScriptedModel(script, chunk_delay=chunk_delay),
        name=name,
        tools=list(tools),
        hooks=[SubagentHooks(session, task_id=name, timeout=timeout)],
        callback_handler=None,
    )


def _task(session: BlockingSession, task_id: str) -> Any:
    snapshot = session.subagent_task(task_id)
    assert snapshot is not None
    return snapshot


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


def _model(agent: Agent) -> ScriptedModel:
    assert isinstance(agent.model, ScriptedModel)
    return agent.model


async def _until(condition: Callable[[], bool]) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the run never got there")


def test_a_subagent_cancelled_by_id_mid_stream_leaves_its_sibling_and_the_delegating_turn_going(
    session: BlockingSession,
) -> None:
    slow = _agent(session, "slow", [Reply("alpha beta gamma delta epsilon zeta eta theta", chunk_delay=0.1)])
    quick = _agent(session, "quick", ["the quick answer"])
    orchestrator = _agent(
        session,
        "orchestrator",
        [
            Reply("Asking both.", (ToolCall("slow", {"input": "dig"}), ToolCall("quick", {"input": "look"}))),
            "Summary of what came back.",
        ],
        tools=[slow.as_tool(), quick.as_tool()],
    )

    async def run() -> Any:
        turn = asyncio.ensure_future(orchestrator.invoke_async("research this"))
        await _until(lambda: _model(slow).text_chunks >= 3)
        assert session.cancel_subagent_task("slow", reason="the user stopped it")
        return await turn

    result = asyncio.run(run())
    assert (result.stop_reason, str(result).strip()) == ("end_turn", "Summary of what came back.")
    slow_task = _task(session, "slow")
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
    quick_task, turn_task = _task(session, "quick"), _task(session, "orchestrator")
    assert (quick_task.status, quick_task.result, quick_task.parent_id) == (
        SubagentStatus.COMPLETED,
        "the quick answer",
        "orchestrator",
    )
    assert (turn_task.status, turn_task.result) == (SubagentStatus.COMPLETED, "Summary of what came back.")
    assert session.pending_subagent_tasks() == []


def test_the_top_level_run_cancelled_returns_cancelled_with_every_tool_call_answered(
    session: BlockingSession,
) -> None:
    researcher = _agent(session, "researcher", [Reply("one two three four five six seven", chunk_delay=0.1)])
    orchestrator = _agent(
        session,
        "orchestrator",
        [
            Reply(
                "Working on it.",
                (ToolCall("researcher", {"input": "dig"}), ToolCall("wait_for", {"seconds": 60})),
            ),
            "never reached",
        ],
        tools=[researcher.as_tool(), wait_for],
    )

    async def run() -> tuple[Any, float]:
        turn = asyncio.ensure_future(orchestrator.invoke_async("research this"))
        await _until(lambda: _model(researcher).text_chunks >= 2)
        assert session.cancel_subagent_task("orchestrator", reason="stop everything")
        started = time.monotonic()
        return await turn, time.monotonic() - started

    result, stopping = asyncio.run(run())
    assert result.stop_reason == "cancelled"
    assert stopping < 2, "the async tool is stopped, not waited for"
    answers = _tool_results(orchestrator.messages)
    assert len(answers) == 2 and all(answer is not None for answer in answers.values())
    researcher_answer, tool_answer = answers.values()
    researcher_task = _task(session, "researcher")
    assert (researcher_task.status, researcher_task.cancel_cause) == (SubagentStatus.CANCELLED, "parent")
    assert _text(researcher_answer) == cancelled_run_text(
        agent="researcher", task_id="researcher", reason="stop everything", partial=researcher_task.result
    )
    assert (tool_answer["status"], _text(tool_answer)) == (
        "error",
        "The tool 'wait_for' was cancelled while running: stop everything.",
    )
    turn_task = _task(session, "orchestrator")
    assert (turn_task.status, turn_task.result) == (SubagentStatus.CANCELLED, "Working on it.")
    assert session.pending_subagent_tasks() == []


def test_a_silent_model_is_stopped_without_waiting_for_a_chunk(session: BlockingSession) -> None:
    thinker = _agent(session, "thinker", [Reply("never sent", stall=60)])

    async def run() -> tuple[Any, float]:
        turn = asyncio.ensure_future(thinker.invoke_async("think"))
        await _until(lambda: _model(thinker).calls == 1)
        assert session.cancel_subagent_task("thinker", reason="too slow")
        started = time.monotonic()
        return await turn, time.monotonic() - started

    result, stopping = asyncio.run(run())
    assert result.stop_reason == "cancelled" and stopping < 2
    assert thinker.messages[-1]["role"] == "assistant", "the cancelled response closes the history"
    thinker_task = _task(session, "thinker")
    assert (thinker_task.status, thinker_task.cancel_reason) == (SubagentStatus.CANCELLED, "too slow")
    assert session.pending_subagent_tasks() == []


def test_a_deadline_stops_a_running_async_tool_from_its_timer_thread(session: BlockingSession) -> None:
    worker = _agent(
        session,
        "worker",
        [Reply("Starting.", (ToolCall("wait_for", {"seconds": 60}),)), "never reached"],
        tools=[wait_for],
        timeout=0.3,
    )
    started = time.monotonic()
    result = asyncio.run(worker.invoke_async("work"))
    assert result.stop_reason == "cancelled" and time.monotonic() - started < 5
    (answer,) = _tool_results(worker.messages).values()
    assert _text(answer) == f"The tool 'wait_for' was cancelled while running: {DEADLINE_REASON}."
    worker_task = _task(session, "worker")
    assert (worker_task.status, worker_task.cancel_cause, worker_task.result) == (
        SubagentStatus.CANCELLED,
        "deadline",
        "Starting.",
    )
    assert session.pending_subagent_tasks() == []


def test_a_cancel_from_another_thread_stops_a_run_of_the_synchronous_entry_point(
    session: BlockingSession,
) -> None:
    # ``agent(prompt)`` runs the invocation on an event loop of its own, in a worker thread.
    talker = _agent(
        session, "talker", [Reply(" ".join(f"word{index}" for index in range(200)))], chunk_delay=0.02
    )

    def cancel_once_it_talks() -> None:
        deadline = time.monotonic() + 30
        while _model(talker).text_chunks < 2 and time.monotonic() < deadline:
            time.sleep(0.005)
        session.cancel_subagent_task("talker", reason="from elsewhere")

    canceller = threading.Thread(target=cancel_once_it_talks)
    canceller.start()
    result = talker("talk")
    canceller.join()
    assert result.stop_reason == "cancelled"
    talker_task = _task(session, "talker")
    assert (talker_task.status, talker_task.cancel_reason) == (SubagentStatus.CANCELLED, "from elsewhere")
    assert talker_task.result.startswith("word0 word1") and "word199" not in talker_task.result
    assert session.pending_subagent_tasks() == []


def test_a_normal_finish_completes_each_run_with_its_output(session: BlockingSession) -> None:
    helper = _agent(session, "helper", ["helped"])
    lead = _agent(
        session,
        "lead",
        [Reply("Let me check.", (ToolCall("helper", {"input": "help"}),)), "All done."],
        tools=[helper.as_tool()],
    )
    result = asyncio.run(lead.invoke_async("go"))
    assert (result.stop_reason, str(result).strip()) == ("end_turn", "All done.")
    lead_task, helper_task = _task(session, "lead"), _task(session, "helper")
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
    assert session.pending_subagent_tasks() == []


def test_a_run_that_raises_fails_and_its_delegating_run_goes_on(session: BlockingSession) -> None:
    broken = Agent(
        model=ScriptedModel([Reply("half", error=RuntimeError("provider down"))]),
        name="broken",
        hooks=[SubagentHooks(session, task_id="broken")],
        callback_handler=None,
        retry_strategy=None,
    )
    lead = _agent(
        session,
        "lead",
        [Reply("Delegating.", (ToolCall("broken", {"input": "x"}),)), "It failed; sorry."],
        tools=[broken.as_tool()],
    )
    result = asyncio.run(lead.invoke_async("go"))
    assert str(result).strip() == "It failed; sorry."
    broken_task = _task(session, "broken")
    assert (broken_task.status, broken_task.error) == (SubagentStatus.FAILED, "RuntimeError: provider down")
    assert _task(session, "lead").status is SubagentStatus.COMPLETED

    with pytest.raises(RuntimeError, match="provider down"):
        asyncio.run(
            Agent(
                model=ScriptedModel([Reply(error=RuntimeError("provider down"))]),
                name="alone",
                hooks=[SubagentHooks(session, task_id="alone")],
                callback_handler=None,
                retry_strategy=None,
            ).invoke_async("go")
        )
    assert _task(session, "alone").status is SubagentStatus.FAILED
    assert session.pending_subagent_tasks() == []


def test_task_ids_come_from_a_string_a_callable_or_are_generated_per_run(session: BlockingSession) -> None:
    ids = iter(["first-run", "second-run"])
    named = Agent(
        model=ScriptedModel(["one", "two"]),
        name="named",
        hooks=[SubagentHooks(session, task_id=lambda: next(ids))],
        callback_handler=None,
    )
    generated = Agent(
        model=ScriptedModel(["one", "two"]),
        name="generated",
        hooks=[SubagentHooks(session)],
        callback_handler=None,
    )

    async def run() -> None:
        for _ in range(2):
            await named.invoke_async("go")
            await generated.invoke_async("go")

    asyncio.run(run())
    assert (_task(session, "first-run").result, _task(session, "second-run").result) == ("one", "two")
    generated_ids = {task.task_id for task in session.subagent_tasks() if task.agent == "generated"}
    assert len(generated_ids) == 2, "a generated id is unique per run"
    assert session.pending_subagent_tasks() == []


def test_a_run_inside_a_tracked_block_is_its_child_and_its_cancel_reaches_the_run(
    session: BlockingSession,
) -> None:
    writer = _agent(session, "writer", [Reply(" ".join(["text"] * 200))], chunk_delay=0.02)

    async def run() -> Any:
        async with tracked(session, agent="my-own-loop", task_id="outer"):
            turn = asyncio.ensure_future(writer.invoke_async("write"))
            await _until(lambda: _model(writer).text_chunks >= 1)
            assert session.cancel_subagent_task("outer", reason="the outer loop stopped")
            return await turn

    result = asyncio.run(run())
    assert result.stop_reason == "cancelled"
    writer_task = _task(session, "writer")
    assert (writer_task.parent_id, writer_task.status, writer_task.cancel_cause) == (
        "outer",
        SubagentStatus.CANCELLED,
        "parent",
    )
    assert session.pending_subagent_tasks() == []


def test_the_agent_s_own_cancel_ends_its_task_cancelled(session: BlockingSession) -> None:
    talker = _agent(session, "talker", [Reply(" ".join(["word"] * 200))], chunk_delay=0.02)

    async def run() -> Any:
        turn = asyncio.ensure_future(talker.invoke_async("talk"))
        await _until(lambda: _model(talker).text_chunks >= 2)
        talker.cancel()
        return await turn

    assert asyncio.run(run()).stop_reason == "cancelled"
    talker_task = _task(session, "talker")
    assert talker_task.status is SubagentStatus.CANCELLED
    assert talker_task.result.startswith("word word")
    assert session.pending_subagent_tasks() == []


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"session": object()}, TypeError, "session must be"),
        ({"task_id": 7}, TypeError, "task_id must be"),
        ({"timeout": -1.0}, ValueError, "timeout"),
    ],
)
def test_bad_arguments_are_refused_at_construction(
    arguments: dict[str, Any], error: type[Exception], message: str
) -> None:
    call: dict[str, Any] = {"session": Session(), **arguments}
    with pytest.raises(error, match=message):
        SubagentHooks(**call)


def test_a_cancel_landing_as_a_run_ends_does_not_stop_the_agent_s_next_run(session: BlockingSession) -> None:
    ids = iter(["run-1", "run-2"])
    agent = Agent(
        model=ScriptedModel(["first answer", "second answer"]),
        name="reused",
        hooks=[SubagentHooks(session, task_id=lambda: next(ids))],
        callback_handler=None,
    )

    def cancel_as_the_run_ends(event: AfterInvocationEvent) -> None:
        # Before the adapter's own after-hook: the cancel's action is on its way to the loop as the run ends.
        if event.agent.cancel_signal.is_set() is False and session.subagent_task("run-2") is None:
            session.cancel_subagent_task("run-1", reason="too late")

    agent.hooks.add_callback(AfterInvocationEvent, cancel_as_the_run_ends, order=HookOrder.SDK_FIRST - 1)

    async def run() -> tuple[str, str]:
        first = await agent.invoke_async("one")
        await asyncio.sleep(0.05)  # the loop turns a late action would run in
        second = await agent.invoke_async("two")
        return str(first.stop_reason), str(second.stop_reason)

    assert asyncio.run(run()) == ("end_turn", "end_turn")
    second_task = _task(session, "run-2")
    assert (second_task.status, second_task.result) == (SubagentStatus.COMPLETED, "second answer")


def test_a_run_started_while_its_caller_handles_an_exception_is_not_failed_by_it(
    session: BlockingSession,
) -> None:
    agent = _agent(session, "fallback", ["the fallback answer"])

    async def run() -> str:
        try:
            raise ConnectionError("the primary provider is down")
        except ConnectionError:
            return str(await agent.invoke_async("answer anyway"))

    assert asyncio.run(run()).strip() == "the fallback answer"
    task = _task(session, "fallback")
    assert (task.status, task.error, task.result) == (SubagentStatus.COMPLETED, None, "the fallback answer")


def test_a_stream_dropped_unclosed_still_ends_its_task_and_parents_nothing(session: BlockingSession) -> None:
    agent = _agent(session, "dropped", [Reply("one two three four five six", chunk_delay=0.01)])
    later = _agent(session, "later", ["a later answer"])

    async def read_first_chunk() -> None:
        async for event in agent.stream_async("go"):
            if "data" in event:
                return  # the stream is dropped here, never closed: asyncio's finalizer closes it later

    async def run() -> None:
        await read_first_chunk()
        deadline = time.monotonic() + 10
        while not _task(session, "dropped").finished:
            assert time.monotonic() < deadline, "the dropped run's task did not end within 10 s"
            gc.collect()
            await asyncio.sleep(0.01)
        # The dropped run is still set in this task's context (strands ran its hooks there), but has ended.
        assert current_task() is None
        await later.invoke_async("and now?")

    asyncio.run(run())
    task = _task(session, "dropped")
    assert (task.status, task.cancel_reason) == (SubagentStatus.CANCELLED, STREAM_CLOSED_REASON)
    later_task = _task(session, "later")
    assert (later_task.status, later_task.parent_id) == (SubagentStatus.COMPLETED, None)
    assert session.pending_subagent_tasks() == []


def test_a_cancel_after_the_model_s_response_is_whole_does_not_replace_it(session: BlockingSession) -> None:
    agent = _agent(session, "answered", ["the complete answer"])

    async def cancel_once_the_response_is_whole(
        context: InvokeModelContext, next_stage: Callable[[InvokeModelContext], AsyncGenerator[Any, None]]
    ) -> AsyncGenerator[Any, None]:
        # Registered after the adapter's, so it runs inside it: the cancel lands with the stop event passed.
        async for event in next_stage(context):
            yield event
            if isinstance(event, ModelStopReason):
                session.cancel_subagent_task("answered", reason="too late")
                await asyncio.sleep(0.01)

    agent.add_middleware(InvokeModelStage, cancel_once_the_response_is_whole)
    asyncio.run(agent.invoke_async("go"))
    assert agent.messages[-1]["content"] == [{"text": "the complete answer"}]
    task = _task(session, "answered")
    assert (task.status, task.result) == (SubagentStatus.CANCELLED, "the complete answer")
