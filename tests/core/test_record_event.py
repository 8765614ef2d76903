"""Event-sourced ingestion (contract §5): ``session.record_event(event)`` feeds a session from another
runtime's stream of starts, progress reports and ends, which may come late, early or twice. On every store."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from subagent_tracker import SubagentStatus, UnknownTaskError
from subagent_tracker.integrations._support import BlockingSession


@pytest.fixture
def session(tracked_session: BlockingSession) -> BlockingSession:
    return tracked_session


def test_a_stream_of_events_runs_a_task_without_a_runner_here(session: BlockingSession) -> None:
    started = {"kind": "started", "task_id": "a", "agent": "coder", "metadata": {"user": "ana"}, "seq": 1}
    assert session.record_event(started)
    assert not session.record_event(started), "a repeat changes nothing"
    assert session.record_event({"kind": "progress", "task_id": "a", "message": "half way", "data": {"n": 1}})
    assert session.record_event({"kind": "ended", "task_id": "a", "success": True, "result": {"answer": 42}})
    assert not session.record_event({"kind": "ended", "task_id": "a", "success": False, "error": "late"})
    task = session.subagent_task("a")
    assert task is not None
    assert (task.status, task.finished, task.agent, task.progress) == (
        SubagentStatus.COMPLETED,
        True,
        "coder",
        "half way",
    )
    assert task.result == {"answer": 42} and dict(task.metadata or {}) == {"user": "ana"}
    assert [entry.message for entry in task.progress_log] == ["half way"]
    assert not session.record_event(started), "a late start of a finished task is a repeat"


def test_an_end_before_its_start_records_the_finished_task(session: BlockingSession) -> None:
    failed = {"kind": "ended", "task_id": "b", "success": False, "error": "boom", "error_type": "ToolError"}
    assert session.record_event(failed)
    task = session.subagent_task("b")
    assert task is not None
    assert (task.status, task.error, task.error_type) == (SubagentStatus.FAILED, "boom", "ToolError")
    assert not session.record_event({"kind": "started", "task_id": "b"})
    assert not session.record_event({"kind": "progress", "task_id": "b", "message": "late"})
    assert session.record_event({"kind": "ended", "task_id": "c", "success": False})
    task = session.subagent_task("c")
    assert task is not None and task.error == "the task failed (its event gave no error)"


def test_other_kinds_are_ignored(session: BlockingSession) -> None:
    assert not session.record_event({"kind": "heartbeat", "task_id": "a"})
    assert not session.record_event({"kind": "tool_call", "task_id": 5})
    assert session.subagent_tasks() == []


def test_children_recorded_by_events_are_cancelled_with_their_parent(session: BlockingSession) -> None:
    assert session.record_event({"kind": "started", "task_id": "root", "metadata": {"user": "ana"}})
    assert session.record_event({"kind": "started", "task_id": "child", "parent_id": "root"})
    assert session.cancel_subagent_task("root", "user pressed stop")
    child = session.subagent_task("child")
    assert child is not None and child.status is SubagentStatus.CANCELLED
    assert dict(child.metadata or {}) == {"user": "ana"}, "a recorded child inherits its parent's metadata"
    assert not session.record_event({"kind": "ended", "task_id": "child", "success": True})
    child = session.subagent_task("child")
    assert child is not None and (child.status, child.finished) == (SubagentStatus.CANCELLED, True)
    with pytest.raises(UnknownTaskError):
        session.record_event({"kind": "started", "task_id": "orphan", "parent_id": "nobody"})


def _deliver_at_once(session: BlockingSession, task_id: str, value: int) -> list[bool]:
    """Two copies of an ``ended`` event, its ``started`` and a cancel, from four threads at once; returns what
    the deliveries returned."""
    start = threading.Barrier(4)
    changed: list[bool] = []

    def deliver(event: dict[str, Any]) -> None:
        start.wait(timeout=5)
        changed.append(session.record_event(event))

    def cancel() -> None:
        start.wait(timeout=5)
        session.cancel_subagent_task(task_id)

    ended = {"kind": "ended", "task_id": task_id, "success": True, "result": value}
    threads = [threading.Thread(target=deliver, args=(ended,)) for _ in range(2)]
    threads.append(threading.Thread(target=deliver, args=({"kind": "started", "task_id": task_id},)))
    threads.append(threading.Thread(target=cancel))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    return changed


def test_duplicate_events_racing_from_threads_change_the_session_once(session: BlockingSession) -> None:
    for round_number in range(10):
        task_id = f"race-{round_number}"
        changed = _deliver_at_once(session, task_id, round_number)
        task = session.subagent_task(task_id)
        assert task is not None and task.finished
        assert task.status in (SubagentStatus.COMPLETED, SubagentStatus.CANCELLED)
        assert changed.count(True) <= 2, "at most one start and one end took effect"


@pytest.mark.parametrize(
    ("event", "error", "match"),
    [
        ("started", TypeError, "event must be a mapping"),
        ({"task_id": "a"}, TypeError, "must have a 'kind'"),
        ({"kind": 1, "task_id": "a"}, TypeError, "'kind' must be a str"),
        ({"kind": "started"}, TypeError, "must have a 'task_id'"),
        ({"kind": "started", "task_id": ""}, ValueError, "task_id"),
        ({"kind": "started", "task_id": "a", "agent": 5}, TypeError, "agent must be a str"),
        ({"kind": "started", "task_id": "a", "metadata": [1]}, TypeError, "metadata must be a mapping"),
        ({"kind": "ended", "task_id": "a", "success": "yes"}, TypeError, "bool"),
    ],
)
def test_a_bad_event_is_refused_and_changes_nothing(
    session: BlockingSession, event: Any, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        session.record_event(event)
    assert session.subagent_tasks() == []
