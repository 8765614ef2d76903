"""Deadlines, cancel callbacks, linked tokens, checkpoints and spawn (docs/agent-loops.md)."""

from __future__ import annotations

import asyncio
import functools
import logging
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable

import pytest

from subagent_tracker import (
    CancellationToken,
    Session,
    SessionProtocol,
    SubagentStatus,
    SubagentTaskHandle,
    TaskCancelledError,
    ToolCall,
    run_tool_calls,
)
from subagent_tracker.diagnostics import pending_deadlines

# --- deadlines and causes


def test_cancel_causes_are_recorded(session: Session) -> None:
    a = session.start_subagent_task("a")
    b = session.start_subagent_task("b", parent_id="a")
    c = session.start_subagent_task("c")
    session.cancel_subagent_task("a")
    session.cancel()
    assert (a.snapshot().cancel_cause, b.snapshot().cancel_cause, c.snapshot().cancel_cause) == (
        "requested",
        "parent",
        "session",
    )
    assert session.start_subagent_task("d").snapshot().cancel_cause is None


def test_a_timeout_cancels_with_the_deadline_reason(session: Session) -> None:
    handle = session.start_subagent_task("a", timeout=0.03)
    deadline = handle.snapshot().deadline
    assert deadline is not None and deadline <= time.time() + 0.05
    assert handle.token.wait(timeout=5) is True
    snapshot = handle.snapshot()
    assert snapshot.status is SubagentStatus.CANCELLED
    assert (snapshot.cancel_reason, snapshot.cancel_cause) == ("deadline exceeded", "deadline")


def test_an_absolute_deadline_in_the_past_cancels_at_start(session: Session) -> None:
    handle = session.start_subagent_task("a", deadline=time.time() - 1)
    assert handle.token.is_cancelled
    assert handle.snapshot().cancel_cause == "deadline"


def test_a_childs_deadline_is_bounded_by_its_parents_unless_detached(session: Session) -> None:
    parent = session.start_subagent_task("p", timeout=60)
    child = session.start_subagent_task("c", parent_id="p", timeout=3600)
    free = session.start_subagent_task("d", parent_id="p", detached=True)
    parent_deadline = parent.snapshot().deadline
    child_deadline = child.snapshot().deadline
    assert parent_deadline is not None and child_deadline is not None
    assert child_deadline <= parent_deadline
    assert free.snapshot().deadline is None and free.snapshot().detached


def test_a_detached_child_escapes_the_cascade_but_not_its_session(session: Session) -> None:
    session.start_subagent_task("p")
    parent = session.start_subagent_task("p2")
    detached = session.start_subagent_task("d", parent_id="p2", detached=True)
    session.cancel_subagent_task("p2")
    assert not detached.token.is_cancelled
    session.cancel()
    assert detached.token.is_cancelled and detached.snapshot().cancel_cause == "session"
    del parent


def test_deadlines_and_callbacks_leave_nothing_behind_when_tasks_finish_first() -> None:
    session = Session()
    before = pending_deadlines()
    handles = [session.start_subagent_task(f"t{index}", timeout=3600) for index in range(20_000)]
    for handle in handles:
        handle.token.on_cancel(lambda: None)
    assert pending_deadlines() == before + 20_000
    tokens = [handle.token for handle in handles]
    for handle in handles:
        handle.complete()
    assert pending_deadlines() == before
    assert all(token.callback_count == 0 for token in tokens)


def test_a_deadline_racing_completion_has_one_winner(session: Session) -> None:
    for index in range(300):
        handle = session.start_subagent_task(f"t{index}", timeout=(index % 5) / 10_000)
        time.sleep((index % 3) / 10_000)
        completed = handle.complete()
        assert completed == (handle.snapshot().status is SubagentStatus.COMPLETED)


def test_deadline_arguments_are_checked(session: Session) -> None:
    with pytest.raises(TypeError, match="timeout"):
        session.start_subagent_task("a", timeout="soon")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout"):
        session.start_subagent_task("a", timeout=-1)
    with pytest.raises(TypeError, match="deadline"):
        session.start_subagent_task("a", deadline="tomorrow")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        session.start_subagent_task("a", detached="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="linked"):
        session.start_subagent_task("a", linked=[object()])  # type: ignore[list-item]
    assert session.subagent_task("a") is None


# --- callbacks


def test_a_callback_runs_once_and_at_once_when_already_cancelled(session: Session) -> None:
    handle = session.start_subagent_task("a")
    calls: list[str] = []
    handle.token.on_cancel(lambda: calls.append("first"))
    assert handle.token.callback_count == 1
    session.cancel_subagent_task("a")
    session.cancel_subagent_task("a")
    assert calls == ["first"]
    handle.token.on_cancel(lambda: calls.append("late"))
    assert calls == ["first", "late"]


def test_removed_callbacks_and_callbacks_of_completed_tasks_never_run(session: Session) -> None:
    handle = session.start_subagent_task("a")
    calls: list[str] = []
    registration = handle.token.on_cancel(lambda: calls.append("removed"))
    assert registration.remove() is True
    assert registration.remove() is False
    handle.token.on_cancel(lambda: calls.append("released"))
    handle.complete()
    assert handle.token.callback_count == 0
    assert calls == []


def test_a_failing_callback_is_logged_and_breaks_nothing(
    session: Session, caplog: pytest.LogCaptureFixture
) -> None:
    handle = session.start_subagent_task("a")
    calls: list[str] = []

    def broken() -> None:
        raise RuntimeError("callback bug")

    handle.token.on_cancel(broken)
    handle.token.on_cancel(lambda: calls.append("second"))
    with caplog.at_level(logging.ERROR, logger="subagent_tracker"):
        assert session.cancel_subagent_task("a") is True
    assert calls == ["second"]
    assert "a cancel callback raised" in caplog.text and "callback bug" in caplog.text


def test_a_coroutine_callback_runs_on_the_loop_that_registered_it(session: Session) -> None:
    handle = session.start_subagent_task("a")

    async def main() -> None:
        ran_on: list[int] = []
        done = asyncio.Event()

        async def cleanup() -> None:
            ran_on.append(threading.get_ident())
            done.set()

        handle.token.on_cancel(cleanup)
        canceller = threading.Thread(target=session.cancel_subagent_task, args=("a",))
        canceller.start()
        await asyncio.wait_for(done.wait(), 5)
        canceller.join()
        assert ran_on == [threading.get_ident()]

    asyncio.run(main())
    with pytest.raises(RuntimeError, match="running event loop"):

        async def orphan() -> None:
            pass

        session.start_subagent_task("b").token.on_cancel(orphan)


def _race_cancel(session: Session, task_id: str, action: Callable[[], object]) -> object:
    """Cancels ``task_id`` in another thread at the moment ``action`` runs here; returns what it returned."""
    barrier = threading.Barrier(2)

    def cancel() -> None:
        barrier.wait()
        session.cancel_subagent_task(task_id)

    canceller = threading.Thread(target=cancel)
    canceller.start()
    barrier.wait()
    try:
        return action()
    finally:
        canceller.join()


def _register_racing_cancel() -> list[int]:
    session = Session()
    handle = session.start_subagent_task("a")
    calls: list[int] = []

    def register() -> None:
        for index in range(100):
            handle.token.on_cancel(functools.partial(calls.append, index))

    _race_cancel(session, "a", register)
    return sorted(calls)


def test_a_callback_registered_as_the_token_fires_runs_exactly_once() -> None:
    for _ in range(50):
        assert _register_racing_cancel() == list(range(100))


def test_callbacks_must_be_callable(session: Session) -> None:
    with pytest.raises(TypeError, match="callable"):
        session.start_subagent_task("a").token.on_cancel(42)  # type: ignore[arg-type]


# --- linked tokens


def test_a_linked_task_follows_its_source_across_sessions(session: Session) -> None:
    request_session = Session("requests")
    request = request_session.start_subagent_task("request")
    linked = session.start_subagent_task("a", linked=[request.token])
    request_session.cancel_subagent_task("request", reason="client disconnected")
    snapshot = linked.snapshot()
    assert snapshot.status is SubagentStatus.CANCELLED
    assert (snapshot.cancel_cause, snapshot.cancel_reason) == ("linked", "client disconnected")


def test_links_are_dropped_when_linked_tasks_finish(session: Session) -> None:
    source = session.start_subagent_task("long-lived")
    for index in range(2_000):
        session.start_subagent_task(f"t{index}", linked=[source.token]).complete()
    assert source.token.callback_count == 0


def _link_racing_cancel() -> bool:
    session = Session()
    source = session.start_subagent_task("source")
    linked = _race_cancel(session, "source", lambda: session.start_subagent_task("a", linked=[source.token]))
    assert isinstance(linked, SubagentTaskHandle)
    return linked.token.is_cancelled


def test_a_link_to_a_token_cancelled_during_start_always_takes() -> None:
    for _ in range(100):
        assert _link_racing_cancel()


def test_any_fires_with_its_first_source_and_leaks_nothing(session: Session) -> None:
    long_lived = session.start_subagent_task("long-lived")
    other = session.start_subagent_task("other")
    for _ in range(1_000):
        CancellationToken.any(long_lived.token, other.token)
    assert long_lived.token.callback_count == 0, "collected combinations leave no registration"
    combined = CancellationToken.any(long_lived.token, other.token)
    session.cancel_subagent_task("other", reason="user left")
    assert combined.is_cancelled and combined.reason == "user left"
    with pytest.raises(TypeError, match="CancellationToken"):
        CancellationToken.any(long_lived.token, "not a token")  # type: ignore[arg-type]


# --- stream checkpoint


async def _stream(chunks: list[str], delay: float, closed: list[bool]) -> AsyncIterator[str]:
    try:
        for chunk in chunks:
            await asyncio.sleep(delay)
            yield chunk
        await asyncio.sleep(3600)  # then falls silent
    finally:
        closed.append(True)


def test_guard_passes_chunks_through_and_ends_with_the_stream(session: Session) -> None:
    handle = session.start_subagent_task("a")

    async def finite() -> AsyncIterator[int]:
        for index in range(3):
            yield index

    async def main() -> list[int]:
        return [chunk async for chunk in handle.token.guard(finite())]

    assert asyncio.run(main()) == [0, 1, 2]


def test_guard_stops_a_silent_stream_at_once_and_keeps_the_partial_output(session: Session) -> None:
    handle = session.start_subagent_task("a")
    closed: list[bool] = []

    async def main() -> None:
        received = []

        async def consume() -> None:
            async for chunk in handle.token.guard(_stream(["Hel", "lo"], 0.001, closed)):
                received.append(chunk)

        consumer = asyncio.ensure_future(consume())
        await asyncio.sleep(0.05)  # the stream is now silent
        started = time.perf_counter()
        session.cancel_subagent_task("a", reason="user pressed stop")
        with pytest.raises(TaskCancelledError) as raised:
            await asyncio.wait_for(consumer, 2)
        assert time.perf_counter() - started < 0.5
        assert raised.value.partial == ["Hel", "lo"] == received
        assert raised.value.reason == "user pressed stop"

    asyncio.run(main())
    assert closed == [True], "the source stream was closed"


# --- tool checkpoints


def test_run_interrupts_a_running_tool(session: Session) -> None:
    handle = session.start_subagent_task("a")

    async def main() -> None:
        cleaned: list[bool] = []

        async def slow_tool() -> str:
            try:
                await asyncio.sleep(3600)
            finally:
                cleaned.append(True)
            return "never"

        async def fast_tool() -> str:
            return "fast"

        assert await handle.token.run(fast_tool()) == "fast"
        call = asyncio.ensure_future(handle.token.run(slow_tool()))
        await asyncio.sleep(0.01)
        session.cancel_subagent_task("a")
        with pytest.raises(TaskCancelledError):
            await asyncio.wait_for(call, 2)
        assert cleaned == [True], "the tool was cancelled and could clean up"
        with pytest.raises(TaskCancelledError):
            await handle.token.run(fast_tool())

    asyncio.run(main())


def _tools(started: list[str]) -> list[ToolCall]:
    def tool(name: str, seconds: float, fails: bool = False) -> ToolCall:
        async def run() -> str:
            started.append(name)
            await asyncio.sleep(seconds)
            if fails:
                raise ValueError("bad arguments")
            return f"{name} done"

        return ToolCall(call_id=f"call-{name}", name=name, run=run)

    return [tool("search", 0.0), tool("broken", 0.0, fails=True), tool("fetch", 3600), tool("summarize", 0.0)]


@pytest.mark.parametrize("concurrent", [False, True])
def test_a_tool_batch_gives_every_call_an_outcome_on_cancel(session: Session, concurrent: bool) -> None:
    handle = session.start_subagent_task(f"a-{concurrent}")
    started: list[str] = []

    async def main() -> None:
        batch = asyncio.ensure_future(run_tool_calls(handle.token, _tools(started), concurrent=concurrent))
        await asyncio.sleep(0.05)
        session.cancel_subagent_task(handle.task_id, reason="stop")
        outcomes = await asyncio.wait_for(batch, 2)
        statuses = {outcome.name: outcome.status for outcome in outcomes}
        assert statuses["search"] == "completed" and outcomes[0].result == "search done"
        assert statuses["broken"] == "failed" and outcomes[1].error == "ValueError: bad arguments"
        assert statuses["fetch"] == "interrupted"
        assert statuses["summarize"] == ("completed" if concurrent else "not_started")
        messages = [outcome.as_tool_message() for outcome in outcomes]
        assert [message["tool_call_id"] for message in messages] == [
            "call-search",
            "call-broken",
            "call-fetch",
            "call-summarize",
        ]

    asyncio.run(main())


@pytest.mark.parametrize("concurrent", [False, True])
def test_before_call_vetoes_one_call_and_the_batch_goes_on(
    tracked_session: SessionProtocol, concurrent: bool
) -> None:
    """§15, a veto (issue 20, item 7): a vetoed call gets its own outcome, with the message as its error; the
    other calls run, and the token is untouched. A coroutine function may veto too."""
    handle = tracked_session.start_subagent_task()
    started: list[str] = []
    asked: list[str] = []

    def no_broken_tools(call: ToolCall) -> str | None:
        asked.append(call.name)
        return "the user refused it" if call.name == "broken" else None

    async def no_slow_tools(call: ToolCall) -> str | None:
        await asyncio.sleep(0)
        return "too slow for this turn" if call.name == "fetch" else None

    async def main() -> None:
        tools = _tools(started)
        vetoed = await run_tool_calls(
            handle.token, tools[:2], concurrent=concurrent, before_call=no_broken_tools
        )
        assert [(outcome.status, outcome.error) for outcome in vetoed] == [
            ("completed", None),
            ("vetoed", "the user refused it"),
        ]
        assert not vetoed[1].cancelled
        assert vetoed[1].as_tool_message()["content"] == "not run: the user refused it"
        assert sorted(asked) == ["broken", "search"] and started == ["search"]
        slow = await run_tool_calls(handle.token, tools[2:], concurrent=concurrent, before_call=no_slow_tools)
        assert [outcome.status for outcome in slow] == ["vetoed", "completed"]
        assert started == ["search", "summarize"]

    asyncio.run(main())
    assert not handle.token.is_cancelled
    handle.complete()


def test_a_cancel_wins_over_a_veto_and_a_broken_before_call_fails_only_its_call(
    tracked_session: SessionProtocol,
) -> None:
    """A cancel that lands while ``before_call`` decides leaves that call, and the rest, ``not_started``; a
    ``before_call`` that raises or answers something other than a message fails its own call only."""
    handle = tracked_session.start_subagent_task()
    started: list[str] = []

    def broken(call: ToolCall) -> str | None:
        if call.name == "search":
            raise RuntimeError("policy service down")
        if call.name == "broken":
            return 42  # type: ignore[return-value]
        return None

    async def cancelling(call: ToolCall) -> str | None:
        tracked_session.cancel_subagent_task(handle.task_id, reason="stop")
        deadline = time.monotonic() + 5
        while not handle.token.is_cancelled:  # On Redis, the runner's token fires a round trip later.
            assert time.monotonic() < deadline
            await asyncio.sleep(0.005)
        return "vetoed too late"

    async def main() -> None:
        failed = await run_tool_calls(handle.token, _tools(started)[:2], before_call=broken)
        assert [(outcome.status, outcome.error) for outcome in failed] == [
            ("failed", "before_call: RuntimeError: policy service down"),
            ("failed", "before_call: TypeError: before_call must return None or a str message, not int"),
        ]
        assert started == []
        cancelled = await run_tool_calls(handle.token, _tools(started)[2:], before_call=cancelling)
        assert [(outcome.status, outcome.error) for outcome in cancelled] == [
            ("not_started", "stop"),
            ("not_started", "stop"),
        ]
        assert started == []
        approval = asyncio.Event()

        async def ask_a_person(call: ToolCall) -> str | None:
            await approval.wait()  # nobody answers: the cancel must not wait for them
            return None

        second = tracked_session.start_subagent_task()
        batch = asyncio.ensure_future(
            run_tool_calls(second.token, _tools(started)[:2], before_call=ask_a_person)
        )
        await asyncio.sleep(0.05)
        tracked_session.cancel_subagent_task(second.task_id, reason="stop")
        waiting = await asyncio.wait_for(batch, 5)
        assert [outcome.status for outcome in waiting] == ["not_started", "not_started"]
        assert started == []
        second.complete()
        with pytest.raises(TypeError, match="before_call must be a callable or None, not str"):
            await run_tool_calls(handle.token, [], before_call="veto")  # type: ignore[arg-type]

    asyncio.run(main())
    handle.complete()


def test_plain_function_tools_run_in_a_thread_and_a_cancel_interrupts_them_at_once(session: Session) -> None:
    """§15: a synchronous tool runs in a worker thread (the loop keeps running); on cancel its outcome is
    interrupted at once, and the result the thread returns later is dropped."""
    handle = session.start_subagent_task("sync-tools")
    release = threading.Event()
    threads: list[str] = []

    def lookup() -> str:
        threads.append(threading.current_thread().name)
        return "found"

    def slow_download() -> str:
        release.wait(5)
        return "downloaded"

    calls = [
        ToolCall("call-lookup", "lookup", lookup),
        ToolCall("call-download", "download", slow_download),
        ToolCall("call-coroutine", "coroutine", lambda: asyncio.sleep(0, result="slept")),
    ]

    async def main() -> None:
        batch = asyncio.ensure_future(run_tool_calls(handle.token, calls, concurrent=True))
        await asyncio.sleep(0.1)
        began = time.monotonic()
        session.cancel_subagent_task("sync-tools", reason="stop")
        outcomes = await asyncio.wait_for(batch, 2)
        assert time.monotonic() - began < 0.5, "the cancel did not wait for the thread"
        assert [(outcome.status, outcome.result) for outcome in outcomes] == [
            ("completed", "found"),
            ("interrupted", None),
            ("completed", "slept"),
        ]
        # Let the abandoned thread finish, or the loop's shutdown would wait for it.
        release.set()

    try:
        asyncio.run(main())
    finally:
        release.set()
    assert threads and threads[0] != threading.main_thread().name


# --- spawn with escalation


def test_spawn_completes_with_the_functions_result(session: Session) -> None:
    async def main() -> None:
        async def work(handle: SubagentTaskHandle) -> str:
            handle.progress("thinking")
            return "answer"

        snapshot = await session.spawn_subagent_task(work, "a")
        assert snapshot.status is SubagentStatus.COMPLETED and snapshot.result == "answer"

        async def broken(handle: SubagentTaskHandle) -> None:
            raise KeyError("tool missing")

        snapshot = await session.spawn_subagent_task(broken, "b")
        assert snapshot.status is SubagentStatus.FAILED and "tool missing" in (snapshot.error or "")

    asyncio.run(main())


def test_spawn_stops_cooperatively_without_escalation(session: Session) -> None:
    async def main() -> None:
        async def cooperative(handle: SubagentTaskHandle) -> None:
            await handle.token.cancelled()
            handle.token.raise_if_cancelled()

        spawned = session.spawn_subagent_task(cooperative, "a", grace=5)
        await asyncio.sleep(0.01)
        session.cancel_subagent_task("a")
        snapshot = await asyncio.wait_for(spawned, 2)
        assert snapshot.status is SubagentStatus.CANCELLED and snapshot.finished
        assert not snapshot.escalated

    asyncio.run(main())


def test_spawn_escalates_after_the_grace_period(session: Session) -> None:
    async def main() -> None:
        async def stubborn(handle: SubagentTaskHandle) -> None:
            await asyncio.sleep(3600)  # never looks at its token

        spawned = session.spawn_subagent_task(stubborn, "a", grace=0.05)
        await asyncio.sleep(0.01)
        cancelled_at = time.perf_counter()
        session.cancel_subagent_task("a", reason="stop now")
        snapshot = await asyncio.wait_for(spawned, 2)
        assert time.perf_counter() - cancelled_at >= 0.05
        assert snapshot.status is SubagentStatus.CANCELLED and snapshot.finished
        assert snapshot.escalated and snapshot.cancel_reason == "stop now"

    asyncio.run(main())


def test_deadlines_passing_during_interpreter_exit_are_quiet() -> None:
    probe = """
import sys
from subagent_tracker import Session
session = Session()
handles = []
for index in range(200):
    handle = session.start_subagent_task(f"t{index}", timeout=0.001 * (index % 20))
    handle.token.on_cancel(lambda: None)
    handles.append(handle)
cycle = [handles]
cycle.append(cycle)  # keeps the handles alive into interpreter shutdown
"""
    for _ in range(3):
        finished = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
        assert finished.returncode == 0
        assert finished.stderr == "", finished.stderr
