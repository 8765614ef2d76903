"""CONTRACT §3: cascade, session cancel and close, and starts under cancelled parents."""

from __future__ import annotations

import pytest

from subagent_tracker import Session, SessionClosedError, SubagentStatus, UnknownTaskError


def test_cancel_cascades_to_running_descendants_only(session: Session) -> None:
    root = session.start_subagent_task("root")
    child = session.start_subagent_task("child", parent_id="root")
    grandchild = session.start_subagent_task("grandchild", parent_id="child")
    done = session.start_subagent_task("done", parent_id="child")
    done.complete()
    sibling = session.start_subagent_task("sibling", parent_id="root")

    assert session.cancel_subagent_task("child", reason="too slow") is True

    for handle in (child, grandchild):
        snapshot = handle.snapshot()
        assert snapshot.status is SubagentStatus.CANCELLED
        assert snapshot.cancel_reason == "too slow"
        assert snapshot.cancel_origin == "child"
        assert handle.token.is_cancelled
    assert done.snapshot().status is SubagentStatus.COMPLETED
    assert not done.token.is_cancelled
    assert root.snapshot().status is SubagentStatus.RUNNING
    assert sibling.snapshot().status is SubagentStatus.RUNNING


def test_the_default_reason_is_cancelled(session: Session) -> None:
    handle = session.start_subagent_task("a")
    session.cancel_subagent_task("a")
    assert handle.snapshot().cancel_reason == "cancelled"
    assert handle.token.reason == "cancelled"


def test_cancel_returns_false_for_unknown_finished_and_already_cancelled(session: Session) -> None:
    assert session.cancel_subagent_task("nobody") is False
    done = session.start_subagent_task("done")
    done.complete()
    assert session.cancel_subagent_task("done") is False
    cancelled = session.start_subagent_task("cancelled")
    assert session.cancel_subagent_task("cancelled") is True
    assert session.cancel_subagent_task("cancelled", reason="again") is False
    assert cancelled.snapshot().cancel_reason == "cancelled"


def test_a_deep_chain_cascades(session: Session) -> None:
    handles = [session.start_subagent_task("0")]
    for depth in range(1, 2_000):
        handles.append(session.start_subagent_task(str(depth), parent_id=str(depth - 1)))
    assert session.cancel_subagent_task("0") is True
    assert all(handle.token.is_cancelled for handle in handles)


def test_a_child_started_under_a_cancelled_parent_starts_cancelled(session: Session) -> None:
    parent = session.start_subagent_task("parent")
    session.cancel_subagent_task("parent", reason="shutting down")
    child = session.start_subagent_task("child", parent_id="parent")
    snapshot = child.snapshot()
    assert snapshot.status is SubagentStatus.CANCELLED
    assert snapshot.cancel_reason == "shutting down"
    assert snapshot.cancel_origin == "parent"
    assert child.token.is_cancelled
    assert [task.task_id for task in session.pending_subagent_tasks()] == []
    del parent


def test_a_finished_or_unknown_parent_raises(session: Session) -> None:
    parent = session.start_subagent_task("parent")
    parent.complete()
    with pytest.raises(UnknownTaskError, match="already finished"):
        session.start_subagent_task("child", parent_id="parent")
    with pytest.raises(UnknownTaskError, match="nobody"):
        session.start_subagent_task("child", parent_id="nobody")
    assert session.subagent_task("child") is None


def test_session_cancel_moves_every_running_task(session: Session) -> None:
    a = session.start_subagent_task("a")
    b = session.start_subagent_task("b", parent_id="a")
    c = session.start_subagent_task("c")
    c.complete()
    assert session.cancel(reason="session over") == 2
    assert a.token.is_cancelled and b.token.is_cancelled and not c.token.is_cancelled
    assert b.snapshot().cancel_reason == "session over"
    assert session.cancel() == 0
    assert not session.closed
    session.start_subagent_task("d").complete()


def test_close_cancels_and_refuses_new_starts(session: Session) -> None:
    a = session.start_subagent_task("a")
    assert session.close(reason="bye") == 1
    assert session.closed
    assert a.snapshot().cancel_reason == "bye"
    with pytest.raises(SessionClosedError):
        session.start_subagent_task("b")
    assert session.close() == 0


def test_session_as_context_manager_closes() -> None:
    with Session() as session:
        handle = session.start_subagent_task("a")
    assert session.closed
    assert handle.token.is_cancelled
