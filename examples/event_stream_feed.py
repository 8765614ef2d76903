"""A session fed by an event stream of starts and ends, as a tracker beside an agent runtime sees them.

The runtime reports ``start`` and ``end`` events by id (over a queue here; a websocket or a log in practice);
the tracker records them without holding the runners' handles: ``end_subagent_task`` records an end by id,
under the same first-transition rule as a handle. Meanwhile a user's stop cancels a task by id, and the late
end the runtime reports for it afterwards never turns the cancel into a success.

    python examples/event_stream_feed.py
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from subagent_tracker import Session, SubagentTaskHandle


@dataclass(frozen=True)
class RuntimeEvent:
    kind: str  # "start" or "end"
    task_id: str
    parent_id: str | None = None
    result: Any = None
    error: str | None = None


async def agent_runtime(events: asyncio.Queue[RuntimeEvent | None]) -> None:
    """Stands in for an agent runtime that reports what its subagents do."""
    await events.put(RuntimeEvent("start", "plan"))
    for name in ("search", "read", "write"):
        await events.put(RuntimeEvent("start", name, parent_id="plan"))
    await asyncio.sleep(0.02)
    await events.put(RuntimeEvent("end", "search", result={"hits": 12}))
    await events.put(RuntimeEvent("end", "read", error="TimeoutError: the page did not load"))
    await asyncio.sleep(0.05)
    # "write" was stopped by the user in the meantime; the runtime reports its end late, as runtimes do.
    await events.put(RuntimeEvent("end", "write", result="a draft nobody asked for any more"))
    await events.put(RuntimeEvent("end", "plan", result="done"))
    await events.put(None)


async def feed(session: Session, events: asyncio.Queue[RuntimeEvent | None]) -> None:
    """Records the runtime's events in the session; keeps each task's handle until its end arrives."""
    handles: dict[str, SubagentTaskHandle] = {}
    while (event := await events.get()) is not None:
        if event.kind == "start":
            handles[event.task_id] = session.start_subagent_task(event.task_id, parent_id=event.parent_id)
        else:
            moved = session.end_subagent_task(event.task_id, result=event.result, error=event.error)
            print(f"end of {event.task_id!r} recorded: {'yes' if moved else 'no, it was already cancelled'}")
            handles.pop(event.task_id, None)


async def main() -> None:
    session = Session("fed-by-events")
    events: asyncio.Queue[RuntimeEvent | None] = asyncio.Queue()
    feeding = asyncio.ensure_future(feed(session, events))
    runtime = asyncio.ensure_future(agent_runtime(events))
    await asyncio.sleep(0.03)
    session.cancel_subagent_task("write", reason="user pressed stop")  # by id: the tracker needs no handle
    await asyncio.gather(runtime, feeding)
    for task in session.subagent_tasks():
        detail = task.error or task.cancel_reason or task.result
        print(f"{task.task_id:<7} {task.status.value:<10} finished={task.finished}  {detail}")


if __name__ == "__main__":
    asyncio.run(main())
