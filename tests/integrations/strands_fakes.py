"""A scripted Strands model for offline tests: no fake ships with strands-agents, and its default model is
Bedrock, which would reach the network.

Each call to ``stream`` plays the next reply of the script as the provider events strands parses
(``messageStart``, a text block streamed word by word, one block per tool call, ``messageStop``), so the
agent's own streaming, tool and cancel paths run as they do against a real provider.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncGenerator, AsyncIterable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel
from strands.models.model import Model
from strands.types.content import Messages
from strands.types.streaming import StreamEvent
from strands.types.tools import ToolSpec

_Output = TypeVar("_Output", bound=BaseModel)


@dataclass(frozen=True)
class ToolCall:
    """A tool call the model makes: its input is sent as the tool-use block's JSON."""

    name: str
    input: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Reply:
    """One model response.

    - ``text`` is streamed word by word, ``chunk_delay`` seconds apart (the model's default when ``None``);
    - ``stall`` seconds of silence come before the first event: a model that sends nothing while it thinks,
      which strands' between-chunk cancel checkpoint cannot see;
    - ``error``, when set, is raised after the text, as a provider failure mid-stream.
    """

    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    chunk_delay: float | None = None
    stall: float = 0.0
    error: Exception | None = None


Script = Iterable["Reply | str"] | Callable[[Messages], "Reply | str"]


class ScriptedModel(Model):
    """A model that answers from a script: a sequence of replies played in order (running past its end is a
    test error), or a function of the conversation. A plain string is a text-only reply. ``calls`` and
    ``text_chunks`` count what it has been asked and has sent, for tests to wait on."""

    def __init__(self, script: Script, *, chunk_delay: float = 0.0) -> None:
        self._next: Callable[[Messages], Reply | str]
        if callable(script):
            self._next = script
        else:
            replies = iter(list(script))
            self._next = lambda _messages: next(replies)
        self._chunk_delay = chunk_delay
        self._tool_ids = itertools.count()
        self.calls = 0
        self.text_chunks = 0

    def update_config(self, **model_config: Any) -> None:
        """Nothing to configure."""

    def get_config(self) -> dict[str, Any]:
        """An empty configuration."""
        return {}

    def structured_output(
        self, output_model: type[_Output], prompt: Messages, system_prompt: str | None = None, **kwargs: Any
    ) -> AsyncGenerator[dict[str, _Output | Any], None]:
        """Not scripted: a test that needs it should say so."""
        raise NotImplementedError("ScriptedModel does not script structured output")

    def stream(
        self,
        messages: Messages,
        tool_specs: list[ToolSpec] | None = None,
        system_prompt: str | None = None,
        **kwargs: Any,
    ) -> AsyncIterable[StreamEvent]:
        """Plays the next reply of the script."""
        self.calls += 1
        reply = self._next(messages)
        return self._play(Reply(text=reply) if isinstance(reply, str) else reply)

    async def _play(self, reply: Reply) -> AsyncGenerator[StreamEvent, None]:
        delay = self._chunk_delay if reply.chunk_delay is None else reply.chunk_delay
        if reply.stall:
            await asyncio.sleep(reply.stall)
        yield {"messageStart": {"role": "assistant"}}
        if reply.text:
            yield {"contentBlockStart": {"start": {}}}
            for index, word in enumerate(reply.text.split(" ")):
                if delay:
                    await asyncio.sleep(delay)
                self.text_chunks += 1
                yield {"contentBlockDelta": {"delta": {"text": word if index == 0 else f" {word}"}}}
            yield {"contentBlockStop": {}}
        if reply.error is not None:
            raise reply.error
        for call in reply.tool_calls:
            tool_use_id = f"call-{next(self._tool_ids)}"
            yield {"contentBlockStart": {"start": {"toolUse": {"name": call.name, "toolUseId": tool_use_id}}}}
            yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(call.input)}}}}
            yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "tool_use" if reply.tool_calls else "end_turn"}}
