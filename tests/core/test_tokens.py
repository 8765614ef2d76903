"""CONTRACT §4: tokens, checked, raised, awaited from any loop and thread, and waited on from threads."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from subagent_tracker import Session, SubagentTrackerError, TaskCancelledError


def test_is_cancelled_reason_and_raise_if_cancelled(session: Session) -> None:
    handle = session.start_subagent_task("a")
    token = handle.token
    assert token is handle.token
    assert token.task_id == "a"
    assert token.is_cancelled is False
    assert token.reason is None
    token.raise_if_cancelled()
    session.cancel_subagent_task("a", reason="user pressed stop")
    assert token.is_cancelled is True
    assert token.reason == "user pressed stop"
    with pytest.raises(TaskCancelledError) as raised:
        token.raise_if_cancelled()
    assert raised.value.task_id == "a"
    assert raised.value.reason == "user pressed stop"
    assert isinstance(raised.value, SubagentTrackerError)
    assert "user pressed stop" in str(raised.value)


def test_a_completed_tasks_token_never_fires_even_under_a_cancelled_parent(session: Session) -> None:
    session.start_subagent_task("parent")
    parent = session.start_subagent_task("parent2")
    child = session.start_subagent_task("child", parent_id="parent2")
    child.complete()
    session.cancel_subagent_task("parent2")
    session.cancel()
    assert not child.token.is_cancelled
    assert child.token.wait(timeout=0.02) is False
    del parent


def test_await_cancelled_returns_at_once_when_already_cancelled(session: Session) -> None:
    handle = session.start_subagent_task("a")
    session.cancel_subagent_task("a")

    async def main() -> None:
        await asyncio.wait_for(handle.token.cancelled(), 1)

    asyncio.run(main())


def test_await_cancelled_is_woken_by_a_cancel_on_the_same_loop(session: Session) -> None:
    handles = [session.start_subagent_task(f"t{index}") for index in range(100)]

    async def main() -> None:
        waiters = [asyncio.ensure_future(handle.token.cancelled()) for handle in handles]
        await asyncio.sleep(0)
        assert not any(waiter.done() for waiter in waiters)
        assert session.cancel() == 100
        await asyncio.wait_for(asyncio.gather(*waiters), 2)

    asyncio.run(main())


def test_await_cancelled_is_woken_by_a_cancel_from_another_thread(session: Session) -> None:
    handle = session.start_subagent_task("a")

    async def main() -> None:
        waiter = asyncio.ensure_future(handle.token.cancelled())
        await asyncio.sleep(0.01)
        canceller = threading.Thread(target=session.cancel_subagent_task, args=("a",))
        canceller.start()
        await asyncio.wait_for(waiter, 2)
        canceller.join()

    asyncio.run(main())


def test_await_cancelled_works_on_several_loops_in_several_threads(session: Session) -> None:
    handles = [session.start_subagent_task(f"t{index}") for index in range(40)]
    ready = threading.Barrier(5)
    woken: list[int] = []

    def loop_thread(slot: int) -> None:
        async def main() -> None:
            mine = handles[slot * 10 : slot * 10 + 10]
            waiters = [asyncio.ensure_future(handle.token.cancelled()) for handle in mine]
            await asyncio.sleep(0)
            await asyncio.get_running_loop().run_in_executor(None, ready.wait)
            await asyncio.wait_for(asyncio.gather(*waiters), 5)
            woken.append(len(waiters))

        asyncio.run(main())

    threads = [threading.Thread(target=loop_thread, args=(slot,)) for slot in range(4)]
    for thread in threads:
        thread.start()
    ready.wait()
    assert session.cancel() == 40
    for thread in threads:
        thread.join()
    assert sorted(woken) == [10, 10, 10, 10]


def test_a_waiter_cancelled_by_asyncio_does_not_break_the_canceller(session: Session) -> None:
    handle = session.start_subagent_task("a")

    async def main() -> None:
        waiter = asyncio.ensure_future(handle.token.cancelled())
        await asyncio.sleep(0)
        waiter.cancel()
        await asyncio.sleep(0)
        assert session.cancel_subagent_task("a") is True
        other = asyncio.ensure_future(handle.token.cancelled())
        await asyncio.wait_for(other, 1)

    asyncio.run(main())


def test_cancelled_outside_a_running_loop_raises(session: Session) -> None:
    handle = session.start_subagent_task("a")
    with pytest.raises(RuntimeError):
        handle.token.cancelled()


def test_wait_blocks_until_cancelled_from_another_thread(session: Session) -> None:
    handle = session.start_subagent_task("a")
    started = time.monotonic()
    assert handle.token.wait(timeout=0.05) is False
    assert time.monotonic() - started >= 0.05

    def cancel_later() -> None:
        time.sleep(0.05)
        session.cancel_subagent_task("a")

    canceller = threading.Thread(target=cancel_later)
    canceller.start()
    assert handle.token.wait() is True
    canceller.join()


def test_wait_releases_the_gil(session: Session) -> None:
    handle = session.start_subagent_task("a")
    counter = 0
    stop = threading.Event()

    def spin() -> None:
        nonlocal counter
        while not stop.is_set():
            counter += 1

    spinner = threading.Thread(target=spin)
    spinner.start()
    handle.token.wait(timeout=0.2)
    stop.set()
    spinner.join()
    assert counter > 1_000, "another Python thread must run while wait() blocks"
