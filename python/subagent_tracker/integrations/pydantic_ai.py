"""Tracking pydantic-ai runs: :class:`SubagentTracking`, a capability that makes every run of the agent that
carries it a task of a session.

::

    from pydantic_ai import Agent
    from subagent_tracker import Session
    from subagent_tracker.integrations.pydantic_ai import SubagentTracking

    session = Session()
    researcher = Agent(model, name="researcher", capabilities=[SubagentTracking(session)])
    orchestrator = Agent(model, name="orchestrator", capabilities=[SubagentTracking(session)])

    @orchestrator.tool_plain
    async def research(question: str) -> str:
        return (await researcher.run(question)).output  # a child task of the orchestrator's run

Cancelling a run's task (by id, by cascade, through a session cancel, by deadline, or from another process
over Redis) cancels the run the way pydantic-ai's own ``RunContext.cancel()`` does: mid model stream, before
and between tool calls, and inside running async tools. A cancelled subagent's tool call answers the
delegating run with the reason and the partial output, and the delegating run goes on; a cancelled top-level
run raises ``pydantic_ai.exceptions.RunCancelled`` with every tool call of its history answered.

pydantic-ai needs Python 3.11 or later: on 3.10 importing this module raises ``ImportError`` saying so.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Any

from subagent_tracker._errors import TaskCancelledError
from subagent_tracker.integrations import TrackedHandle, TrackedSession, tracked
from subagent_tracker.integrations._support import (
    CancelledRun,
    cancelled_tool_call_text,
    check_run_options,
    delegating_call,
    missing_framework,
    on_cancel_in_loop,
    resolved,
)

try:
    import pydantic_core
    from pydantic_ai import ModelRequestNode, RunContext
    from pydantic_ai.capabilities import (
        AbstractCapability,
        AgentNode,
        ValidatedToolArgs,
        WrapRunHandler,
        WrapToolExecuteHandler,
    )
    from pydantic_ai.exceptions import RunCancelled
    from pydantic_ai.messages import (
        ModelMessage,
        ModelRequest,
        ModelResponse,
        TextPart,
        ToolCallPart,
        ToolReturnPart,
    )
    from pydantic_ai.models import Model, ModelRequestParameters, StreamedResponse
    from pydantic_ai.models.wrapper import WrapperModel
    from pydantic_ai.run import AgentRunResult
    from pydantic_ai.settings import ModelSettings
    from pydantic_ai.tools import ToolDefinition
except ImportError as error:
    if sys.version_info < (3, 11):
        raise ImportError(
            "subagent_tracker.integrations.pydantic_ai needs Python 3.11 or later, as pydantic-ai does "
            f"(this is Python {sys.version_info[0]}.{sys.version_info[1]})"
        ) from error
    raise missing_framework("pydantic_ai", "pydantic-ai", error) from error

__all__ = ["SubagentTracking"]


class _RunState:
    """One run's own state (a capability instance is shared by every run of its agent)."""

    def __init__(self) -> None:
        self.handle: TrackedHandle | None = None
        # The run's live history: only node contexts hold it (`wrap_run`'s is a copy, and the list is
        # replaced once the first node has run).
        self.messages: list[ModelMessage] | None = None
        # The tool calls whose execution started: each answers for itself when the run is cancelled.
        self.started_calls: set[str] = set()
        # The request the next model request node sends (holding the last tool results): the node adds it to
        # the history only once it runs, so a cancel before then would drop those results.
        self.next_request: ModelRequest | None = None
        # The run's latest model response, if it was streamed: a cancel can reach the run before the partial
        # response is in the history (when it comes through a delegating run's teardown).
        self.last_stream: StreamedResponse | None = None


class _StreamWatch(WrapperModel):
    """The run's model, noting in the run's state the response it streams."""

    def __init__(self, wrapped: Model, runs: dict[str, _RunState]) -> None:
        super().__init__(wrapped)
        self._runs = runs

    @contextlib.asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: RunContext[Any] | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        async with super().request_stream(
            messages, model_settings, model_request_parameters, run_context
        ) as stream:
            if run_context is not None and (state := _run_state(self._runs, run_context)) is not None:
                state.last_stream = stream
            yield stream


class SubagentTracking(AbstractCapability[Any]):
    """A pydantic-ai capability that makes every run of the agent carrying it a task of ``session``.

    - The task's ``agent`` is the agent's name; its parent is the innermost tracked run of the current
      context (:func:`subagent_tracker.integrations.tracked`), whichever framework runs it, so an agent run
      by a tool of a tracked run is that run's child.
    - ``task_id``: a string, a zero-argument callable returning one (called once per run), or ``None`` for
      an id unique per run. A string names one run at a time: a second run under it while the first runs is
      refused with ``DuplicateTaskError``.
    - ``timeout``: seconds until the run's deadline cancels it.

    A run that returns completes its task, with its output (as text) as the result; a run that raises fails
    it. Cancelling the task cancels the run through pydantic-ai's own ``RunContext.cancel()``, and then:

    - the run's partial output text becomes the task's ``result`` (a late end: the task stays ``CANCELLED``);
    - every tool call of the run's history gets a result: a running tool's call says it was cancelled, and
      why (with a tracked subagent's partial output), as does a call that never started; so
      ``RunCancelled.all_messages()`` is a history to resume from;
    - awaited by a tool of a run that carries this capability too, the cancelled run does not end that run:
      the tool call's result is :func:`~subagent_tracker.integrations.cancelled_run_text`, naming the reason
      and the partial output, and the delegating run goes on. Awaited elsewhere, it raises ``RunCancelled``.

    Raises ``TypeError`` at construction for a ``session`` that is not a ``Session`` or a ``RedisSession``,
    or a ``task_id`` of another type; ``timeout`` is checked as the session checks it (``TypeError``,
    ``ValueError``).
    """

    def __init__(
        self,
        session: TrackedSession,
        *,
        task_id: str | Callable[[], str] | None = None,
        timeout: float | None = None,
    ) -> None:
        check_run_options(session, task_id, timeout)
        self.session = session
        self.task_id = task_id
        self.timeout = timeout
        # Each run's own state, by run id: an agent's capability instance serves all its runs, concurrent ones
        # too. (A `for_run` copy per run would cost every run a re-extraction of the agent's configuration.)
        self._runs: dict[str, _RunState] = {}

    def __repr__(self) -> str:
        return (
            f"SubagentTracking(session={self.session!r}, task_id={self.task_id!r}, timeout={self.timeout!r})"
        )

    @classmethod
    def get_serialization_name(cls) -> str | None:
        # A session is a live object: agent specs cannot name one.
        return None

    async def wrap_run(self, ctx: RunContext[Any], *, handler: WrapRunHandler) -> AgentRunResult[Any]:
        state = _RunState()
        if ctx.run_id is not None:
            self._runs[ctx.run_id] = state
        try:
            return await self._run_tracked(ctx, handler, state)
        finally:
            if ctx.run_id is not None:
                del self._runs[ctx.run_id]

    async def _run_tracked(
        self, ctx: RunContext[Any], handler: WrapRunHandler, state: _RunState
    ) -> AgentRunResult[Any]:
        agent = ctx.agent.name if ctx.agent is not None else None
        async with tracked(
            self.session,
            agent=agent,
            task_id=self.task_id,
            timeout=self.timeout,
            partial_output=lambda: _partial_text(state, ctx.run_id),
        ) as handle:
            state.handle = handle
            try:
                async with on_cancel_in_loop(handle.token, ctx.cancel):
                    result = await handler()
            except asyncio.CancelledError:
                # pydantic-ai's own cancels arrive here bare, and its `RunCancelled` is raised further out.
                # Leaving `tracked` keeps the partial output as the task's result (a late end), and reports
                # the run to the tool call that ran it.
                if handle.token.is_cancelled and state.messages is not None:
                    _keep_tool_results(state.messages, state.next_request)
                    _answer_calls_never_started(state.messages, state.started_calls, handle.token.reason)
                raise
            await resolved(handle.complete(_output_text(result.output)))
            return result

    def get_wrapper_model(self, model: Model) -> Model | None:
        return _StreamWatch(model, self._runs)

    async def before_node_run(self, ctx: RunContext[Any], *, node: AgentNode[Any]) -> AgentNode[Any]:
        # `before_node_run`, unlike `wrap_node_run`, also fires for `run_stream()`'s final model request.
        state = _run_state(self._runs, ctx)
        if state is not None:
            state.messages = ctx.messages
            if isinstance(node, ModelRequestNode):
                state.next_request = node.request
                state.last_stream = None  # its response is the latest, and it may not stream
            _cancel_if_asked(state, ctx)
        return node

    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: ValidatedToolArgs,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        state = _run_state(self._runs, ctx)
        if state is None:
            return await handler(args)
        state.started_calls.add(call.tool_call_id)
        started = False
        with delegating_call() as tool_call:
            try:
                if _cancel_if_asked(state, ctx):
                    # The run's cancel cancels this tool's task at its next await: start nothing meanwhile.
                    await _torn_down()
                started = True
                result = await handler(args)
            except (asyncio.CancelledError, RunCancelled, TaskCancelledError) as error:
                handle = state.handle
                if handle is not None and handle.token.is_cancelled:
                    # The run is being cancelled and tears its tools down: a result returned then is kept in
                    # the history pydantic-ai records for the cancelled run, so this call is answered.
                    answer = _cancelled_call_text(call, tool_call.cancelled_run, handle.token.reason, started)
                    if not isinstance(error, asyncio.CancelledError):  # a subagent's, ahead of this teardown
                        await _held_until_torn_down(state, ctx)
                    return answer
                if not isinstance(error, asyncio.CancelledError) and tool_call.cancelled_run is not None:
                    # A tracked subagent was cancelled, not this run (a pydantic-ai agent raises RunCancelled,
                    # a crew TaskCancelledError): pydantic-ai would answer the call with a generic failure;
                    # this says why, and what the subagent had produced, and the run goes on.
                    return _cancelled_call_text(call, tool_call.cancelled_run, None, started)
                raise
        await _held_until_torn_down(state, ctx)
        # A tracked subagent that ended cancelled without raising (a Strands agent returns) answers the call
        # all the same.
        return tool_call.answer(result)


async def _torn_down() -> None:
    """Waits for the cancelled run to cancel the current tool's task, as its teardown does."""
    await asyncio.Event().wait()


async def _held_until_torn_down(state: _RunState, ctx: RunContext[Any]) -> None:
    """If the run was cancelled while a tool ran, waits for the run's teardown before the tool returns.

    Returned before, the tool's result would reach the next model request node, which the cancel drops with
    it; returned in the teardown, it is recorded in the history of the cancelled run."""
    if _cancel_if_asked(state, ctx):
        with contextlib.suppress(asyncio.CancelledError):
            await _torn_down()


def _run_state(runs: dict[str, _RunState], ctx: RunContext[Any]) -> _RunState | None:
    return None if ctx.run_id is None else runs.get(ctx.run_id)


def _cancelled_call_text(
    call: ToolCallPart, cancelled_run: CancelledRun | None, reason: str | None, started: bool
) -> str:
    """The result of a tool call cut short by a cancel: a tracked subagent's reason and partial output if the
    call was running one, else the cancelled run's reason."""
    if cancelled_run is not None:
        return cancelled_run.text()
    return cancelled_tool_call_text(tool=call.tool_name, reason=reason, started=started)


def _cancel_if_asked(state: _RunState, ctx: RunContext[Any]) -> bool:
    """Cancels the run at once if its task is cancelled: the token's callback reaches the loop one turn later,
    and a checkpoint must not let a node or a tool start in between."""
    if state.handle is None or not state.handle.token.is_cancelled:
        return False
    ctx.cancel()
    return True


def _output_text(output: object) -> str:
    """A run's output as text: a string as it is, structured output as JSON."""
    if isinstance(output, str):
        return output
    return pydantic_core.to_json(output).decode()


def _partial_text(state: _RunState, run_id: str | None) -> str | None:
    """The run's partial output: the text of its latest response if it has any (streamed, it is cut where the
    cancel stopped it), else of the last response of the run's history that has any."""
    if state.last_stream is not None and (text := _response_text(state.last_stream.get())):
        return text
    for message in reversed(state.messages or []):
        if isinstance(message, ModelResponse) and message.run_id in (None, run_id):
            if text := _response_text(message):
                return text
    return None


def _response_text(response: ModelResponse) -> str:
    return "".join(part.content for part in response.parts if isinstance(part, TextPart))


def _keep_tool_results(messages: list[ModelMessage], next_request: ModelRequest | None) -> None:
    """Adds to the history the request a cancel stopped before its node sent it, if it holds tool results."""
    if next_request is None or any(message is next_request for message in messages):
        return
    if any(getattr(part, "tool_call_id", None) is not None for part in next_request.parts):
        messages.append(next_request)


def _answer_calls_never_started(messages: list[ModelMessage], started: set[str], reason: str | None) -> None:
    """Gives each call of the history's last response that never started, and has no result, one saying the
    run was cancelled: in the request that answers its siblings, or in a new request after the response.

    A call that started answers for itself (its tool's teardown returns a result, recorded by pydantic-ai
    in a request it appends after this hook has run)."""
    last_response = next(
        (index for index in range(len(messages) - 1, -1, -1) if isinstance(messages[index], ModelResponse)),
        None,
    )
    if last_response is None:
        return
    answered = started | {
        tool_call_id
        for message in messages[last_response + 1 :]
        if isinstance(message, ModelRequest)
        for part in message.parts
        if (tool_call_id := getattr(part, "tool_call_id", None)) is not None
    }
    answers = [
        ToolReturnPart(
            tool_name=call.tool_name,
            content=cancelled_tool_call_text(tool=call.tool_name, reason=reason, started=False),
            tool_call_id=call.tool_call_id,
            outcome="interrupted",
        )
        for call in messages[last_response].parts
        if isinstance(call, ToolCallPart) and call.tool_call_id not in answered
    ]
    if not answers:
        return
    follower = last_response + 1
    if follower < len(messages) and isinstance(request := messages[follower], ModelRequest):
        messages[follower] = replace(request, parts=[*request.parts, *answers])
    else:
        messages.insert(follower, ModelRequest(parts=answers))
