"""The Google ADK adapter, ``subagent_tracker.integrations.adk.SubagentTrackerPlugin``, an app's plugin: every
invocation (the app's own, and each agent an ``AgentTool`` runs) is a task; a cancel by id, a parent's
cascade, a session cancel, a deadline, the caller's own ``abort_signal`` or a cancel from another process
stops exactly the runs it should, through ADK's own abort; the calling agent goes on with the cancelled text;
the saved session answers every function call, for sync and async tools alike. Offline: the agents run on
``adk_fakes.ScriptedLlm``. Most tests run against the in-memory session and a Redis session."""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from adk_fakes import ScriptedLlm, Step
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.events.event import Event
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.adk.sessions.session import Session as AdkSession
from google.adk.tools.agent_tool import AgentTool
from google.genai import types
from redis_support import RedisServer, Worker

from subagent_tracker import DEADLINE_REASON, RedisRegistry, Session, SubagentStatus, SubagentTask
from subagent_tracker.integrations import (
    FRAMEWORK_CANCEL_REASON,
    RUN_STOPPED_REASON,
    STREAM_CLOSED_REASON,
    cancelled_run_text,
    current_task,
    tracked,
)
from subagent_tracker.integrations._support import BlockingSession
from subagent_tracker.integrations.adk import SubagentTrackerPlugin

pytestmark = [
    pytest.mark.timeout(120),
    # ADK's own AgentTool still passes plugins to its Runner the way ADK deprecates.
    pytest.mark.filterwarnings("ignore:The `plugins` argument is deprecated:DeprecationWarning"),
]

USER = "user"


def _agent(name: str, steps: list[Step], tools: list[Any] | None = None) -> LlmAgent:
    return LlmAgent(name=name, model=ScriptedLlm(steps=steps), tools=tools or [])


def _app(session: BlockingSession, root: LlmAgent, **options: Any) -> App:
    return App(name="tracked_app", root_agent=root, plugins=[SubagentTrackerPlugin(session, **options)])


async def _run(
    app: App, *, abort_signal: asyncio.Event | None = None, stop_after: int | None = None
) -> tuple[list[Event], AdkSession]:
    """Runs ``app`` on one message; the events it yielded, and the session ADK saved. ``stop_after`` stops
    reading after that many events (a client gone)."""
    service = InMemorySessionService()
    runner = Runner(app=app, session_service=service)
    created = await service.create_session(app_name=app.name, user_id=USER)
    message = types.Content(role="user", parts=[types.Part.from_text(text="go")])
    events: list[Event] = []
    stream = runner.run_async(
        user_id=USER, session_id=created.id, new_message=message, abort_signal=abort_signal
    )
    try:
        async for event in stream:
            events.append(event)
            if stop_after is not None and len(events) >= stop_after:
                break
    finally:
        await stream.aclose()
    saved = await service.get_session(app_name=app.name, user_id=USER, session_id=created.id)
    assert saved is not None
    return events, saved


def _responses(saved: AdkSession) -> dict[str, Any]:
    """Each function call of the saved session, by id, with its response (``None``: never answered)."""
    calls: dict[str, Any] = {}
    for event in saved.events:
        for call in event.get_function_calls():
            calls.setdefault(str(call.id), None)
        for response in event.get_function_responses():
            calls[str(response.id)] = response.response
    return calls


def _task_of(session: BlockingSession, agent: str) -> SubagentTask:
    [task] = [task for task in session.subagent_tasks() if task.agent == agent]
    return task


async def _until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 10
    while not condition():
        assert time.monotonic() < deadline, f"{what} never happened"
        await asyncio.sleep(0.005)


def _started(session: BlockingSession, agent: str) -> bool:
    return any(task.agent == agent for task in session.subagent_tasks())


class _SlowTool:
    """An async tool that runs until stopped (or ``seconds``), and says when it has begun."""

    def __init__(self, seconds: float = 30.0) -> None:
        self.begun = asyncio.Event()
        self.finished = False
        self._seconds = seconds

        async def slow_search(query: str) -> str:
            """Searches, slowly."""
            self.begun.set()
            await asyncio.sleep(self._seconds)
            self.finished = True
            return f"results for {query}"

        self.tool = slow_search


def test_a_run_and_its_agent_tool_subagent_are_tasks_that_end_with_their_answers(
    tracked_session: BlockingSession,
) -> None:
    researcher = _agent("researcher", ["the finding"])
    orchestrator = _agent(
        "orchestrator", [("researcher", {"request": "look"}), "the summary"], [AgentTool(researcher)]
    )
    _, saved = asyncio.run(_run(_app(tracked_session, orchestrator)))
    top, sub = _task_of(tracked_session, "orchestrator"), _task_of(tracked_session, "researcher")
    assert (top.status, top.result, top.parent_id) == (SubagentStatus.COMPLETED, "the summary", None)
    assert (sub.status, sub.result, sub.parent_id) == (SubagentStatus.COMPLETED, "the finding", top.task_id)
    assert list(_responses(saved).values()) == [{"result": "the finding"}]


def test_a_run_whose_model_fails_is_a_failed_task(tracked_session: BlockingSession) -> None:
    def broken() -> str:
        raise RuntimeError("the model is down")

    with pytest.raises(RuntimeError, match="the model is down"):
        asyncio.run(_run(_app(tracked_session, _agent("fragile", [broken]))))
    task = _task_of(tracked_session, "fragile")
    assert task.status is SubagentStatus.FAILED
    assert task.error is not None and "the model is down" in task.error


def test_a_subagent_cancelled_by_id_answers_its_caller_which_goes_on(
    tracked_session: BlockingSession,
) -> None:
    slow = _SlowTool()
    researcher = _agent(
        "researcher", [("slow_search", {"query": "x"}, "looking into it"), "never"], [slow.tool]
    )
    orchestrator = _agent(
        "orchestrator", [("researcher", {"request": "look"}), "went on without it"], [AgentTool(researcher)]
    )

    async def scenario() -> tuple[list[Event], AdkSession]:
        async def stop_the_researcher() -> None:
            await slow.begun.wait()
            task = _task_of(tracked_session, "researcher")
            tracked_session.cancel_subagent_task(task.task_id, "the user pressed stop")

        stopping = asyncio.create_task(stop_the_researcher())
        started = time.monotonic()
        ran = await _run(_app(tracked_session, orchestrator))
        await stopping
        assert time.monotonic() - started < 10, "the running tool was not stopped"
        return ran

    _, saved = asyncio.run(scenario())
    top, sub = _task_of(tracked_session, "orchestrator"), _task_of(tracked_session, "researcher")
    assert (sub.status, sub.cancel_reason, sub.result) == (
        SubagentStatus.CANCELLED,
        "the user pressed stop",
        "looking into it",
    )
    assert (top.status, top.result) == (SubagentStatus.COMPLETED, "went on without it")
    expected = cancelled_run_text(
        agent="researcher", task_id=sub.task_id, reason="the user pressed stop", partial="looking into it"
    )
    assert list(_responses(saved).values()) == [{"result": expected}]
    assert not slow.finished


@pytest.mark.parametrize("kind", ["async tool", "sync tool"])
def test_a_cancelled_top_level_run_leaves_every_call_answered_with_the_reason(
    tracked_session: BlockingSession, kind: str
) -> None:
    """A cancel stops a running async tool at once; a sync tool runs on the loop's thread, where nothing can
    interrupt it, and the run stops as it returns. Either way no call is left without a response."""
    slow = _SlowTool()
    ran_sync: list[str] = []

    def blocking_fetch(url: str) -> str:
        """Fetches, blocking its thread."""
        threading.Timer(
            0.05, tracked_session.cancel_subagent_task, [_task_of(tracked_session, "worker").task_id, "stop"]
        ).start()
        time.sleep(0.3)
        ran_sync.append(url)
        return "fetched"

    if kind == "async tool":
        steps: list[Step] = [("slow_search", {"query": "x"}), "never"]
        tools: list[Any] = [slow.tool]
    else:
        steps = [("blocking_fetch", {"url": "u"}), "never"]
        tools = [blocking_fetch]
    model = ScriptedLlm(steps=steps)
    worker = LlmAgent(name="worker", model=model, tools=tools)

    async def scenario() -> AdkSession:
        async def stop() -> None:
            await slow.begun.wait()
            tracked_session.cancel_subagent_task(_task_of(tracked_session, "worker").task_id, "stop")

        stopping = asyncio.create_task(stop()) if kind == "async tool" else None
        _, saved = await _run(_app(tracked_session, worker))
        if stopping is not None:
            await stopping
        return saved

    saved = asyncio.run(scenario())
    task = _task_of(tracked_session, "worker")
    assert (task.status, task.cancel_reason) == (SubagentStatus.CANCELLED, "stop")
    responses = _responses(saved)
    assert None not in responses.values(), f"a call was left without a response: {responses}"
    assert model.calls == 1, "the model was called again after the cancel"
    if kind == "async tool":
        assert list(responses.values()) == [
            {"error": "The tool 'slow_search' was cancelled while running: stop."}
        ]
    else:
        assert ran_sync == ["u"], "the sync tool ran to its end"
        assert list(responses.values()) == [{"result": "fetched"}], "its response is kept"


def test_a_parent_s_cancel_reaches_its_running_subagent(tracked_session: BlockingSession) -> None:
    slow = _SlowTool()
    researcher = _agent("researcher", [("slow_search", {"query": "x"}), "never"], [slow.tool])
    orchestrator = _agent(
        "orchestrator", [("researcher", {"request": "look"}), "never"], [AgentTool(researcher)]
    )

    async def scenario() -> AdkSession:
        async def stop_everything() -> None:
            await slow.begun.wait()
            tracked_session.cancel_subagent_task(_task_of(tracked_session, "orchestrator").task_id, "enough")

        stopping = asyncio.create_task(stop_everything())
        _, saved = await _run(_app(tracked_session, orchestrator))
        await stopping
        return saved

    saved = asyncio.run(scenario())
    top, sub = _task_of(tracked_session, "orchestrator"), _task_of(tracked_session, "researcher")
    assert (top.status, top.cancel_reason) == (SubagentStatus.CANCELLED, "enough")
    assert (sub.status, sub.cancel_cause) == (SubagentStatus.CANCELLED, "parent")
    expected = cancelled_run_text(agent="researcher", task_id=sub.task_id, reason="enough", partial=None)
    # ADK seals the call as the orchestrator's abort tears it down ("error"), or, when the researcher's own
    # abort (it follows its caller's) ends it first, the call returns it ("result"): either way it says why.
    [answer] = _responses(saved).values()
    assert answer in ({"error": expected}, {"result": expected}), "the AgentTool call says why"
    assert not slow.finished


def test_a_session_cancel_and_a_deadline_stop_the_run(tracked_session: BlockingSession) -> None:
    slow = _SlowTool()
    worker = _agent("worker", [("slow_search", {"query": "x"}), "never"], [slow.tool])
    asyncio.run(_run(_app(tracked_session, worker, timeout=0.2)))
    task = _task_of(tracked_session, "worker")
    assert (task.status, task.cancel_reason) == (SubagentStatus.CANCELLED, DEADLINE_REASON)

    other = _agent("other", [("slow_search", {"query": "y"}), "never"], [_SlowTool().tool])

    async def scenario() -> None:
        running = asyncio.create_task(_run(_app(tracked_session, other)))
        await _until(lambda: _started(tracked_session, "other"), "the run's start")
        tracked_session.cancel("the session is over")
        await running

    asyncio.run(scenario())
    other_task = _task_of(tracked_session, "other")
    assert (other_task.status, other_task.cancel_reason) == (SubagentStatus.CANCELLED, "the session is over")


def test_the_caller_s_own_abort_signal_cancels_the_run_and_its_subagents(
    tracked_session: BlockingSession,
) -> None:
    slow = _SlowTool()
    researcher = _agent("researcher", [("slow_search", {"query": "x"}), "never"], [slow.tool])
    orchestrator = _agent(
        "orchestrator", [("researcher", {"request": "look"}), "never"], [AgentTool(researcher)]
    )

    async def scenario() -> AdkSession:
        abort = asyncio.Event()

        async def press_stop() -> None:
            await slow.begun.wait()
            abort.set()

        stopping = asyncio.create_task(press_stop())
        _, saved = await _run(_app(tracked_session, orchestrator), abort_signal=abort)
        await stopping
        return saved

    saved = asyncio.run(scenario())
    top, sub = _task_of(tracked_session, "orchestrator"), _task_of(tracked_session, "researcher")
    assert (top.status, top.cancel_reason) == (SubagentStatus.CANCELLED, FRAMEWORK_CANCEL_REASON)
    assert (sub.status, sub.cancel_reason) == (SubagentStatus.CANCELLED, FRAMEWORK_CANCEL_REASON)
    assert None not in _responses(saved).values()


def test_a_caller_that_stops_reading_cancels_the_run(tracked_session: BlockingSession) -> None:
    worker = _agent("worker", [("slow_search", {"query": "x"}), "never"], [_SlowTool().tool])
    asyncio.run(_run(_app(tracked_session, worker), stop_after=1))
    task = _task_of(tracked_session, "worker")
    assert (task.status, task.cancel_reason) == (SubagentStatus.CANCELLED, STREAM_CLOSED_REASON)


def test_a_run_whose_caller_asyncio_cancels_ends_with_the_caller_s_task(
    tracked_session: BlockingSession,
) -> None:
    """ADK calls none of its plugins' callbacks for an invocation asyncio cancelled without an abort: the
    run ends as the task that drove it does, with no garbage collection needed."""
    worker = _agent("worker", [("slow_search", {"query": "x"}), "never"], [_SlowTool().tool])

    async def scenario() -> None:
        gc.disable()
        try:
            driving = asyncio.create_task(_run(_app(tracked_session, worker)))
            await _until(lambda: _started(tracked_session, "worker"), "the run's start")
            driving.cancel()
            with pytest.raises(asyncio.CancelledError):
                await driving
            await _until(lambda: _task_of(tracked_session, "worker").finished, "the abandoned run's end")
        finally:
            gc.enable()

    asyncio.run(scenario())
    task = _task_of(tracked_session, "worker")
    assert (task.status, task.cancel_reason) == (SubagentStatus.CANCELLED, RUN_STOPPED_REASON)


def test_a_caller_that_breaks_off_and_runs_again_in_the_same_task_starts_a_top_level_run(
    tracked_session: BlockingSession,
) -> None:
    """The run is never the current run of its caller's context: a second run after a ``break`` without
    ``aclose()``, or after an ``asyncio.timeout``, in the same task, is top-level, and goes on when the first
    one's end cascades."""

    async def scenario() -> None:
        service = InMemorySessionService()
        first = _app(
            tracked_session, _agent("first", [("slow_search", {"query": "x"}), "never"], [_SlowTool().tool])
        )
        runner = Runner(app=first, session_service=service)
        chat = await service.create_session(app_name=first.name, user_id=USER)
        message = types.Content(role="user", parts=[types.Part.from_text(text="go")])
        async for _ in runner.run_async(user_id=USER, session_id=chat.id, new_message=message):
            break
        assert current_task() is None
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.2):  # type: ignore[attr-defined,unused-ignore]  # 3.11+, as ADK
                await _run(
                    _app(
                        tracked_session,
                        _agent("timed", [("slow_search", {"query": "y"})], [_SlowTool().tool]),
                    )
                )
        assert current_task() is None
        gc.collect()
        await _run(_app(tracked_session, _agent("second", ["done"])))

    asyncio.run(scenario())
    second = _task_of(tracked_session, "second")
    assert (second.status, second.parent_id) == (SubagentStatus.COMPLETED, None)


def test_a_subagent_whose_call_a_failing_sibling_call_cancels_ends(tracked_session: BlockingSession) -> None:
    """ADK cancels the other calls of a response when one raises: the AgentTool call's agent run ends (ADK
    calls none of its callbacks), with no garbage collection needed."""
    from google.adk.models.llm_response import LlmResponse

    researcher = _agent("researcher", [("slow_search", {"query": "x"}), "never"], [_SlowTool().tool])

    async def broken() -> str:
        """Fails, a moment after it starts."""
        await asyncio.sleep(0.3)
        raise RuntimeError("the tool broke")

    class TwoCalls(ScriptedLlm):
        async def generate_content_async(self, llm_request: Any, stream: bool = False) -> Any:
            calls = [
                types.FunctionCall(name="researcher", args={"request": "r"}, id="call-a"),
                types.FunctionCall(name="broken", args={}, id="call-b"),
            ]
            parts = [types.Part(function_call=call) for call in calls]
            yield LlmResponse(content=types.Content(role="model", parts=parts))

    orchestrator = LlmAgent(
        name="orchestrator", model=TwoCalls(steps=["x"]), tools=[AgentTool(researcher), broken]
    )

    async def scenario() -> None:
        gc.disable()
        try:
            with pytest.raises(RuntimeError, match="the tool broke"):
                await _run(_app(tracked_session, orchestrator))
            await _until(lambda: _task_of(tracked_session, "researcher").finished, "the subagent's end")
        finally:
            gc.enable()

    asyncio.run(scenario())
    assert _task_of(tracked_session, "orchestrator").status is SubagentStatus.FAILED
    sub = _task_of(tracked_session, "researcher")
    assert (sub.status, sub.cancel_reason) == (SubagentStatus.CANCELLED, RUN_STOPPED_REASON)


def test_a_retried_invocation_is_tracked_apart_from_the_one_it_retries(
    tracked_session: BlockingSession,
) -> None:
    """A retry reuses the failed invocation's id: the old invocation's collection never ends the new run."""
    attempts = [0]

    async def flaky() -> str:
        attempts[0] += 1
        if attempts[0] == 1:
            raise RuntimeError("the model is overloaded")
        await asyncio.sleep(0.3)
        return "the second try worked"

    app = _app(tracked_session, _agent("worker", [flaky, flaky]))

    async def scenario() -> None:
        service = InMemorySessionService()
        runner = Runner(app=app, session_service=service)
        chat = await service.create_session(app_name=app.name, user_id=USER)
        message = types.Content(role="user", parts=[types.Part.from_text(text="go")])
        with pytest.raises(RuntimeError, match="overloaded"):
            async for _ in runner.run_async(user_id=USER, session_id=chat.id, new_message=message):
                pass
        saved = await service.get_session(app_name=app.name, user_id=USER, session_id=chat.id)
        assert saved is not None
        failed_invocation = saved.events[0].invocation_id

        async def retry() -> None:
            async for _ in runner.run_async(
                user_id=USER, session_id=chat.id, invocation_id=failed_invocation
            ):
                pass

        retrying = asyncio.create_task(retry())
        await asyncio.sleep(0.1)
        gc.collect()  # the first invocation is collected while the retry runs
        await retrying

    asyncio.run(scenario())
    statuses = sorted((task.status.value, task.result) for task in tracked_session.subagent_tasks())
    assert statuses == [("completed", "the second try worked"), ("failed", None)]


def test_a_run_that_ends_while_its_caller_handles_a_cancel_completes(
    tracked_session: BlockingSession,
) -> None:
    async def scenario() -> None:
        try:
            raise asyncio.CancelledError
        except asyncio.CancelledError:
            # A summary on shutdown: the cancel being handled is the caller's, not the run's.
            await _run(_app(tracked_session, _agent("summariser", ["the summary"])))

    asyncio.run(scenario())
    task = _task_of(tracked_session, "summariser")
    assert (task.status, task.result) == (SubagentStatus.COMPLETED, "the summary")


def test_a_workflow_root_ends_with_the_last_answer_of_its_agents(tracked_session: BlockingSession) -> None:
    """A workflow's invocation names no agent: its task has the app's name, and the last answer of the
    workflow's agents as its result."""
    from google.adk.workflow import START, Workflow

    drafter, editor = _agent("drafter", ["a draft"]), _agent("editor", ["the final edit"])
    pipeline = Workflow(name="pipeline", edges=[(START, drafter), (drafter, editor)])
    app = App(name="publishing", root_agent=pipeline, plugins=[SubagentTrackerPlugin(tracked_session)])
    asyncio.run(_run(app))
    task = _task_of(tracked_session, "publishing")
    assert (task.status, task.result) == (SubagentStatus.COMPLETED, "the final edit")


def test_the_plugins_after_this_one_see_the_calls_a_cancel_answered(tracked_session: BlockingSession) -> None:
    from google.adk.plugins.base_plugin import BasePlugin

    seen: list[Any] = []

    class Watcher(BasePlugin):
        async def on_event_callback(self, *, invocation_context: Any, event: Event) -> None:
            seen.extend(response.response for response in event.get_function_responses())

    slow = _SlowTool()
    worker = _agent("worker", [("slow_search", {"query": "x"}), "never"], [slow.tool])
    app = App(
        name="watched_app",
        root_agent=worker,
        plugins=[SubagentTrackerPlugin(tracked_session), Watcher(name="watcher")],
    )

    async def scenario() -> None:
        async def stop() -> None:
            await slow.begun.wait()
            tracked_session.cancel_subagent_task(_task_of(tracked_session, "worker").task_id, "stop")

        stopping = asyncio.create_task(stop())
        await _run(app)
        await stopping

    asyncio.run(scenario())
    assert seen == [{"error": "The tool 'slow_search' was cancelled while running: stop."}]


def test_a_run_inside_a_tracked_run_is_its_child(tracked_session: BlockingSession) -> None:
    async def scenario() -> None:
        async with tracked(tracked_session, agent="outer", task_id="outer-run"):
            await _run(_app(tracked_session, _agent("inner", ["done"])))
        assert current_task() is None

    asyncio.run(scenario())
    assert _task_of(tracked_session, "inner").parent_id == "outer-run"


def test_on_redis_a_cancel_from_another_process_stops_the_run(module_redis_server: RedisServer) -> None:
    session = RedisRegistry(module_redis_server.url, reconcile_interval=0.1).session("adk-across")
    slow = _SlowTool()
    worker = _agent("remote", [("slow_search", {"query": "x"}, "half done"), "never"], [slow.tool])

    async def scenario() -> AdkSession:
        async def cancel_elsewhere() -> None:
            await slow.begun.wait()
            canceller = Worker(module_redis_server.url, "adk-canceller")
            try:
                task_id = _task_of(session, "remote").task_id
                await asyncio.to_thread(
                    canceller.ask, op="cancel", session="adk-across", task=task_id, reason="from elsewhere"
                )
            finally:
                canceller.stop()

        stopping = asyncio.create_task(cancel_elsewhere())
        _, saved = await _run(_app(session, worker))
        await stopping
        return saved

    saved = asyncio.run(scenario())
    task = _task_of(session, "remote")
    assert (task.status, task.cancel_reason, task.result) == (
        SubagentStatus.CANCELLED,
        "from elsewhere",
        "half done",
    )
    assert None not in _responses(saved).values()
    assert not slow.finished


def test_bad_arguments_are_refused_when_made() -> None:
    with pytest.raises(TypeError, match="session"):
        SubagentTrackerPlugin(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="task_id"):
        SubagentTrackerPlugin(Session(), task_id=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        SubagentTrackerPlugin(Session(), timeout=-1)
