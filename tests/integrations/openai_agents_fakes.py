"""Scripted OpenAI Agents SDK models for the tests: agents whose model answers from a script, offline, with
text that can stream slowly (one word per delta) so a cancel lands mid stream."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from agents import Agent, ModelSettings, Tool, set_tracing_disabled
from agents.items import TResponseStreamEvent
from agents.models.interface import ModelTracing
from agents.testing import ModelCall, ModelStep, ScriptedModel, assistant_message, function_call
from openai.types.responses import ResponseTextDeltaEvent

# Nothing may reach the network: no trace exporter, and no model but the scripted ones.
set_tracing_disabled(True)


def text_step(text: str) -> ModelStep:
    """A model response that is one assistant message."""
    return ModelStep(output=[assistant_message(text)])


def calls_step(*calls: tuple[str, Mapping[str, Any], str]) -> ModelStep:
    """A model response that calls tools: each call is ``(tool name, arguments, call id)``."""
    return ModelStep(
        output=[function_call(name, arguments, call_id=call_id) for name, arguments, call_id in calls]
    )


def slow_text_step(words: Sequence[str], delay: float) -> ModelStep:
    """A model response that streams ``words`` one delta each, ``delay`` seconds apart, then completes with
    their text (so a run that is not cancelled ends with all of it)."""
    text = " ".join(words)

    async def stream(_call: ModelCall) -> AsyncIterator[TResponseStreamEvent]:
        for event in await _reference_events(text):
            if isinstance(event, ResponseTextDeltaEvent):
                for index, word in enumerate(words):
                    await asyncio.sleep(delay)
                    yield event.model_copy(update={"delta": word if index == 0 else f" {word}"})
            else:
                yield event

    return ModelStep.stream(stream)


async def _reference_events(text: str) -> list[TResponseStreamEvent]:
    # The SDK's own well-formed event sequence for the message (one text delta), to split into many.
    model = ScriptedModel([text_step(text)])
    return [
        event
        async for event in model.stream_response(
            None,
            "",
            ModelSettings(),
            [],
            None,
            [],
            ModelTracing.DISABLED,
            previous_response_id=None,
            conversation_id=None,
            prompt=None,
        )
    ]


def scripted_agent(name: str, steps: Sequence[ModelStep], tools: Sequence[Tool] = ()) -> Agent[Any]:
    """An agent whose model answers each call with the next of ``steps``."""
    return Agent(name=name, instructions=f"You are {name}.", model=ScriptedModel(steps), tools=list(tools))
