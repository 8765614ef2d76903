"""LangGraph: compiled graphs run as tracked subagents, and whole graph runs streamed as tasks.

- :func:`tracked_subgraph_tool` turns a compiled graph into a tool a delegating graph's ``ToolNode`` (or any
  caller) runs; each call is a task, and a cancelled call answers with the reason and the partial output
  instead of stopping the delegating graph.
- :func:`tracked_astream` is ``graph.astream`` with the whole run a task; a cancel ends the iteration with
  ``TaskCancelledError`` and, with a checkpointer, answers the tool calls the run left open, so the thread's
  next turn works.

Both stop the graph by cancelling the asyncio task that drives it, from the loop that runs it (a deadline or a
Redis cancel arrives on another thread): that reaches the graph wherever it awaits, mid model stream, between
tool calls, and inside a running async tool. A synchronous tool running in a worker thread cannot be stopped;
its late result is dropped.

Install with the ``langgraph`` extra: from a clone, ``pip install '.[langgraph]'``; from the package index,
``pip install 'subagent-tracker[langgraph]'``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from typing import Any, cast
from uuid import UUID

from subagent_tracker._errors import TaskCancelledError
from subagent_tracker._native import CancellationToken
from subagent_tracker.integrations import STREAM_CLOSED_REASON, TrackedSession, tracked
from subagent_tracker.integrations._support import (
    CancelledRun,
    cancel_in_background,
    cancelled_tool_call_text,
    check_run_options,
    missing_framework,
    on_cancel_in_loop,
    report_cancelled_run,
    resolved,
)

try:
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.messages import AIMessage, BaseMessage, BaseMessageChunk, HumanMessage, ToolMessage
    from langchain_core.runnables import RunnableConfig
    from langchain_core.runnables.config import merge_configs
    from langchain_core.tools import BaseTool, StructuredTool, ToolException
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.pregel import Pregel
    from langgraph.types import StreamMode
    from pydantic import BaseModel, Field
except ImportError as error:  # pragma: no cover - exercised without the extra installed
    raise missing_framework("langgraph", "langgraph", error) from error

__all__ = ["tracked_astream", "tracked_subgraph_tool"]

#: What a subgraph tool streams: the state after each step (its last message is the output) and the model's
#: tokens, so the partial output of a subagent cut off mid reply holds what it had said (the text the
#: delegating model reads).
_SUBGRAPH_MODES: list[StreamMode] = ["values", "messages"]


class _SubgraphInput(BaseModel):
    input: str = Field(description="The request for the subagent, in plain words.")


class _SubagentCancelled(ToolException):
    """The tool's answer for a cancelled subagent: LangChain turns a handled ``ToolException`` into a
    ``ToolMessage`` with ``status="error"`` (or its text, for a call made without a tool call id)."""


def _answer_cancelled(error: ToolException) -> str:
    if isinstance(error, _SubagentCancelled):
        return str(error)
    # A ToolException the subgraph let out is not ours to answer: it fails the call as it would untracked.
    raise error


def tracked_subgraph_tool(
    graph: Pregel[Any, Any, Any, Any],
    session: TrackedSession,
    *,
    name: str,
    description: str,
    task_id: str | Callable[[], str] | None = None,
    timeout: float | None = None,
) -> BaseTool:
    """A tool that runs the compiled ``graph`` as a tracked subagent: each call is a task of ``session`` whose
    ``agent`` is the tool's ``name`` (the name the delegating model calls it by; a compiled graph is named
    "LangGraph" unless told otherwise).

    The tool takes one argument, ``input: str``, sent to the graph as ``{"messages": [HumanMessage(input)]}``;
    its result is the text of the last message of the graph's final state, which also becomes the task's
    ``result``. Its parent is the innermost tracked run of the current context, of any framework.

    A cancel (by id, by cascade, by session, by the ``timeout`` deadline, from another process) stops the
    subgraph wherever it awaits; the task keeps the last message's text so far (tokens streamed before the
    cancel included) as its ``result``, and the call answers with ``ToolMessage(status="error")`` holding
    :func:`~subagent_tracker.integrations.cancelled_run_text`: the delegating graph goes on with its turn. A
    subgraph that raises fails the task and the call raises, as the graph would untracked.

    Async only (``ainvoke``; a graph run with ``ainvoke`` or ``astream``), as the cancel is an asyncio one.
    Called outside a graph, ``await tool.ainvoke({"input": ...})`` returns the output, or the cancelled text.
    ``TypeError`` at once for a bad ``session`` or ``task_id``; ``timeout`` is checked as the session checks
    it (``TypeError``, ``ValueError``).
    """
    check_run_options(session, task_id, timeout)

    async def run_subagent(input: str) -> str:
        return await _run_subgraph(graph, session, name, task_id, timeout, input)

    return StructuredTool.from_function(
        coroutine=run_subagent,
        name=name,
        description=description,
        args_schema=_SubgraphInput,
        handle_tool_error=_answer_cancelled,
    )


async def _run_subgraph(
    graph: Pregel[Any, Any, Any, Any],
    session: TrackedSession,
    agent: str,
    task_id: str | Callable[[], str] | None,
    timeout: float | None,
    request: str,
) -> str:
    output = _LastMessageText()
    # partial_output: a teardown by the delegating run (an asyncio cancel of this call) keeps it too.
    async with tracked(
        session, agent=agent, task_id=task_id, timeout=timeout, partial_output=lambda: output.text
    ) as task:
        # A CancelledError out of a tool cancels the delegating graph's whole step, siblings included: the
        # subgraph runs in a task of its own, and only that task is cancelled.
        run = asyncio.ensure_future(_follow(graph, {"messages": [HumanMessage(request)]}, task.token, output))
        async with on_cancel_in_loop(task.token, run.cancel):
            await _wait_or_cancel(run)
        finished = not run.cancelled() and run.result()  # a subgraph that raised fails the task here
        # After a cancel, a late end: the task stays CANCELLED and keeps what the subagent had said so far.
        await resolved(task.complete(output.text))
        if finished:
            return output.text
        cancelled = CancelledRun(
            agent=agent, task_id=task.task_id, reason=task.token.reason, partial=output.text
        )
        # Its tool answers for it; the report is for a delegating call of another framework around that tool.
        report_cancelled_run(cancelled)
    raise _SubagentCancelled(cancelled.text())


async def _follow(
    graph: Pregel[Any, Any, Any, Any], graph_input: Any, token: CancellationToken, output: _LastMessageText
) -> bool:
    """Runs the graph to its end (``True``), or until the token has fired at a chunk (``False``): a
    checkpoint at every step and every model token, for a cancel that lands before its asyncio cancel."""
    stream = cast(AsyncGenerator[Any, None], graph.astream(graph_input, stream_mode=_SUBGRAPH_MODES))
    try:
        async for mode, data in stream:
            output.observe(mode, data)
            if token.is_cancelled:
                return False
    finally:
        # Closing the stream stops the graph's running nodes, as the asyncio cancel would.
        await stream.aclose()
    return True


async def _wait_or_cancel(run: asyncio.Future[Any]) -> None:
    """Waits for ``run`` to end, however it ends; if the waiting task is cancelled, ``run`` goes too."""
    try:
        await asyncio.wait({run})
    except asyncio.CancelledError:
        run.cancel()
        raise


class _LastMessageText:
    """The text of a run's last message, as it streams: the last message of the latest state, or, once a model
    streams a newer message, that message's tokens so far."""

    __slots__ = ("_streaming", "text")

    def __init__(self) -> None:
        self.text = ""
        self._streaming: str | None = None

    def observe(self, mode: str, data: Any) -> None:
        if mode == "values":
            messages = data.get("messages") if isinstance(data, Mapping) else getattr(data, "messages", None)
            if isinstance(messages, Sequence) and messages and isinstance(messages[-1], BaseMessage):
                self.text = str(messages[-1].text)
                self._streaming = None
        elif mode == "messages" and isinstance(data, tuple) and data and isinstance(data[0], BaseMessage):
            message = data[0]
            if not isinstance(message, BaseMessageChunk):
                self.text = str(message.text)
            elif message.id is not None and message.id == self._streaming:
                self.text += str(message.text)
            else:
                self._streaming = message.id
                self.text = str(message.text)


def tracked_astream(
    session: TrackedSession,
    graph: Pregel[Any, Any, Any, Any],
    input: Any,
    config: RunnableConfig | None = None,
    *,
    task_id: str | Callable[[], str] | None = None,
    timeout: float | None = None,
    **astream_options: Any,
) -> AsyncIterator[Any]:
    """``graph.astream(input, config, **astream_options)``, with the whole run a task of ``session``
    (``agent`` is the graph's name; the parent is the innermost tracked run of the current context, of any
    framework).

    It yields what ``graph.astream`` yields, in the same shapes. The text of the last message of the final
    state becomes the task's ``result``; a graph that raises fails the task, and the iteration raises it.

    A cancel (by id, by cascade, by session, by the ``timeout`` deadline, from another process) stops the
    graph wherever it awaits and ends the iteration with ``TaskCancelledError``, whose ``partial`` holds the
    chunks yielded so far; the task keeps the last message's text so far as its ``result`` (the last message
    of the last finished step, or, if the caller streams ``"messages"``, the tokens of the reply the cancel
    cut off). With a
    checkpointer, the thread's saved messages then answer every tool call: a call that finished before the
    cancel keeps its result (``ToolNode`` saves the results of one message's calls together, so the cancel
    would lose them), the others get a ``ToolMessage(status="error")`` saying they were cancelled, so a next
    turn on the same thread runs. Closing the iteration early (``aclose``, or dropping it) cancels the run the
    same way.

    ``TypeError`` at once for a bad ``session`` or ``task_id``; ``timeout`` is checked as the session checks
    it (``TypeError``, ``ValueError``), at the call, before the run starts.
    """
    check_run_options(session, task_id, timeout)
    return _tracked_stream(session, graph, input, config, task_id, timeout, astream_options)


async def _tracked_stream(
    session: TrackedSession,
    graph: Pregel[Any, Any, Any, Any],
    graph_input: Any,
    config: RunnableConfig | None,
    task_id: str | Callable[[], str] | None,
    timeout: float | None,
    astream_options: dict[str, Any],
) -> AsyncIterator[Any]:
    # The run is driven by a task with a context of its own: the current-run variable that `tracked` sets
    # inside an async generator would leak into the code iterating it.
    run = _GraphRun(session, graph, graph_input, config, astream_options)
    driver = asyncio.ensure_future(run.drive(task_id, timeout))
    delivered: list[Any] = []
    try:
        while True:
            kind, item = await run.next_item()
            if kind == "chunk":
                delivered.append(item)
                yield item
            elif kind == "end":
                return
            else:
                if isinstance(item, TaskCancelledError):
                    item.partial = delivered
                raise item
    finally:
        if not driver.done():
            run.stop(STREAM_CLOSED_REASON)
            # Let the run write its history and end its task before the caller moves on.
            with contextlib.suppress(Exception):
                await asyncio.shield(driver)


class _GraphRun:
    """One tracked run of ``graph.astream``: a driver task ends the task from how the graph ended, and passes
    on the chunks, then how the run ended, through a queue. The graph waits for each chunk to be taken, so it
    runs no further ahead of its reader than ``graph.astream`` lets it; the end never waits, so a reader that
    has gone does not hold the driver."""

    def __init__(
        self,
        session: TrackedSession,
        graph: Pregel[Any, Any, Any, Any],
        graph_input: Any,
        config: RunnableConfig | None,
        astream_options: dict[str, Any],
    ) -> None:
        self._session = session
        self._graph = graph
        self._input = graph_input
        self._tool_results = _ToolResults()
        self._thread = config if isinstance(graph.checkpointer, BaseCheckpointSaver) else None
        # The tool results are needed only to write a cancelled run's history; a callback costs every run.
        self._config = (
            config if self._thread is None else merge_configs(config, {"callbacks": [self._tool_results]})
        )
        self._options = dict(astream_options)
        self._items: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self._task_id: str | None = None
        self._stop_reason: str | None = None
        asked: StreamMode | Sequence[StreamMode] = self._options.pop("stream_mode", None) or graph.stream_mode
        self._single_mode = isinstance(asked, str)
        self._asked_modes: tuple[StreamMode, ...] = (asked,) if isinstance(asked, str) else tuple(asked)
        # The state after each step is streamed for the output, whatever the caller asked for; the tokens only
        # if the caller streams them too: streaming them for the partial output alone would cost every run
        # about a sixth of its time with a fast model.
        self._modes: list[StreamMode] = list(self._asked_modes)
        if "values" not in self._modes:
            self._modes.append("values")
        self._subgraphs = bool(self._options.get("subgraphs", False))
        self._v2 = self._options.get("version", "v1") == "v2"

    async def next_item(self) -> tuple[str, Any]:
        item = await self._items.get()
        self._items.task_done()
        return item

    def stop(self, reason: str) -> None:
        """Cancels the run's task (once it has started; before, the run will not start)."""
        self._stop_reason = reason
        if self._task_id is not None:
            cancel_in_background(self._session, self._task_id, reason)

    async def drive(self, task_id: str | Callable[[], str] | None, timeout: float | None) -> None:
        output = _LastMessageText()
        # How the run ended, passed on only once its task has ended.
        outcome: tuple[str, Any]
        try:
            async with tracked(
                self._session, agent=self._graph.name, task_id=task_id, timeout=timeout
            ) as task:
                self._task_id = task.task_id
                if self._stop_reason is not None:
                    await resolved(self._session.cancel_subagent_task(task.task_id, reason=self._stop_reason))
                pump = asyncio.ensure_future(self._pump(task.token, output))
                async with on_cancel_in_loop(task.token, pump.cancel):
                    await _wait_or_cancel(pump)
                if not pump.cancelled() and pump.result():
                    outcome = ("end", None)
                else:
                    await self._answer_open_tool_calls(task.token.reason)
                    outcome = ("error", _cancelled_error(task.token))
                # After a cancel, a late end: the task stays CANCELLED and keeps the partial output.
                await resolved(task.complete(output.text))
        except Exception as failure:
            outcome = ("error", failure)
        self._items.put_nowait(outcome)

    async def _pump(self, token: CancellationToken, output: _LastMessageText) -> bool:
        """Passes the graph's chunks on until its end (``True``), or until the token has fired at a chunk
        (``False``), as :func:`_follow` does."""
        stream = cast(
            AsyncGenerator[Any, None],
            self._graph.astream(self._input, self._config, stream_mode=self._modes, **self._options),
        )
        try:
            async for chunk in stream:
                namespace, mode, data = self._parts(chunk)
                if not namespace:
                    output.observe(mode, data)
                if mode in self._asked_modes:
                    self._items.put_nowait(("chunk", self._as_asked(chunk, namespace, mode, data)))
                    await self._items.join()
                if token.is_cancelled:
                    return False
        finally:
            await stream.aclose()
        return True

    def _parts(self, chunk: Any) -> tuple[tuple[str, ...], str, Any]:
        if self._v2:
            return tuple(chunk["ns"]), chunk["type"], chunk["data"]
        if self._subgraphs:
            namespace, mode, data = chunk
            return tuple(namespace), mode, data
        mode, data = chunk
        return (), mode, data

    def _as_asked(self, chunk: Any, namespace: tuple[str, ...], mode: str, data: Any) -> Any:
        """The chunk in the shape ``graph.astream`` gives for the modes the caller asked for."""
        if self._v2:
            return chunk
        if self._single_mode:
            return (namespace, data) if self._subgraphs else data
        return (namespace, mode, data) if self._subgraphs else (mode, data)

    async def _answer_open_tool_calls(self, reason: str | None) -> None:
        """Writes a ``ToolMessage`` for every tool call the thread's saved messages leave unanswered: the
        call's own result if it finished before the cancel, else one saying it was cancelled."""
        if self._thread is None:
            return
        state = await self._graph.aget_state(self._thread)
        messages = state.values.get("messages") if isinstance(state.values, Mapping) else None
        if not isinstance(messages, Sequence):
            return
        answered = {message.tool_call_id for message in messages if isinstance(message, ToolMessage)}
        answers = [
            self._tool_results.answer(call["id"], call["name"], reason)
            for message in messages
            if isinstance(message, AIMessage)
            for call in message.tool_calls
            if call["id"] is not None and call["id"] not in answered
        ]
        if answers:
            await self._graph.aupdate_state(self._thread, {"messages": answers})


def _cancelled_error(token: CancellationToken) -> TaskCancelledError:
    try:
        token.raise_if_cancelled()
    except TaskCancelledError as cancelled:
        return cancelled
    raise AssertionError("only called once the token has fired")


class _ToolResults(BaseCallbackHandler):
    """Keeps the result of every tool call that finishes during the run, by tool call id, and which calls
    started: what a cancel needs to answer the calls of a ``ToolNode`` step it cut short."""

    run_inline = True
    # Only the tool events (dispatched under "agent") are wanted: the others would cost every node and token.
    ignore_llm = ignore_retry = ignore_chain = ignore_retriever = ignore_chat_model = ignore_custom_event = (
        True
    )

    def __init__(self) -> None:
        self._started: set[str] = set()
        self._results: dict[str, ToolMessage] = {}

    def on_tool_start(
        self,
        serialized: dict[str, Any],
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        tags: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        call_id = kwargs.get("tool_call_id")
        if isinstance(call_id, str):
            self._started.add(call_id)

    def on_tool_end(
        self, output: Any, *, run_id: UUID, parent_run_id: UUID | None = None, **kwargs: Any
    ) -> None:
        if isinstance(output, ToolMessage):
            self._results[output.tool_call_id] = output

    def answer(self, call_id: str, name: str, reason: str | None) -> ToolMessage:
        finished = self._results.get(call_id)
        if finished is not None:
            return finished
        content = cancelled_tool_call_text(tool=name, reason=reason, started=call_id in self._started)
        return ToolMessage(content=content, tool_call_id=call_id, name=name, status="error")
