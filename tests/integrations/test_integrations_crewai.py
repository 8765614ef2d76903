"""The CrewAI adapter, ``subagent_tracker.integrations.crewai``: a kickoff is a task with the crew's name; a
cancel by id, cascade, session cancel, deadline or from another process stops the crew at its next model
call, tool call or delegation, through CrewAI's interception hooks, and the task ends ``CANCELLED`` (not as a
failed kickoff); a streamed kickoff whose consumer goes away is cancelled; one crew's cancel never stops
another. Offline: the agents run on ``crewai_fakes.ScriptedLLM``.

CrewAI's pins conflict with the main environment's (openai<3, OpenTelemetry 1.45.1 or later), so this module
runs in ``.venv-crewai``, which ``scripts/check.sh`` makes from the same wheel
(``scripts/constraints-crewai.txt``); in the main environment it is skipped."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

crewai = pytest.importorskip("crewai", reason="runs in .venv-crewai: see scripts/check.sh")

from crewai.tools import tool  # noqa: E402 - after the skip of an environment without CrewAI
from crewai_fakes import ScriptedLLM, Step, crew_of  # noqa: E402
from redis_support import RedisServer, Worker  # noqa: E402

from subagent_tracker import (  # noqa: E402
    DEADLINE_REASON,
    RedisRegistry,
    SubagentStatus,
    TaskCancelledError,
)
from subagent_tracker.integrations import STREAM_CLOSED_REASON, tracked  # noqa: E402
from subagent_tracker.integrations._support import BlockingSession  # noqa: E402
from subagent_tracker.integrations.crewai import (  # noqa: E402
    tracked_kickoff,
    tracked_kickoff_async,
    tracked_kickoff_stream,
)

pytestmark = [
    pytest.mark.timeout(120),
    # CrewAI's own deprecations, raised by its own calls.
    pytest.mark.filterwarnings("ignore::DeprecationWarning:crewai.*"),
]


def _calls(crew: Any) -> list[int]:
    """How many times each agent's model was called."""
    return [agent.llm.calls for agent in crew.agents]


def _cancel(session: BlockingSession, task_id: str, reason: str) -> None:
    """Cancels ``task_id`` (a user pressing stop): on Redis too, the cancel has reached the crew's token here
    when it returns."""
    session.cancel_subagent_task(task_id, reason)
    assert session.token(task_id).is_cancelled, "the cancel had not reached the crew on return"


def _cancelling(session: BlockingSession, task_id: str, reason: str, then: Step) -> Callable[[], Any]:
    """A model step that cancels ``task_id`` as the model answers, and then answers ``then``."""

    def step() -> Any:
        _cancel(session, task_id, reason)
        return then

    return step


def test_the_adapter_imports_with_crewai_and_documents_its_names() -> None:
    from subagent_tracker.integrations import crewai as adapter

    assert adapter.__all__
    for name in adapter.__all__:
        assert getattr(adapter, name).__doc__, f"{name} is documented"


def test_a_kickoff_is_a_task_with_the_crew_s_name_that_ends_with_its_output(
    tracked_session: BlockingSession,
) -> None:
    crew = crew_of("research crew", ("researcher", ["the finding"], []), ("writer", ["the report"], []))
    output = asyncio.run(tracked_kickoff_async(tracked_session, crew, task_id="crew"))
    task = tracked_session.subagent_task("crew")
    assert output.raw == "the report"
    assert task is not None and (task.agent, task.status, task.result) == (
        "research crew",
        SubagentStatus.COMPLETED,
        "the report",
    )


def test_a_crew_whose_model_fails_is_a_failed_task(tracked_session: BlockingSession) -> None:
    def broken() -> str:
        raise RuntimeError("the model is down")

    crew = crew_of("fragile crew", ("researcher", [broken], []))
    with pytest.raises(Exception, match="the model is down"):
        asyncio.run(tracked_kickoff_async(tracked_session, crew, task_id="crew"))
    task = tracked_session.subagent_task("crew")
    assert task is not None and task.status is SubagentStatus.FAILED


@pytest.mark.parametrize("where", ["during a tool", "before a tool"])
def test_a_cancel_by_id_stops_the_crew_at_its_next_checkpoint_and_keeps_the_finished_output(
    tracked_session: BlockingSession, where: str
) -> None:
    """A cancel during a tool lets the tool finish (it runs in the crew's thread) and stops the crew before
    its next model call; a cancel as the model asks for a tool stops the crew before the tool runs."""
    ran: list[str] = []

    @tool("search")  # type: ignore[untyped-decorator,unused-ignore]  # typed where CrewAI is installed
    def search(query: str) -> str:
        """Searches."""
        if where == "during a tool":
            _cancel(tracked_session, "crew", "the user pressed stop")
        ran.append(query)
        return "found"

    call: Step = ("search", {"query": "x"})
    steps: list[Step] = (
        [call, "never"]
        if where == "during a tool"
        else [_cancelling(tracked_session, "crew", "the user pressed stop", call), "never"]
    )
    crew = crew_of("research crew", ("warm", ["warmed up"], []), ("researcher", steps, [search]))
    with pytest.raises(TaskCancelledError, match="the user pressed stop"):
        asyncio.run(tracked_kickoff_async(tracked_session, crew, task_id="crew"))
    task = tracked_session.subagent_task("crew")
    assert task is not None and (task.status, task.cancel_reason, task.result) == (
        SubagentStatus.CANCELLED,
        "the user pressed stop",
        "warmed up",
    )
    assert _calls(crew) == [1, 1], "no model call after the cancel"
    assert ran == (["x"] if where == "during a tool" else []), "a tool starts only before the cancel"


def test_a_cancel_during_a_delegation_stops_the_crew(tracked_session: BlockingSession) -> None:
    """A delegation to a coworker is a tool call: the coworker's abort is swallowed by CrewAI into the
    delegation's result, and the delegating agent stops at its next model call."""
    from crewai import Agent, Crew, Task

    coworker_llm = ScriptedLLM(
        model="scripted", steps=[_cancelling(tracked_session, "crew", "stop the delegation", "never")]
    )
    coworker = Agent(role="analyst", goal="analyses", backstory="offline", llm=coworker_llm, verbose=False)
    delegate: Step = (
        "Delegate work to coworker",
        {"task": "analyse it", "context": "all of it", "coworker": "analyst"},
    )
    lead_llm = ScriptedLLM(model="scripted", steps=[delegate, "never"])
    lead = Agent(
        role="lead", goal="leads", backstory="offline", llm=lead_llm, allow_delegation=True, verbose=False
    )
    task = Task(description="lead the analysis", expected_output="an answer", agent=lead)
    crew = Crew(name="delegating crew", agents=[lead, coworker], tasks=[task], verbose=False)
    with pytest.raises(TaskCancelledError, match="stop the delegation"):
        asyncio.run(tracked_kickoff_async(tracked_session, crew, task_id="crew"))
    record = tracked_session.subagent_task("crew")
    assert record is not None and record.status is SubagentStatus.CANCELLED
    assert (lead_llm.calls, coworker_llm.calls) == (1, 1)


def test_a_deadline_a_parent_s_cancel_and_a_session_cancel_stop_the_crew(
    tracked_session: BlockingSession,
) -> None:
    def slow_step(then: Step) -> Callable[[], Any]:
        def step() -> Any:
            time.sleep(0.3)
            return then

        return step

    crew = crew_of("slow crew", ("researcher", [slow_step(("search", {})), "never"], [_noop_tool()]))
    with pytest.raises(TaskCancelledError):
        asyncio.run(tracked_kickoff_async(tracked_session, crew, task_id="deadline", timeout=0.1))
    task = tracked_session.subagent_task("deadline")
    assert task is not None and (task.status, task.cancel_reason) == (
        SubagentStatus.CANCELLED,
        DEADLINE_REASON,
    )

    async def under_a_parent() -> None:
        cancel_the_parent = _cancelling(tracked_session, "parent", "enough", ("search", {}))
        child = crew_of("child crew", ("researcher", [cancel_the_parent, "never"], [_noop_tool()]))
        async with tracked(tracked_session, agent="outer", task_id="parent"):
            await tracked_kickoff_async(tracked_session, child, task_id="child")

    with pytest.raises(TaskCancelledError):
        asyncio.run(under_a_parent())
    child = tracked_session.subagent_task("child")
    assert child is not None and (child.status, child.parent_id, child.cancel_cause) == (
        SubagentStatus.CANCELLED,
        "parent",
        "parent",
    )

    def session_cancel() -> Step:
        tracked_session.cancel("the session is over")
        return ("search", {})

    last = crew_of("last crew", ("researcher", [session_cancel, "never"], [_noop_tool()]))
    with pytest.raises(TaskCancelledError):
        asyncio.run(tracked_kickoff_async(tracked_session, last, task_id="last"))
    record = tracked_session.subagent_task("last")
    assert record is not None and record.status is SubagentStatus.CANCELLED


def _noop_tool() -> Any:
    @tool("search")  # type: ignore[untyped-decorator,unused-ignore]  # typed where CrewAI is installed
    def search() -> str:
        """Searches."""
        return "found"

    return search


def test_one_crew_s_cancel_never_stops_another_running_beside_it(tracked_session: BlockingSession) -> None:
    both_running = threading.Barrier(2, timeout=10)

    def meet(then: Step) -> Callable[[], Any]:
        def step() -> Any:
            both_running.wait()
            return then

        return step

    @tool("search")  # type: ignore[untyped-decorator,unused-ignore]  # typed where CrewAI is installed
    def cancelling_search() -> str:
        """Searches, while the user stops this crew alone."""
        _cancel(tracked_session, "stopped", "stop this one")
        return "found"

    # Both crews meet in their first model call; the stopped one's cancel then comes from its own tool.
    stopped = crew_of("stopped crew", ("researcher", [meet(("search", {})), "never"], [cancelling_search]))
    going_on = crew_of("other crew", ("researcher", [meet("the other answer")], []))

    async def scenario() -> list[Any]:
        return list(
            await asyncio.gather(
                tracked_kickoff_async(tracked_session, stopped, task_id="stopped"),
                tracked_kickoff_async(tracked_session, going_on, task_id="going on"),
                return_exceptions=True,
            )
        )

    first, second = asyncio.run(scenario())
    assert isinstance(first, TaskCancelledError)
    assert getattr(second, "raw", None) == "the other answer"
    other = tracked_session.subagent_task("going on")
    assert other is not None and other.status is SubagentStatus.COMPLETED


def test_a_streamed_kickoff_whose_consumer_goes_away_is_cancelled(tracked_session: BlockingSession) -> None:
    llm_steps: list[Step] = ["a long answer " * 20, "never"]
    crew = crew_of("streaming crew", ("writer", llm_steps, []), ("editor", ["edited"], []), stream=True)
    for agent in crew.agents:
        agent.llm.chunk_delay = 0.005

    async def read_a_little() -> int:
        chunks = 0
        stream = tracked_kickoff_stream(tracked_session, crew, task_id="streamed")
        async for _ in stream:
            chunks += 1
            if chunks == 3:
                break
        await stream.aclose()
        return chunks

    assert asyncio.run(read_a_little()) == 3
    task = tracked_session.subagent_task("streamed")
    assert task is not None and (task.status, task.cancel_reason) == (
        SubagentStatus.CANCELLED,
        STREAM_CLOSED_REASON,
    )
    deadline = time.monotonic() + 10
    while crew.agents[0].llm.calls < 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.5)
    assert _calls(crew)[1] == 0, "the crew stopped at its next checkpoint, before the editor's model call"

    whole = crew_of("whole crew", ("writer", ["all of it"], []), stream=True)

    async def read_it_all() -> int:
        return len([chunk async for chunk in tracked_kickoff_stream(tracked_session, whole, task_id="whole")])

    assert asyncio.run(read_it_all()) > 0
    done = tracked_session.subagent_task("whole")
    assert done is not None and (done.status, done.result) == (SubagentStatus.COMPLETED, "all of it")


def test_the_blocking_kickoff_runs_where_no_loop_runs_and_refuses_where_one_does(
    tracked_session: BlockingSession,
) -> None:
    crew = crew_of("blocking crew", ("researcher", ["the finding"], []))
    assert tracked_kickoff(tracked_session, crew, task_id="blocking").raw == "the finding"

    async def inside_a_loop() -> None:
        with pytest.raises(RuntimeError, match="await tracked_kickoff_async"):
            tracked_kickoff(tracked_session, crew_of("other", ("r", ["x"], [])), task_id="refused")

    asyncio.run(inside_a_loop())
    assert tracked_session.subagent_task("refused") is None


def test_on_redis_a_cancel_from_another_process_stops_the_crew(module_redis_server: RedisServer) -> None:
    session = RedisRegistry(module_redis_server.url, reconcile_interval=0.1).session("crewai-across")

    def cancelled_elsewhere() -> Any:
        worker = Worker(module_redis_server.url, "crewai-canceller")
        try:
            worker.ask(op="cancel", session="crewai-across", task="remote", reason="from elsewhere")
        finally:
            worker.stop()
        deadline = time.monotonic() + 5
        while not session.token("remote").is_cancelled:
            assert time.monotonic() < deadline, "the cancel never arrived"
            time.sleep(0.005)
        return ("search", {})

    crew = crew_of("remote crew", ("researcher", [cancelled_elsewhere, "never"], [_noop_tool()]))
    with pytest.raises(TaskCancelledError, match="from elsewhere"):
        asyncio.run(tracked_kickoff_async(session, crew, task_id="remote"))
    task = session.subagent_task("remote")
    assert task is not None and (task.status, task.cancel_reason) == (
        SubagentStatus.CANCELLED,
        "from elsewhere",
    )


def test_bad_arguments_are_refused_before_any_task_starts(tracked_session: BlockingSession) -> None:
    with pytest.raises(TypeError, match="crewai Crew"):
        asyncio.run(tracked_kickoff_async(tracked_session, object(), task_id="x"))  # type: ignore[arg-type,unused-ignore]
    with pytest.raises(TypeError, match="tracked_kickoff_stream"):
        asyncio.run(tracked_kickoff_async(tracked_session, crew_of("s", ("r", ["x"], []), stream=True)))
    with pytest.raises(ValueError, match="timeout"):
        asyncio.run(tracked_kickoff_async(tracked_session, crew_of("c", ("r", ["x"], [])), timeout=-1))
    assert tracked_session.subagent_tasks() == []


def test_the_caller_s_own_scoped_hooks_still_run_and_their_aborts_stay_failures(
    tracked_session: BlockingSession,
) -> None:
    """The adapter's checkpoints come after the hooks the caller scoped itself: a guard that blocks a tool
    still blocks it, and a hook's own abort of a model call is a failure, not a cancel."""
    from crewai.hooks.dispatch import HookAborted, InterceptionPoint, register_scoped, scoped_hooks

    ran: list[str] = []

    @tool("delete_file")  # type: ignore[untyped-decorator,unused-ignore]  # typed where CrewAI is installed
    def delete_file(path: str) -> str:
        """Deletes a file."""
        ran.append(path)
        return "deleted"

    def guard(context: Any) -> None:
        if getattr(context, "tool_name", None) == "delete_file":
            raise HookAborted("deleting is not allowed", source="guard")

    def refuse_model(_context: Any) -> None:
        raise HookAborted("no model calls today", source="policy")

    guarded = crew_of(
        "guarded", ("janitor", [("delete_file", {"path": "/etc"}), "left it alone"], [delete_file])
    )
    refused = crew_of("refused", ("writer", ["never"], []))

    async def scenario() -> None:
        with scoped_hooks():
            register_scoped(InterceptionPoint.PRE_TOOL_CALL, guard)
            await tracked_kickoff_async(tracked_session, guarded, task_id="guarded")
        with scoped_hooks():
            register_scoped(InterceptionPoint.PRE_MODEL_CALL, refuse_model)
            with pytest.raises(HookAborted, match="no model calls today"):
                await tracked_kickoff_async(tracked_session, refused, task_id="refused")

    asyncio.run(scenario())
    assert ran == [], "the caller's guard blocked the tool"
    guarded_task, refused_task = (
        tracked_session.subagent_task("guarded"),
        tracked_session.subagent_task("refused"),
    )
    assert guarded_task is not None and guarded_task.status is SubagentStatus.COMPLETED
    assert refused_task is not None and refused_task.status is SubagentStatus.FAILED


def test_a_stream_dropped_unclosed_is_cancelled_keeping_what_the_crew_finished_and_leaves_nothing_behind(
    tracked_session: BlockingSession,
) -> None:
    crew = crew_of(
        "streaming crew",
        ("outliner", ["the outline"], []),
        ("writer", ["a long answer " * 20, "never"], []),
        ("editor", ["edited"], []),
        stream=True,
    )
    for agent in crew.agents:
        agent.llm.chunk_delay = 0.005
    afterwards = crew_of("afterwards", ("researcher", ["done after"], []))

    async def scenario() -> None:
        outline_streamed = False
        async for chunk in tracked_kickoff_stream(tracked_session, crew, task_id="dropped"):
            if "outline" in str(getattr(chunk, "content", "")):
                outline_streamed = True
            if outline_streamed and crew.tasks[0].output is not None and crew.agents[1].llm.calls:
                break  # no aclose(): asyncio's finalizer closes the stream
        deadline = time.monotonic() + 10
        while not (task := tracked_session.subagent_task("dropped")) or not task.finished:
            assert time.monotonic() < deadline, "the dropped stream's task never ended"
            await asyncio.sleep(0.01)
        # Nothing of the stream is left in this context: an untracked kickoff here runs to its end.
        assert (await afterwards.kickoff_async()).raw == "done after"

    asyncio.run(scenario())
    task = tracked_session.subagent_task("dropped")
    assert task is not None and (task.status, task.cancel_reason, task.error) == (
        SubagentStatus.CANCELLED,
        STREAM_CLOSED_REASON,
        None,
    )
    assert task.result == "the outline"


def test_a_reused_crew_s_partial_output_is_this_kickoff_s_alone(tracked_session: BlockingSession) -> None:
    first_steps: list[Step] = ["the outline", "the outline again"]
    writer_steps: list[Step] = ["the draft", _cancelling(tracked_session, "second", "stop", ("search", {}))]
    crew = crew_of("reused", ("outliner", first_steps, []), ("writer", writer_steps, [_noop_tool()]))
    asyncio.run(tracked_kickoff_async(tracked_session, crew, task_id="first"))
    with pytest.raises(TaskCancelledError):
        asyncio.run(tracked_kickoff_async(tracked_session, crew, task_id="second"))
    task = tracked_session.subagent_task("second")
    assert task is not None and (task.status, task.result) == (SubagentStatus.CANCELLED, "the outline again")


def test_a_crew_that_finishes_after_a_cancel_no_checkpoint_saw_raises_it(
    tracked_session: BlockingSession,
) -> None:
    crew = crew_of(
        "late", ("researcher", [_cancelling(tracked_session, "late", "too late", "the answer")], [])
    )
    with pytest.raises(TaskCancelledError, match="too late"):
        asyncio.run(tracked_kickoff_async(tracked_session, crew, task_id="late"))
    task = tracked_session.subagent_task("late")
    assert task is not None and (task.status, task.result) == (SubagentStatus.CANCELLED, "the answer")


def test_a_subagent_cancelled_inside_the_crew_never_answers_for_the_crew(
    tracked_session: BlockingSession,
) -> None:
    """A crew run by another framework's tool call: a subagent that the crew's own tool runs and that ends
    cancelled reports to the crew's tool (if it opted in), not past the crew to the outer call."""
    from subagent_tracker.integrations import answers_for_subagents

    inner = crew_of(
        "inner",
        ("helper", [_cancelling(tracked_session, "inner", "stop the inner", ("search", {}))], [_noop_tool()]),
    )

    @tool("ask_inner")  # type: ignore[untyped-decorator,unused-ignore]  # typed where CrewAI is installed
    def ask_inner() -> str:
        """Asks the inner crew, and carries on without it."""
        try:
            return str(tracked_kickoff(tracked_session, inner, task_id="inner").raw)
        except TaskCancelledError:
            return "the inner crew was stopped"

    outer = crew_of("outer", ("lead", [("ask_inner", {}), "the outer answer"], [ask_inner]))

    async def outer_call() -> str:
        return str((await tracked_kickoff_async(tracked_session, outer, task_id="outer")).raw)

    assert asyncio.run(answers_for_subagents(outer_call)()) == "the outer answer"
