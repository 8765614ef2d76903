"""The OpenAI Agents SDK adapter, ``subagent_tracker.integrations.openai_agents``: agents used as tools and
whole streamed runs are tasks; a cancel by id, cascade, deadline or another thread stops them at the SDK's
checkpoints while the delegating run goes on; a cancelled run leaves every function call answered; nothing
stays pending. Scripted models only (``agents.testing``), against the in-memory and a Redis session."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest
from agents import AgentToolStreamEvent, RawResponsesStreamEvent, Runner, function_tool
from agents.testing import ModelStep, ScriptedModel
from agents.tool_context import ToolContext
from openai.types.responses import ResponseTextDeltaEvent
from openai_agents_fakes import calls_step, scripted_agent, slow_text_step, text_step
from pydantic import BaseModel

from subagent_tracker import DEADLINE_REASON, Session, SubagentStatus
from subagent_tracker.integrations import (
    FRAMEWORK_CANCEL_REASON,
    RUN_STOPPED_REASON,
    STREAM_CLOSED_REASON,
    cancelled_run_text,
    tracked,
)
from subagent_tracker.integrations._support import BlockingSession
from subagent_tracker.integrations.openai_agents import tracked_as_tool, tracked_run_streamed

_T = TypeVar("_T")
WORDS = [f"w{index}" for index in range(400)]
DONE = "orchestrator done"


@pytest.fixture
def session(tracked_session: BlockingSession) -> Iterator[BlockingSession]:
    yield tracked_session
    assert tracked_session.pending_subagent_tasks() == [], "nothing stays pending"


def _task(session: BlockingSession, task_id: str) -> Any:
    snapshot = session.subagent_task(task_id)
    assert snapshot is not None
    return snapshot


def _run(scenario: Callable[[], Awaitable[_T]]) -> _T:
    async def bounded() -> _T:
        return await asyncio.wait_for(scenario(), timeout=10)

    return asyncio.run(bounded())


class _Deltas:
    """A caller's own ``on_stream``: counts the nested run's text deltas, and says when enough came."""

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


def _calls(history: list[Any]) -> list[str]:
    return [item["call_id"] for item in history if item.get("type") == "function_call"]


def _assert_partial(partial: str, at_least: int) -> None:
    assert len(partial.split()) >= at_least, "the text streamed before the cancel"
    assert " ".join(WORDS).startswith(partial) and partial != " ".join(WORDS), "and not the whole of it"


def test_a_subagent_cancelled_by_id_mid_stream_answers_its_call_while_its_sibling_finishes(
    session: BlockingSession,
) -> None:
    deltas = _Deltas(enough=3)
    slow = scripted_agent("researcher", [slow_text_step(WORDS, delay=0.01)])
    quick = scripted_agent("summarizer", [slow_text_step(["a", "b", "c"], delay=0.01)])
    orchestrator_model = ScriptedModel(
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

    async def scenario() -> list[Any]:
        result = tracked_run_streamed(session, orchestrator, "go", task_id="root")

        async def cancel_mid_stream() -> None:
            await deltas.enough.wait()
            assert session.cancel_subagent_task("slow", reason="enough research")

        canceller = asyncio.ensure_future(cancel_mid_stream())
        async for _event in result.stream_events():
            pass
        await canceller
        assert result.final_output == DONE, "the delegating run went on and finished its turn"
        return result.to_input_list()

    history = _run(scenario)
    slow_task, quick_task, root = _task(session, "slow"), _task(session, "quick"), _task(session, "root")
    assert (slow_task.status, slow_task.cancel_reason, slow_task.parent_id) == (
        SubagentStatus.CANCELLED,
        "enough research",
        "root",
    )
    _assert_partial(slow_task.result, at_least=3)
    expected = cancelled_run_text(
        agent="researcher", task_id="slow", reason="enough research", partial=slow_task.result
    )
    assert _outputs(history) == {"call-slow": expected, "call-quick": "a b c"}
    assert (quick_task.status, quick_task.result, quick_task.parent_id) == (
        SubagentStatus.COMPLETED,
        "a b c",
        "root",
    )
    assert (root.status, root.result, root.agent) == (SubagentStatus.COMPLETED, DONE, "orchestrator")
    last_call = orchestrator_model.last_call
    assert last_call is not None
    assert _outputs(list(last_call.input))["call-slow"] == expected, "the delegating model read it"
    assert deltas.count >= 3, "the caller's own on_stream still gets the events"


def test_a_cancelled_top_level_run_ends_its_stream_quietly_and_answers_every_call(
    session: BlockingSession,
) -> None:
    deltas = _Deltas(enough=3)
    slow_tool_started = threading.Event()

    @function_tool
    async def fetch(url: str) -> str:
        slow_tool_started.set()
        await asyncio.sleep(30)
        return "fetched"

    @function_tool
    async def lookup(key: str) -> str:
        return f"value of {key}"

    researcher = scripted_agent("researcher", [slow_text_step(WORDS, delay=0.01)])
    orchestrator = scripted_agent(
        "orchestrator",
        [
            calls_step(
                ("research", {"input": "x"}, "call-research"),
                ("fetch", {"url": "u"}, "call-fetch"),
                ("lookup", {"key": "k"}, "call-lookup"),
            ),
            text_step(DONE),
        ],
        [
            tracked_as_tool(
                researcher,
                session,
                tool_name="research",
                tool_description="d",
                task_id="child",
                on_stream=deltas,
            ),
            fetch,
            lookup,
        ],
    )

    async def scenario() -> tuple[list[Any], float]:
        result = tracked_run_streamed(session, orchestrator, "go", task_id="root")

        async def cancel_from_another_thread() -> float:
            await deltas.enough.wait()
            await asyncio.get_running_loop().run_in_executor(None, slow_tool_started.wait)
            cancelled_at = time.monotonic()
            thread = threading.Thread(
                target=session.cancel_subagent_task, args=("root", "the user pressed stop")
            )
            thread.start()
            thread.join()
            return cancelled_at

        canceller = asyncio.ensure_future(cancel_from_another_thread())
        async for _event in result.stream_events():
            pass
        stopped_after = time.monotonic() - await canceller
        assert result.final_output is None
        return result.to_input_list(), stopped_after

    history, stopped_after = _run(scenario)
    assert stopped_after < 2, "the running async tool and the nested stream were stopped, not waited for"
    child, root = _task(session, "child"), _task(session, "root")
    assert (root.status, root.cancel_reason, root.finished) == (
        SubagentStatus.CANCELLED,
        "the user pressed stop",
        True,
    )
    assert (child.status, child.cancel_cause, child.parent_id) == (SubagentStatus.CANCELLED, "parent", "root")
    _assert_partial(child.result, at_least=3)
    assert _calls(history) == ["call-research", "call-fetch", "call-lookup"], "the dropped turn is put back"
    assert _outputs(history) == {
        "call-research": cancelled_run_text(
            agent="researcher", task_id="child", reason="the user pressed stop", partial=child.result
        ),
        "call-fetch": "The tool 'fetch' was cancelled while running: the user pressed stop.",
        "call-lookup": "value of k",
    }


def test_a_top_level_run_cancelled_mid_stream_keeps_its_streamed_text(session: BlockingSession) -> None:
    talker = scripted_agent("talker", [slow_text_step(WORDS, delay=0.01)])

    async def scenario() -> list[Any]:
        result = tracked_run_streamed(session, talker, "go", task_id="talk")
        deltas = 0
        async for event in result.stream_events():
            if isinstance(event, RawResponsesStreamEvent) and isinstance(event.data, ResponseTextDeltaEvent):
                deltas += 1
                if deltas == 5:
                    session.cancel_subagent_task("talk", reason="long enough")
        return result.to_input_list()

    history = _run(scenario)
    talk = _task(session, "talk")
    assert (talk.status, talk.cancel_reason) == (SubagentStatus.CANCELLED, "long enough")
    _assert_partial(talk.result, at_least=5)
    assert history == [{"content": "go", "role": "user"}]


def test_deadlines_stop_a_subagent_and_a_whole_run(session: BlockingSession) -> None:
    # A deadline of a second, for streams of four: it lands mid stream even if a loaded machine is slow to
    # set the runs up. The two runs go side by side, so the test waits for one deadline.
    researcher = scripted_agent("researcher", [slow_text_step(WORDS, delay=0.01)])
    orchestrator = scripted_agent(
        "orchestrator",
        [calls_step(("research", {"input": "x"}, "call-1")), text_step(DONE)],
        [
            tracked_as_tool(
                researcher, session, tool_name="research", tool_description="d", task_id="r", timeout=1.0
            )
        ],
    )
    talker = scripted_agent("talker", [slow_text_step(WORDS, delay=0.01)])

    async def drain(result: Any) -> Any:
        async for _event in result.stream_events():
            pass
        return result.final_output

    async def scenario() -> tuple[Any, Any]:
        delegating = tracked_run_streamed(session, orchestrator, "go", task_id="root")
        whole = tracked_run_streamed(session, talker, "go", task_id="talk", timeout=1.0)
        delegated, talked = await asyncio.gather(drain(delegating), drain(whole))
        return delegated, talked

    assert _run(scenario) == (DONE, None)
    for task_id in ("r", "talk"):
        task = _task(session, task_id)
        assert (task.status, task.cancel_reason, task.cancel_cause) == (
            SubagentStatus.CANCELLED,
            DEADLINE_REASON,
            "deadline",
        )
        _assert_partial(task.result, at_least=3)
    assert _task(session, "root").status is SubagentStatus.COMPLETED


def test_a_normal_finish_completes_with_the_output_and_ids_can_come_from_a_callable(
    session: BlockingSession,
) -> None:
    ids = iter(["first", "second"])
    helper = scripted_agent("helper", [text_step("one"), text_step("two")])
    orchestrator = scripted_agent(
        "orchestrator",
        [
            calls_step(("help", {"input": "a"}, "call-1")),
            calls_step(("help", {"input": "b"}, "call-2")),
            text_step(DONE),
        ],
        [tracked_as_tool(helper, session, tool_name="help", tool_description="d", task_id=lambda: next(ids))],
    )

    async def scenario() -> Any:
        result = tracked_run_streamed(session, orchestrator, "go", task_id=lambda: "root")
        async for _event in result.stream_events():
            pass
        return result.final_output

    assert _run(scenario) == DONE
    first, second, root = _task(session, "first"), _task(session, "second"), _task(session, "root")
    assert (first.status, first.result, first.agent, first.parent_id) == (
        SubagentStatus.COMPLETED,
        "one",
        "helper",
        "root",
    )
    assert (second.status, second.result) == (SubagentStatus.COMPLETED, "two")
    assert (root.status, root.result) == (SubagentStatus.COMPLETED, DONE)


def test_a_raising_subagent_fails_its_task_and_the_delegating_run_goes_on(session: BlockingSession) -> None:
    broken = scripted_agent("broken", [ModelStep.raise_error(RuntimeError("the model broke"))])
    orchestrator = scripted_agent(
        "orchestrator",
        [calls_step(("delegate", {"input": "x"}, "call-1")), text_step(DONE)],
        [tracked_as_tool(broken, session, tool_name="delegate", tool_description="d", task_id="broken")],
    )
    broken_top = scripted_agent("broken-top", [ModelStep.raise_error(RuntimeError("the top model broke"))])

    async def scenario() -> list[Any]:
        result = tracked_run_streamed(session, orchestrator, "go", task_id="root")
        async for _event in result.stream_events():
            pass
        assert result.final_output == DONE
        failing = tracked_run_streamed(session, broken_top, "go", task_id="top")
        with pytest.raises(RuntimeError, match="the top model broke"):
            async for _event in failing.stream_events():
                pass
        return result.to_input_list()

    history = _run(scenario)
    assert _outputs(history) == {"call-1": "An error occurred while running the tool. Please try again."}
    task = _task(session, "broken")
    assert task.status is SubagentStatus.FAILED and "the model broke" in task.error
    top = _task(session, "top")
    assert top.status is SubagentStatus.FAILED and "the top model broke" in top.error


def test_runs_nest_through_the_context_across_frameworks_and_the_tool_runs_outside_a_run(
    session: BlockingSession,
) -> None:
    helper = scripted_agent("helper", [text_step("from a plain run"), text_step("called directly")])
    tool = tracked_as_tool(helper, session, tool_name="help", tool_description="d", task_id=lambda: next(ids))
    ids = iter(["in-plain-run", "direct"])
    orchestrator = scripted_agent(
        "orchestrator", [calls_step(("help", {"input": "a"}, "call-1")), text_step(DONE)], [tool]
    )

    async def scenario() -> Any:
        async with tracked(session, agent="outer", task_id="outer"):
            # An untracked SDK run inside a tracked run of any framework: its agent tools are the outer's
            # children.
            result = await Runner.run(orchestrator, "go")
            arguments = json.dumps({"input": "b"})
            context = ToolContext(
                context=None, tool_name="help", tool_call_id="direct-call", tool_arguments=arguments
            )
            direct = await tool.on_invoke_tool(context, arguments)
        return result.final_output, direct

    assert _run(scenario) == (DONE, "called directly")
    assert _task(session, "in-plain-run").parent_id == "outer"
    direct = _task(session, "direct")
    assert (direct.parent_id, direct.status, direct.result) == (
        "outer",
        SubagentStatus.COMPLETED,
        "called directly",
    )


def test_a_tool_run_inside_another_session_s_run_is_linked_to_it(session: BlockingSession) -> None:
    elsewhere = Session()
    deltas = _Deltas(enough=2)
    researcher = scripted_agent("researcher", [slow_text_step(WORDS, delay=0.01)])
    tool = tracked_as_tool(
        researcher, session, tool_name="research", tool_description="d", task_id="inner", on_stream=deltas
    )
    arguments = json.dumps({"input": "x"})

    async def scenario() -> Any:
        async with tracked(elsewhere, agent="outer", task_id="outer"):
            context = ToolContext(
                context=None, tool_name="research", tool_call_id="c", tool_arguments=arguments
            )
            call = asyncio.ensure_future(tool.on_invoke_tool(context, arguments))
            await deltas.enough.wait()
            elsewhere.cancel_subagent_task("outer", reason="from the other session")
            return await call

    output = _run(scenario)
    inner = _task(session, "inner")
    assert (inner.parent_id, inner.status, inner.cancel_cause) == (None, SubagentStatus.CANCELLED, "linked")
    assert output == cancelled_run_text(
        agent="researcher", task_id="inner", reason="from the other session", partial=inner.result
    )


def test_a_torn_down_tool_call_cancels_its_subagent(session: BlockingSession) -> None:
    deltas = _Deltas(enough=2)
    researcher = scripted_agent("researcher", [slow_text_step(WORDS, delay=0.01)])
    tool = tracked_as_tool(
        researcher, session, tool_name="research", tool_description="d", task_id="torn", on_stream=deltas
    )
    arguments = json.dumps({"input": "x"})

    async def scenario() -> None:
        context = ToolContext(context=None, tool_name="research", tool_call_id="c", tool_arguments=arguments)
        call = asyncio.ensure_future(tool.on_invoke_tool(context, arguments))
        await deltas.enough.wait()
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        for _ in range(100):
            if _task(session, "torn").finished:
                break
            await asyncio.sleep(0.01)

    _run(scenario)
    torn = _task(session, "torn")
    assert (torn.status, torn.cancel_reason, torn.finished) == (
        SubagentStatus.CANCELLED,
        RUN_STOPPED_REASON,
        True,
    )
    _assert_partial(torn.result, at_least=2)


def test_a_consumer_that_stops_reading_stops_the_run(session: BlockingSession) -> None:
    talker = scripted_agent("talker", [slow_text_step(WORDS, delay=0.01)])
    other = scripted_agent("other", [slow_text_step(WORDS, delay=0.01)])

    async def scenario() -> None:
        abandoned = tracked_run_streamed(session, talker, "go", task_id="abandoned")
        async for _event in abandoned.stream_events():
            break
        cancelled = tracked_run_streamed(session, other, "go", task_id="cancelled-by-sdk")
        async for event in cancelled.stream_events():
            if isinstance(event, RawResponsesStreamEvent) and isinstance(event.data, ResponseTextDeltaEvent):
                cancelled.cancel()
        for result in (abandoned, cancelled):
            assert result.run_loop_task is not None
            await asyncio.wait({result.run_loop_task}, timeout=2)
            assert result.run_loop_task.done(), "the run does not go on"
        await asyncio.sleep(0)

    _run(scenario)
    assert (_task(session, "abandoned").status, _task(session, "abandoned").cancel_reason) == (
        SubagentStatus.CANCELLED,
        STREAM_CLOSED_REASON,
    )
    assert _task(session, "cancelled-by-sdk").cancel_reason == FRAMEWORK_CANCEL_REASON


@pytest.mark.parametrize("arguments", [{"session": object()}, {"task_id": 7}])
def test_bad_arguments_are_type_errors_at_construction(arguments: dict[str, Any]) -> None:
    agent = scripted_agent("a", [])
    call: dict[str, Any] = {"session": Session(), **arguments}
    with pytest.raises(TypeError, match=r"session must be|task_id must be"):
        tracked_as_tool(agent, tool_name="a", tool_description="d", **call)

    async def start_a_run() -> None:
        tracked_run_streamed(starting_agent=agent, input="go", **call)

    with pytest.raises(TypeError, match=r"session must be|task_id must be"):
        asyncio.run(start_a_run())


class _Answer(BaseModel):
    answer: int


def test_a_structured_output_is_the_result_and_kept_as_json_on_redis(session: BlockingSession) -> None:
    answering = scripted_agent("answering", [text_step('{"answer": 42}')])
    answering.output_type = _Answer

    async def scenario() -> Any:
        result = tracked_run_streamed(session, answering, "go", task_id="structured")
        async for _event in result.stream_events():
            pass
        return result.final_output

    assert _run(scenario) == _Answer(answer=42)
    kept = _task(session, "structured").result
    assert kept == (_Answer(answer=42) if isinstance(session, Session) else {"answer": 42})
