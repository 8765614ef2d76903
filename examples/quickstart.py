"""The README's Python quick start, runnable: ``python examples/quickstart.py``."""

from __future__ import annotations

import asyncio

from subagent_tracker import Session, SubagentStatus, TaskCancelledError


async def researcher(session: Session, task_id: str, parent_id: str) -> None:
    async with session.start_subagent_task(task_id, parent_id=parent_id, agent="researcher") as task:
        for chunk in range(100):
            task.token.raise_if_cancelled()  # cheap: call it on every streamed chunk
            task.progress(f"chunk {chunk}")
            await asyncio.sleep(0.01)


async def main() -> None:
    session = Session("quickstart")
    orchestrator = session.start_subagent_task("orchestrator")
    runners = [
        asyncio.ensure_future(researcher(session, f"researcher-{index}", "orchestrator"))
        for index in range(3)
    ]
    await asyncio.sleep(0.05)

    # Cancel one subagent by id; its runner stops at its next check.
    assert session.cancel_subagent_task("researcher-0", reason="user pressed stop")
    snapshot = await session.wait_subagent_task("researcher-0", timeout=1)
    print(snapshot.task_id, snapshot.status.value, snapshot.cancel_reason, f"progress={snapshot.progress!r}")

    # What is still running?
    print("pending:", [task.task_id for task in session.pending_subagent_tasks()])

    # Cancel a whole subtree: the orchestrator and every running descendant.
    session.cancel_subagent_task("orchestrator", reason="request withdrawn")
    results = await asyncio.gather(*runners, return_exceptions=True)
    assert all(isinstance(result, TaskCancelledError) for result in results)
    orchestrator.complete()  # a late end: the orchestrator stays CANCELLED
    for task in session.subagent_tasks():
        assert task.status is SubagentStatus.CANCELLED and task.finished
        print(f"{task.task_id:<14} {task.status.value:<10} origin={task.cancel_origin}")


if __name__ == "__main__":
    asyncio.run(main())
