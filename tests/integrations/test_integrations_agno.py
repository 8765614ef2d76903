"""The Agno adapter, ``subagent_tracker.integrations.agno.SubagentCancellationManager``, installed with Agno's
own ``set_cancellation_manager()``: every agent and team run is a task; a cancel by id, by Agno's own
``cancel_run``, by a team's cancel, by deadline or from another process stops the run at Agno's checkpoints; a
member cancelled alone answers its team, which goes on. Offline: the agents run on
``agno_fakes.ScriptedModel``. Every test runs against the in-memory session and a Redis session.

Ported from Agno's own cancellation tests (in ``libs/agno/tests/integration/``:
``agent/test_agent_run_cancellation.py`` and ``teams/test_team_run_cancellation.py``, which need a live
model): a cancel during a sync and an async stream, a non-streaming sync and async run cancelled, a cancel of
a run that does not exist, a cancel that comes before the run registers, a run cancelled by its own tool,
several cancels of one run, a new run of the agent after a cancelled one, the manager's active runs and their
cleanup, and a team's cancel reaching its running member."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from agno.agent import Agent
from agno.run.base import RunStatus
from agno.run.cancel import get_cancellation_manager, set_cancellation_manager
from agno.team import Team
from agno.tools import tool
from agno_fakes import ScriptedModel, Step
from redis_support import RedisServer, Worker

from subagent_tracker import DEADLINE_REASON, RedisRegistry, Session, SubagentStatus
from subagent_tracker.integrations import _CURRENT, cancelled_run_text, current_task, tracked
from subagent_tracker.integrations._support import BlockingSession
from subagent_tracker.integrations.agno import AGNO_CANCEL_REASON, PAUSED_REASON, SubagentCancellationManager

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def session(tracked_session: BlockingSession) -> Iterator[BlockingSession]:
    """The session, with a manager on it installed for the test, and Agno's own restored after."""
    installed = get_cancellation_manager()
    set_cancellation_manager(SubagentCancellationManager(tracked_session))
    yield tracked_session
    set_cancellation_manager(installed)


def _manager() -> SubagentCancellationManager:
    manager = get_cancellation_manager()
    assert isinstance(manager, SubagentCancellationManager)
    return manager


def _agent(name: str, steps: list[Step], tools: list[Any] | None = None) -> Agent:
    return Agent(name=name, model=ScriptedModel(steps=steps), tools=tools or [], telemetry=False)


def _assert_cancelled_here(task_id: str) -> None:
    """A cancel made in this process has reached its run's token when it returns, on Redis too."""
    assert _manager().is_cancelled(task_id), f"the cancel of {task_id!r} had not reached its run on return"


def _cancel(session: BlockingSession, task_id: str, reason: str) -> Callable[[], str]:
    """A model step that cancels ``task_id`` as the model answers (a user pressing stop meanwhile)."""

    def step() -> str:
        session.cancel_subagent_task(task_id, reason)
        _assert_cancelled_here(task_id)
        return "partial answer"

    return step


def _answered(messages: list[Any] | None) -> bool:
    """Whether every tool call in ``messages`` has its answer."""
    calls = {call["id"] for message in messages or [] for call in (message.tool_calls or [])}
    answers = {message.tool_call_id for message in messages or [] if message.role == "tool"}
    return calls <= answers


def add(a: int, b: int) -> str:
    """Adds two numbers."""
    return str(a + b)


def test_a_run_is_a_task_with_the_agent_s_name_and_ends_with_its_output(session: BlockingSession) -> None:
    output = _agent("calculator", [("add", {"a": 1, "b": 2}), "three"], [add]).run("1 + 2?", run_id="sum")
    assert (output.status, output.content) == (RunStatus.completed, "three")
    task = session.subagent_task("sum")
    assert task is not None
    assert (task.agent, task.status, task.result) == ("calculator", SubagentStatus.COMPLETED, "three")
    assert _manager().get_active_runs() == {}


def test_an_async_run_is_a_task_too(session: BlockingSession) -> None:
    async def main() -> Any:
        return await _agent("calculator", ["four"]).arun("2 + 2?", run_id="async-sum")

    output = asyncio.run(main())
    assert output.status is RunStatus.completed
    task = session.subagent_task("async-sum")
    assert task is not None and (task.status, task.result) == (SubagentStatus.COMPLETED, "four")


def test_a_run_whose_model_fails_is_a_failed_task(session: BlockingSession) -> None:
    def broken() -> str:
        raise RuntimeError("the model is down")

    output = _agent("fragile", [broken]).run("go", run_id="broken")
    assert output.status is RunStatus.error
    task = session.subagent_task("broken")
    assert task is not None and task.status is SubagentStatus.FAILED
    assert "the model is down" in (task.error or "")


@pytest.mark.parametrize("mode", ["sync", "async", "sync-stream", "async-stream"])
def test_a_cancel_by_id_stops_the_run_at_its_next_checkpoint(session: BlockingSession, mode: str) -> None:
    """Agno's test_cancel_agent_during_{sync,async}_streaming and
    test_cancel_agent_non_streaming_{sync,async}: the run ends cancelled, its tool calls answered, the task
    cancelled with the reason."""
    steps: list[Step] = [("add", {"a": 1, "b": 1}), _cancel(session, mode, "user pressed stop"), "never said"]
    agent = _agent("researcher", steps, [add])

    async def run_async() -> Any:
        if mode == "async":
            return await agent.arun("go", run_id=mode)
        last: Any = None
        async for event in agent.arun("go", run_id=mode, stream=True, yield_run_output=True):
            last = event
        return last

    output: Any = None
    if mode == "sync":
        output = agent.run("go", run_id=mode)
    elif mode == "sync-stream":
        for event in agent.run("go", run_id=mode, stream=True, yield_run_output=True):
            output = event
    else:
        output = asyncio.run(run_async())
    assert output is not None and output.status is RunStatus.cancelled
    assert _answered(output.messages)
    assert agent.model is not None and "never said" in str(agent.model.steps)  # type: ignore[attr-defined]
    task = session.subagent_task(mode)
    assert task is not None
    assert (task.status, task.cancel_reason, task.finished) == (
        SubagentStatus.CANCELLED,
        "user pressed stop",
        True,
    )


def test_a_run_cancelled_by_its_own_tool_stops_before_the_next_model_call(session: BlockingSession) -> None:
    """Agno's test_cancel_agent_immediately and test_cancel_agent_with_tool_calls."""

    def stop_me(run_context: Any) -> str:
        """Stops the run it is called in."""
        assert Agent.cancel_run(run_context.run_id) is True
        return "stopping"

    agent = _agent("self-stopper", [("stop_me", {}), "never said"], [stop_me])
    output = agent.run("go", run_id="self")
    assert output.status is RunStatus.cancelled
    assert _answered(output.messages)
    task = session.subagent_task("self")
    assert task is not None and (task.status, task.cancel_reason) == (
        SubagentStatus.CANCELLED,
        AGNO_CANCEL_REASON,
    )


def test_a_cancel_of_a_run_not_started_is_kept_and_cancels_it_as_it_starts(session: BlockingSession) -> None:
    """Agno's test_cancel_non_existent_agent_run, and its cancel-before-start: the intent is stored."""
    manager = _manager()
    assert manager.cancel_run("later") is False
    assert manager.is_cancelled("later") is True
    assert manager.get_active_runs() == {"later": True}
    output = _agent("late", ["never said"]).run("go", run_id="later")
    assert output.status is RunStatus.cancelled
    task = session.subagent_task("later")
    assert task is not None and task.status is SubagentStatus.CANCELLED
    assert manager.get_active_runs() == {}


def test_several_cancels_of_one_run_are_one_cancel_and_the_agent_runs_again(session: BlockingSession) -> None:
    """Agno's test_multiple_cancel_calls and test_continue_session_after_cancelled_agent_run."""

    def cancel_thrice() -> str:
        for _ in range(3):
            _manager().cancel_run("first")
        return "partial"

    agent = _agent("again", [cancel_thrice, "ok"])
    assert agent.run("go", run_id="first").status is RunStatus.cancelled
    assert agent.run("go again", run_id="second").status is RunStatus.completed
    first, second = session.subagent_task("first"), session.subagent_task("second")
    assert first is not None and first.status is SubagentStatus.CANCELLED
    assert second is not None and second.status is SubagentStatus.COMPLETED


def test_is_cancelled_follows_the_token_while_the_run_is_active(session: BlockingSession) -> None:
    seen: list[dict[str, bool]] = []

    def look() -> str:
        manager = _manager()
        seen.append(manager.get_active_runs())
        session.cancel_subagent_task("watched", "stop")
        _assert_cancelled_here("watched")
        seen.append(manager.get_active_runs())
        return "partial"

    _agent("watched", [look]).run("go", run_id="watched")
    assert seen == [{"watched": False}, {"watched": True}]
    assert _manager().get_active_runs() == {}


def test_a_deadline_stops_the_run(tracked_session: BlockingSession) -> None:
    installed = get_cancellation_manager()
    set_cancellation_manager(SubagentCancellationManager(tracked_session, timeout=0.05))
    try:

        def slow() -> str:
            deadline_seen = tracked_session.subagent_task("timed")
            assert deadline_seen is not None and deadline_seen.deadline is not None
            time.sleep(0.3)
            return "late"

        output = _agent("slow", [slow, "never said"]).run("go", run_id="timed")
    finally:
        set_cancellation_manager(installed)
    assert output.status is RunStatus.cancelled
    task = tracked_session.subagent_task("timed")
    assert task is not None and (task.status, task.cancel_reason) == (
        SubagentStatus.CANCELLED,
        DEADLINE_REASON,
    )


def _team(member: Agent, team_steps: list[Step]) -> Team:
    return Team(name="crew", members=[member], model=ScriptedModel(steps=team_steps), telemetry=False)


def test_a_member_cancelled_alone_answers_its_team_which_goes_on(session: BlockingSession) -> None:
    def cancel_the_member() -> str:
        (member,) = [task for task in session.pending_subagent_tasks() if task.parent_id == "team-run"]
        session.cancel_subagent_task(member.task_id, "not needed any more")
        _assert_cancelled_here(member.task_id)
        return "half the findings"

    researcher = _agent("researcher", [cancel_the_member, "never said"])
    team = _team(
        researcher, [("delegate_task_to_member", {"member_id": "researcher", "task": "find"}), "went on"]
    )
    output = team.run("go", run_id="team-run")
    assert (output.status, output.content) == (RunStatus.completed, "went on")
    tasks = {task.task_id: task for task in session.subagent_tasks()}
    (member,) = [task for task in tasks.values() if task.parent_id == "team-run"]
    assert (member.agent, member.status, member.cancel_reason) == (
        "researcher",
        SubagentStatus.CANCELLED,
        "not needed any more",
    )
    assert tasks["team-run"].status is SubagentStatus.COMPLETED
    answers = [message.content for message in output.messages or [] if message.role == "tool"]
    expected = cancelled_run_text(
        agent="researcher", task_id=member.task_id, reason="not needed any more", partial=None
    )
    assert answers == [expected]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_team_s_cancel_reaches_its_running_member(session: BlockingSession, mode: str) -> None:
    """Agno's team cancel-cascade (team_cancel_while_member_runs): here through the task tree, so that a
    cancel of the team from any process reaches the member wherever it runs."""
    researcher = _agent("researcher", [_cancel(session, f"team-{mode}", "stop the team"), "never said"])
    team = _team(
        researcher, [("delegate_task_to_member", {"member_id": "researcher", "task": "find"}), "never"]
    )
    if mode == "sync":
        output = team.run("go", run_id=f"team-{mode}")
    else:

        async def main() -> Any:
            return await team.arun("go", run_id=f"team-{mode}")

        output = asyncio.run(main())
    assert output.status is RunStatus.cancelled
    tasks = {task.task_id: task for task in session.subagent_tasks()}
    (member,) = [task for task in tasks.values() if task.parent_id == f"team-{mode}"]
    assert (member.status, member.cancel_cause) == (SubagentStatus.CANCELLED, "parent")
    assert tasks[f"team-{mode}"].status is SubagentStatus.CANCELLED


def test_a_run_inside_a_tracked_run_is_its_child(session: BlockingSession) -> None:
    async def main() -> None:
        async with tracked(session, agent="orchestrator", task_id="outer"):
            await _agent("inner", ["done"]).arun("go", run_id="inner")

    asyncio.run(main())
    inner = session.subagent_task("inner")
    assert inner is not None and inner.parent_id == "outer"


def test_bad_arguments_are_refused_when_made() -> None:
    with pytest.raises(TypeError, match="session"):
        SubagentCancellationManager(object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        SubagentCancellationManager(Session(), timeout=-1)


def test_on_redis_a_cancel_from_another_process_arrives_by_push_and_checkpoints_make_no_server_call(
    module_redis_server: RedisServer,
) -> None:
    session = RedisRegistry(module_redis_server.url, reconcile_interval=0.1).session("agno-across")
    installed = get_cancellation_manager()
    set_cancellation_manager(SubagentCancellationManager(session))
    commands: list[int] = []

    def calls_so_far() -> int:
        stats = module_redis_server.cli("INFO", "commandstats")
        return sum(
            int(line.split("calls=")[1].split(",")[0]) for line in stats if line.startswith("cmdstat_")
        )

    def cancelled_elsewhere() -> str:
        worker = Worker(module_redis_server.url, "agno-canceller")
        try:
            worker.ask(
                op="cancel", session="agno-across", task="remote", reason="stopped from another process"
            )
        finally:
            worker.stop()
        manager = _manager()
        for _ in range(500):
            if manager.is_cancelled("remote"):
                break
            time.sleep(0.01)
        before = calls_so_far()
        for _ in range(1_000):
            manager.is_cancelled("remote")
        # INFO itself is one command, counted between the two reads.
        commands.append(calls_so_far() - before - 1)
        return "partial"

    try:
        output = _agent("remote", [cancelled_elsewhere, "never said"]).run("go", run_id="remote")
    finally:
        set_cancellation_manager(installed)
    assert output.status is RunStatus.cancelled
    assert commands[0] < 20, f"1,000 checkpoints made {commands[0]} server calls"
    task = session.subagent_task("remote")
    assert task is not None and task.cancel_reason == "stopped from another process"


@tool(requires_confirmation=True)
def delete_files(path: str) -> str:
    """Deletes files, once a human confirms."""
    return f"deleted {path}"


def _janitor() -> Agent:
    steps: list[Step] = [("delete_files", {"path": "/tmp/old"}), "cleaned"]
    return _agent("janitor", steps, [delete_files])


def test_a_run_agno_pauses_for_a_human_is_a_paused_task_until_it_continues(session: BlockingSession) -> None:
    agent = _janitor()
    output = agent.run("clean up", run_id="confirm")
    assert output.status is RunStatus.paused
    task = session.subagent_task("confirm")
    assert task is not None and (task.status, task.pause_reason) == (SubagentStatus.PAUSED, PAUSED_REASON)
    for requirement in output.active_requirements:
        requirement.confirm()  # type: ignore[no-untyped-call]
    output = agent.continue_run(run_response=output)
    assert (output.status, output.content) == (RunStatus.completed, "cleaned")
    task = session.subagent_task("confirm")
    assert task is not None and (task.status, task.result) == (SubagentStatus.COMPLETED, "cleaned")


def test_a_paused_run_cancelled_while_it_waits_stops_when_it_continues(session: BlockingSession) -> None:
    agent = _janitor()
    output = agent.run("clean up", run_id="confirm-then-stop")
    assert session.cancel_subagent_task("confirm-then-stop", "the human said no") is True
    for requirement in output.active_requirements:
        requirement.confirm()  # type: ignore[no-untyped-call]
    output = agent.continue_run(run_response=output)
    assert output.status is RunStatus.cancelled
    task = session.subagent_task("confirm-then-stop")
    assert task is not None and (task.status, task.cancel_reason) == (
        SubagentStatus.CANCELLED,
        "the human said no",
    )


def test_a_run_leaves_its_caller_s_context_as_it_found_it(session: BlockingSession) -> None:
    """Agno registers a sync run in its caller's own context: once the run is over, that context has no
    current run, and the caller's next run is top-level, not a child of the last."""
    _agent("first", ["one"]).run("go", run_id="first-top")
    assert current_task() is None
    assert _CURRENT.get() is None, "the context holds nothing of the run (its handle among it)"
    _agent("second", ["two"]).run("go", run_id="second-top")
    second = session.subagent_task("second-top")
    assert second is not None and second.parent_id is None


def test_a_background_run_leaves_its_caller_s_context_and_its_own_runs_are_its_children(
    session: BlockingSession,
) -> None:
    """``arun(background=True)`` registers the run in its caller's context and returns while the run goes on
    in a task of its own: the caller's next run is top-level, and a run the background run starts is its
    child."""
    from agno.db.in_memory import InMemoryDb

    inner = _agent("inner", ["inner answer"])

    @tool(name="ask_inner")
    async def ask_inner() -> str:
        output = await inner.arun("go", run_id="inner-of-background")
        return str(output.content)

    steps: list[Step] = [("ask_inner", {}), "done"]
    background = Agent(
        name="background",
        model=ScriptedModel(steps=steps),
        tools=[ask_inner],
        db=InMemoryDb(),  # type: ignore[no-untyped-call]  # Agno leaves its __init__ untyped
        telemetry=False,
    )

    async def scenario() -> None:
        await background.arun("go", run_id="the-background-run", background=True)
        assert _CURRENT.get() is None, "the caller's context has no current run while the run goes on"
        await _agent("after", ["after answer"]).arun("go", run_id="after-background")
        deadline = time.monotonic() + 10
        while (task := session.subagent_task("the-background-run")) is None or not task.finished:
            assert time.monotonic() < deadline, "the background run never ended"
            await asyncio.sleep(0.01)

    asyncio.run(scenario())
    after = session.subagent_task("after-background")
    assert after is not None and after.parent_id is None
    child = session.subagent_task("inner-of-background")
    assert child is not None and child.parent_id == "the-background-run"
    task = session.subagent_task("the-background-run")
    assert task is not None and task.status is SubagentStatus.COMPLETED


@pytest.mark.parametrize("fails", [False, True], ids=["completes", "fails"])
def test_a_workflow_run_is_a_task_with_the_workflow_s_name_that_ends_as_the_workflow_did(
    session: BlockingSession, fails: bool
) -> None:
    """A workflow registers its run before it makes the run's output: the task still has the workflow's
    name, and ends failed when the workflow's run did."""
    from agno.workflow import Step as WorkflowStep
    from agno.workflow import Workflow
    from agno.workflow.types import HumanReview

    def failing(_input: Any) -> Any:
        raise RuntimeError("the step broke")

    step = (
        WorkflowStep(name="only", executor=failing, max_retries=0, human_review=HumanReview(on_error="fail"))
        if fails
        else WorkflowStep(name="only", agent=_agent("writer", ["written"]))
    )
    workflow = Workflow(name="publishing", steps=[step], telemetry=False)
    if fails:
        with pytest.raises(RuntimeError, match="the step broke"):
            workflow.run("go", run_id="the-workflow-run")
    else:
        assert workflow.run("go", run_id="the-workflow-run").status is RunStatus.completed
    task = session.subagent_task("the-workflow-run")
    assert task is not None and task.agent == "publishing"
    assert task.status is (SubagentStatus.FAILED if fails else SubagentStatus.COMPLETED)
