"""Pause and resume (contract §5): a runner pauses its task to wait for a person, the session resumes it with
a value, and a paused task stays pending, so a cancel still reaches it and its waiting runner. On every
store."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import pytest
from redis_support import RedisServer

from subagent_tracker import (
    AsyncRedisRegistry,
    RedisRegistry,
    Session,
    SubagentStatus,
    TaskCancelledError,
)
from subagent_tracker.integrations._support import BlockingSession


@pytest.fixture
def session(tracked_session: BlockingSession) -> BlockingSession:
    return tracked_session


def _resume_later(
    session: BlockingSession, task_id: str, value: Any, delay: float = 0.05
) -> threading.Thread:
    def resume() -> None:
        time.sleep(delay)
        assert session.resume_subagent_task(task_id, value)

    thread = threading.Thread(target=resume)
    thread.start()
    return thread


def test_a_paused_task_is_pending_and_shows_why(session: BlockingSession) -> None:
    handle = session.start_subagent_task("a")
    assert handle.pause("approve the plan")
    task = session.subagent_task("a")
    assert task is not None
    assert (task.status, task.status.is_pending, task.pause_reason) == (
        SubagentStatus.PAUSED,
        True,
        "approve the plan",
    )
    assert [pending.task_id for pending in session.pending_subagent_tasks()] == ["a"]
    assert not handle.pause("again"), "a paused task is not running"
    assert session.resume_subagent_task("a", "yes")
    assert not session.resume_subagent_task("a", "twice"), "resumed once"
    task = session.subagent_task("a")
    assert task is not None and (task.status, task.pause_reason) == (SubagentStatus.RUNNING, None)
    assert handle.wait_resumed() == "yes", "a task that is not paused returns the latest resume value"
    assert handle.complete()
    assert not handle.pause(), "a finished task does not pause"


def test_only_a_paused_task_resumes(session: BlockingSession) -> None:
    handle = session.start_subagent_task("a")
    assert not session.resume_subagent_task("a")
    assert not session.resume_subagent_task("unknown")
    handle.complete()


def test_the_blocking_wait_returns_the_value_the_session_resumed_with(session: BlockingSession) -> None:
    handle = session.start_subagent_task("a")
    assert handle.pause()
    resumer = _resume_later(session, "a", {"approved": True, "notes": ["fine"]})
    assert handle.wait_resumed(timeout=10) == {"approved": True, "notes": ["fine"]}
    resumer.join()
    assert handle.complete()


def test_the_async_wait_returns_the_value(session: BlockingSession) -> None:
    handle = session.start_subagent_task("a")

    async def main() -> Any:
        assert handle.pause("review")
        resumer = _resume_later(session, "a", 42)
        value = await asyncio.wait_for(handle.resumed(), 10)
        resumer.join()
        return value

    assert asyncio.run(main()) == 42
    assert handle.complete()


def test_a_cancel_while_paused_raises_in_the_waiting_runner_and_keeps_the_reason(
    session: BlockingSession,
) -> None:
    parent = session.start_subagent_task("parent")
    child = session.start_subagent_task("child", parent_id="parent")
    assert child.pause("waiting for a person")

    def cancel() -> None:
        time.sleep(0.05)
        assert session.cancel_subagent_task("parent", "user pressed stop")

    canceller = threading.Thread(target=cancel)
    canceller.start()
    with pytest.raises(TaskCancelledError, match="user pressed stop"):
        child.wait_resumed(timeout=10)
    canceller.join()
    assert not session.resume_subagent_task("child", "too late")
    task = session.subagent_task("child")
    assert task is not None
    assert (task.status, task.cancel_origin, task.pause_reason) == (
        SubagentStatus.CANCELLED,
        "parent",
        "waiting for a person",
    )
    with child:
        pass
    with parent:
        pass
    finished = session.subagent_task("child")
    assert finished is not None and finished.finished and finished.pause_reason == "waiting for a person"


def test_an_async_wait_raises_on_cancel(session: BlockingSession) -> None:
    handle = session.start_subagent_task("a")

    async def main() -> None:
        assert handle.pause()
        waiting = asyncio.ensure_future(handle.resumed())
        await asyncio.sleep(0.05)
        assert session.cancel_subagent_task("a", "no longer needed")
        with pytest.raises(TaskCancelledError):
            await asyncio.wait_for(waiting, 10)

    asyncio.run(main())
    handle.complete()


def test_a_wait_that_times_out_names_the_task_and_leaves_it_paused(session: BlockingSession) -> None:
    handle = session.start_subagent_task("a")
    assert handle.pause()
    with pytest.raises(TimeoutError, match=r'task "a" was not resumed within 0\.05 seconds'):
        handle.wait_resumed(timeout=0.05)
    task = session.subagent_task("a")
    assert task is not None and task.status is SubagentStatus.PAUSED
    handle.complete()


def test_a_paused_task_ends_as_a_running_one_does(session: BlockingSession) -> None:
    handle = session.start_subagent_task("a")
    assert handle.pause()
    assert session.end_subagent_task("a", error="rejected", error_type="Rejected")
    assert handle.wait_resumed(timeout=5) is None, "ended while paused: nothing to resume with"
    task = session.subagent_task("a")
    assert task is not None and task.status is SubagentStatus.FAILED
    runner_ends = session.start_subagent_task("b")
    assert runner_ends.pause()
    assert runner_ends.complete("gave up waiting")
    task = session.subagent_task("b")
    assert task is not None and task.status is SubagentStatus.COMPLETED


def test_cancel_by_filter_and_queries_see_paused_tasks(session: BlockingSession) -> None:
    handles = [session.start_subagent_task(task_id) for task_id in ("x", "y")]
    assert handles[0].pause()
    assert session.cancel_subagent_tasks(status=SubagentStatus.PAUSED, reason="stale") == ["x"]
    task = session.subagent_task("y")
    assert task is not None and task.status is SubagentStatus.RUNNING
    for handle in handles:
        with handle:
            pass


def _race_resumes_with_a_cancel(session: BlockingSession, task_id: str) -> tuple[list[bool], list[object]]:
    """Two resumes and a cancel at once on a paused task whose runner waits; returns what the resumes
    returned and what woke the runner."""
    handle = session.start_subagent_task(task_id)
    assert handle.pause()
    start = threading.Barrier(3)
    resumed: list[bool] = []
    woken: list[object] = []

    def resume() -> None:
        start.wait(timeout=5)
        resumed.append(session.resume_subagent_task(task_id, "go"))

    def wait() -> None:
        try:
            woken.append(handle.wait_resumed(timeout=10))
        except TaskCancelledError as cancelled:
            woken.append(cancelled)

    threads = [threading.Thread(target=resume) for _ in range(2)] + [threading.Thread(target=wait)]
    for thread in threads:
        thread.start()
    start.wait(timeout=5)
    assert session.cancel_subagent_task(task_id)
    for thread in threads:
        thread.join(timeout=15)
    with handle:
        pass
    return resumed, woken


def test_resumes_racing_a_cancel_leave_the_task_cancelled_and_wake_the_runner(
    session: BlockingSession,
) -> None:
    """At most one resume wins, a cancel always ends the pause, and the waiting runner wakes whichever comes
    first: with the value, or with ``TaskCancelledError``."""
    for round_number in range(10):
        task_id = f"race-{round_number}"
        resumed, woken = _race_resumes_with_a_cancel(session, task_id)
        assert resumed.count(True) <= 1
        assert len(woken) == 1 and (woken[0] == "go" or isinstance(woken[0], TaskCancelledError))
        task = session.subagent_task(task_id)
        assert task is not None and task.status is SubagentStatus.CANCELLED


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda handle, session: handle.pause(5), TypeError, "reason must be a str"),
        (lambda handle, session: session.resume_subagent_task(5), TypeError, "task_id must be a str"),
        (lambda handle, session: session.resume_subagent_task(""), ValueError, "task_id"),
        (lambda handle, session: handle.wait_resumed(timeout=-1), ValueError, "timeout"),
    ],
)
def test_bad_arguments_are_refused_and_change_nothing(
    session: BlockingSession, call: Any, error: type[Exception], match: str
) -> None:
    handle = session.start_subagent_task("a")
    assert handle.pause("approval")
    with pytest.raises(error, match=match):
        call(handle, session)
    task = session.subagent_task("a")
    assert task is not None and (task.status, task.pause_reason) == (SubagentStatus.PAUSED, "approval")
    handle.complete()


def test_a_redis_resume_value_must_be_json(module_redis_server: RedisServer) -> None:
    session = RedisRegistry(module_redis_server.url).session("pause-json")
    handle = session.start_subagent_task("a")
    assert handle.pause()
    with pytest.raises(TypeError, match="value"):
        session.resume_subagent_task("a", object())
    task = session.subagent_task("a")
    assert task is not None and task.status is SubagentStatus.PAUSED
    handle.complete()


def test_events_tell_the_pause_and_the_resume(session: BlockingSession) -> None:
    async def main() -> list[tuple[str, str | None, str | None]]:
        events = session.events()
        handle = session.start_subagent_task("a")
        assert handle.pause("approval")
        assert session.resume_subagent_task("a")
        handle.complete()
        seen: list[tuple[str, str | None, str | None]] = []
        async for event in events:
            seen.append((event.kind, event.status.value if event.status else None, event.reason))
            if event.kind == "ended":
                break
        events.close()
        return seen

    seen = asyncio.run(asyncio.wait_for(main(), 10))
    assert seen == [
        ("started", "running", None),
        ("paused", "paused", "approval"),
        ("resumed", "running", None),
        ("ended", "completed", None),
    ]


def test_a_pause_survives_the_worker_s_reconnect(module_redis_server: RedisServer) -> None:
    """The subscription that carries resumes is dropped: the task stays paused in Redis, and the resume still
    reaches the runner (by the notification after the resubscription, or by the reconcile)."""
    runner_session = RedisRegistry(module_redis_server.url, reconcile_interval=0.1).session("pause-reconnect")
    handle = runner_session.start_subagent_task("a")
    assert handle.pause("approval")
    assert module_redis_server.admin("CLIENT", "KILL", "TYPE", "pubsub").startswith(b":")
    other = RedisRegistry(module_redis_server.url).session("pause-reconnect")
    task = other.subagent_task("a")
    assert task is not None and task.status is SubagentStatus.PAUSED
    assert other.resume_subagent_task("a", "after the reconnect")
    assert handle.wait_resumed(timeout=10) == "after the reconnect"
    handle.complete()


def test_the_asyncio_redis_api_pauses_and_resumes(module_redis_server: RedisServer) -> None:
    async def main() -> Any:
        registry = await AsyncRedisRegistry.connect(module_redis_server.url)
        session = await registry.session("pause-asyncio")
        handle = await session.start_subagent_task("a")
        assert await handle.pause("approval")
        task = await session.subagent_task("a")
        assert task is not None and task.pause_reason == "approval"
        waiting = asyncio.ensure_future(handle.resumed())
        await asyncio.sleep(0.05)
        assert await session.resume_subagent_task("a", [1, 2])
        value = await asyncio.wait_for(waiting, 10)
        assert await handle.complete()
        return value

    assert asyncio.run(main()) == [1, 2]


def test_a_session_in_memory_keeps_any_python_value() -> None:
    session = Session()
    handle = session.start_subagent_task("a")
    assert handle.pause()
    marker = object()
    assert session.resume_subagent_task("a", marker)
    assert handle.wait_resumed() is marker
    handle.complete()
