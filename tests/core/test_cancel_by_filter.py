"""Cancel by filter (contract §3): ``session.cancel_subagent_tasks(*, agent, status, metadata, reason)``
cancels the pending tasks that match every filter given, each with its pending descendants, and returns the
ids of the matching tasks it moved, in start order; in memory and on Redis. Of racing cancels, each task is
reported by exactly one."""

from __future__ import annotations

import asyncio
import itertools
import threading
from typing import Any

import pytest
from redis_support import RedisServer

from subagent_tracker import AsyncRedisRegistry, AwaitableSession, RedisRegistry, Session, SubagentStatus
from subagent_tracker.integrations._support import BlockingSession

_IDS = itertools.count()


@pytest.fixture
def session(tracked_session: BlockingSession) -> BlockingSession:
    return tracked_session


def _status(session: BlockingSession, task_id: str) -> SubagentStatus:
    snapshot = session.subagent_task(task_id)
    assert snapshot is not None, task_id
    return snapshot.status


def test_every_filter_given_must_match_and_the_ids_come_in_start_order(session: BlockingSession) -> None:
    coder = session.start_subagent_task("coder-1", agent="coder", metadata={"user": 42, "tags": ["a", "b"]})
    researcher = session.start_subagent_task("researcher", agent="researcher", metadata={"user": 42})
    session.reserve_subagent_task("coder-queued", agent="coder", metadata={"user": 7})
    other = session.start_subagent_task("coder-2", agent="coder")
    with session.start_subagent_task("coder-done", agent="coder", metadata={"user": 42}):
        pass

    assert session.cancel_subagent_tasks(agent="coder", metadata={"user": 42, "tags": ["a"]}) == []
    assert session.cancel_subagent_tasks(
        agent="coder", status=SubagentStatus.RUNNING, metadata={"tags": ["a", "b"]}, reason="user 42 left"
    ) == ["coder-1"], "a list given matches the stored list, kept read-only as a tuple"
    cancelled = session.subagent_task("coder-1")
    assert cancelled is not None
    assert (cancelled.status, cancelled.cancel_reason, cancelled.cancel_cause) == (
        SubagentStatus.CANCELLED,
        "user 42 left",
        "requested",
    )
    assert session.cancel_subagent_tasks(status="queued") == ["coder-queued"], "a status may be given by name"
    assert session.cancel_subagent_tasks(metadata={"user": 42}) == ["researcher"]
    assert _status(session, "coder-done") is SubagentStatus.COMPLETED, "finished tasks are never touched"
    assert _status(session, "coder-2") is SubagentStatus.RUNNING
    assert session.cancel_subagent_tasks(agent="coder") == ["coder-2"]
    assert session.cancel_subagent_tasks() == []
    for handle in (coder, researcher, other):
        handle.complete()


def test_a_status_that_is_not_pending_matches_nothing(session: BlockingSession) -> None:
    running = session.start_subagent_task("running")
    for status in (SubagentStatus.COMPLETED, SubagentStatus.FAILED, "cancelled"):
        assert session.cancel_subagent_tasks(status=status) == []
    assert _status(session, "running") is SubagentStatus.RUNNING
    running.complete()


def test_the_cascade_reaches_descendants_and_reports_only_the_matching_ones(session: BlockingSession) -> None:
    handles = [
        session.start_subagent_task("plan", agent="planner"),
        session.start_subagent_task("helper", parent_id="plan", agent="tool"),
        session.start_subagent_task("sub-plan", parent_id="helper", agent="planner"),
        session.start_subagent_task("other", agent="tool"),
    ]
    assert session.cancel_subagent_tasks(agent="planner") == ["plan", "sub-plan"]
    helper = session.subagent_task("helper")
    assert (
        helper is not None and helper.status is SubagentStatus.CANCELLED and helper.cancel_cause == "parent"
    )
    assert _status(session, "other") is SubagentStatus.RUNNING
    for handle in handles:
        handle.complete()


def test_metadata_values_compare_by_value(session: BlockingSession) -> None:
    """Missing keys never match, ``None`` matches ``None`` only, numbers compare by value, nested mappings
    member by member."""
    handles = [
        session.start_subagent_task("bare"),
        session.start_subagent_task("none", metadata={"user": None}),
        session.start_subagent_task("float", metadata={"score": 1.0}),
        session.start_subagent_task("nested", metadata={"scope": {"team": "infra", "ids": [1, 2]}}),
    ]
    assert session.cancel_subagent_tasks(metadata={"user": 42}) == []
    assert session.cancel_subagent_tasks(metadata={"user": None}) == ["none"]
    assert session.cancel_subagent_tasks(metadata={"score": 1}) == ["float"]
    assert session.cancel_subagent_tasks(metadata={"scope": {"team": "infra"}}) == []
    assert session.cancel_subagent_tasks(metadata={"scope": {"ids": (1, 2), "team": "infra"}}) == ["nested"]
    assert session.cancel_subagent_tasks(metadata={}) == ["bare"], "an empty mapping asks nothing"
    for handle in handles:
        handle.complete()


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"agent": 1}, TypeError, "agent must be a str, got int"),
        ({"status": 3}, TypeError, "status must be a str, got int"),
        ({"status": "paused-for-good"}, ValueError, "status must be a SubagentStatus or one of 'queued'"),
        ({"metadata": ["user"]}, TypeError, "metadata must be a mapping"),
        ({"reason": b"bytes"}, TypeError, "reason must be a str, got bytes"),
        ({"agent": 1, "status": "nonsense", "metadata": 1}, TypeError, "agent must be a str"),
    ],
)
def test_bad_filters_are_refused_and_nothing_is_cancelled(
    session: BlockingSession, arguments: dict[str, Any], error: type[Exception], message: str
) -> None:
    handle = session.start_subagent_task("job", agent="coder")
    with pytest.raises(error, match=message):
        session.cancel_subagent_tasks(**arguments)
    assert _status(session, "job") is SubagentStatus.RUNNING
    handle.complete()


def test_on_redis_the_wanted_metadata_must_be_json(module_redis_server: RedisServer) -> None:
    """Metadata crosses processes as JSON, so a value JSON cannot hold is refused, as at start."""
    session = RedisRegistry(module_redis_server.url).session(f"filter-json-{next(_IDS)}")
    handle = session.start_subagent_task("job")
    with pytest.raises(TypeError, match="metadata"):
        session.cancel_subagent_tasks(metadata={"user": object()})
    assert _status(session, "job") is SubagentStatus.RUNNING
    handle.complete()


def test_racing_cancels_report_each_task_exactly_once(session: BlockingSession) -> None:
    for round_number in range(5):
        ids = [f"r{round_number}-t{index}" for index in range(30)]
        handles = [session.start_subagent_task(task_id, agent="worker") for task_id in ids]
        barrier = threading.Barrier(3)
        reported: list[list[str]] = [[], []]

        def by_filter(slot: int, barrier: threading.Barrier, reported: list[list[str]]) -> None:
            barrier.wait()
            reported[slot] = session.cancel_subagent_tasks(agent="worker")

        racers = [threading.Thread(target=by_filter, args=(slot, barrier, reported)) for slot in range(2)]
        for racer in racers:
            racer.start()
        barrier.wait()
        by_id = [task_id for task_id in reversed(ids) if session.cancel_subagent_task(task_id)]
        for racer in racers:
            racer.join(10)
        everything = by_id + reported[0] + reported[1]
        assert sorted(everything) == sorted(ids), "each task reported by exactly one cancel"
        for listed in reported:
            assert listed == [task_id for task_id in ids if task_id in listed], "in start order"
        for handle in handles:
            handle.complete()


def test_a_cancel_by_filter_racing_ends_either_cancels_a_task_or_leaves_its_end(
    session: BlockingSession,
) -> None:
    ids = [f"end-race-{index}" for index in range(40)]
    handles = [session.start_subagent_task(task_id) for task_id in ids]
    barrier = threading.Barrier(2)
    cancelled: list[str] = []

    def cancel_everything() -> None:
        barrier.wait()
        cancelled.extend(session.cancel_subagent_tasks())

    canceller = threading.Thread(target=cancel_everything)
    canceller.start()
    barrier.wait()
    completed = [handle.task_id for handle in handles if handle.complete()]
    canceller.join(10)
    assert not set(completed) & set(cancelled)
    assert sorted(completed + cancelled) == sorted(ids)
    for task_id in cancelled:
        assert _status(session, task_id) is SubagentStatus.CANCELLED


def test_the_asyncio_redis_session_cancels_by_filter(module_redis_server: RedisServer) -> None:
    async def scenario() -> None:
        registry = await AsyncRedisRegistry.connect(module_redis_server.url)
        session = await registry.session(f"filter-async-{next(_IDS)}")
        first = await session.start_subagent_task("a", agent="coder")
        second = await session.start_subagent_task("b", agent="coder", metadata={"user": 1})
        assert await session.cancel_subagent_tasks(agent="coder", metadata={"user": 1}) == ["b"]
        assert await session.cancel_subagent_tasks(agent="coder") == ["a"]
        await first.complete()
        await second.complete()

    asyncio.run(scenario())


def test_the_awaitable_session_cancels_by_filter() -> None:
    async def scenario() -> None:
        session = AwaitableSession(Session())
        handle = await session.start_subagent_task("a", agent="coder")
        assert await session.cancel_subagent_tasks(agent="coder") == ["a"]
        await handle.complete()

    asyncio.run(scenario())
