"""An offline model for Agno's agents and teams: each call of the model takes the next step of a script, a
text answer or a tool call, as Agno's own tests do with a live model."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from agno.models.base import Model
from agno.models.response import ModelResponse

# Offline: Agno reports each run to its own service unless told not to, read as each agent or team is made
# (the tests' agents and teams also pass telemetry=False).
os.environ["AGNO_TELEMETRY"] = "false"

#: A script step: a text answer, a tool call ``(tool name, arguments)``, or a callable run when the step is
#: taken (to cancel, or to wait) that returns one of those.
Step = str | tuple[str, dict[str, Any]] | Callable[[], Any]


@dataclass
class ScriptedModel(Model):
    """A model that answers with its script, one step per call, and ``"done"`` once the script runs out."""

    id: str = "scripted"
    name: str = "Scripted"
    provider: str = "Scripted"
    steps: list[Step] = field(default_factory=list)
    calls: int = 0

    def _next(self) -> ModelResponse:
        self.calls += 1
        step: Any = self.steps.pop(0) if self.steps else "done"
        while callable(step):
            step = step()
        if isinstance(step, str):
            return ModelResponse(role="assistant", content=step)
        name, arguments = step
        call = {
            "id": f"call-{self.calls}",
            "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)},
        }
        return ModelResponse(role="assistant", tool_calls=[call])

    def invoke(self, *args: Any, **kwargs: Any) -> ModelResponse:
        return self._next()

    async def ainvoke(self, *args: Any, **kwargs: Any) -> ModelResponse:
        return self._next()

    def invoke_stream(self, *args: Any, **kwargs: Any) -> Iterator[ModelResponse]:
        yield self._next()

    async def ainvoke_stream(self, *args: Any, **kwargs: Any) -> AsyncIterator[ModelResponse]:
        yield self._next()

    def _parse_provider_response(self, response: Any, **kwargs: Any) -> ModelResponse:
        return response  # type: ignore[no-any-return]

    def _parse_provider_response_delta(self, response: Any) -> ModelResponse:
        return response  # type: ignore[no-any-return]


@dataclass
class SlowStreamingModel(ScriptedModel):
    """A model whose streamed answer is ``words``, one chunk per word with ``delay`` seconds between (a slow
    answer a cancel lands in the middle of); ``streamed`` counts the chunks sent."""

    words: list[str] = field(default_factory=list)
    delay: float = 0.0
    streamed: int = 0

    async def ainvoke_stream(self, *args: Any, **kwargs: Any) -> AsyncIterator[ModelResponse]:
        for word in self.words:
            await asyncio.sleep(self.delay)
            self.streamed += 1
            yield ModelResponse(role="assistant", content=f"{word} ")
