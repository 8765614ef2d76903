"""Tracking Strands Agents runs: :class:`SubagentHooks`, a hook provider that makes every invocation of its
agent a task of a session.

::

    from strands import Agent
    from subagent_tracker import Session
    from subagent_tracker.integrations.strands import SubagentHooks

    session = Session()
    researcher = Agent(model, name="researcher", hooks=[SubagentHooks(session)])
    orchestrator = Agent(
        model, name="orchestrator", tools=[researcher.as_tool()], hooks=[SubagentHooks(session)]
    )

Cancelling a run's task calls the agent's own ``cancel()``; the adapter also stops, at once, the model call
and the async tool calls the run has in flight (strands itself checks its cancel signal only when a model
chunk arrives and between tools). The run then returns with ``stop_reason == "cancelled"`` and every tool
call in ``agent.messages`` answered. A delegating agent that carries the adapter too gets, for the tool call
that ran a cancelled subagent, :func:`~subagent_tracker.integrations.cancelled_run_text` (the reason and the
partial output) instead of strands' generic text, and finishes its turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextvars import ContextVar, Token
from typing import Any

from subagent_tracker.integrations import (
    FRAMEWORK_CANCEL_REASON,
    STREAM_CLOSED_REASON,
    TrackedHandle,
    TrackedSession,
    tracked,
)
from subagent_tracker.integrations._support import (
    CancelledRun,
    DelegatingCall,
    StreamedText,
    absorb_own_cancel,
    cancelled_tool_call_text,
    check_run_options,
    delegating_call,
    missing_framework,
    on_cancel_in_loop,
    report_cancelled_run,
    resolved,
)

try:
    from strands import Agent
    from strands.hooks import (
        AfterInvocationEvent,
        AgentInitializedEvent,
        BeforeInvocationEvent,
        HookOrder,
        HookProvider,
        HookRegistry,
    )

    # Public since strands-agents 1.62, the extra's minimum: hooks alone cannot stop a silent model or a
    # running tool.
    from strands.middleware import ExecuteToolContext, ExecuteToolStage, InvokeModelContext, InvokeModelStage
    from strands.types.events import ModelStopReason, ToolResultEvent
except ImportError as error:  # pragma: no cover - depends on the environment
    raise missing_framework("strands", "strands", error) from error

__all__ = ["SubagentHooks"]

#: What strands itself answers a model call cancelled mid-stream with; the adapter's own stop says the same.
_CANCELLED_RESPONSE_TEXT = "Cancelled by user"


class _Step:
    """A model call or a tool call of a tracked run, in flight: the adapter's own checkpoint.

    :meth:`run` passes the stage's events on. Interrupting the step while the stage waits for its next event
    cancels the waiting asyncio task, so the ``CancelledError`` lands inside the model's or the tool's await;
    it is absorbed there, once, and the stage is answered as cancelled. Interrupting it anywhere else only
    marks it, for the next event.
    """

    def __init__(self, run: _AgentRun) -> None:
        self._run = run
        self._task: asyncio.Task[Any] | None = None
        self._waiting = False
        self.interrupted = run.handle.token.is_cancelled
        self.answered = False
        # Whether the stage was entered: a step interrupted before its first event never started.
        self.started = False

    def interrupt(self) -> None:
        """Stops the step at once (from the loop's thread), unless it has already been answered."""
        if self.answered or self.interrupted:
            return
        self.interrupted = True
        if self._waiting and self._task is not None:
            self._task.cancel()

    async def run(
        self, events: AsyncIterator[Any], passing: Callable[[Any], Any], stopped: Callable[[], Any]
    ) -> AsyncGenerator[Any, None]:
        """The stage's events, each through ``passing``; once the step is interrupted, ``stopped()`` ends the
        stage instead. The middleware returns this generator itself: one layer per event, the least a
        checkpoint at every chunk costs."""
        # A stage's events are pulled by one task, from its first to its last.
        self._task = asyncio.current_task()
        self.enter()
        try:
            while not self.interrupted:
                self.started = True
                self._waiting = True
                try:
                    event = await events.__anext__()
                except StopAsyncIteration:
                    return
                except asyncio.CancelledError:
                    # Only the adapter's own cancel request is absorbed: another one still pending goes on up.
                    if not self.interrupted or self._task is None or not absorb_own_cancel(self._task):
                        raise
                    break
                finally:
                    self._waiting = False
                yield passing(event)
            self.answered = True
            yield stopped()
        finally:
            self.leave()

    def enter(self) -> None:
        """The stage has begun: the run's cancel stops it from now on."""
        self._run.steps.add(self)

    def leave(self) -> None:
        """The stage has ended: a cancel has nothing more to stop here."""
        self._run.steps.discard(self)


class _ToolCall(_Step):
    """A tool call of a tracked run, and a delegating call (``delegating_call``): a tracked subagent of any
    framework that ends cancelled inside it answers it with its cancelled text. A Strands subagent running
    inside it (an agent used as a tool) is not interrupted from outside: it is cancelled with the run (it is
    its child, or linked to it) and stops at its own checkpoints, so its history and partial output
    survive."""

    def __init__(self, run: _AgentRun) -> None:
        super().__init__(run)
        self._key: asyncio.Task[Any] | None = None
        self.subagent_runs: list[_AgentRun] = []
        self._deferred = False
        self._delegating = contextlib.ExitStack()
        self.delegating: DelegatingCall | None = None

    def enter(self) -> None:
        # By the task that runs the call: a subagent started inside it finds its call so, and reports to it.
        super().enter()
        self._key = self._task
        self._run.tool_calls[self._key] = self
        self.delegating = self._delegating.enter_context(delegating_call())

    def leave(self) -> None:
        super().leave()
        if self._run.tool_calls.get(self._key) is self:
            del self._run.tool_calls[self._key]
        # Left in a context of its own when a finalizer closes the call: nothing to restore there.
        with contextlib.suppress(ValueError):
            self._delegating.close()

    def interrupt(self) -> None:
        if any(not run.ended for run in self.subagent_runs):
            self._deferred = True
            return
        super().interrupt()

    def subagent_ended(self) -> None:
        """A subagent run inside the call has ended: an interrupt it deferred applies once the task is back
        waiting on the tool (never inside the subagent's own cleanup)."""
        if self._deferred:
            self._deferred = False
            asyncio.get_running_loop().call_soon(self.interrupt)


class _AgentRun:
    """One invocation of an agent carrying the adapter: its task, and what the adapter needs to stop it and to
    report it."""

    def __init__(
        self,
        agent: Agent,
        handle: TrackedHandle,
        exits: contextlib.AsyncExitStack,
        tool_call: _ToolCall | None,
    ) -> None:
        self.agent = agent
        self.handle = handle
        self.exits = exits
        self.tool_call = tool_call
        self.context_token: Token[_AgentRun | None] | None = None
        self.outer_error: BaseException | None = None
        self.steps: set[_Step] = set()
        self.tool_calls: dict[asyncio.Task[Any] | None, _ToolCall] = {}
        self.text = StreamedText()
        self.ended = False
        self.cancelled = False

    def cancelled_run(self, reason: str | None) -> CancelledRun:
        """The run, stopped by a cancel with ``reason``, as the tool call that ran it reports it."""
        return CancelledRun(
            agent=self.agent.name, task_id=self.handle.task_id, reason=reason, partial=self.text.text or None
        )

    def stop(self) -> None:
        """The run's cancel, on its loop: the agent's own cancel, and the steps it has in flight."""
        self.agent.cancel()
        for step in list(self.steps):
            step.interrupt()


#: The innermost run of an agent carrying the adapter, in the current context.
_RUN: ContextVar[_AgentRun | None] = ContextVar("subagent_tracker_strands_run", default=None)


class SubagentHooks(HookProvider):
    """Makes every invocation of the agent that carries it a task of ``session``: ``Agent(...,
    hooks=[SubagentHooks(session)])``.

    - The task's ``agent`` is the agent's name; its parent is the innermost tracked run of the current
      context, of any framework (an agent used as a tool has the calling agent's run as its parent);
      ``task_id`` is a string or a zero-argument callable (called once per run), generated when ``None``;
      ``timeout`` gives each run a deadline.
    - A run that returns ends ``COMPLETED`` with its output text as the result; one that raises ends
      ``FAILED``; one cancelled (by id, cascade, session cancel, deadline, or over Redis) returns with
      ``stop_reason == "cancelled"``, every tool call in ``agent.messages`` answered, and its task ends
      ``CANCELLED`` with the text it streamed as the result.
    - A run cancelled through the agent's own ``cancel()`` ends ``CANCELLED`` too.
    - In a delegating agent that carries it, the tool call that ran a cancelled subagent (``agent.as_tool()``)
      is answered with :func:`~subagent_tracker.integrations.cancelled_run_text`, and the turn goes on.

    Raises ``TypeError`` at once for a ``session`` that is not a session of this package or a ``task_id`` of
    another type; ``timeout`` is checked as the session checks it (``TypeError``, ``ValueError``).
    """

    def __init__(
        self,
        session: TrackedSession,
        *,
        task_id: str | Callable[[], str] | None = None,
        timeout: float | None = None,
    ) -> None:
        check_run_options(session, task_id, timeout)
        self._session = session
        self._task_id = task_id
        self._timeout = timeout
        self._attached: weakref.WeakSet[Agent] = weakref.WeakSet()
        self._runs: weakref.WeakKeyDictionary[Agent, _AgentRun] = weakref.WeakKeyDictionary()

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        """Registers the adapter's callbacks: the run starts after the other hooks' setup (a hook that raises
        there starts no task) and ends after their cleanup."""
        registry.add_callback(AgentInitializedEvent, self._on_initialized)
        registry.add_callback(BeforeInvocationEvent, self._on_before_invocation, order=HookOrder.SDK_LAST)
        registry.add_callback(AfterInvocationEvent, self._on_after_invocation, order=HookOrder.SDK_FIRST)

    def _on_initialized(self, event: AgentInitializedEvent) -> None:
        self._attach(event.agent)

    def _attach(self, agent: Agent) -> None:
        if agent in self._attached:
            return
        self._attached.add(agent)
        agent.add_middleware(InvokeModelStage, _stop_model_call)
        agent.add_middleware(ExecuteToolStage, _stop_tool_call)

    async def _on_before_invocation(self, event: BeforeInvocationEvent) -> None:
        agent = event.agent
        self._attach(agent)
        delegating = _RUN.get()
        if delegating is not None and delegating.ended:
            delegating = None  # a run of a stream dropped unclosed, still set in the context that read it
        tool_call = None if delegating is None else delegating.tool_calls.get(asyncio.current_task())
        exits = contextlib.AsyncExitStack()
        run: _AgentRun | None = None
        handle = await exits.enter_async_context(
            tracked(
                self._session,
                agent=agent.name,
                task_id=self._task_id,
                timeout=self._timeout,
                partial_output=lambda: None if run is None else run.text.text,
            )
        )
        run = _AgentRun(agent, handle, exits, tool_call)
        try:
            await exits.enter_async_context(on_cancel_in_loop(handle.token, run.stop))
        except BaseException as error:
            await exits.__aexit__(type(error), error, error.__traceback__)
            raise
        # An exception the caller was handling when it started the run (a fallback in an ``except``) is in
        # flight in the after-hook too, and must not count as the run's. (One the caller began to handle
        # while it read the run's stream would still count: strands gives the hook no other way to know.)
        run.outer_error = sys.exc_info()[1]
        run.context_token = _RUN.set(run)
        # By agent, not through the context: a stream dropped unclosed is closed by asyncio's finalizer in a
        # context of its own, and its run must still end. (An agent runs one invocation at a time.)
        self._runs[agent] = run
        if tool_call is not None:
            tool_call.subagent_runs.append(run)

    async def _on_after_invocation(self, event: AfterInvocationEvent) -> None:
        run = self._runs.pop(event.agent, None)
        if run is None or run.context_token is None:
            return  # this adapter started no run here: its start raised
        # AfterInvocationEvent carries no exception; it is dispatched from the run's ``finally``, so the one
        # in flight, unless the caller's own, is the run's.
        error = sys.exc_info()[1]
        if error is run.outer_error:
            error = None
        # In the finalizer's context (a dropped stream) the run was never current: nothing to restore there.
        with contextlib.suppress(ValueError):
            _RUN.reset(run.context_token)
        try:
            await self._end(run, event, error)
        finally:
            run.ended = True
            if run.tool_call is not None:
                run.tool_call.subagent_ended()

    async def _end(self, run: _AgentRun, event: AfterInvocationEvent, error: BaseException | None) -> None:
        handle, token = run.handle, run.handle.token
        if error is not None:
            if isinstance(error, GeneratorExit):
                # The caller stopped reading the run's stream: the run was abandoned, not broken.
                if not token.is_cancelled:
                    await resolved(
                        self._session.cancel_subagent_task(handle.task_id, reason=STREAM_CLOSED_REASON)
                    )
                error = asyncio.CancelledError(STREAM_CLOSED_REASON)
            run.cancelled = token.is_cancelled or isinstance(error, asyncio.CancelledError)
            # Leaving `tracked` cancelled keeps the partial output as the task's result (a late end).
            await run.exits.__aexit__(type(error), error, error.__traceback__)
            return
        result = event.result
        # A cancel that stopped the loop leaves the agent's signal set (strands clears it after this hook); a
        # deferred stop (``cancel(after_current_tools=True)``, the stop tool) does not, and is a normal end.
        stopped = (
            result is not None and result.stop_reason == "cancelled" and event.agent.cancel_signal.is_set()
        )
        run.cancelled = stopped
        if stopped:
            # The run returns rather than raises, so it reports itself to the tool call that ran it (`tracked`
            # does so for a run that raises), before any wait on the session.
            report_cancelled_run(run.cancelled_run(token.reason or FRAMEWORK_CANCEL_REASON))
        if stopped and not token.is_cancelled:
            await resolved(self._session.cancel_subagent_task(handle.task_id, reason=FRAMEWORK_CANCEL_REASON))
        if stopped or result is None:
            # After a cancel this is a late end: the task stays CANCELLED and keeps what the run had streamed
            # (``result`` is None only for the deprecated ``structured_output`` call).
            await resolved(handle.complete(run.text.text or None))
        else:
            await resolved(handle.complete(_output(result)))
        await run.exits.aclose()


def _output(result: Any) -> str:
    """The run's output text: strands' own text of its final message."""
    return str(result).strip()


def _stop_model_call(
    context: InvokeModelContext, next_stage: Callable[[InvokeModelContext], AsyncGenerator[Any, None]]
) -> AsyncGenerator[Any, None]:
    """Middleware of the model call: a cancel stops it at once, even while the model sends nothing; the call
    ends as strands ends one it sees cancelled between chunks."""
    run = _RUN.get()
    if run is None or run.agent is not context.agent:
        return next_stage(context)
    text = run.text
    text.new_response()

    def passing(event: Any) -> Any:
        # Strands drops the text of a response cancelled mid-stream: the partial output keeps it.
        if (data := event.get("data")) and isinstance(data, str):
            text.add(data)
        elif isinstance(event, ModelStopReason):
            step.answered = True  # the response is whole: a later cancel must not replace it
        return event

    def stopped() -> Any:
        return ModelStopReason(
            stop_reason="cancelled",
            message={"role": "assistant", "content": [{"text": _CANCELLED_RESPONSE_TEXT}]},
            usage={"inputTokens": 0, "outputTokens": 0, "totalTokens": 0},
            metrics={"latencyMs": 0},
        )

    step = _Step(run)
    return step.run(next_stage(context), passing, stopped)


def _stop_tool_call(
    context: ExecuteToolContext, next_stage: Callable[[ExecuteToolContext], AsyncGenerator[Any, None]]
) -> AsyncGenerator[Any, None]:
    """Middleware of a tool call: a cancel stops a running async tool at once and answers its call (strands
    would let it run to its end); the call that ran a cancelled tracked subagent gets its cancelled text."""
    run = _RUN.get()
    if run is None or run.agent is not context.agent:
        return next_stage(context)
    call = _ToolCall(run)

    def passing(event: Any) -> Any:
        if isinstance(event, ToolResultEvent):
            call.answered = True
            return _answer_for_subagent(call, event)
        return event

    def stopped() -> Any:
        return ToolResultEvent(_cancelled_tool_result(context, run.handle.token.reason, call.started))

    return call.run(next_stage(context), passing, stopped)


def _cancelled_tool_result(context: ExecuteToolContext, reason: str | None, started: bool) -> Any:
    text = cancelled_tool_call_text(tool=context.tool_use["name"], reason=reason, started=started)
    tool_use_id = str(context.tool_use.get("toolUseId"))
    return {"toolUseId": tool_use_id, "status": "error", "content": [{"text": text}]}


def _answer_for_subagent(call: _ToolCall, event: ToolResultEvent) -> ToolResultEvent:
    """The result of a tool call that ran a tracked subagent, of any framework, that ended cancelled: the
    subagent's reason and partial output, in place of what the tool made of it (strands' generic text for an
    agent used as a tool, another framework's exception)."""
    cancelled = None if call.delegating is None else call.delegating.cancelled_run
    if cancelled is None:
        return event
    return ToolResultEvent(
        {"toolUseId": event.tool_use_id, "status": "error", "content": [{"text": cancelled.text()}]},
        exception=event.exception,
    )
