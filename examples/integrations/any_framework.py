"""Tracking the runs of any agent framework with ``subagent_tracker.integrations.tracked``, offline.

An orchestrator delegates to two researchers, each a run of a stand-in framework that streams tokens. One
researcher is stopped by id while its sibling finishes; the orchestrator's turn goes on with both results: the
stopped one's partial output and reason, the other's answer.

    python examples/integrations/any_framework.py
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from subagent_tracker import Session, TaskCancelledError
from subagent_tracker.integrations import tracked

session = Session()


async def stream_model(prompt: str, tokens: int) -> AsyncIterator[str]:
    """Stands in for a framework's model stream."""
    for index in range(tokens):
        await asyncio.sleep(0.01)
        yield f"{prompt}-{index} "


async def researcher(name: str, tokens: int) -> str:
    """A subagent run: tracked, checked at every chunk; its partial output survives a cancel."""
    async with tracked(session, agent="researcher", task_id=name) as task:
        output = ""
        try:
            async for chunk in stream_model(name, tokens):
                task.token.raise_if_cancelled()  # the framework's checkpoint: one atomic load
                output += chunk
        except TaskCancelledError as cancelled:
            task.complete(output)  # a late end: the task stays CANCELLED and keeps the partial output
            return f"[{name} was cancelled ({cancelled.reason}); partial output: {output.strip()!r}]"
        task.complete(output)
        return output.strip()


async def orchestrator() -> None:
    async with tracked(session, agent="orchestrator", task_id="orchestrator") as turn:
        runs = [
            asyncio.ensure_future(researcher("quick", tokens=5)),
            asyncio.ensure_future(researcher("slow", tokens=500)),
        ]
        await asyncio.sleep(0.1)
        session.cancel_subagent_task("slow", reason="the user pressed stop")
        results = await asyncio.gather(*runs)
        turn.complete(" | ".join(results))
    for task in session.subagent_tasks():
        print(f"{task.task_id:>12} {task.status.value:<9} parent={task.parent_id} result={task.result!r}")


if __name__ == "__main__":
    asyncio.run(orchestrator())
