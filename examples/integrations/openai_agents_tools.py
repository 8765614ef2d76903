"""Tracking OpenAI Agents SDK subagents with ``subagent_tracker.integrations.openai_agents``, offline.

An orchestrator delegates to two agents used as tools. One of them is stopped by id while it waits in a
slow search tool; its sibling finishes, and the orchestrator's turn goes on with the stopped one's reason and
partial output. Scripted models (``agents.testing``) stand in for the real ones, and tracing is off: nothing
reaches the network.

    python examples/integrations/openai_agents_tools.py
"""

from __future__ import annotations

import asyncio
from typing import Any

from agents import Agent, ToolCallOutputItem, function_tool, set_tracing_disabled
from agents.testing import ModelStep, ScriptedModel, assistant_message, function_call

from subagent_tracker import Session
from subagent_tracker.integrations.openai_agents import tracked_as_tool, tracked_run_streamed

set_tracing_disabled(True)
session = Session()
searching = asyncio.Event()


@function_tool
async def search_archive(query: str) -> str:
    """Stands in for a slow search: the cancel stops it where it waits."""
    searching.set()
    await asyncio.sleep(30)
    return f"every document about {query}"


def scripted(name: str, *steps: ModelStep, tools: list[Any] | None = None) -> Agent[Any]:
    return Agent(name=name, model=ScriptedModel(steps), tools=tools or [])


archivist = scripted(
    "archivist",
    ModelStep(
        output=[
            assistant_message("Found 3 letters from 1921 so far; searching the rest."),
            function_call("search_archive", {"query": "1921"}, call_id="search"),
        ]
    ),
    ModelStep(output=[assistant_message("All the letters.")]),
    tools=[search_archive],
)
summarizer = scripted("summarizer", ModelStep(output=[assistant_message("A two-line summary.")]))
orchestrator = scripted(
    "orchestrator",
    ModelStep(
        output=[
            function_call("archive", {"input": "letters of 1921"}, call_id="to-archivist"),
            function_call("summarize", {"input": "the request"}, call_id="to-summarizer"),
        ]
    ),
    ModelStep(output=[assistant_message("Here is what I have, and what was stopped.")]),
    tools=[
        tracked_as_tool(
            archivist,
            session,
            tool_name="archive",
            tool_description="Searches the archive.",
            task_id="archivist",
        ),
        tracked_as_tool(summarizer, session, tool_name="summarize", tool_description="Summarizes."),
    ],
)


async def main() -> None:
    result = tracked_run_streamed(session, orchestrator, "Tell me about 1921.", task_id="orchestrator")

    async def stop_the_archivist() -> None:
        await searching.wait()
        session.cancel_subagent_task("archivist", reason="the user only wanted a summary")

    stopper = asyncio.ensure_future(stop_the_archivist())
    async for _event in result.stream_events():
        pass
    await stopper
    for item in result.new_items:
        if isinstance(item, ToolCallOutputItem):
            print(f"{item.call_id}: {item.output!r}")
    print(f"orchestrator: {result.final_output!r}")
    for task in session.subagent_tasks():
        print(f"{task.agent:>12} {task.status.value:<9} parent={task.parent_id} result={task.result!r}")


if __name__ == "__main__":
    asyncio.run(main())
