"""CONTRACT §5: the runner's side: with and async with outcomes, progress, and ids."""

from __future__ import annotations

import asyncio

import pytest

from subagent_tracker import (
    DuplicateTaskError,
    Session,
    SubagentStatus,
    TaskCancelledError,
)


def test_a_normal_exit_completes(session: Session) -> None:
    with session.start_subagent_task("a") as handle:
        handle.progress("working")
    snapshot = handle.snapshot()
    assert snapshot.status is SubagentStatus.COMPLETED and snapshot.finished


def test_an_exception_fails_and_propagates(session: Session) -> None:
    with pytest.raises(KeyError), session.start_subagent_task("a") as handle:
        raise KeyError("missing tool")
    snapshot = handle.snapshot()
    assert snapshot.status is SubagentStatus.FAILED
    assert snapshot.error == "KeyError: 'missing tool'"


def test_task_cancelled_error_leaves_it_cancelled_and_finished(session: Session) -> None:
    with pytest.raises(TaskCancelledError), session.start_subagent_task("a") as handle:
        session.cancel_subagent_task("a", reason="stop")
        handle.token.raise_if_cancelled()
    snapshot = handle.snapshot()
    assert snapshot.status is SubagentStatus.CANCELLED
    assert snapshot.finished
    assert snapshot.cancel_reason == "stop"


def test_task_cancelled_error_raised_by_hand_cancels_a_running_task(session: Session) -> None:
    child_holder = []
    with pytest.raises(TaskCancelledError), session.start_subagent_task("a") as handle:
        child_holder.append(session.start_subagent_task("child", parent_id="a"))
        raise TaskCancelledError("a", "gave up")
    snapshot = handle.snapshot()
    assert snapshot.status is SubagentStatus.CANCELLED and snapshot.finished
    assert snapshot.cancel_reason == "gave up"
    assert child_holder[0].token.is_cancelled


def test_a_cancelled_body_that_returns_normally_stays_cancelled(session: Session) -> None:
    with session.start_subagent_task("a") as handle:
        session.cancel_subagent_task("a")
    snapshot = handle.snapshot()
    assert snapshot.status is SubagentStatus.CANCELLED, "cancellation is never turned into success"
    assert snapshot.finished


def test_async_with_outcomes(session: Session) -> None:
    async def main() -> None:
        async with session.start_subagent_task("ok") as handle:
            await asyncio.sleep(0)
        assert handle.snapshot().status is SubagentStatus.COMPLETED

        with pytest.raises(ValueError):
            async with session.start_subagent_task("bad") as handle:
                raise ValueError("bad input")
        assert handle.snapshot().status is SubagentStatus.FAILED
        assert handle.snapshot().error == "ValueError: bad input"

        async def runner() -> None:
            async with session.start_subagent_task("slow"):
                await asyncio.sleep(10)

        task = asyncio.ensure_future(runner())
        await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        snapshot = session.subagent_task("slow")
        assert snapshot is not None
        assert snapshot.status is SubagentStatus.CANCELLED and snapshot.finished

        async def cooperative() -> None:
            async with session.start_subagent_task("coop") as handle:
                await handle.token.cancelled()
                handle.token.raise_if_cancelled()

        task = asyncio.ensure_future(cooperative())
        await asyncio.sleep(0.01)
        session.cancel_subagent_task("coop", reason="user")
        with pytest.raises(TaskCancelledError):
            await task
        finished = await session.wait_subagent_task("coop", timeout=1)
        assert finished.status is SubagentStatus.CANCELLED and finished.finished
        assert finished.cancel_reason == "user"

    asyncio.run(main())


def test_progress_keeps_the_latest_message_and_a_count_bounded(session: Session) -> None:
    handle = session.start_subagent_task("a")
    assert handle.progress("searching") is True
    assert handle.progress("x" * 100_000) is True
    snapshot = handle.snapshot()
    assert snapshot.progress_count == 2
    assert snapshot.progress is not None and len(snapshot.progress) <= 4096
    handle.complete()
    assert handle.progress("after the end") is False
    assert handle.snapshot().progress_count == 2


def test_generated_ids_are_unique(session: Session) -> None:
    handles = [session.start_subagent_task() for _ in range(1_000)]
    assert len({handle.task_id for handle in handles}) == 1_000


def test_a_live_id_is_a_duplicate_and_a_finished_one_may_run_again(session: Session) -> None:
    first = session.start_subagent_task("a")
    with pytest.raises(DuplicateTaskError):
        session.start_subagent_task("a")
    session.cancel_subagent_task("a")
    with pytest.raises(DuplicateTaskError, match="already running"):
        session.start_subagent_task("a")
    first.complete()
    second = session.start_subagent_task("a", agent="second run")
    snapshot = session.subagent_task("a")
    assert (
        snapshot is not None and snapshot.agent == "second run" and snapshot.status is SubagentStatus.RUNNING
    )
    assert len(session.subagent_tasks()) == 1
    second.complete()
