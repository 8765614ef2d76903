"""A pydantic-ai orchestrator delegating to two researcher agents, all tracked with ``SubagentTracking``:
one researcher is cancelled by id mid-stream while the other finishes, and the orchestrator goes on with the
cancelled one's reason and partial output. Offline: the models are pydantic-ai ``FunctionModel``s.

Run it with ``python examples/integrations/pydantic_ai_agents.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from subagent_tracker import Session
from subagent_tracker.integrations.pydantic_ai import SubagentTracking


def researcher_model(words: list[str]) -> FunctionModel:
    """Streams ``words``, one every 50 ms, as a slow model would."""

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        for word in words:
            yield word + " "
            await asyncio.sleep(0.05)

    return FunctionModel(stream_function=stream)


async def orchestrator_stream(
    messages: list[ModelMessage], info: AgentInfo
) -> AsyncIterator[str | DeltaToolCalls]:
    """Calls both research tools at once, then reports what each returned."""
    last = messages[-1]
    results = (
        [part for part in last.parts if isinstance(part, ToolReturnPart)]
        if isinstance(last, ModelRequest)
        else []
    )
    if not results:
        yield {
            0: DeltaToolCall(name="ask_history", json_args="{}", tool_call_id="history"),
            1: DeltaToolCall(name="ask_physics", json_args="{}", tool_call_id="physics"),
        }
        return
    yield "\n".join(f"[{part.tool_name}] {part.content}" for part in results)


async def main() -> None:
    session = Session()
    history = Agent(
        researcher_model(
            ["The", "printing", "press", "spread", "across", "Europe", "within", "fifty", "years."]
        ),
        name="historian",
        capabilities=[SubagentTracking(session, task_id="historian")],
    )
    physics = Agent(
        researcher_model(["Light", "travels", "at", "about", "300,000", "km/s."]),
        name="physicist",
        capabilities=[SubagentTracking(session, task_id="physicist")],
    )
    orchestrator = Agent(
        FunctionModel(stream_function=orchestrator_stream),
        name="orchestrator",
        capabilities=[SubagentTracking(session, task_id="orchestrator")],
    )

    @orchestrator.tool_plain
    async def ask_history() -> str:
        async with history.run_stream("When did printing spread?") as streamed:
            return await streamed.get_output()

    @orchestrator.tool_plain
    async def ask_physics() -> str:
        async with physics.run_stream("How fast is light?") as streamed:
            return await streamed.get_output()

    async def cancel_the_historian() -> None:
        await asyncio.sleep(0.18)  # a few words into its answer
        session.cancel_subagent_task("historian", reason="the user changed the question")

    canceller = asyncio.ensure_future(cancel_the_historian())
    async with orchestrator.run_stream("Research two things.") as run:
        print(await run.get_output())
    await canceller

    print()
    for task in session.subagent_tasks():
        result = str(task.result).replace("\n", " ")
        print(f"{task.task_id:<13} parent={task.parent_id!s:<13} {task.status.name:<9} {result[:48]!r}")
    assert session.pending_subagent_tasks() == []


if __name__ == "__main__":
    asyncio.run(main())
