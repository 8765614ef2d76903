"""An LLM-style subagent with tools, cancelled mid-stream and then mid-tool; prints the resulting history.

    python examples/streaming_agent.py

The fake model streams text and asks for tools. The first run is cancelled while the model streams: the
partial text is kept. The second is cancelled while a tool runs: finished tools keep their results, the
running one is interrupted, the rest get synthetic "cancelled" results, so the history stays valid for the
next turn.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from subagent_tracker import Session, SubagentTaskHandle, TaskCancelledError, ToolCall, run_tool_calls


async def fake_model(text: str, delay: float) -> AsyncIterator[str]:
    for word in text.split():
        await asyncio.sleep(delay)
        yield word + " "


def tool(name: str, seconds: float, result: str) -> ToolCall:
    async def run() -> str:
        await asyncio.sleep(seconds)
        return result

    return ToolCall(call_id=f"call_{name}", name=name, run=run)


async def agent_turn(handle: SubagentTaskHandle, history: list[dict[str, Any]]) -> None:
    """One turn: stream the model's text, then run the tools it asked for."""
    token = handle.token
    text: list[str] = []
    try:
        async for chunk in token.guard(fake_model("Let me look that up in three places for you", 0.02)):
            text.append(chunk)
    except TaskCancelledError as cancelled:
        # Keep what the user already saw, marked as cut short.
        partial = "".join(cancelled.partial or [])
        history.append({"role": "assistant", "content": partial + "[cancelled]"})
        raise
    calls = [
        tool("search_docs", 0.01, "3 matching pages"),
        tool("query_db", 5.0, "42 rows"),
        tool("fetch_url", 0.01, "<html>…</html>"),
    ]
    history.append(
        {"role": "assistant", "content": "".join(text), "tool_calls": [call.call_id for call in calls]}
    )
    outcomes = await run_tool_calls(token, calls)
    history.extend(outcome.as_tool_message() for outcome in outcomes)
    token.raise_if_cancelled()


async def run(session: Session, task_id: str, cancel_after: float) -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [{"role": "user", "content": "Find me everything about subagents."}]
    handle = session.start_subagent_task(task_id, agent="researcher")

    async def turn() -> None:
        async with handle:
            await agent_turn(handle, history)

    running = asyncio.ensure_future(turn())
    await asyncio.sleep(cancel_after)
    session.cancel_subagent_task(task_id, reason="user pressed stop")
    try:
        await running
    except TaskCancelledError:
        pass
    snapshot = handle.snapshot()
    status = f"{snapshot.status.value}, finished={snapshot.finished}, reason={snapshot.cancel_reason!r}"
    print(f"\n== {task_id}: {status}")
    for message in history:
        print("  " + json.dumps(message, ensure_ascii=False))
    return history


async def main() -> None:
    session = Session("streaming-agent")
    mid_stream = await run(session, "cancelled-mid-stream", cancel_after=0.07)
    assert mid_stream[-1]["content"].endswith("[cancelled]")
    mid_tool = await run(session, "cancelled-mid-tool", cancel_after=0.4)
    statuses = [message["content"].split(":")[0] for message in mid_tool if message["role"] == "tool"]
    assert statuses == ["3 matching pages", "cancelled while running", "cancelled before it started"]


if __name__ == "__main__":
    asyncio.run(main())
