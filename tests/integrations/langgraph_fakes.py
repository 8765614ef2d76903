"""Offline LangGraph agents for the tests, the examples and the benchmark: a scripted chat model that streams
its replies token by token (tool calls included), and a model-and-tools graph built the way LangGraph
documents it, with ``StateGraph`` and ``ToolNode``.

``GenericFakeChatModel`` alone will not do: it has no ``bind_tools``, and in message mode a reply that carries
only tool calls fails with "No generations found in stream". langchain-core calls ``on_llm_new_token`` for
every chunk itself, so the stream here does not.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun
from langchain_core.language_models import LanguageModelInput
from langchain_core.language_models.chat_models import agenerate_from_stream
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolCallChunk
from langchain_core.outputs import ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable
from langchain_core.tools import BaseTool
from langgraph.checkpoint.base import BaseCheckpointSaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.state import CompiledStateGraph
from langgraph.prebuilt import ToolNode, tools_condition


class ScriptedChatModel(GenericFakeChatModel):
    """Replies with the next scripted message, streamed a word at a time, ``token_delay`` seconds apart; its
    tool calls follow as ``tool_call_chunks``. ``bind_tools`` returns the model itself: the script decides the
    calls."""

    token_delay: float = 0.0
    #: How many chunks the model has streamed so far: tests wait on it to cancel mid stream.
    chunks_streamed: int = 0

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> Runnable[LanguageModelInput, AIMessage]:
        return self

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        scripted = next(self.messages)
        reply = AIMessage(content=scripted) if isinstance(scripted, str) else scripted
        text = reply.content if isinstance(reply.content, str) else ""
        words = text.split(" ")
        for index, word in enumerate(words):
            await asyncio.sleep(self.token_delay)
            token = word if index == len(words) - 1 else f"{word} "
            self.chunks_streamed += 1
            yield ChatGenerationChunk(message=AIMessageChunk(content=token, id=reply.id))
        for index, call in enumerate(reply.tool_calls):
            await asyncio.sleep(self.token_delay)
            self.chunks_streamed += 1
            chunk = ToolCallChunk(
                name=call["name"],
                args=json.dumps(call["args"]),
                id=call["id"],
                index=index,
                type="tool_call_chunk",
            )
            yield ChatGenerationChunk(
                message=AIMessageChunk(content="", id=reply.id, tool_call_chunks=[chunk])
            )

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        # Called when nobody streams: the same script, the same delays.
        return await agenerate_from_stream(self._astream(messages, stop, run_manager, **kwargs))


def scripted_model(replies: Iterable[AIMessage | str], *, token_delay: float = 0.0) -> ScriptedChatModel:
    """A model that gives ``replies`` in order, one per call."""
    return ScriptedChatModel(messages=iter(list(replies)), token_delay=token_delay)


def tool_calls(*calls: tuple[str, str, dict[str, Any]], text: str = "") -> AIMessage:
    """A scripted reply that calls tools: each call is ``(call id, tool name, arguments)``."""
    return AIMessage(
        content=text,
        tool_calls=[
            {"id": call_id, "name": name, "args": args, "type": "tool_call"} for call_id, name, args in calls
        ],
    )


def agent_graph(
    model: ScriptedChatModel,
    tools: Sequence[BaseTool | Callable[..., Any]] = (),
    *,
    name: str = "agent",
    checkpointer: BaseCheckpointSaver[Any] | None = None,
) -> CompiledStateGraph[MessagesState, None, MessagesState, MessagesState]:
    """The model-and-tools loop: the model answers; while its reply calls tools, ``ToolNode`` runs them (all
    the calls of one reply at once) and the model goes on."""
    bound = model.bind_tools(list(tools))

    async def call_model(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [await bound.ainvoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("model", call_model)
    builder.add_edge(START, "model")
    if tools:
        builder.add_node("tools", ToolNode(list(tools)))
        builder.add_conditional_edges("model", tools_condition)
        builder.add_edge("tools", "model")
    else:
        builder.add_edge("model", END)
    return builder.compile(name=name, checkpointer=checkpointer)
