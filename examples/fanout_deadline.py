"""A fan-out under one deadline: the orchestrator's deadline bounds every child's.

    python examples/fanout_deadline.py

Twenty researchers take between 0.05 s and 2 s each; the orchestrator allows 0.5 s. The fast ones complete,
the slow ones are cancelled by the deadline (cause "parent" or "deadline"), and nothing outlives the request.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from collections.abc import Awaitable, Callable

from subagent_tracker import Session, SubagentStatus, SubagentTaskHandle


async def research(handle: SubagentTaskHandle, seconds: float) -> str:
    await handle.token.run(asyncio.sleep(seconds))  # interrupted the moment the deadline passes
    return f"findings after {seconds:.2f}s"


async def main() -> None:
    session = Session("fan-out")
    generator = random.Random(3)
    durations = [generator.uniform(0.05, 2.0) for _ in range(20)]

    def researcher(seconds: float) -> Callable[[SubagentTaskHandle], Awaitable[str]]:
        return lambda handle: research(handle, seconds)

    async with session.start_subagent_task("orchestrator", timeout=0.5):
        spawned = [
            session.spawn_subagent_task(
                researcher(seconds),
                f"researcher-{index:02d}",
                parent_id="orchestrator",
                timeout=10,  # bounded by the orchestrator's 0.5 s anyway
            )
            for index, seconds in enumerate(durations)
        ]
        snapshots = await asyncio.gather(*spawned)
    statuses = Counter(snapshot.status.value for snapshot in snapshots)
    # Why the cancelled ones were cancelled: their parent's deadline reached them ("parent").
    causes = Counter(snapshot.cancel_cause for snapshot in snapshots if snapshot.cancel_cause is not None)
    print(f"{len(snapshots)} researchers under a 0.5 s deadline: {dict(statuses)}")
    print(f"  why the cancelled ones were cancelled: {dict(causes)}")
    for snapshot in snapshots[:5]:
        print(f"  {snapshot.task_id}: {snapshot.status.value:<9} {snapshot.result or snapshot.cancel_reason}")
    assert all(snapshot.finished for snapshot in snapshots)
    assert any(snapshot.status is SubagentStatus.COMPLETED for snapshot in snapshots)
    assert any(snapshot.status is SubagentStatus.CANCELLED for snapshot in snapshots)


if __name__ == "__main__":
    asyncio.run(main())
