"""Tracking Strands Agents subagents with ``subagent_tracker.integrations.strands``, offline.

An orchestrator delegates to two researchers, each an agent used as a tool. One researcher is stopped by id
mid-stream while its sibling finishes; the orchestrator's tool call for it gets the reason and the partial
output, and the orchestrator finishes its turn. The agents run on a small scripted model, so nothing reaches
the network.

    python examples/integrations/strands_agents.py
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, AsyncIterable
from typing import Any

from strands import Agent
from strands.models.model import Model
from strands.types.content import Messages
from strands.types.streaming import StreamEvent
from strands.types.tools import ToolSpec

from subagent_tracker import Session
from subagent_tracker.integrations.strands import SubagentHooks


class ScriptedModel(Model):
    """Stands in for a provider: each call streams the next scripted reply, word by word, then its tool
    calls."""

    def __init__(self, *replies: tuple[str, list[str]], delay: float = 0.0) -> None:
        self._replies = iter(replies)
        self._delay = delay

    def update_config(self, **model_config: Any) -> None:
        """Nothing to configure."""

    def get_config(self) -> dict[str, Any]:
        """An empty configuration."""
        return {}

    def structured_output(self, *args: Any, **kwargs: Any) -> AsyncGenerator[dict[str, Any], None]:
        """Not used here."""
        raise NotImplementedError

    def stream(
        self, messages: Messages, tool_specs: list[ToolSpec] | None = None, *args: Any, **kwargs: Any
    ) -> AsyncIterable[StreamEvent]:
        """Streams the next reply."""
        return self._play(*next(self._replies))

    async def _play(self, text: str, tools: list[str]) -> AsyncGenerator[StreamEvent, None]:
        yield {"messageStart": {"role": "assistant"}}
        yield {"contentBlockStart": {"start": {}}}
        for index, word in enumerate(text.split(" ")):
            await asyncio.sleep(self._delay)
            yield {"contentBlockDelta": {"delta": {"text": word if index == 0 else f" {word}"}}}
        yield {"contentBlockStop": {}}
        for name in tools:
            yield {"contentBlockStart": {"start": {"toolUse": {"name": name, "toolUseId": f"call-{name}"}}}}
            yield {
                "contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps({"input": "the question"})}}}
            }
            yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "tool_use" if tools else "end_turn"}}


session = Session()


def researcher(name: str, answer: str, delay: float) -> Agent:
    return Agent(
        model=ScriptedModel((answer, []), delay=delay),
        name=name,
        hooks=[SubagentHooks(session, task_id=name)],
        callback_handler=None,
    )


async def main() -> None:
    quick = researcher("quick", "The quick researcher's answer.", delay=0.01)
    slow = researcher(
        "slow", "The slow researcher reads every source there is, one after another.", delay=0.1
    )
    orchestrator = Agent(
        model=ScriptedModel(("Asking both researchers.", ["quick", "slow"]), ("Here is what I found.", [])),
        name="orchestrator",
        tools=[quick.as_tool(), slow.as_tool()],
        # The delegating agent carries the adapter too: its tool call for a cancelled subagent says why.
        hooks=[SubagentHooks(session, task_id="orchestrator")],
        callback_handler=None,
    )
    turn = asyncio.ensure_future(orchestrator.invoke_async("Research this."))
    await asyncio.sleep(0.4)
    session.cancel_subagent_task("slow", reason="the user pressed stop")
    result = await turn

    print(f"orchestrator: {result.stop_reason}: {str(result).strip()}")
    for block in orchestrator.messages[2]["content"]:
        answer = block["toolResult"]
        print(f"  tool result {answer['toolUseId']}: {answer['content'][0]['text']!r}")
    for task in session.subagent_tasks():
        print(f"{task.task_id:>12} {task.status.value:<9} parent={task.parent_id} result={task.result!r}")


if __name__ == "__main__":
    asyncio.run(main())
