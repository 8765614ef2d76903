"""Task groups (contract §3): ``start_subagent_task(..., structured=True)`` makes a task behave as an anyio
task group. A failing attached child cancels it (cause ``"child_failed"``, the child as origin), and so its
other children; its own end, by completing or failing, cancels its pending children. The default stays as
before: a failure is the child's own. In memory and on Redis."""

from __future__ import annotations

import threading
import time

import pytest

from subagent_tracker import (
    CHILD_FAILED_REASON,
    GROUP_ENDED_REASON,
    SubagentStatus,
    SubagentTaskHandle,
    TaskHandleProtocol,
)
from subagent_tracker.integrations._support import BlockingSession


@pytest.fixture
def session(tracked_session: BlockingSession) -> BlockingSession:
    return tracked_session


def _snapshot_of(session: BlockingSession, task_id: str) -> tuple[SubagentStatus, str | None, str | None]:
    snapshot = session.subagent_task(task_id)
    assert snapshot is not None, task_id
    return snapshot.status, snapshot.cancel_cause, snapshot.cancel_origin


def _fired(handle: TaskHandleProtocol) -> bool:
    """Whether the runner's token fires within 5 s (on Redis a notification later)."""
    return handle.token.wait(5)


def test_a_failing_child_cancels_its_group_and_so_its_siblings(session: BlockingSession) -> None:
    group = session.start_subagent_task("plan", structured=True)
    failing = session.start_subagent_task("search", parent_id="plan")
    sibling = session.start_subagent_task("fetch", parent_id="plan")
    detached = session.start_subagent_task("audit", parent_id="plan", detached=True)
    session.reserve_subagent_task("queued", parent_id="plan")
    failing.fail(ValueError("rate limited"))
    assert _snapshot_of(session, "plan") == (SubagentStatus.CANCELLED, "child_failed", "search")
    snapshot = session.subagent_task("plan")
    assert snapshot is not None and snapshot.cancel_reason == CHILD_FAILED_REASON
    assert _snapshot_of(session, "fetch") == (SubagentStatus.CANCELLED, "parent", "search")
    assert _snapshot_of(session, "queued") == (SubagentStatus.CANCELLED, "parent", "search")
    assert _snapshot_of(session, "audit") == (SubagentStatus.RUNNING, None, None)
    assert _fired(group) and _fired(sibling)
    assert not detached.token.is_cancelled
    for handle in (group, sibling, detached):
        handle.complete()


def test_without_structured_a_failure_is_the_child_s_own(session: BlockingSession) -> None:
    parent = session.start_subagent_task("plan")
    session.start_subagent_task("search", parent_id="plan").fail("boom")
    sibling = session.start_subagent_task("fetch", parent_id="plan")
    assert _snapshot_of(session, "plan") == (SubagentStatus.RUNNING, None, None)
    assert sibling.complete() and parent.complete()


@pytest.mark.parametrize("ends", ["completes", "fails", "fails by id"])
def test_a_group_s_end_cancels_its_pending_children_and_their_descendants(
    session: BlockingSession, ends: str
) -> None:
    group = session.start_subagent_task("write", structured=True)
    running = session.start_subagent_task("draft", parent_id="write")
    grandchild = session.start_subagent_task("cite", parent_id="draft")
    session.reserve_subagent_task("queued", parent_id="write")
    with session.start_subagent_task("done", parent_id="write"):
        pass
    if ends == "completes":
        assert group.complete("ok")
    elif ends == "fails":
        assert group.fail("gave up")
    else:
        assert session.end_subagent_task("write", error="the worker pool is gone")
    for task_id in ("draft", "cite", "queued"):
        assert _snapshot_of(session, task_id) == (SubagentStatus.CANCELLED, "parent", "write"), task_id
        snapshot = session.subagent_task(task_id)
        assert snapshot is not None and snapshot.cancel_reason == GROUP_ENDED_REASON
    assert _snapshot_of(session, "done")[0] is SubagentStatus.COMPLETED
    assert _fired(running) and _fired(grandchild)
    running.complete()
    grandchild.complete()
    group.complete()


def test_a_group_cancelled_first_keeps_its_first_cause(session: BlockingSession) -> None:
    group = session.start_subagent_task("plan", structured=True)
    child = session.start_subagent_task("search", parent_id="plan")
    assert session.cancel_subagent_task("plan", "user pressed stop")
    assert _fired(child)
    assert not child.fail("late")
    snapshot = session.subagent_task("plan")
    assert snapshot is not None
    assert (snapshot.cancel_cause, snapshot.cancel_reason) == ("requested", "user pressed stop")
    group.complete()


def test_structured_is_a_bool_in_starts_reservations_and_batches(session: BlockingSession) -> None:
    with pytest.raises(TypeError):
        session.start_subagent_task("a", structured="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        session.start_subagent_tasks([{"task_id": "a", "structured": "yes"}])
    assert session.subagent_task("a") is None, "a refused start leaves nothing behind"
    [group] = session.start_subagent_tasks([{"task_id": "batch-group", "structured": True}])
    session.reserve_subagent_task("reserved-group", structured=True)
    session.reserve_subagent_task("reserved-child", parent_id="reserved-group")
    session.start_subagent_task("failing", parent_id="batch-group").fail("boom")
    assert _snapshot_of(session, "batch-group")[1] == "child_failed"
    session.end_subagent_task("reserved-child", error="no runner")
    assert _snapshot_of(session, "reserved-group") == (
        SubagentStatus.CANCELLED,
        "child_failed",
        "reserved-child",
    )
    group.complete()


def test_of_children_failing_at_once_exactly_one_cancels_the_group(session: BlockingSession) -> None:
    for round_number in range(5):
        group_id = f"group-{round_number}"
        group = session.start_subagent_task(group_id, structured=True)
        children = [
            session.start_subagent_task(f"{group_id}-c{index}", parent_id=group_id) for index in range(8)
        ]
        barrier = threading.Barrier(len(children))
        failed: dict[str, bool] = {}

        def fail(handle: SubagentTaskHandle, barrier: threading.Barrier, failed: dict[str, bool]) -> None:
            barrier.wait()
            failed[handle.task_id] = handle.fail("boom")

        threads = [threading.Thread(target=fail, args=(child, barrier, failed)) for child in children]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        status, cause, origin = _snapshot_of(session, group_id)
        assert (status, cause) == (SubagentStatus.CANCELLED, "child_failed")
        assert origin is not None and failed[origin], "the origin is a child whose failure won"
        for child in children:
            expected = SubagentStatus.FAILED if failed[child.task_id] else SubagentStatus.CANCELLED
            assert _snapshot_of(session, child.task_id)[0] is expected
        deadline = time.monotonic() + 5
        while not group.token.is_cancelled:
            assert time.monotonic() < deadline
            time.sleep(0.005)
        group.complete()


def test_a_failing_group_s_children_end_by_its_end_then_its_parent_is_cancelled(
    session: BlockingSession,
) -> None:
    """Nested groups: a group that fails cancels its own pending children first (reason
    ``GROUP_ENDED_REASON``), then the group it belongs to (cause ``"child_failed"``), alike on both stores."""
    outer = session.start_subagent_task("outer", structured=True)
    inner = session.start_subagent_task("inner", parent_id="outer", structured=True)
    leaf = session.start_subagent_task("leaf", parent_id="inner")
    sibling = session.start_subagent_task("sibling", parent_id="outer")
    inner.fail("gave up")
    leaf_snapshot = session.subagent_task("leaf")
    assert leaf_snapshot is not None
    assert (leaf_snapshot.cancel_cause, leaf_snapshot.cancel_origin, leaf_snapshot.cancel_reason) == (
        "parent",
        "inner",
        GROUP_ENDED_REASON,
    )
    assert _snapshot_of(session, "outer") == (SubagentStatus.CANCELLED, "child_failed", "inner")
    assert _snapshot_of(session, "sibling") == (SubagentStatus.CANCELLED, "parent", "inner")
    for handle in (outer, leaf, sibling):
        handle.complete()


def test_a_claim_timeout_is_a_failure_that_cancels_the_group(session: BlockingSession) -> None:
    group = session.start_subagent_task("plan", structured=True)
    session.reserve_subagent_task("unclaimed", parent_id="plan", claim_timeout=0.05)
    assert _fired(group)
    assert _snapshot_of(session, "plan") == (SubagentStatus.CANCELLED, "child_failed", "unclaimed")
    group.complete()
