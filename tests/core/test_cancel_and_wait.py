"""Cancel and wait (contract §3): ``await session.cancel_subagent_task_and_wait(task_id)`` returns the final
snapshot once the runner has ended and every ``on_cancel`` handler of the task and of its descendants, sync or
async, in whichever process, has finished. On every store."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable
from typing import Any

import pytest
from redis_support import RedisServer, Worker

from subagent_tracker import RedisRegistry, Session, SubagentStatus, UnknownTaskError
from subagent_tracker.integrations._support import BlockingSession


@pytest.fixture
def session(tracked_session: BlockingSession) -> BlockingSession:
    return tracked_session


def _stop_when_cancelled(handle: Any, after: float = 0.05) -> threading.Thread:
    """A runner in a thread: it notices the cancel, takes ``after`` seconds to stop, and ends."""

    def run() -> None:
        assert handle.token.wait(10)
        time.sleep(after)
        with handle:
            pass

    runner = threading.Thread(target=run)
    runner.start()
    return runner


def test_the_wait_ends_after_the_runner_and_every_handler_of_the_subtree(session: BlockingSession) -> None:
    parent = session.start_subagent_task("parent")
    child = session.start_subagent_task("child", parent_id="parent")
    cleaned: list[str] = []

    async def main() -> Any:
        async def release_sandbox() -> None:
            await asyncio.sleep(0.15)
            cleaned.append("sandbox")

        child.token.on_cancel(release_sandbox)
        parent.token.on_cancel(lambda: cleaned.append("parent"))
        runners = [_stop_when_cancelled(parent), _stop_when_cancelled(child)]
        began = time.monotonic()
        task = await asyncio.wait_for(
            session.cancel_subagent_task_and_wait("parent", "user pressed stop"), 10
        )
        waited = time.monotonic() - began
        for runner in runners:
            runner.join()
        return task, waited

    task, waited = asyncio.run(main())
    assert sorted(cleaned) == ["parent", "sandbox"], "every handler finished before the wait returned"
    assert waited >= 0.15
    assert (task.status, task.finished, task.cancel_reason) == (
        SubagentStatus.CANCELLED,
        True,
        "user pressed stop",
    )


def test_a_task_cancelled_or_finished_before_is_waited_for_all_the_same(session: BlockingSession) -> None:
    session.start_subagent_task("done").complete("result")
    stopping = session.start_subagent_task("stopping")
    assert session.cancel_subagent_task("stopping")

    async def main() -> tuple[Any, Any]:
        done = await asyncio.wait_for(session.cancel_subagent_task_and_wait("done"), 10)
        runner = _stop_when_cancelled(stopping, after=0.05)
        stopped = await asyncio.wait_for(session.cancel_subagent_task_and_wait("stopping"), 10)
        runner.join()
        return done, stopped

    done, stopped = asyncio.run(main())
    assert (done.status, done.result) == (SubagentStatus.COMPLETED, "result")
    assert (stopped.status, stopped.finished) == (SubagentStatus.CANCELLED, True)


def test_an_unknown_id_is_refused(session: BlockingSession) -> None:
    async def main() -> None:
        with pytest.raises(UnknownTaskError):
            await session.cancel_subagent_task_and_wait("nobody")

    asyncio.run(main())


def test_a_timeout_names_the_runner_that_still_runs(session: BlockingSession) -> None:
    handle = session.start_subagent_task("stubborn")

    async def main() -> None:
        with pytest.raises(
            TimeoutError, match=r'task "stubborn" was cancelled but did not stop .*its runner'
        ):
            await session.cancel_subagent_task_and_wait("stubborn", timeout=0.1)

    asyncio.run(main())
    task = session.subagent_task("stubborn")
    assert task is not None and task.status is SubagentStatus.CANCELLED, "the cancel stays made"
    with handle:
        pass


def test_a_timeout_names_the_tasks_whose_handlers_still_run(session: BlockingSession) -> None:
    handle = session.start_subagent_task("a")
    release = threading.Event()
    handle.token.on_cancel(lambda: threading.Thread(target=release.wait).start())

    async def main() -> None:
        never_done = asyncio.get_running_loop().create_future()

        async def hangs() -> None:
            await never_done

        handle.token.on_cancel(hangs)
        runner = _stop_when_cancelled(handle, after=0)
        with pytest.raises(TimeoutError, match=r'the cancel handlers of "a" still running'):
            await session.cancel_subagent_task_and_wait("a", timeout=0.3)
        runner.join()
        never_done.set_result(None)
        await asyncio.sleep(0.05)
        task = await asyncio.wait_for(session.cancel_subagent_task_and_wait("a"), 10)
        assert task.finished

    asyncio.run(main())
    release.set()


def test_a_wait_racing_the_runner_s_own_end_returns_one_whole_outcome(session: BlockingSession) -> None:
    for round_number in range(10):
        task_id = f"race-{round_number}"
        handle = session.start_subagent_task(task_id)
        start = threading.Barrier(2)

        def complete(start: threading.Barrier = start, handle: Any = handle) -> None:
            start.wait(timeout=5)
            with handle:
                pass

        completer = threading.Thread(target=complete)
        completer.start()

        async def main(start: threading.Barrier = start, task_id: str = task_id) -> Any:
            start.wait(timeout=5)
            return await asyncio.wait_for(session.cancel_subagent_task_and_wait(task_id), 10)

        task = asyncio.run(main())
        completer.join()
        assert task.finished and task.status in (SubagentStatus.COMPLETED, SubagentStatus.CANCELLED)


def test_concurrent_waits_on_one_task_all_return_the_final_snapshot(session: BlockingSession) -> None:
    handle = session.start_subagent_task("a")

    async def main() -> list[Any]:
        runner = _stop_when_cancelled(handle)
        waits: list[Awaitable[Any]] = [session.cancel_subagent_task_and_wait("a") for _ in range(3)]
        tasks: list[Any] = await asyncio.wait_for(asyncio.gather(*waits), 10)
        runner.join()
        return tasks

    tasks = asyncio.run(main())
    assert all(task.status is SubagentStatus.CANCELLED and task.finished for task in tasks)


@pytest.mark.parametrize("timeout", [-1, "soon"])
def test_a_bad_timeout_is_refused_and_cancels_nothing(session: BlockingSession, timeout: Any) -> None:
    handle = session.start_subagent_task("a")

    async def main() -> None:
        with pytest.raises((TypeError, ValueError), match="timeout"):
            await session.cancel_subagent_task_and_wait("a", timeout=timeout)

    asyncio.run(main())
    task = session.subagent_task("a")
    assert task is not None and task.status is SubagentStatus.RUNNING
    handle.complete()


def test_a_slow_handler_holds_up_no_wait_on_a_sibling_cancelled_with_it(session: BlockingSession) -> None:
    """Two children cancelled by one cascade: a wait on the one whose handlers are done returns while the
    other's handler still runs (on Redis, the worker reports each run's handlers done as soon as they are)."""
    parent = session.start_subagent_task("parent")
    slow = session.start_subagent_task("slow", parent_id="parent")
    quick = session.start_subagent_task("quick", parent_id="parent")
    runners = [_stop_when_cancelled(handle, after=0) for handle in (parent, slow, quick)]

    async def main() -> Any:
        release = asyncio.Event()

        async def slow_cleanup() -> None:
            await release.wait()

        slow.token.on_cancel(slow_cleanup)
        session.cancel_subagent_task("parent")
        try:
            task = await asyncio.wait_for(session.cancel_subagent_task_and_wait("quick"), 5)
            assert not release.is_set(), "the sibling's handler was still running"
            return task
        finally:
            release.set()
            await asyncio.sleep(0)

    task = asyncio.run(main())
    for runner in runners:
        runner.join()
    assert (task.task_id, task.finished) == ("quick", True)


def test_the_handlers_of_a_runner_in_another_process_are_waited_for(
    module_redis_server: RedisServer,
) -> None:
    """The runner and its cancel handler run in a worker process; the canceller, here, waits for both."""
    session_id = "cancel-and-wait-across-processes"
    runner = Worker(module_redis_server.url, "runner")
    try:
        runner.ask(op="start", session=session_id, task="job")
        assert runner.ask(op="slow_cleanup", session=session_id, task="job", seconds=0.3)
        runner.send(op="wait_cancelled", session=session_id, task="job", timeout=10)
        session = RedisRegistry(module_redis_server.url, worker_id="canceller").session(session_id)

        async def main() -> tuple[Any, float]:
            began = time.monotonic()
            waiting = asyncio.ensure_future(session.cancel_subagent_task_and_wait("job"))
            assert (await asyncio.to_thread(runner.answer))["cancelled"]
            # The runner stops at once; its handler goes on for 0.3 s.
            await asyncio.to_thread(runner.ask, op="complete", session=session_id, task="job")
            task = await asyncio.wait_for(waiting, 10)
            return task, time.monotonic() - began

        task, waited = asyncio.run(main())
        assert (task.status, task.finished) == (SubagentStatus.CANCELLED, True)
        assert waited >= 0.3, "the wait lasted as long as the other process's handler"
        assert runner.ask(op="cleanups_done", session=session_id, task="job") == 1
    finally:
        runner.stop()


def test_an_async_handler_that_raises_is_logged_and_counts_as_finished(
    caplog: pytest.LogCaptureFixture,
) -> None:
    session = Session()
    handle = session.start_subagent_task("a")

    async def main() -> Any:
        async def broken_cleanup() -> None:
            await asyncio.sleep(0)
            raise RuntimeError("cleanup failed")

        handle.token.on_cancel(broken_cleanup)
        runner = _stop_when_cancelled(handle, after=0)
        task = await asyncio.wait_for(session.cancel_subagent_task_and_wait("a"), 10)
        runner.join()
        return task

    with caplog.at_level("ERROR", logger="subagent_tracker"):
        task = asyncio.run(main())
    assert task.finished
    assert any("a cancel callback raised" in record.message for record in caplog.records)
