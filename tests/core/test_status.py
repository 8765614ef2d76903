"""CONTRACT §2: statuses, sticky terminal states and late ends."""

from __future__ import annotations

import enum
import threading
import warnings

import pytest

import subagent_tracker._native
import subagent_tracker._status
from subagent_tracker import Session, SubagentStatus


def test_status_is_an_enum_with_lowercase_values() -> None:
    assert issubclass(SubagentStatus, enum.Enum)
    assert [member.name for member in SubagentStatus] == [
        "QUEUED",
        "RUNNING",
        "PAUSED",
        "COMPLETED",
        "FAILED",
        "CANCELLED",
    ]
    assert [member.value for member in SubagentStatus] == [
        "queued",
        "running",
        "paused",
        "completed",
        "failed",
        "cancelled",
    ]
    assert SubagentStatus["CANCELLED"] is SubagentStatus("cancelled") is SubagentStatus.CANCELLED


def test_pending_and_terminal_are_the_cores_rule_and_split_the_statuses() -> None:
    pending = [status.value for status in SubagentStatus if status.is_pending]
    terminal = [status.value for status in SubagentStatus if status.is_terminal]
    assert pending == ["queued", "running", "paused"]
    assert terminal == ["completed", "failed", "cancelled"]
    # Python holds no copy of the rule: it asks the core.
    assert tuple(pending) == subagent_tracker._native._PENDING_STATUSES


def test_is_pending_reads_the_cores_rule_rather_than_a_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(subagent_tracker._status, "_PENDING_STATUSES", ("queued",))
    assert SubagentStatus.QUEUED.is_pending
    assert not SubagentStatus.RUNNING.is_pending


def test_a_task_runs_then_completes_with_its_result(session: Session) -> None:
    handle = session.start_subagent_task("a")
    snapshot = session.subagent_task("a")
    assert snapshot is not None and snapshot.status is SubagentStatus.RUNNING and not snapshot.finished
    assert handle.complete({"answer": 42}) is True
    snapshot = session.subagent_task("a")
    assert snapshot is not None
    assert snapshot.status is SubagentStatus.COMPLETED
    assert snapshot.finished
    assert snapshot.result == {"answer": 42}
    assert snapshot.ended_at is not None and snapshot.ended_at >= snapshot.started_at


def test_terminal_statuses_are_sticky(session: Session) -> None:
    handle = session.start_subagent_task("a")
    assert handle.fail("boom") is True
    assert handle.complete() is False
    assert session.cancel_subagent_task("a") is False
    snapshot = handle.snapshot()
    assert snapshot.status is SubagentStatus.FAILED
    assert snapshot.error == "boom"
    assert not handle.token.is_cancelled


def test_a_late_end_never_downgrades_cancelled_and_is_kept(session: Session) -> None:
    handle = session.start_subagent_task("a")
    assert session.cancel_subagent_task("a", reason="user pressed stop") is True
    snapshot = handle.snapshot()
    assert snapshot.status is SubagentStatus.CANCELLED
    assert not snapshot.finished, "cancel requested is not runner stopped"
    assert snapshot.cancel_reason == "user pressed stop"
    assert snapshot.cancelled_at is not None
    assert handle.complete("partial answer") is False
    snapshot = handle.snapshot()
    assert snapshot.status is SubagentStatus.CANCELLED
    assert snapshot.finished
    assert snapshot.result == "partial answer"


def test_a_late_failure_is_kept_too(session: Session) -> None:
    handle = session.start_subagent_task("a")
    session.cancel_subagent_task("a")
    assert handle.fail(RuntimeError("lost connection")) is False
    snapshot = handle.snapshot()
    assert snapshot.status is SubagentStatus.CANCELLED
    assert snapshot.error == "RuntimeError: lost connection"


def test_a_dropped_handle_fails_its_running_task_and_warns(session: Session) -> None:
    """§2: nothing stays running with no runner; dropping the handle warns as an unclosed file does."""
    with pytest.warns(ResourceWarning, match='"orphan" of session "test-session" was never ended'):
        session.start_subagent_task("orphan")  # handle discarded at once
    snapshot = session.subagent_task("orphan")
    assert snapshot is not None
    assert snapshot.status is SubagentStatus.FAILED
    assert snapshot.finished
    assert snapshot.error is not None and "dropped its handle" in snapshot.error
    assert "error='the runner dropped its handle" in repr(snapshot)


def test_a_handle_dropped_after_its_cancel_finishes_the_task_and_warns(session: Session) -> None:
    handle = session.start_subagent_task("stopped")
    session.cancel_subagent_task("stopped")
    with pytest.warns(ResourceWarning, match="while the task was cancelled"):
        del handle
    snapshot = session.subagent_task("stopped")
    assert snapshot is not None and (snapshot.status, snapshot.finished) == (SubagentStatus.CANCELLED, True)


def test_a_handle_that_ended_its_task_drops_silently(session: Session) -> None:
    handle = session.start_subagent_task("done")
    handle.complete()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        del handle


def test_snapshot_fields_are_what_start_recorded(session: Session) -> None:
    session_handle = session.start_subagent_task("p")
    handle = session.start_subagent_task(
        "c", parent_id="p", agent="coder", description="write tests", metadata={"k": [1]}
    )
    snapshot = handle.snapshot()
    assert (snapshot.task_id, snapshot.session_id, snapshot.parent_id) == ("c", "test-session", "p")
    assert (snapshot.agent, snapshot.description) == ("coder", "write tests")
    assert dict(snapshot.metadata or {}) == {"k": (1,)}  # nested values are frozen: lists become tuples
    assert snapshot.cancelled_at is None and snapshot.ended_at is None
    assert snapshot.cancel_reason is None and snapshot.cancel_origin is None
    assert snapshot.progress is None and snapshot.progress_count == 0
    assert snapshot.result is None and snapshot.error is None
    assert handle.task_id == "c" and handle.session_id == "test-session"
    session_handle.complete()


def test_snapshots_are_immutable(session: Session) -> None:
    metadata = {"k": 1}
    handle = session.start_subagent_task("a", metadata=metadata)
    metadata["k"] = 2
    snapshot = handle.snapshot()
    assert snapshot.metadata is not None and snapshot.metadata["k"] == 1
    try:
        snapshot.metadata["k"] = 3  # type: ignore[index]
    except TypeError:
        pass
    else:
        raise AssertionError("metadata must be read-only")
    try:
        snapshot.status = SubagentStatus.FAILED  # type: ignore[misc]
    except AttributeError:
        pass
    else:
        raise AssertionError("snapshots must be immutable")


def test_an_end_recorded_by_id_follows_the_first_transition_rule(session: Session) -> None:
    """§2: ending by id (a tracker fed by start and end events) obeys the same rule as the handle."""
    completed = session.start_subagent_task("done")
    assert session.end_subagent_task("done", result={"answer": 42})
    assert not completed.complete(), "the runner finds its task finished"
    snapshot = session.subagent_task("done")
    assert snapshot is not None and (snapshot.status, snapshot.result) == (
        SubagentStatus.COMPLETED,
        {"answer": 42},
    )

    failing = session.start_subagent_task("broken")
    assert session.end_subagent_task("broken", error=RuntimeError("tool crashed"))
    assert failing.snapshot().error == "RuntimeError: tool crashed"

    cancelled = session.start_subagent_task("stopped")
    session.cancel_subagent_task("stopped")
    assert not session.end_subagent_task("stopped", result="late")
    late = cancelled.snapshot()
    assert (late.status, late.finished, late.result) == (SubagentStatus.CANCELLED, True, "late")

    assert not session.end_subagent_task("nobody")
    with pytest.raises(ValueError, match="not both"):
        session.end_subagent_task("done", result=1, error="x")


def test_ends_by_id_race_cancels_with_exactly_one_winner(session: Session) -> None:
    """§2: of an end by id and a cancel racing from two threads, exactly one wins."""
    for index in range(200):
        task_id = f"race-{index}"
        handle = session.start_subagent_task(task_id)
        outcome: list[bool] = []

        def cancel(task_id: str = task_id, outcome: list[bool] = outcome) -> None:
            outcome.append(session.cancel_subagent_task(task_id))

        canceller = threading.Thread(target=cancel)
        canceller.start()
        ended = session.end_subagent_task(task_id)
        canceller.join()
        assert ended ^ outcome[0]
        expected = SubagentStatus.COMPLETED if ended else SubagentStatus.CANCELLED
        assert handle.snapshot().status == expected
