"""Tracking OpenAI Agents SDK runs as subagent tasks: agents used as tools, and whole streamed runs.

Two drop-ins, installed with the ``openai-agents`` extra (from a clone, ``pip install '.[openai-agents]'``;
from the package index, ``pip install 'subagent-tracker[openai-agents]'``):

- :func:`tracked_as_tool` for ``agent.as_tool(...)``: each invocation of the tool is a task. Cancelling it
  stops the nested run and the tool call returns the reason and the partial output, so the delegating run goes
  on with its turn.
- :func:`tracked_run_streamed` for ``Runner.run_streamed(...)``: the whole run is a task. Cancelling it ends
  ``stream_events()`` without raising, and ``to_input_list()`` answers every function call.

Both take their parent from the innermost run tracked in the current context, whichever framework it
belongs to (see :func:`subagent_tracker.integrations.tracked`): an agent tool called from a tracked run is its
child.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeAlias, TypeVar, cast

from subagent_tracker.integrations import (
    FRAMEWORK_CANCEL_REASON,
    RUN_STOPPED_REASON,
    STREAM_CLOSED_REASON,
    TrackedHandle,
    TrackedSession,
    tracked,
)
from subagent_tracker.integrations._support import (
    BlockingHandle,
    BlockingSession,
    CancelledRun,
    StreamedText,
    absorb_own_cancel,
    answers_for_subagents,
    blocking_twin,
    cancel_in_background,
    cancelled_tool_call_text,
    check_run_options,
    missing_framework,
    on_cancel_in_loop,
    report_cancelled_run,
    resolved,
)

try:
    from agents import (
        Agent,
        AgentToolStreamEvent,
        FunctionTool,
        ItemHelpers,
        MessageOutputItem,
        ModelResponse,
        RawResponsesStreamEvent,
        ReasoningItem,
        RunContextWrapper,
        RunHooks,
        RunItem,
        Runner,
        RunResultStreaming,
        RunState,
        StreamEvent,
        ToolCallItem,
        ToolCallOutputItem,
        TResponseInputItem,
        default_tool_error_function,
    )
    from agents.lifecycle import RunHooksBase
    from agents.run_context import AgentHookContext
    from agents.tool import Tool
    from agents.tool_context import ToolContext
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseReasoningItem,
        ResponseTextDeltaEvent,
    )
    from pydantic_core import to_jsonable_python
except ImportError as error:
    raise missing_framework("openai_agents", "openai-agents", error) from error

__all__ = ["tracked_as_tool", "tracked_run_streamed"]

_T = TypeVar("_T")
#: What ``as_tool`` takes as ``failure_error_function``.
_FailureFunction: TypeAlias = Callable[[RunContextWrapper[Any], Exception], "str | Awaitable[str]"]


def _observe(text: StreamedText, event: StreamEvent) -> None:
    """Keeps the text a stream event carries, response by response."""
    if not isinstance(event, RawResponsesStreamEvent):
        return
    if event.data.type == "response.created":
        text.new_response()
    elif isinstance(event.data, ResponseTextDeltaEvent):
        text.add(event.data.delta)


@dataclass
class _RunRecord:
    """What a tracked streamed run needs to rebuild a turn that ``cancel("immediate")`` dropped: the last
    model response, the outputs its tool calls produced before the cancel, and which calls had started."""

    last_response: tuple[Agent[Any], ModelResponse] | None = None
    outputs: dict[str, Any] = field(default_factory=dict)
    started: set[str] = field(default_factory=set)


#: The record of the tracked streamed run the current code runs in (its tools see it through their context).
_RUN_RECORD: ContextVar[_RunRecord | None] = ContextVar("subagent_tracker_openai_run_record", default=None)


@dataclass
class _Invocation:
    """One call of a tracked agent tool: its task, once started, and what its nested run produced."""

    agent: str
    text: StreamedText = field(default_factory=StreamedText)
    handle: TrackedHandle | None = None
    error: Exception | None = None

    def cancelled_run(self, reason: str | None) -> CancelledRun:
        task_id = "" if self.handle is None else self.handle.task_id
        return CancelledRun(agent=self.agent, task_id=task_id, reason=reason, partial=self.text.text)

    def cancelled_text(self, reason: str | None) -> str:
        return self.cancelled_run(reason).text()


#: The agent tool call the current code runs in: its ``on_stream`` and failure function record into it.
_INVOCATION: ContextVar[_Invocation | None] = ContextVar("subagent_tracker_openai_invocation", default=None)


def tracked_as_tool(
    agent: Agent[Any],
    session: TrackedSession,
    *,
    tool_name: str | None,
    tool_description: str | None,
    task_id: str | Callable[[], str] | None = None,
    timeout: float | None = None,
    **as_tool_options: Any,
) -> FunctionTool:
    """``agent.as_tool(tool_name, tool_description, **as_tool_options)``, with each invocation tracked as a
    task of ``session`` (its ``agent`` is ``agent.name``; its parent the innermost tracked run of the calling
    context).

    The nested run streams (an ``on_stream`` of the adapter's own records its text; the caller's
    ``on_stream``, if given, still receives every event). Cancelling the task, by id, cascade, session cancel,
    deadline (``timeout=``) or from another process, stops the nested run wherever it waits: mid model stream,
    between tool calls, or inside its running async tools. The tool call then returns
    :func:`~subagent_tracker.integrations.cancelled_run_text` with the reason and the text streamed so far,
    the task keeps that text as its ``result``, and the delegating run goes on with its turn.

    A nested run that returns completes the task with the tool's output. One that raises fails it; the tool
    call then returns what ``failure_error_function`` makes of the error, as ``as_tool`` does (with
    ``failure_error_function=None`` the error propagates). If the delegating run tears the tool call down (its
    own cancel), the task is cancelled with :data:`RUN_STOPPED_REASON` unless already cancelled.

    Raises ``TypeError`` at once for a ``session`` that is not a ``Session`` or a ``RedisSession``, or a bad
    ``task_id``; ``timeout`` is checked as the session checks it (``TypeError``, ``ValueError``).
    """
    check_run_options(session, task_id, timeout)
    user_on_stream: Callable[[AgentToolStreamEvent], object] | None = as_tool_options.pop("on_stream", None)
    user_failure: _FailureFunction | None = as_tool_options.pop(
        "failure_error_function", default_tool_error_function
    )

    async def record_stream(payload: AgentToolStreamEvent) -> None:
        invocation = _INVOCATION.get()
        if invocation is not None:
            _observe(invocation.text, payload["event"])
        if user_on_stream is not None:
            outcome = user_on_stream(payload)
            if inspect.isawaitable(outcome):
                await outcome

    def record_failure(context: RunContextWrapper[Any], error: Exception) -> str | Awaitable[str]:
        # as_tool turns a failed nested run into a tool result: remember the error so the task fails.
        invocation = _INVOCATION.get()
        if invocation is not None:
            invocation.error = error
        assert user_failure is not None
        return user_failure(context, error)

    tool = agent.as_tool(
        tool_name,
        tool_description,
        on_stream=record_stream,
        failure_error_function=None if user_failure is None else record_failure,
        **as_tool_options,
    )
    run_nested_agent = tool.on_invoke_tool

    async def run_tracked(context: ToolContext[Any], input_json: str, invocation: _Invocation) -> Any:
        this_task = asyncio.current_task()
        assert this_task is not None
        try:
            # Leaving cancelled keeps the text streamed so far as the task's result (a late end).
            async with tracked(
                session,
                agent=agent.name,
                task_id=task_id,
                timeout=timeout,
                partial_output=lambda: invocation.text.text,
            ) as handle:
                invocation.handle = handle
                # This task's own context: seen by the nested run's on_stream and failure function only.
                _INVOCATION.set(invocation)
                async with on_cancel_in_loop(handle.token, this_task.cancel):
                    output = await run_nested_agent(context, input_json)
                if invocation.error is not None:
                    await resolved(handle.fail(invocation.error))
                else:
                    await _complete(handle, output)
                return output
        except asyncio.CancelledError:
            # The tracker's cancel, handed to this task by `on_cancel_in_loop`, is answered here; another one
            # (the delegating run tearing the call down as well) goes on up.
            stopped = invocation.handle
            if stopped is None or not stopped.token.is_cancelled or not absorb_own_cancel(this_task):
                raise
            return invocation.cancelled_text(stopped.token.reason)

    async def on_invoke_tool(context: ToolContext[Any], input_json: str) -> Any:
        invocation = _Invocation(agent.name)
        # The nested run runs in a task of its own: it sees this call as its context (parent, invocation), it
        # is cancelled alone, and it ends the tracked task itself when it has stopped, even if this call is
        # torn down first.
        nested = asyncio.ensure_future(run_tracked(context, input_json, invocation))
        try:
            return await asyncio.shield(nested)
        except asyncio.CancelledError:
            handle = invocation.handle
            if handle is not None:
                # Not awaited: a second cancel of this call must not skip the answer below.
                cancel_in_background(session, handle.task_id, RUN_STOPPED_REASON)
            nested.cancel()
            reason = RUN_STOPPED_REASON if handle is None else handle.token.reason or RUN_STOPPED_REASON
            # The answer is made now and the nested run ends later: the text it answers with is its result.
            invocation.text.close()
            cancelled = invocation.cancelled_run(reason)
            _record_torn_down_call(context, cancelled.text())
            # The nested run ends later, in its own task: the delegating run answers this call now.
            report_cancelled_run(cancelled)
            raise

    tool.on_invoke_tool = on_invoke_tool
    return tool


async def _complete(handle: TrackedHandle, output: Any) -> None:
    # A Redis session keeps results as JSON: a structured output (a pydantic model, a dataclass) is kept as
    # its JSON form there, and as itself in memory. The call refuses it before anything is sent.
    try:
        completing = handle.complete(output)
    except TypeError:
        completing = handle.complete(to_jsonable_python(output, fallback=str))
    await resolved(completing)


def _record_torn_down_call(context: object, output: str) -> None:
    record = _RUN_RECORD.get()
    if record is not None and isinstance(context, ToolContext):
        record.outputs[context.tool_call_id] = output


def tracked_run_streamed(
    session: TrackedSession,
    starting_agent: Agent[Any],
    input: str | list[TResponseInputItem] | RunState[Any],
    *,
    task_id: str | Callable[[], str] | None = None,
    timeout: float | None = None,
    **run_options: Any,
) -> RunResultStreaming:
    """``Runner.run_streamed(starting_agent, input, **run_options)``, with the whole run tracked as a task of
    ``session`` (its ``agent`` is ``starting_agent.name``; its parent the innermost tracked run of the calling
    context). Call it from a running event loop, as ``Runner.run_streamed``.

    Cancelling the task, by id, cascade, session cancel, deadline (``timeout=``) or from another process,
    stops the run at once (``RunResultStreaming.cancel("immediate")``): mid model stream, or in its running
    async tools, whose tracked subagents are cancelled with it. Then ``stream_events()`` ends without raising,
    and ``to_input_list()`` answers every function call: the turn the cancel dropped is put back, each tool
    call that had finished keeps its output, and each other one gets one that says it was cancelled, and why.
    The task ends ``CANCELLED`` with the text streamed to the consumer so far as its ``result``.

    A run that ends normally completes the task with ``final_output`` as its result; one that raises fails it.
    A consumer that stops iterating ``stream_events()`` before the end (``break``, ``aclose()``, or its task
    cancelled) cancels the run with :data:`STREAM_CLOSED_REASON` rather than leaving it running; a
    ``result.cancel()`` of the caller's own ends the task ``CANCELLED`` with :data:`FRAMEWORK_CANCEL_REASON`.

    Raises ``TypeError`` at once for a ``session`` that is not a ``Session`` or a ``RedisSession``, or a bad
    ``task_id``; ``timeout`` is checked as the session checks it (``TypeError``, ``ValueError``);
    ``RuntimeError`` outside a running event loop.
    """
    check_run_options(session, task_id, timeout)
    asyncio.get_running_loop()  # outside a loop, fail before a task is started
    # `Runner.run_streamed` returns at once: the task is started, and later ended, synchronously.
    return _StreamedRun(blocking_twin(session)).start(starting_agent, input, task_id, timeout, run_options)


class _StreamedRun:
    """One tracked ``Runner.run_streamed``: starts the task, stops the run on a cancel, repairs its history,
    and ends the task from how the run ended."""

    def __init__(self, session: BlockingSession) -> None:
        self._session = session
        self._record = _RunRecord()
        self._text = StreamedText()
        # The run's own context: the task is its current run, so everything the run starts is its child.
        self._context = contextvars.copy_context()
        self._scope: contextlib.AbstractAsyncContextManager[BlockingHandle] | None = None
        self._handle: BlockingHandle | None = None
        self._result: RunResultStreaming | None = None
        self._ended = False

    def start(
        self,
        starting_agent: Agent[Any],
        input: str | list[TResponseInputItem] | RunState[Any],
        task_id: str | Callable[[], str] | None,
        timeout: float | None,
        run_options: dict[str, Any],
    ) -> RunResultStreaming:
        self._scope = _run_scope(self._session, starting_agent.name, task_id, timeout, self._stop)
        self._handle = _settle(self._context, self._scope.__aenter__())
        try:
            self._context.run(_RUN_RECORD.set, self._record)
            run_options["hooks"] = _RecordingHooks(self._record, run_options.get("hooks"))
            result = self._context.run(lambda: Runner.run_streamed(starting_agent, input, **run_options))
        except BaseException as error:
            self._exit(error)
            raise
        self._result = result
        assert result.run_loop_task is not None
        result.run_loop_task.add_done_callback(lambda _task: self._end())
        # A drop-in: the caller iterates result.stream_events() as ever, and gets this generator.
        result.stream_events = self._stream_events  # type: ignore[method-assign]
        return result

    def _stop(self) -> None:
        """On the loop, when the task's token fires: stop the run where it is."""
        result = self._result
        if result is not None and result.run_loop_task is not None and not result.run_loop_task.done():
            result.cancel("immediate")

    async def _stream_events(self) -> AsyncIterator[StreamEvent]:
        assert self._result is not None
        events = cast(AsyncGenerator[StreamEvent, None], RunResultStreaming.stream_events(self._result))
        reached_the_end = False
        try:
            async for event in events:
                _observe(self._text, event)
                yield event
            reached_the_end = True
        finally:
            if not reached_the_end and not self._run_finished():
                self._abandon()
            await events.aclose()
            # The run has settled: answer its calls before the caller reads to_input_list().
            self._end()

    def _abandon(self) -> None:
        assert self._handle is not None
        self._session.cancel_subagent_task(self._handle.task_id, reason=STREAM_CLOSED_REASON)
        self._stop()

    def _run_finished(self) -> bool:
        assert self._result is not None
        return self._result.run_loop_task is None or self._result.run_loop_task.done()

    def _end(self) -> None:
        """Ends the task from how the run ended, once (called when the run loop is done, and again when
        ``stream_events()`` has drained it)."""
        result, handle = self._result, self._handle
        assert result is not None and handle is not None
        loop_task = result.run_loop_task
        if self._ended or loop_task is None or not loop_task.done():
            return
        self._ended = True
        if handle.token.is_cancelled or loop_task.cancelled():
            if not handle.token.is_cancelled:
                self._session.cancel_subagent_task(handle.task_id, reason=FRAMEWORK_CANCEL_REASON)
            _answer_every_call(result, self._record, handle.token.reason or FRAMEWORK_CANCEL_REASON)
            handle.complete(self._text.text)
            self._exit(None)
            return
        error = loop_task.exception()
        if error is not None:
            self._exit(error)
            return
        try:
            handle.complete(result.final_output)
        except TypeError:
            handle.complete(to_jsonable_python(result.final_output, fallback=str))
        self._exit(None)

    def _exit(self, error: BaseException | None) -> None:
        assert self._scope is not None
        _settle(
            self._context,
            self._scope.__aexit__(
                None if error is None else type(error), error, None if error is None else error.__traceback__
            ),
        )


@contextlib.asynccontextmanager
async def _run_scope(
    session: BlockingSession,
    agent: str,
    task_id: str | Callable[[], str] | None,
    timeout: float | None,
    stop: Callable[[], None],
) -> AsyncIterator[BlockingHandle]:
    async with (
        tracked(session, agent=agent, task_id=task_id, timeout=timeout) as handle,
        on_cancel_in_loop(handle.token, stop),
    ):
        yield cast(BlockingHandle, handle)


def _settle(context: contextvars.Context, step: Awaitable[_T]) -> _T:
    """Runs ``step`` to its end in ``context``, now, or raises ``RuntimeError`` if it would wait.

    ``Runner.run_streamed`` returns at once, with its run loop already created in the caller's context; the
    task must be started and made the current run before that, in a context of the run's own, and ended in
    the same context later. Starting and ending a task of a blocking session never waits on the loop, so the
    core's ``tracked`` can be entered and left synchronously.
    """
    steps = step.__await__()
    try:
        context.run(steps.send, None)
    except StopIteration as done:
        value: _T = done.value
        return value
    steps.close()
    raise RuntimeError("tracked_run_streamed needs a blocking session, whose tasks start and end at once")


def _answer_every_call(result: RunResultStreaming, record: _RunRecord, reason: str) -> None:
    """Leaves no function call in ``result.new_items`` (the history ``to_input_list()`` gives) without an
    output: ``cancel("immediate")`` drops the whole turn it lands in, finished tool calls included, so that
    turn's response is put back with the outputs its calls produced, and a cancelled one for each other
    call."""
    items = result.new_items
    calls: dict[str, tuple[Agent[Any], ResponseFunctionToolCall]] = {}
    answered: set[str | None] = set()
    for item in items:
        if isinstance(item, ToolCallItem) and isinstance(item.raw_item, ResponseFunctionToolCall):
            calls[item.raw_item.call_id] = (item.agent, item.raw_item)
        elif isinstance(item, ToolCallOutputItem):
            answered.add(item.call_id)
    if record.last_response is not None:
        agent, response = record.last_response
        dropped_calls = [output for output in response.output if isinstance(output, ResponseFunctionToolCall)]
        if dropped_calls and not any(call.call_id in calls for call in dropped_calls):
            for output in response.output:
                restored = _run_item(agent, output)
                if restored is not None:
                    items.append(restored)
            calls.update((call.call_id, (agent, call)) for call in dropped_calls)
    for call_id, (agent, call) in calls.items():
        if call_id in answered:
            continue
        started = call_id in record.started
        answer: Any = (
            record.outputs[call_id]
            if call_id in record.outputs
            else cancelled_tool_call_text(tool=call.name, reason=reason, started=started)
        )
        raw_output = ItemHelpers.tool_call_output_item(call, answer)
        items.append(ToolCallOutputItem(agent=agent, raw_item=raw_output, output=answer))


def _run_item(agent: Agent[Any], output: object) -> RunItem | None:
    if isinstance(output, ResponseFunctionToolCall):
        return ToolCallItem(agent=agent, raw_item=output)
    if isinstance(output, ResponseOutputMessage):
        return MessageOutputItem(agent=agent, raw_item=output)
    if isinstance(output, ResponseReasoningItem):
        return ReasoningItem(agent=agent, raw_item=output)
    return None


class _RecordingHooks(RunHooks[Any]):
    """The caller's run hooks, if any, plus what the history repair needs: each model response, and each
    tool output keyed by its call id."""

    def __init__(self, record: _RunRecord, inner: RunHooksBase[Any, Any] | None) -> None:
        self._record = record
        self._inner = inner if inner is not None else RunHooks[Any]()

    async def on_llm_start(
        self,
        context: RunContextWrapper[Any],
        agent: Agent[Any],
        system_prompt: str | None,
        input_items: list[Any],
    ) -> None:
        await self._inner.on_llm_start(context, agent, system_prompt, input_items)

    async def on_llm_end(
        self, context: RunContextWrapper[Any], agent: Agent[Any], response: ModelResponse
    ) -> None:
        self._record.last_response = (agent, response)
        await self._inner.on_llm_end(context, agent, response)

    async def on_agent_start(self, context: AgentHookContext[Any], agent: Any) -> None:
        # Each function tool of the run answers for a tracked subagent of any framework that ends cancelled in
        # it (`answers_for_subagents`, which wraps a tool once): the SDK has no hook around a tool's call.
        for tool in getattr(agent, "tools", ()):
            if isinstance(tool, FunctionTool):
                tool.on_invoke_tool = answers_for_subagents(tool.on_invoke_tool)
        await self._inner.on_agent_start(context, agent)

    async def on_agent_end(self, context: AgentHookContext[Any], agent: Any, output: Any) -> None:
        await self._inner.on_agent_end(context, agent, output)

    async def on_handoff(self, context: RunContextWrapper[Any], from_agent: Any, to_agent: Any) -> None:
        await self._inner.on_handoff(context, from_agent, to_agent)

    async def on_tool_start(self, context: RunContextWrapper[Any], agent: Any, tool: Tool) -> None:
        if isinstance(context, ToolContext):
            self._record.started.add(context.tool_call_id)
        await self._inner.on_tool_start(context, agent, tool)

    async def on_tool_end(
        self, context: RunContextWrapper[Any], agent: Any, tool: Tool, result: object
    ) -> None:
        if isinstance(context, ToolContext):
            self._record.outputs[context.tool_call_id] = result
        await self._inner.on_tool_end(context, agent, tool, result)
