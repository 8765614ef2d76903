"""The LangGraph adapter, ``subagent_tracker.integrations.langgraph``: a compiled graph run as a tracked
subagent through ``tracked_subgraph_tool``, and a whole graph run as a task through ``tracked_astream``. A
cancel stops the graph mid model stream, between tool calls and inside a running async tool; the delegating
graph goes on; a cancelled top-level run leaves its thread's history answering every tool call. Offline:
scripted fake models (``langgraph_fakes.py``). Most tests run against the in-memory session and a Redis
session."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import MessagesState
from langgraph_fakes import ScriptedChatModel, agent_graph, scripted_model, tool_calls

from subagent_tracker import DEADLINE_REASON, Session, SubagentStatus, TaskCancelledError
from subagent_tracker.integrations import (
    STREAM_CLOSED_REASON,
    cancelled_run_text,
    current_task,
    tracked,
)
from subagent_tracker.integrations._support import BlockingSession
from subagent_tracker.integrations.langgraph import tracked_astream, tracked_subgraph_tool

_T = TypeVar("_T")

#: A reply long enough, streamed slowly enough (3 s), that only a cancel ends it within a test.
LONG_REPLY = "slow " * 300


@pytest.fixture
def session(tracked_session: BlockingSession) -> BlockingSession:
    return tracked_session


def _run(work: Coroutine[Any, Any, _T]) -> _T:
    return asyncio.run(asyncio.wait_for(work, timeout=20))


def _task(session: BlockingSession, task_id: str) -> Any:
    snapshot = session.subagent_task(task_id)
    assert snapshot is not None, f"no task {task_id!r}"
    return snapshot


async def _until(condition: Callable[[], bool]) -> None:
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the condition never held")


def _answers(messages: list[BaseMessage]) -> dict[str, ToolMessage]:
    return {message.tool_call_id: message for message in messages if isinstance(message, ToolMessage)}


def _ask(text: str) -> MessagesState:
    return {"messages": [HumanMessage(text)]}


class _SlowSearch:
    """An async tool that runs until cancelled, and records that it was."""

    def __init__(self) -> None:
        self.started = False
        self.cancelled = False

        @tool
        async def search(query: str) -> str:
            """Searches the archive, slowly."""
            self.started = True
            try:
                await asyncio.sleep(30)
            except asyncio.CancelledError:
                self.cancelled = True
                raise
            return "found it"

        self.tool: BaseTool = search


def test_a_subagent_cancelled_by_id_mid_stream_answers_its_call_while_its_sibling_finishes(
    session: BlockingSession,
) -> None:
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

    async def cancel_mid_stream() -> None:
        await _until(lambda: slow_model.chunks_streamed >= 3)
        # From another thread, as a dashboard or an API handler would.
        assert await asyncio.to_thread(session.cancel_subagent_task, "slow", "stop digging")

    async def run() -> list[BaseMessage]:
        async with tracked(session, agent="orchestrator", task_id="root"):
            canceller = asyncio.ensure_future(cancel_mid_stream())
            final = await orchestrator.ainvoke(_ask("research this"))
            await canceller
            return list(final["messages"])

    messages = _run(run())
    slow_task, quick_task = _task(session, "slow"), _task(session, "quick")
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
    assert (answers["call-quick"].status, answers["call-quick"].content) == ("success", "the quick answer")
    assert (quick_task.status, quick_task.result, quick_task.parent_id) == (
        SubagentStatus.COMPLETED,
        "the quick answer",
        "root",
    )
    assert messages[-1].text == "both asked", "the delegating graph finished its turn"
    assert session.pending_subagent_tasks() == []


def test_a_cancel_stops_the_subagent_inside_its_running_async_tool(session: BlockingSession) -> None:
    search = _SlowSearch()
    model = scripted_model(
        [tool_calls(("s1", "search", {"query": "x"}), text="Searching the archive"), "never"]
    )
    researcher = tracked_subgraph_tool(
        agent_graph(model, [search.tool]),
        session,
        name="researcher",
        description="Researches.",
        task_id="sub",
    )
    orchestrator = agent_graph(
        scripted_model([tool_calls(("c1", "researcher", {"input": "find it"})), "reported"]), [researcher]
    )

    async def run() -> list[BaseMessage]:
        running = asyncio.ensure_future(orchestrator.ainvoke(_ask("go")))
        await _until(lambda: search.started)
        assert session.cancel_subagent_task("sub", reason="taking too long")
        return list((await running)["messages"])

    messages = _run(run())
    assert search.cancelled, "the running tool was stopped, not left to run on"
    sub = _task(session, "sub")
    assert (sub.status, sub.result, sub.parent_id) == (
        SubagentStatus.CANCELLED,
        "Searching the archive",
        None,
    )
    assert next(model.messages) == "never", "the subagent's model was not called again"
    answer = _answers(messages)["c1"]
    assert answer.status == "error"
    assert "taking too long" in answer.text and "Searching the archive" in answer.text
    assert messages[-1].text == "reported"


def test_a_cancel_between_tool_calls_stops_the_subagent_before_its_next_model_call(
    session: BlockingSession,
) -> None:
    @tool
    async def take_note(text: str) -> str:
        """Takes a note; the subagent's own run decides here that it has done enough."""
        own = current_task()
        assert own is not None, "a subgraph's tool sees the subagent's run as the current one"
        session.cancel_subagent_task(own.task_id, reason="enough notes")
        # On Redis too, a cancel made in the run's own process has fired its token when it returns.
        assert own.token.is_cancelled
        return "noted"

    model = scripted_model(
        [tool_calls(("n1", "take_note", {"text": "x"}), text="Noting"), "must not be said"]
    )
    researcher = tracked_subgraph_tool(
        agent_graph(model, [take_note]), session, name="researcher", description="Notes.", task_id="sub"
    )

    async def run() -> Any:
        return await researcher.ainvoke({"input": "note it"})

    answer = _run(run())
    assert next(model.messages) == "must not be said", "no model call after the cancel"
    sub = _task(session, "sub")
    assert (sub.status, sub.cancel_reason) == (SubagentStatus.CANCELLED, "enough notes")
    assert answer == cancelled_run_text(
        agent="researcher", task_id="sub", reason="enough notes", partial=sub.result
    )


def test_a_deadline_cancels_a_subagent_and_the_delegating_run_goes_on(session: BlockingSession) -> None:
    # A deadline of a second, for a stream of six: it lands mid stream even if a loaded machine is slow to
    # set the run up.
    researcher = tracked_subgraph_tool(
        agent_graph(scripted_model([LONG_REPLY], token_delay=0.02)),
        session,
        name="researcher",
        description="Researches.",
        task_id="late",
        timeout=1.0,
    )
    orchestrator = agent_graph(
        scripted_model([tool_calls(("c1", "researcher", {"input": "q"})), "went on"]), [researcher]
    )

    messages = _run(orchestrator.ainvoke(_ask("go")))["messages"]
    late = _task(session, "late")
    assert (late.status, late.cancel_reason, late.cancel_cause) == (
        SubagentStatus.CANCELLED,
        DEADLINE_REASON,
        "deadline",
    )
    assert late.result.startswith("slow slow slow "), "the text streamed before the deadline"
    assert len(late.result) < len(LONG_REPLY), "stopped mid stream"
    assert DEADLINE_REASON in _answers(messages)["c1"].text
    assert messages[-1].text == "went on"
    assert session.pending_subagent_tasks() == []


def test_a_deadline_ends_a_tracked_stream_with_task_cancelled_error(session: BlockingSession) -> None:
    graph = agent_graph(scripted_model([LONG_REPLY], token_delay=0.02), name="writer")
    received: list[Any] = []

    async def run() -> None:
        async for chunk in tracked_astream(
            session, graph, _ask("write"), task_id="top", timeout=1.0, stream_mode="messages"
        ):
            received.append(chunk)

    with pytest.raises(TaskCancelledError) as cancelled:
        _run(run())
    assert (cancelled.value.task_id, cancelled.value.reason) == ("top", DEADLINE_REASON)
    assert received and cancelled.value.partial == received, "partial: the chunks yielded so far"
    top = _task(session, "top")
    assert (top.status, top.cancel_cause, top.agent) == (SubagentStatus.CANCELLED, "deadline", "writer")
    assert top.result == "".join(chunk[0].text for chunk in received)
    assert len(received) >= 3 and len(top.result) < len(LONG_REPLY), "stopped mid stream"


def test_normal_runs_complete_with_the_last_message_as_result_and_callable_ids(
    session: BlockingSession,
) -> None:
    ids = iter(["research-1", "research-2"])
    researcher = tracked_subgraph_tool(
        agent_graph(scripted_model(["first answer", "second answer"])),
        session,
        name="researcher",
        description="Researches.",
        task_id=lambda: next(ids),
    )
    calls = tool_calls(("c1", "researcher", {"input": "a"}), ("c2", "researcher", {"input": "b"}))
    orchestrator = agent_graph(scripted_model([calls, "all done"]), [researcher], name="orchestrator")

    async def run() -> list[Any]:
        return [chunk async for chunk in tracked_astream(session, orchestrator, _ask("go"), task_id="root")]

    updates = _run(run())
    assert [next(iter(update)) for update in updates] == ["model", "tools", "model"]
    root = _task(session, "root")
    assert (root.status, root.result, root.agent, root.parent_id) == (
        SubagentStatus.COMPLETED,
        "all done",
        "orchestrator",
        None,
    )
    subagents = [_task(session, task_id) for task_id in ("research-1", "research-2")]
    assert {(task.status, task.parent_id, task.agent) for task in subagents} == {
        (SubagentStatus.COMPLETED, "root", "researcher")
    }
    assert {task.result for task in subagents} == {"first answer", "second answer"}
    answers = _answers(updates[1]["tools"]["messages"])
    assert {answer.text for answer in answers.values()} == {"first answer", "second answer"}
    assert {answer.status for answer in answers.values()} == {"success"}


def test_a_raising_subagent_fails_and_so_does_the_run_it_fails(session: BlockingSession) -> None:
    @tool
    async def broken(query: str) -> str:
        """Always breaks."""
        raise RuntimeError("the tool broke")

    researcher = tracked_subgraph_tool(
        agent_graph(scripted_model([tool_calls(("b1", "broken", {"query": "x"}))]), [broken]),
        session,
        name="researcher",
        description="Researches.",
        task_id="sub",
    )
    orchestrator = agent_graph(
        scripted_model([tool_calls(("c1", "researcher", {"input": "q"})), "never"]), [researcher]
    )

    async def run() -> None:
        async for _ in tracked_astream(session, orchestrator, _ask("go"), task_id="root"):
            pass

    with pytest.raises(RuntimeError, match="the tool broke"):
        _run(run())
    for task_id, parent in (("sub", "root"), ("root", None)):
        failed = _task(session, task_id)
        assert (failed.status, failed.error, failed.parent_id) == (
            SubagentStatus.FAILED,
            "RuntimeError: the tool broke",
            parent,
        )
    assert session.pending_subagent_tasks() == []


def test_runs_nest_through_the_context_across_frameworks_and_the_stream_leaks_no_current_run(
    session: BlockingSession,
) -> None:
    @tool
    async def leaf_work(query: str) -> str:
        """Work tracked with the framework-agnostic core, inside a subagent."""
        async with tracked(session, agent="leaf", task_id="leaf") as leaf:
            leaf.complete("leaf done")
        return "leaf done"

    researcher = tracked_subgraph_tool(
        agent_graph(
            scripted_model([tool_calls(("l1", "leaf_work", {"query": "x"})), "sub done"]), [leaf_work]
        ),
        session,
        name="researcher",
        description="Researches.",
        task_id="sub",
    )
    orchestrator = agent_graph(
        scripted_model([tool_calls(("c1", "researcher", {"input": "q"})), "root done"]), [researcher]
    )

    async def run() -> None:
        async with tracked(session, agent="outer", task_id="outer") as outer:
            async for _ in tracked_astream(session, orchestrator, _ask("go"), task_id="root"):
                assert current_task() is outer, "the stream's run does not leak into the reader's context"
            assert current_task() is outer

    _run(run())
    assert [_task(session, task_id).parent_id for task_id in ("root", "sub", "leaf")] == [
        "outer",
        "root",
        "sub",
    ]
    assert [_task(session, task_id).result for task_id in ("root", "sub", "leaf")] == [
        "root done",
        "sub done",
        "leaf done",
    ]


def test_a_cancelled_top_level_run_answers_every_tool_call_and_the_next_turn_runs(
    session: BlockingSession,
) -> None:
    @tool
    async def lookup(query: str) -> str:
        """Answers at once."""
        return "looked up"

    search = _SlowSearch()
    sub_model = scripted_model([LONG_REPLY], token_delay=0.01)
    researcher = tracked_subgraph_tool(
        agent_graph(sub_model), session, name="researcher", description="Researches.", task_id="sub"
    )
    calls = tool_calls(
        ("fast", "lookup", {"query": "a"}),
        ("slow", "search", {"query": "b"}),
        ("delegated", "researcher", {"input": "c"}),
        text="Working on it",
    )
    model = scripted_model([calls, "picked up again"])
    graph = agent_graph(
        model, [lookup, search.tool, researcher], name="orchestrator", checkpointer=InMemorySaver()
    )
    thread: RunnableConfig = {"configurable": {"thread_id": "conversation"}}
    received: list[Any] = []

    async def first_turn() -> None:
        async def cancel_once_all_run() -> None:
            await _until(lambda: search.started and sub_model.chunks_streamed >= 3)
            assert session.cancel_subagent_task("turn-1", reason="the user pressed stop")

        canceller = asyncio.ensure_future(cancel_once_all_run())
        try:
            async for chunk in tracked_astream(session, graph, _ask("go"), thread, task_id="turn-1"):
                received.append(chunk)
        finally:
            await canceller

    with pytest.raises(TaskCancelledError) as cancelled:
        _run(first_turn())
    assert cancelled.value.partial == received and [next(iter(update)) for update in received] == ["model"]
    turn = _task(session, "turn-1")
    assert (turn.status, turn.cancel_reason, turn.result) == (
        SubagentStatus.CANCELLED,
        "the user pressed stop",
        "Working on it",
    )
    sub = _task(session, "sub")
    assert (sub.status, sub.cancel_cause) == (SubagentStatus.CANCELLED, "parent")
    assert search.cancelled

    saved = _run(graph.aget_state(thread)).values["messages"]
    answers = _answers(saved)
    assert set(answers) == {"fast", "slow", "delegated"}, "every tool call has a result"
    assert (answers["fast"].status, answers["fast"].text) == ("success", "looked up"), "a finished call kept"
    assert (answers["slow"].status, answers["slow"].text) == (
        "error",
        "The tool 'search' was cancelled while running: the user pressed stop.",
    )
    # The subagent's own answer if its cancel (a cascade) stopped it before the run's stopped its call.
    assert answers["delegated"].status == "error" and "the user pressed stop" in answers["delegated"].text

    async def next_turn() -> list[Any]:
        return [
            chunk async for chunk in tracked_astream(session, graph, _ask("again"), thread, task_id="turn-2")
        ]

    _run(next_turn())
    assert (_task(session, "turn-2").status, _task(session, "turn-2").result) == (
        SubagentStatus.COMPLETED,
        "picked up again",
    )
    assert session.pending_subagent_tasks() == []


def test_closing_the_stream_early_cancels_the_run(session: BlockingSession) -> None:
    graph = agent_graph(scripted_model([LONG_REPLY], token_delay=0.01))

    async def run() -> None:
        stream = tracked_astream(session, graph, _ask("write"), task_id="abandoned", stream_mode="messages")
        async for _ in stream:
            break
        await stream.aclose()  # type: ignore[attr-defined]

    _run(run())
    abandoned = _task(session, "abandoned")
    assert (abandoned.status, abandoned.cancel_reason, abandoned.result) == (
        SubagentStatus.CANCELLED,
        STREAM_CLOSED_REASON,
        "slow ",
    )
    assert session.pending_subagent_tasks() == []


def test_called_outside_a_graph_the_tool_returns_text_and_each_run_gets_its_own_id(
    session: BlockingSession,
) -> None:
    answering = tracked_subgraph_tool(
        agent_graph(scripted_model(["one", "two"])), session, name="researcher", description="Researches."
    )
    slow = tracked_subgraph_tool(
        agent_graph(scripted_model([LONG_REPLY], token_delay=0.01)),
        session,
        name="slow",
        description="Researches slowly.",
        timeout=0.2,
    )

    async def run() -> list[Any]:
        return [
            await answering.ainvoke({"input": "a"}),
            await answering.ainvoke({"input": "b"}),
            await slow.ainvoke({"input": "c"}),
        ]

    first, second, cancelled = _run(run())
    assert (first, second) == ("one", "two")
    tasks = {task.result: task for task in session.subagent_tasks()}
    assert tasks["one"].task_id != tasks["two"].task_id, "a generated id is unique per run"
    late = next(task for task in session.subagent_tasks() if task.agent == "slow")
    assert cancelled == cancelled_run_text(
        agent="slow", task_id=late.task_id, reason=DEADLINE_REASON, partial=late.result
    )


_OPTIONS: list[dict[str, Any]] = [
    {},
    {"stream_mode": "values"},
    {"stream_mode": ["updates", "values"]},
    {"stream_mode": "updates", "subgraphs": True},
    {"stream_mode": ["values", "custom"], "subgraphs": True},
    {"stream_mode": "updates", "version": "v2"},
]


@pytest.mark.parametrize("options", _OPTIONS)
def test_the_stream_yields_what_graph_astream_yields(options: dict[str, Any]) -> None:
    def build() -> Any:
        inner = agent_graph(scripted_model(["inner answer"]), name="inner")
        researcher = tracked_subgraph_tool(inner, Session(), name="researcher", description="Researches.")
        script: list[AIMessage | str] = [
            tool_calls(("c1", "researcher", {"input": "q"}), text="Asking"),
            "done",
        ]
        return agent_graph(scripted_model(script), [researcher], name="orchestrator")

    async def run() -> tuple[list[Any], list[Any]]:
        plain = [_comparable(chunk) async for chunk in build().astream(_ask("go"), **options)]
        through = [
            _comparable(chunk) async for chunk in tracked_astream(Session(), build(), _ask("go"), **options)
        ]
        return plain, through

    plain, through = _run(run())
    assert plain and through == plain


def _comparable(value: Any) -> Any:
    """A chunk without what differs from run to run: message ids and the task ids in namespaces."""
    if isinstance(value, BaseMessage):
        return (value.type, value.text, [call["id"] for call in getattr(value, "tool_calls", [])])
    if isinstance(value, dict):
        return {key: _comparable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_comparable(item) for item in value)
    if isinstance(value, str):
        return re.sub(r":[0-9a-f-]{36}", ":<task>", value)
    return value


@pytest.mark.parametrize(
    ("arguments", "message"),
    [({"session": object()}, "session must be"), ({"task_id": 7}, "task_id must be")],
)
@pytest.mark.parametrize("entry_point", ["tracked_subgraph_tool", "tracked_astream"])
def test_bad_arguments_are_type_errors_at_construction(
    entry_point: str, arguments: dict[str, Any], message: str
) -> None:
    graph = agent_graph(scripted_model(["unused"]))
    call: dict[str, Any] = {"session": Session(), **arguments}
    with pytest.raises(TypeError, match=message):
        if entry_point == "tracked_subgraph_tool":
            tracked_subgraph_tool(graph, name="a", description="b", **call)
        else:
            tracked_astream(graph=graph, input=_ask("go"), **call)


def test_the_fake_model_streams_tool_calls_as_chunks() -> None:
    model: ScriptedChatModel = scripted_model([tool_calls(("t1", "lookup", {"query": "x"}), text="Let me")])

    async def run() -> list[Any]:
        return [chunk async for chunk in model.astream("hi")]

    chunks = _run(run())
    assert [chunk.text for chunk in chunks][:2] == ["Let ", "me"]
    assert any(chunk.tool_call_chunks for chunk in chunks)
