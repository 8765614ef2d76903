"""CONTRACT §7: finished tasks are retained within a bound; unfinished tasks never are evicted."""

from __future__ import annotations

import threading

import pytest

from subagent_tracker import (
    DEFAULT_MAX_FINISHED_TASKS,
    DuplicateTaskError,
    Session,
    SubagentStatus,
    SubagentTask,
)


def test_the_default_bound_is_sensible() -> None:
    assert Session().max_finished_tasks == DEFAULT_MAX_FINISHED_TASKS == 10_000


def test_the_oldest_finished_are_evicted_first_and_unfinished_never() -> None:
    session = Session(max_finished_tasks=3)
    long_running = session.start_subagent_task("long")
    cancelled = session.start_subagent_task("cancelled-unfinished")
    session.cancel_subagent_task("cancelled-unfinished")
    for index in range(10):
        session.start_subagent_task(f"f{index}").complete()
    assert [task.task_id for task in session.subagent_tasks()] == [
        "long",
        "cancelled-unfinished",
        "f7",
        "f8",
        "f9",
    ]
    del long_running, cancelled


def test_a_large_session_evicts_the_oldest_first_and_keeps_the_unfinished() -> None:
    # With 40,000 runs retained, the id map of a machine of up to 8 cores (32 shards) is large enough that
    # each end fetches the next eviction's memory ahead, and each start its id's place: the order and the
    # bound are the same as in a small session.
    retained = 40_000
    session = Session(max_finished_tasks=retained)
    long_running = session.start_subagent_task("long")
    start = session.start_subagent_task
    for index in range(2 * retained):
        start(f"f{index}").complete()
    assert session.subagent_task("f39999") is None
    assert session.subagent_task("long") is not None
    assert [task.task_id for task in session.subagent_tasks()] == ["long"] + [
        f"f{index}" for index in range(retained, 2 * retained)
    ]
    long_running.complete()


def test_retention_stays_bounded_under_churn_from_threads() -> None:
    session = Session(max_finished_tasks=500)

    def churn(prefix: str) -> None:
        for index in range(20_000):
            handle = session.start_subagent_task(f"{prefix}{index % 2_000}")
            if index % 5 == 0:
                session.cancel_subagent_task(handle.task_id)
            handle.complete()

    threads = [threading.Thread(target=churn, args=(prefix,)) for prefix in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(session.subagent_tasks()) <= 500
    assert session.pending_subagent_tasks() == []


# A finished task is kept as a compact record once its end is recorded; it must answer as the live task did.

SNAPSHOT_FIELDS = [
    "task_id",
    "session_id",
    "parent_id",
    "agent",
    "description",
    "metadata",
    "status",
    "finished",
    "started_at",
    "worker",
    "queued_at",
    "claimed_at",
    "cancelled_at",
    "ended_at",
    "cancel_reason",
    "cancel_origin",
    "cancel_cause",
    "deadline",
    "detached",
    "escalated",
    "progress",
    "progress_count",
    "result",
    "error",
]


def fields(task: SubagentTask | None) -> dict[str, object]:
    assert task is not None
    return {name: getattr(task, name) for name in SNAPSHOT_FIELDS}


def test_a_finished_tasks_record_shows_what_its_handle_shows() -> None:
    session = Session()
    parent = session.start_subagent_task("parent")
    handles = []
    plain = session.start_subagent_task("plain")
    plain.complete()
    handles.append(plain)
    full = session.start_subagent_task(
        "full",
        parent_id="parent",
        agent="researcher",
        description="find papers",
        metadata={"user": "u1"},
        timeout=60,
    )
    full.progress("half way")
    full.complete({"answer": 42})
    handles.append(full)
    failed = session.start_subagent_task("failed")
    failed.fail(ValueError("boom"))
    handles.append(failed)
    cancelled = session.start_subagent_task("cancelled", parent_id="parent")
    session.cancel_subagent_task("parent", "stop")
    cancelled.complete("late")
    handles.append(cancelled)
    session.reserve_subagent_task("reserved")
    claimed = session.claim_subagent_task("reserved")
    claimed.complete()
    handles.append(claimed)
    for handle in handles:
        assert fields(session.subagent_task(handle.task_id)) == fields(handle.snapshot()), handle.task_id
    record = session.subagent_task("full")
    assert record is not None
    assert record.metadata == {"user": "u1"}
    assert record.result == {"answer": 42}
    assert record.progress == "half way"
    cancelled_record = session.subagent_task("cancelled")
    assert cancelled_record is not None
    assert (cancelled_record.status, cancelled_record.cancel_origin) == (SubagentStatus.CANCELLED, "parent")
    assert cancelled_record.result == "late"
    del parent


def test_an_escalation_recorded_after_the_end_reaches_the_sessions_record() -> None:
    session = Session()
    handle = session.start_subagent_task("a")
    session.cancel_subagent_task("a")
    handle.complete()
    handle.record_escalation()
    record = session.subagent_task("a")
    assert record is not None and record.escalated
    assert fields(record) == fields(handle.snapshot())


def test_a_reservation_cancelled_before_its_claim_is_still_claimed_once() -> None:
    session = Session(max_finished_tasks=100)
    session.reserve_subagent_task("a")
    assert session.cancel_subagent_task("a", "not needed")
    for index in range(5):
        session.start_subagent_task(f"other-{index}").complete()
    handle = session.claim_subagent_task("a")
    assert handle.token.is_cancelled
    record = session.subagent_task("a")
    assert record is not None and record.claimed_at is not None
    with pytest.raises(DuplicateTaskError, match="claimed"):
        session.claim_subagent_task("a")


def test_restarts_racing_the_end_they_replace_keep_the_bound_exact() -> None:
    session = Session(max_finished_tasks=3)

    def churn(offset: int) -> None:
        for index in range(5_000):
            try:
                handle = session.start_subagent_task(f"id-{(index + offset) % 4}")
            except DuplicateTaskError:
                continue
            if index % 3 == 0:
                session.cancel_subagent_task(handle.task_id)
            handle.complete()

    threads = [threading.Thread(target=churn, args=(offset,)) for offset in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(session.subagent_tasks()) <= 3
    for index in range(4):
        session.start_subagent_task(f"after-{index}").complete()
    assert [task.task_id for task in session.subagent_tasks()] == ["after-1", "after-2", "after-3"]
