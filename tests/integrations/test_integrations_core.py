"""The framework-agnostic core of the integrations, ``subagent_tracker.integrations.tracked``: runs nest
through the current context, whichever framework each belongs to; each exit ends its task as the contract
says; and a cancel by id, by cascade, by deadline or from another session reaches the run. Every test runs
against the in-memory session and a Redis session."""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from subagent_tracker import (
    DEADLINE_REASON,
    DuplicateTaskError,
    Session,
    SubagentStatus,
    TaskCancelledError,
)
from subagent_tracker.integrations import RUN_STOPPED_REASON, current_task, tracked
from subagent_tracker.integrations._support import BlockingSession, StreamedText


@pytest.fixture
def session(tracked_session: BlockingSession) -> BlockingSession:
    return tracked_session


def _task(session: BlockingSession, task_id: str) -> Any:
    snapshot = session.subagent_task(task_id)
    assert snapshot is not None
    return snapshot


def test_a_normal_exit_completes_and_the_body_s_output_is_the_result(session: BlockingSession) -> None:
    async def run() -> None:
        async with tracked(session, agent="researcher", task_id="plain") as task:
            assert current_task() is task
        async with tracked(session, agent="researcher", task_id="answered") as task:
            task.complete("the answer")
        assert current_task() is None

    asyncio.run(run())
    plain, answered = _task(session, "plain"), _task(session, "answered")
    assert (plain.status, plain.agent, plain.finished) == (SubagentStatus.COMPLETED, "researcher", True)
    assert (answered.status, answered.result) == (SubagentStatus.COMPLETED, "the answer")


def test_an_exception_fails_the_task_and_goes_on(session: BlockingSession) -> None:
    async def run() -> None:
        async with tracked(session, agent="coder", task_id="broken"):
            raise RuntimeError("the tool broke")

    with pytest.raises(RuntimeError, match="the tool broke"):
        asyncio.run(run())
    broken = _task(session, "broken")
    assert broken.status is SubagentStatus.FAILED
    assert broken.error == "RuntimeError: the tool broke"


def test_nested_runs_are_children_and_a_cancel_by_id_cascades_while_siblings_go_on(
    session: BlockingSession,
) -> None:
    async def child(name: str, started: asyncio.Event) -> str:
        async with tracked(session, agent="researcher", task_id=name) as task:
            started.set()
            while not task.token.is_cancelled:
                await asyncio.sleep(0.01)
            # What the framework had streamed so far: a late end keeps it as the result.
            task.complete(f"{name}: partial")
            task.token.raise_if_cancelled()
        return f"{name}: done"

    async def orchestrate() -> list[object]:
        async with tracked(session, agent="orchestrator", task_id="root") as root:
            assert current_task() is root
            events = [asyncio.Event(), asyncio.Event()]
            runs = [asyncio.ensure_future(child(f"child-{index}", events[index])) for index in range(2)]
            for event in events:
                await event.wait()
            assert session.cancel_subagent_task("child-0", reason="stop this one")
            await asyncio.sleep(0.1)
            assert not runs[1].done(), "its sibling goes on"
            assert session.cancel_subagent_task("root", reason="stop everything")
            return list(await asyncio.gather(*runs, return_exceptions=True))

    outcomes = asyncio.run(orchestrate())
    assert all(isinstance(outcome, TaskCancelledError) for outcome in outcomes)
    first, second = _task(session, "child-0"), _task(session, "child-1")
    assert first.parent_id == second.parent_id == "root"
    assert (first.status, first.cancel_reason, first.result) == (
        SubagentStatus.CANCELLED,
        "stop this one",
        "child-0: partial",
    )
    assert (second.cancel_reason, second.cancel_cause) == ("stop everything", "parent")
    assert all(_task(session, task_id).finished for task_id in ("root", "child-0", "child-1"))
    assert session.pending_subagent_tasks() == []


def test_a_run_inside_another_session_s_run_is_linked_to_it(session: BlockingSession) -> None:
    elsewhere = Session()

    async def run() -> None:
        async with tracked(elsewhere, agent="orchestrator", task_id="outer"):
            async with tracked(session, agent="researcher", task_id="inner") as inner:
                assert elsewhere.cancel_subagent_task("outer", reason="from the other session")
                for _ in range(200):
                    if inner.token.is_cancelled:
                        break
                    await asyncio.sleep(0.01)
                inner.token.raise_if_cancelled()

    with pytest.raises(TaskCancelledError):
        asyncio.run(run())
    inner = _task(session, "inner")
    assert inner.parent_id is None, "a session holds only its own tasks"
    assert (inner.status, inner.cancel_reason, inner.cancel_cause) == (
        SubagentStatus.CANCELLED,
        "from the other session",
        "linked",
    )


def test_parent_can_be_named_or_refused_and_ids_can_come_from_a_callable(session: BlockingSession) -> None:
    ids = iter(["first", "second"])

    async def run() -> None:
        async with tracked(session, agent="orchestrator", task_id="root"):
            async with tracked(session, agent="a", task_id=lambda: next(ids), parent=None):
                async with tracked(session, agent="a", task_id=lambda: next(ids), parent="root"):
                    pass
            async with tracked(session, agent="a") as generated:
                other = generated.task_id
            async with tracked(session, agent="a") as generated:
                assert generated.task_id != other, "a generated id is unique per run"

    asyncio.run(run())
    assert _task(session, "first").parent_id is None, "parent=None: top-level, even inside a run"
    assert _task(session, "second").parent_id == "root", "a named parent, not the innermost run"


def test_a_deadline_cancels_the_run(session: BlockingSession) -> None:
    async def run() -> None:
        async with tracked(session, agent="slow", task_id="slow", timeout=0.2) as task:
            await task.token.cancelled()
            task.token.raise_if_cancelled()

    with pytest.raises(TaskCancelledError):
        asyncio.run(asyncio.wait_for(run(), timeout=10))
    slow = _task(session, "slow")
    assert (slow.status, slow.cancel_reason, slow.finished) == (
        SubagentStatus.CANCELLED,
        DEADLINE_REASON,
        True,
    )


def test_asyncio_cancellation_of_the_body_leaves_the_task_cancelled_and_finished(
    session: BlockingSession,
) -> None:
    async def body(started: asyncio.Event) -> None:
        async with tracked(session, agent="worker", task_id="interrupted"):
            started.set()
            await asyncio.sleep(60)

    async def run() -> None:
        started = asyncio.Event()
        running = asyncio.ensure_future(body(started))
        await started.wait()
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running

    asyncio.run(run())
    interrupted = _task(session, "interrupted")
    assert (interrupted.status, interrupted.finished) == (SubagentStatus.CANCELLED, True)


def test_concurrent_runs_each_see_their_own_current_run(session: BlockingSession) -> None:
    async def leaf(name: str) -> str | None:
        async with tracked(session, agent="leaf", task_id=name):
            await asyncio.sleep(0.01)
            inner = current_task()
            return None if inner is None else inner.task_id

    async def branch(name: str) -> list[str | None]:
        async with tracked(session, agent="branch", task_id=name):
            return list(await asyncio.gather(*(leaf(f"{name}-{index}") for index in range(3))))

    async def run() -> list[list[str | None]]:
        return list(await asyncio.gather(branch("a"), branch("b")))

    assert asyncio.run(run()) == [["a-0", "a-1", "a-2"], ["b-0", "b-1", "b-2"]]
    assert _task(session, "a-2").parent_id == "a"
    assert _task(session, "b-0").parent_id == "b"


def test_a_start_that_raises_leaves_the_current_run_as_it_was(session: BlockingSession) -> None:
    async def run() -> None:
        async with tracked(session, agent="orchestrator", task_id="root") as root:
            with pytest.raises(DuplicateTaskError):
                async with tracked(session, agent="a", task_id="root"):
                    pass
            assert current_task() is root

    asyncio.run(run())
    assert current_task() is None


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"session": object()}, "session must be"),
        ({"task_id": 7}, "task_id must be"),
        ({"parent": 7}, "parent must be"),
    ],
)
def test_bad_arguments_are_type_errors_at_once(arguments: dict[str, Any], message: str) -> None:
    call: dict[str, Any] = {"session": Session(), "agent": "a", **arguments}
    with pytest.raises(TypeError, match=message):
        tracked(**call)


def test_a_task_id_callable_that_returns_no_str_is_a_type_error() -> None:
    session = Session()

    async def run() -> None:
        async with tracked(session, agent="a", task_id=lambda: 7):  # type: ignore[arg-type,return-value]
            pass

    with pytest.raises(TypeError, match="must return a str"):
        asyncio.run(run())
    assert session.subagent_tasks() == []


def test_a_cancel_raised_from_another_token_keeps_that_token_s_reason(session: BlockingSession) -> None:
    sibling = session.start_subagent_task("sibling")
    assert session.cancel_subagent_task("sibling", reason="the sibling was stopped")

    async def run() -> None:
        with pytest.raises(TaskCancelledError):
            async with tracked(session, agent="a", task_id="raised-it", parent=None):
                sibling.token.raise_if_cancelled()  # a body may watch a token that is not its own

    asyncio.run(run())
    task = _task(session, "raised-it")
    assert (task.status, task.cancel_reason) == (SubagentStatus.CANCELLED, "the sibling was stopped")
    sibling.complete()


def test_an_asyncio_cancel_keeps_the_partial_output_and_a_failing_one_does_not_hide_the_cancel(
    session: BlockingSession, caplog: pytest.LogCaptureFixture
) -> None:
    async def body(task_id: str, partial_output: Any) -> None:
        async with tracked(session, agent="a", task_id=task_id, parent=None, partial_output=partial_output):
            await asyncio.sleep(30)

    async def cancelled(task_id: str, partial_output: Any) -> None:
        running = asyncio.ensure_future(body(task_id, partial_output))
        await asyncio.sleep(0.05)
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running

    asyncio.run(cancelled("kept", lambda: "what it had"))
    asyncio.run(cancelled("broken", lambda: 1 / 0))

    kept, broken = _task(session, "kept"), _task(session, "broken")
    assert (kept.status, kept.cancel_reason, kept.result) == (
        SubagentStatus.CANCELLED,
        RUN_STOPPED_REASON,
        "what it had",
    )
    assert (broken.status, broken.cancel_reason, broken.finished) == (
        SubagentStatus.CANCELLED,
        RUN_STOPPED_REASON,
        True,
    )
    assert "could not read the partial output of the cancelled run 'broken'" in caplog.text


def test_a_run_ended_elsewhere_is_nobody_s_parent(session: BlockingSession) -> None:
    async def generator_run() -> AsyncIterator[int]:
        async with tracked(session, agent="streamer", task_id="dropped", parent=None):
            for index in range(100):
                yield index
                await asyncio.sleep(0)

    async def run() -> str | None:
        async for _chunk in generator_run():
            break  # dropped, never closed: asyncio's finalizer ends the run, in a context of its own
        deadline = time.monotonic() + 10
        while not _task(session, "dropped").finished:
            assert time.monotonic() < deadline, "the dropped run did not end within 10 s"
            gc.collect()
            await asyncio.sleep(0.01)
        assert current_task() is None
        async with tracked(session, agent="next", task_id="next") as task:
            task.complete("ran")
        parent_id: str | None = _task(session, "next").parent_id
        return parent_id

    assert asyncio.run(run()) is None
    assert _task(session, "next").status == SubagentStatus.COMPLETED


def test_a_closed_streamed_text_keeps_what_it_had_when_it_answered() -> None:
    """A cancelled run whose call is answered before the run has stopped (the OpenAI Agents tool torn down by
    its delegating run): a chunk arriving after the answer must not make the run's result differ from it."""
    text = StreamedText()
    text.add("w0 ")
    text.add("w1")
    text.close()
    text.add(" w2")
    text.new_response()
    text.add("w3")
    assert text.text == "w0 w1"
