"""An offline model for Google ADK's agents: :class:`ScriptedLlm` answers each model call with the next step
of its script, a text or a function call, so that the ADK adapter's tests run without a network."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncGenerator, Callable
from typing import Any

from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.genai import types

#: A step of a script: the text the model answers; ``(tool, args)``, a call of that tool (``(tool, args,
#: text)`` says ``text`` first, in the same response); or a callable, or coroutine function, that returns one
#: of those (called as the model answers: a user pressing stop meanwhile).
Step = str | tuple[str, dict[str, Any]] | tuple[str, dict[str, Any], str] | Callable[[], Any]

_CALL_IDS = itertools.count(1)


class ScriptedLlm(BaseLlm):
    """Answers model call ``n`` with step ``n`` of ``steps`` (the last step again once they run out); a text
    step comes ``chunk_delay`` seconds after the call, so that a cancel can land while the model answers."""

    model: str = "scripted"
    steps: list[Any]
    chunk_delay: float = 0.0
    calls: int = 0

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        step = self.steps[min(self.calls, len(self.steps) - 1)]
        self.calls += 1
        if callable(step):
            step = step()
            if asyncio.iscoroutine(step):
                step = await step
        if isinstance(step, tuple):
            name, args, *said = step
            call = types.FunctionCall(name=name, args=args, id=f"call-{next(_CALL_IDS)}")
            parts = [types.Part.from_text(text=text) for text in said] + [types.Part(function_call=call)]
            yield LlmResponse(content=types.Content(role="model", parts=parts))
            return
        if self.chunk_delay:
            await asyncio.sleep(self.chunk_delay)
        yield LlmResponse(content=types.Content(role="model", parts=[types.Part.from_text(text=str(step))]))


class SlowStreamingLlm(BaseLlm):
    """Streams ``words`` one chunk per ``delay`` seconds (partial responses, as a streaming model's), then
    their whole text; counts the chunks streamed in ``streamed``."""

    model: str = "slow-streaming"
    words: list[str]
    delay: float
    streamed: int = 0

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        for word in self.words:
            await asyncio.sleep(self.delay)
            self.streamed += 1
            part = types.Part.from_text(text=f"{word} ")
            yield LlmResponse(content=types.Content(role="model", parts=[part]), partial=True)
        whole = types.Part.from_text(text=" ".join(self.words))
        yield LlmResponse(content=types.Content(role="model", parts=[whole]))
