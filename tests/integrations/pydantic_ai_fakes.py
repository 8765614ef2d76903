"""Offline pydantic-ai models for the tests: ``FunctionModel``s that call tools and then answer, or stream
text slowly enough to be cancelled mid-stream. Each model serves both ``agent.run()`` (its ``function``) and
streaming runs (its ``stream_function``), so one agent can be driven every way users drive it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel


def calls_then_text(calls: Sequence[tuple[str, dict[str, Any]]]) -> FunctionModel:
    """A model whose first response calls every tool of ``calls`` (``(tool name, arguments)``) at once, so
    pydantic-ai runs them in parallel, with the ids ``call-0``, ``call-1``, ...; once the results are in, it
    answers with one line per result, ``<tool name>: <content>``, and the run ends with that text."""

    def tool_calls() -> list[ToolCallPart]:
        return [
            ToolCallPart(name, args, tool_call_id=f"call-{index}") for index, (name, args) in enumerate(calls)
        ]

    async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        results = tool_results(messages)
        if not results:
            return ModelResponse(parts=list(tool_calls()))
        return ModelResponse(parts=[TextPart(_summary(results))])

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
        results = tool_results(messages)
        if not results:
            yield {
                index: DeltaToolCall(
                    name=call.tool_name, json_args=call.args_as_json_str(), tool_call_id=call.tool_call_id
                )
                for index, call in enumerate(tool_calls())
            }
            return
        yield _summary(results)

    return FunctionModel(respond, stream_function=stream)


def slow_text(
    words: int, *, delay: float, prefix: str = "word", streamed: Callable[[int], object] | None = None
) -> FunctionModel:
    """A model that answers ``<prefix>0 <prefix>1 ...`` (``words`` words): streamed one word every ``delay``
    seconds, or, unstreamed, all at once after ``words * delay`` seconds. ``streamed(n)`` is called once the
    stream has sent ``n`` words, so a test can cancel mid-stream without guessing at timing."""

    async def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await asyncio.sleep(words * delay)
        return ModelResponse(parts=[TextPart("".join(f"{prefix}{index} " for index in range(words)))])

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        for index in range(words):
            yield f"{prefix}{index} "
            if streamed is not None:
                streamed(index + 1)
            await asyncio.sleep(delay)

    return FunctionModel(respond, stream_function=stream)


def tool_results(messages: Sequence[ModelMessage]) -> dict[str, str]:
    """The results of the tool calls in the last request of ``messages``, by tool name."""
    if not messages or not isinstance(messages[-1], ModelRequest):
        return {}
    return {
        part.tool_name: str(part.content) for part in messages[-1].parts if isinstance(part, ToolReturnPart)
    }


def all_tool_results(messages: Sequence[ModelMessage]) -> dict[str, ToolReturnPart]:
    """Every tool result of a history, by its call's id."""
    return {
        part.tool_call_id: part
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    }


def unanswered_tool_calls(messages: Sequence[ModelMessage]) -> list[str]:
    """The ids of the tool calls of a history that no later request answers: none, for a history a model
    provider accepts."""
    answered = set(all_tool_results(messages))
    return [
        part.tool_call_id
        for message in messages
        if isinstance(message, ModelResponse)
        for part in message.parts
        if isinstance(part, ToolCallPart) and part.tool_call_id not in answered
    ]


def _summary(results: dict[str, str]) -> str:
    return "\n".join(f"{name}: {content}" for name, content in results.items())
