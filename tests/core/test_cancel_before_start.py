"""Cancel before start (contract §3): ``cancel_subagent_task(task_id, reason, before_start=True)`` with no
pending task of that id records the cancel, and the next start or reservation of the id begins cancelled, in
memory and on Redis; a record is used once, expires after the session's ``early_cancel_ttl``, and never
misses a racing start."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time

import pytest
from redis_support import RedisServer

from subagent_tracker import AsyncRedisRegistry, RedisRegistry, Session, SubagentStatus, TaskCancelledError
from subagent_tracker.integrations._support import BlockingSession

_IDS = itertools.count()


@pytest.fixture
def session(tracked_session: BlockingSession) -> BlockingSession:
    return tracked_session


@pytest.fixture(params=["memory", "redis"])
def short_lived(request: pytest.FixtureRequest) -> BlockingSession:
    """A session whose recorded cancels wait 0.2 s for their start."""
    if request.param == "memory":
        return Session(early_cancel_ttl=0.2)
    server: RedisServer = request.getfixturevalue("module_redis_server")
    return RedisRegistry(server.url).session(f"early-{next(_IDS)}", early_cancel_ttl=0.2)


def test_the_next_start_begins_cancelled_and_the_record_is_used_once(session: BlockingSession) -> None:
    assert session.cancel_subagent_task("a", "user pressed stop", before_start=True) is False
    with pytest.raises(TaskCancelledError), session.start_subagent_task("a") as handle:
        assert handle.token.is_cancelled
        handle.token.raise_if_cancelled()
    task = session.subagent_task("a")
    assert task is not None and task.status is SubagentStatus.CANCELLED
    assert (task.cancel_reason, task.cancel_cause, task.cancel_origin) == (
        "user pressed stop",
        "requested",
        "a",
    )
    with session.start_subagent_task("a") as again:
        assert not again.token.is_cancelled


def test_a_pending_task_is_cancelled_now_and_nothing_is_recorded(session: BlockingSession) -> None:
    with pytest.raises(TaskCancelledError), session.start_subagent_task("a") as handle:
        assert session.cancel_subagent_task("a", before_start=True) is True
        # On Redis the runner's token fires when the cancel's notification arrives (contract §20).
        assert handle.token.wait(timeout=5)
        handle.token.raise_if_cancelled()
    with session.start_subagent_task("a") as again:
        assert not again.token.is_cancelled


def test_a_reservation_begins_cancelled_and_finished(session: BlockingSession) -> None:
    session.cancel_subagent_task("q", "not needed", before_start=True)
    session.reserve_subagent_task("q")
    task = session.subagent_task("q")
    assert task is not None and task.status is SubagentStatus.CANCELLED and task.finished


def test_without_before_start_nothing_is_recorded(session: BlockingSession) -> None:
    assert session.cancel_subagent_task("a") is False
    with session.start_subagent_task("a") as handle:
        assert not handle.token.is_cancelled


def test_a_record_expires(short_lived: BlockingSession) -> None:
    short_lived.cancel_subagent_task("a", before_start=True)
    time.sleep(0.4)
    with short_lived.start_subagent_task("a") as handle:
        assert not handle.token.is_cancelled


def _start_at(
    session: BlockingSession, task_id: str, begin: threading.Barrier, cancelled: threading.Event
) -> None:
    """Starts the task as the cancel is made, and holds it until the cancel has returned: a runner that ended
    before the cancel came would leave nothing for it to miss."""
    begin.wait(timeout=5)
    with session.start_subagent_task(task_id):
        cancelled.wait(timeout=10)


def test_a_recorded_cancel_racing_a_start_never_misses_it(session: BlockingSession) -> None:
    for round_number in range(30):
        task_id = f"race-{round_number}"
        begin = threading.Barrier(2)
        cancelled = threading.Event()
        starting = threading.Thread(target=_start_at, args=(session, task_id, begin, cancelled))
        starting.start()
        begin.wait(timeout=5)
        session.cancel_subagent_task(task_id, "stop", before_start=True)
        cancelled.set()
        starting.join(timeout=10)
        task = session.subagent_task(task_id)
        assert task is not None and task.status is SubagentStatus.CANCELLED, round_number
        assert task.cancel_reason == "stop"


@pytest.mark.parametrize("value", [1, "yes", None])
def test_before_start_must_be_a_bool(session: BlockingSession, value: object) -> None:
    with pytest.raises(TypeError):
        session.cancel_subagent_task("a", before_start=value)  # type: ignore[arg-type]


def test_the_asyncio_redis_api_records_too(module_redis_server: RedisServer) -> None:
    async def scenario() -> None:
        registry = await AsyncRedisRegistry.connect(module_redis_server.url)
        session = await registry.session(f"early-async-{next(_IDS)}")
        assert await session.cancel_subagent_task("a", "stop", before_start=True) is False
        handle = await session.start_subagent_task("a")
        assert handle.token.is_cancelled

    asyncio.run(scenario())
