"""CONTRACT §6: queries, and waiting for a task to finish."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from subagent_tracker import Session, SubagentStatus, UnknownTaskError


def test_listing_is_in_start_order_and_pending_lists_running_only(session: Session) -> None:
    handles = [session.start_subagent_task(f"t{index}") for index in range(10)]
    handles[1].complete()
    handles[2].fail("x")
    session.cancel_subagent_task("t3")
    assert [task.task_id for task in session.subagent_tasks()] == [f"t{index}" for index in range(10)]
    assert [task.task_id for task in session.pending_subagent_tasks()] == [
        "t0",
        "t4",
        "t5",
        "t6",
        "t7",
        "t8",
        "t9",
    ]
    assert all(task.status is SubagentStatus.RUNNING for task in session.pending_subagent_tasks())
    assert session.subagent_task("nobody") is None


def test_wait_returns_the_final_snapshot_once_the_runner_stops(session: Session) -> None:
    handle = session.start_subagent_task("a")

    async def main() -> None:
        session.cancel_subagent_task("a")
        with pytest.raises(TimeoutError, match="still running"):
            await session.wait_subagent_task("a", timeout=0.05)
        waiter = asyncio.ensure_future(session.wait_subagent_task("a", timeout=5))
        await asyncio.sleep(0.01)
        assert not waiter.done(), "cancel requested is not runner stopped"
        handle.complete("partial")
        snapshot = await waiter
        assert snapshot.finished and snapshot.status is SubagentStatus.CANCELLED
        assert snapshot.result == "partial"
        already = await session.wait_subagent_task("a")
        assert already.finished

    asyncio.run(main())


def test_wait_is_woken_by_an_end_in_another_thread(session: Session) -> None:
    handle = session.start_subagent_task("a")

    async def main() -> None:
        def finish_later() -> None:
            time.sleep(0.02)
            handle.complete()

        thread = threading.Thread(target=finish_later)
        thread.start()
        snapshot = await session.wait_subagent_task("a", timeout=5)
        thread.join()
        assert snapshot.status is SubagentStatus.COMPLETED

    asyncio.run(main())


def test_wait_on_an_unknown_id_raises(session: Session) -> None:
    async def main() -> None:
        with pytest.raises(UnknownTaskError):
            await session.wait_subagent_task("nobody")

    asyncio.run(main())


def test_wait_survives_the_eviction_of_its_task() -> None:
    session = Session(max_finished_tasks=0)
    handle = session.start_subagent_task("a")

    async def main() -> None:
        waiter = asyncio.ensure_future(session.wait_subagent_task("a"))
        await asyncio.sleep(0)
        handle.complete("kept")
        snapshot = await asyncio.wait_for(waiter, 1)
        assert snapshot.result == "kept"
        assert session.subagent_task("a") is None

    asyncio.run(main())
