"""A pydantic-ai subagent, tracked on Redis through the asyncio API (``AsyncRedisSession``: the event loop
never waits on Redis), cancelled by id from another process through that process's own registry: it stops
within a second, mid stream, and its orchestrator's turn goes on with the reason and the partial output."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai_fakes import calls_then_text, slow_text
from redis_support import RedisServer, Worker

from subagent_tracker import AsyncRedisRegistry, AsyncRedisSession, SubagentStatus
from subagent_tracker.integrations import cancelled_run_text
from subagent_tracker.integrations.pydantic_ai import SubagentTracking


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    yield server
    server.stop()


def test_another_process_cancels_a_subagent_by_id_and_it_stops_within_a_second(
    redis_server: RedisServer,
) -> None:
    streamed = asyncio.Event()
    stopped_at: list[float] = []

    async def run(canceller: Worker) -> tuple[AsyncRedisSession, str, float]:
        registry = await AsyncRedisRegistry.connect(redis_server.url, worker_id="runner")
        session = await registry.session("across")
        researcher = Agent(
            # 1,000 words, 10 ms apart: ten seconds unless stopped.
            slow_text(1_000, delay=0.01, streamed=lambda words: streamed.set() if words == 20 else None),
            name="researcher",
            capabilities=[SubagentTracking(session, task_id="researcher")],
        )
        orchestrator = Agent(
            calls_then_text([("research", {})]),
            name="orchestrator",
            capabilities=[SubagentTracking(session, task_id="orchestrator")],
        )

        @orchestrator.tool_plain
        async def research() -> str:
            try:
                async with researcher.run_stream("dig") as streaming:
                    return await streaming.get_output()
            finally:
                # Reached by the subagent's RunCancelled too, which the orchestrator's capability answers.
                stopped_at.append(time.monotonic())

        running = asyncio.ensure_future(orchestrator.run("research this"))
        await asyncio.wait_for(streamed.wait(), 10)
        cancelled_at = time.monotonic()
        answer = await asyncio.to_thread(
            canceller.ask, op="cancel", session="across", task="researcher", reason="stop from elsewhere"
        )
        assert answer is True, "the other process cancelled a pending task"
        result = await asyncio.wait_for(running, 10)
        return session, result.output, cancelled_at

    canceller = Worker(redis_server.url, "canceller", api="asyncio")
    try:
        session, output, cancelled_at = asyncio.run(run(canceller))
    finally:
        canceller.stop()

    async def snapshots() -> tuple[Any, Any, list[Any]]:
        return (
            await session.subagent_task("researcher"),
            await session.subagent_task("orchestrator"),
            await session.pending_subagent_tasks(),
        )

    researcher_task, orchestrator_task, pending = asyncio.run(snapshots())
    assert researcher_task is not None
    assert (researcher_task.status, researcher_task.cancel_reason, researcher_task.cancel_cause) == (
        SubagentStatus.CANCELLED,
        "stop from elsewhere",
        "requested",
    )
    partial = str(researcher_task.result)
    assert partial.startswith("word0 word1") and "word999" not in partial, "stopped mid stream"
    assert stopped_at, "the tool call came back"
    assert stopped_at[0] - cancelled_at < 1.0, (
        f"stopped {stopped_at[0] - cancelled_at:.3f} s after the cancel"
    )
    expected = cancelled_run_text(
        agent="researcher", task_id="researcher", reason="stop from elsewhere", partial=partial
    )
    assert output == f"research: {expected}", (
        "the orchestrator's turn went on with the reason and the partial"
    )
    assert orchestrator_task is not None and orchestrator_task.status == SubagentStatus.COMPLETED
    assert pending == []
