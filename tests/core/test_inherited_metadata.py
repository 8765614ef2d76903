"""Inherited metadata (contract §5): a child that is not detached starts with its parent's metadata, updated
with its own; on Redis the merge happens in the start's own server call, and keeps every value exactly."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from redis_support import RedisServer

from subagent_tracker import RedisRegistry, SubagentStatus
from subagent_tracker.integrations._support import BlockingSession


@pytest.fixture
def session(tracked_session: BlockingSession) -> BlockingSession:
    return tracked_session


def _metadata(session: BlockingSession, task_id: str) -> Any:
    task = session.subagent_task(task_id)
    assert task is not None
    return None if task.metadata is None else json.loads(json.dumps(dict(task.metadata), default=list))


def test_a_child_starts_with_its_parent_s_metadata_updated_with_its_own(session: BlockingSession) -> None:
    handles = [
        session.start_subagent_task("root", metadata={"user": "ana", "team": "search", "trace": "t-1"}),
        session.start_subagent_task("child", parent_id="root", metadata={"team": "coding", "step": 1}),
        session.start_subagent_task("grandchild", parent_id="child"),
        session.start_subagent_task("loner", parent_id="root", detached=True, metadata={"step": 9}),
        session.start_subagent_task("bare", parent_id="root", detached=True),
    ]
    expected = {"user": "ana", "team": "coding", "trace": "t-1", "step": 1}
    assert _metadata(session, "child") == expected
    assert list(_metadata(session, "child")) == ["user", "team", "trace", "step"], "the parent's keys first"
    assert _metadata(session, "grandchild") == expected, "a child without metadata takes its parent's"
    assert _metadata(session, "loner") == {"step": 9}, "a detached child keeps its own"
    assert _metadata(session, "bare") is None
    assert _metadata(session, "root") == {"user": "ana", "team": "search", "trace": "t-1"}, (
        "the parent unchanged"
    )
    for handle in handles:
        handle.complete()


def test_cancel_by_metadata_reaches_the_children_that_inherited_it(session: BlockingSession) -> None:
    root = session.start_subagent_task("root", metadata={"user": "ana"})
    child = session.start_subagent_task("child", parent_id="root", detached=True, metadata={"user": "bob"})
    grandchild = session.start_subagent_task("grandchild", parent_id="child")
    assert session.cancel_subagent_tasks(metadata={"user": "bob"}) == ["child", "grandchild"]
    task = session.subagent_task("grandchild")
    assert task is not None and task.status is SubagentStatus.CANCELLED
    for handle in (root, child, grandchild):
        with handle:
            pass


def test_a_child_started_under_a_cancelled_parent_starts_cancelled_with_the_merged_metadata(
    session: BlockingSession,
) -> None:
    root = session.start_subagent_task("root", metadata={"user": "ana"})
    assert session.cancel_subagent_task("root", "stop")
    child = session.start_subagent_task("child", parent_id="root", metadata={"step": 2})
    assert child.token.is_cancelled
    assert _metadata(session, "child") == {"user": "ana", "step": 2}
    for handle in (root, child):
        with handle:
            pass


def test_a_batch_child_inherits_from_a_parent_started_in_the_same_batch(session: BlockingSession) -> None:
    handles = session.start_subagent_tasks(
        [
            {"task_id": "root", "metadata": {"user": "ana"}},
            {"task_id": "child", "parent_id": "root", "metadata": {"step": 1}},
        ]
    )
    assert _metadata(session, "child") == {"user": "ana", "step": 1}
    reserved = session.reserve_subagent_task("queued", parent_id="root", metadata={"step": 2})
    assert _metadata(session, reserved) == {"user": "ana", "step": 2}
    session.cancel_subagent_task("queued")
    for handle in handles:
        handle.complete()


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=8,
)
json_objects = st.dictionaries(st.text(max_size=6), json_values, max_size=4)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parent=json_objects, own=json_objects)
def test_redis_merges_any_json_objects_exactly_as_python_does(
    module_redis_server: RedisServer, parent: dict[str, Any], own: dict[str, Any]
) -> None:
    """Keys with quotes, braces and escapes, numbers beyond 2^53, floats, empty lists and nesting: the merged
    text decodes to Python's own merge, value for value."""
    session = RedisRegistry(module_redis_server.url).session("inherit-fidelity", max_finished_tasks=0)
    root = session.start_subagent_task(metadata=parent)
    child = session.start_subagent_task(parent_id=root.task_id, metadata=own)
    task = session.subagent_task(child.task_id)
    assert task is not None
    thawed = json.loads(json.dumps(task.metadata, default=_thaw))
    assert thawed == json.loads(json.dumps({**parent, **own}))
    assert list(thawed) == list({**parent, **own})
    child.complete()
    root.complete()


def _thaw(value: Any) -> Any:
    return dict(value) if hasattr(value, "keys") else list(value)


def test_children_started_while_their_parent_is_cancelled_keep_the_merged_metadata(
    session: BlockingSession,
) -> None:
    """Starts racing a cancel of their parent: each child is cancelled (reached by the cascade, or started
    cancelled), and each holds the parent's metadata merged with its own either way."""
    import threading

    root = session.start_subagent_task("root", metadata={"user": "ana"})
    start = threading.Barrier(2)
    children: list[Any] = []

    def start_children() -> None:
        start.wait(timeout=5)
        for index in range(20):
            children.append(session.start_subagent_task(f"c{index}", parent_id="root", metadata={"n": index}))

    starter = threading.Thread(target=start_children)
    starter.start()
    start.wait(timeout=5)
    assert session.cancel_subagent_task("root", "stop")
    starter.join(timeout=10)
    for index, child in enumerate(children):
        assert child.token.is_cancelled or child.token.wait(5)
        assert _metadata(session, f"c{index}") == {"user": "ana", "n": index}
        with child:
            pass
    with root:
        pass
