"""The waits (``wait_subagent_task``, ``cancel_subagent_task_and_wait``) are coroutines on every store: their
arguments are checked at the call, nothing starts until they are awaited, and ``asyncio.run`` and
``asyncio.create_task`` take them as they take a coroutine of ``async def``."""

from __future__ import annotations

import asyncio
import collections.abc
import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Coroutine
from typing import Any

import pytest

from subagent_tracker import AwaitableSession, Session, SubagentStatus, UnknownTaskError
from subagent_tracker.integrations._support import BlockingSession


@pytest.fixture
def session(tracked_session: BlockingSession) -> BlockingSession:
    return tracked_session


def test_a_wait_is_a_coroutine_that_asyncio_run_takes(session: BlockingSession) -> None:
    session.start_subagent_task("done").complete("result")
    waiting = session.wait_subagent_task("done")
    assert asyncio.iscoroutine(waiting)
    assert isinstance(waiting, collections.abc.Coroutine)
    assert asyncio.run(waiting).result == "result"
    snapshot = asyncio.run(session.cancel_subagent_task_and_wait("done", timeout=5))
    assert snapshot.status is SubagentStatus.COMPLETED


def test_a_wait_is_named_as_a_coroutine_of_its_method_is(session: BlockingSession) -> None:
    # What asyncio shows of a task: its `repr`, and "Task was destroyed but it is pending!".
    handle = session.start_subagent_task("named")
    session_class = type(session).__name__
    for waiting, name in [
        (session.wait_subagent_task("named"), "wait_subagent_task"),
        (session.cancel_subagent_task_and_wait("named"), "cancel_subagent_task_and_wait"),
        (handle.resumed(), "resumed"),
    ]:
        owner = type(handle).__name__ if name == "resumed" else session_class
        named: Any = waiting
        assert (named.__name__, named.__qualname__) == (name, f"{owner}.{name}")

        async def shown(waiting: Coroutine[Any, Any, Any] = waiting) -> str:
            task = asyncio.ensure_future(waiting)
            shown = repr(task)
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            return shown

        assert f"coro=<{owner}.{name}()" in asyncio.run(shown())
    handle.complete()


def test_create_task_takes_a_wait(session: BlockingSession) -> None:
    handle = session.start_subagent_task("running")

    async def main() -> SubagentStatus:
        waiting = asyncio.create_task(session.wait_subagent_task("running", timeout=5))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        handle.complete()
        return (await waiting).status

    assert asyncio.run(main()) is SubagentStatus.COMPLETED


def test_nothing_starts_until_the_wait_is_awaited(session: BlockingSession) -> None:
    handle = session.start_subagent_task("kept")
    never_awaited = session.cancel_subagent_task_and_wait("kept")
    never_awaited.close()
    assert not handle.token.is_cancelled
    snapshot = session.subagent_task("kept")
    assert snapshot is not None and snapshot.status is SubagentStatus.RUNNING
    handle.complete()


def test_bad_arguments_raise_at_the_call_and_an_unknown_id_at_the_await(session: BlockingSession) -> None:
    with pytest.raises(ValueError, match="timeout"):
        _ = session.wait_subagent_task("any", timeout=-1)
    with pytest.raises(TypeError):
        _ = session.cancel_subagent_task_and_wait("any", reason=3)  # type: ignore[arg-type]
    unknown = session.wait_subagent_task("unknown")
    with pytest.raises(UnknownTaskError):
        asyncio.run(unknown)
    with pytest.raises(UnknownTaskError):
        asyncio.run(session.cancel_subagent_task_and_wait("unknown"))


def test_a_wait_given_up_stops_and_a_new_one_still_sees_the_end(session: BlockingSession) -> None:
    handle = session.start_subagent_task("long")

    async def main() -> SubagentStatus:
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(session.wait_subagent_task("long"), 0.05)
        threading.Timer(0.05, handle.complete).start()
        return (await session.wait_subagent_task("long", timeout=5)).status

    assert asyncio.run(main()) is SubagentStatus.COMPLETED


def test_the_timeout_names_the_runner_that_still_runs(session: BlockingSession) -> None:
    handle = session.start_subagent_task("stubborn")
    started = time.monotonic()
    with pytest.raises(
        TimeoutError, match=r'task "stubborn" was cancelled but did not stop within 0.1 seconds'
    ):
        asyncio.run(session.cancel_subagent_task_and_wait("stubborn", timeout=0.1))
    assert time.monotonic() - started < 5
    assert handle.token.is_cancelled
    with pytest.raises(TimeoutError, match=r'task "stubborn" did not finish within 0.1 seconds'):
        asyncio.run(session.wait_subagent_task("stubborn", timeout=0.1))
    with handle:
        pass


def test_throw_and_close_follow_the_coroutine_protocol(session: BlockingSession) -> None:
    session.start_subagent_task("x").complete()
    unstarted = session.wait_subagent_task("x")
    with pytest.raises(KeyError):
        unstarted.throw(KeyError("raised where it waits"))
    with pytest.raises(RuntimeError, match="already awaited"):
        unstarted.send(None)
    with pytest.raises(TypeError, match="non-None"):
        session.wait_subagent_task("x").send(1)

    async def close_while_waiting() -> None:
        handle = session.start_subagent_task("y")
        waiting = session.wait_subagent_task("y")
        waiting.send(None)  # started: it now waits on a future of this loop
        waiting.close()
        waiting.close()
        handle.complete()

    asyncio.run(close_while_waiting())


def test_a_wait_already_over_is_answered_at_the_first_step(session: BlockingSession) -> None:
    """A finished task's wait (and, in memory, a cancel whose handlers ran as it was made) needs no trip
    through the loop: in memory its first step ends it."""
    session.start_subagent_task("over").complete("done")

    async def first_step() -> None:
        waiting = session.wait_subagent_task("over")
        with pytest.raises(StopIteration) as stopped:
            waiting.send(None)
        assert stopped.value.value.result == "done"

    if isinstance(session, Session):
        asyncio.run(first_step())
    else:
        assert asyncio.run(session.wait_subagent_task("over")).result == "done"


def test_an_in_memory_wait_without_a_timeout_starts_no_thread() -> None:
    """In memory a wait is polled on the loop that awaits it, woken by the core as a token's waits are: a
    fresh process that waits for live and finished tasks still runs one thread."""
    script = """
import asyncio, os, subagent_tracker
session = subagent_tracker.Session()
handle = session.start_subagent_task("live")
session.start_subagent_task("done").complete()

async def main():
    waiting = asyncio.ensure_future(session.wait_subagent_task("live"))
    await asyncio.sleep(0)
    handle.complete("ok")
    assert (await waiting).result == "ok"
    assert (await session.wait_subagent_task("done")).finished
    assert (await session.cancel_subagent_task_and_wait("done")).finished

asyncio.run(main())
print(len(os.listdir("/proc/self/task")))
"""
    ran = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert ran.stdout.strip() == "1", ran.stderr


def test_a_wait_keeps_waiting_while_a_cancelled_runner_still_runs(session: BlockingSession) -> None:
    """Contract §2: a cancelled task is unfinished until its runner stops, and the wait waits across that
    window, without a timeout too."""
    handle = session.start_subagent_task("stopping")

    async def main() -> SubagentStatus:
        waiting = asyncio.create_task(session.wait_subagent_task("stopping"))
        assert session.cancel_subagent_task("stopping")
        await asyncio.sleep(0.1)
        assert not waiting.done()
        with handle:
            pass
        return (await asyncio.wait_for(waiting, 10)).status

    assert asyncio.run(main()) is SubagentStatus.CANCELLED


def test_an_awaitable_session_s_calls_are_coroutines_that_run_when_made() -> None:
    """An ``AwaitableSession`` call runs when it is made, as an ``AsyncRedisSession``'s does, and gives a done
    awaitable that ``asyncio.run`` takes."""
    session = Session()
    awaitable = AwaitableSession(session)
    handle = session.start_subagent_task("a")
    cancelling = awaitable.cancel_subagent_task("a")
    assert asyncio.iscoroutine(cancelling)
    assert handle.token.is_cancelled
    assert asyncio.run(cancelling) is True
    listing = awaitable.subagent_tasks()
    assert asyncio.iscoroutine(listing)
    assert [task.task_id for task in asyncio.run(listing)] == ["a"]
    with handle:
        pass
