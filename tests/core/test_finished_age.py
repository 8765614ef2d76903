"""Finished tasks forgotten by age (contract §7): on request with ``forget_finished(older_than)``, or by the
session's ``max_finished_age``, in memory and on Redis; pending tasks never."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time

import pytest
from redis_support import RedisServer

from subagent_tracker import AsyncRedisRegistry, RedisRegistry, Registry, Session, SubagentStatus
from subagent_tracker.integrations._support import BlockingSession

_IDS = itertools.count()


@pytest.fixture(params=["memory", "redis"])
def aged_session(request: pytest.FixtureRequest) -> BlockingSession:
    """A session that forgets finished tasks 0.3 s after they end."""
    if request.param == "memory":
        return Session(max_finished_age=0.3)
    server: RedisServer = request.getfixturevalue("module_redis_server")
    registry = RedisRegistry(server.url, reconcile_interval=0.1)
    return registry.session(f"aged-{next(_IDS)}", max_finished_age=0.3)


@pytest.fixture
def session(tracked_session: BlockingSession) -> BlockingSession:
    return tracked_session


def test_forget_finished_forgets_only_tasks_that_ended_long_enough_ago(session: BlockingSession) -> None:
    session.start_subagent_task("old").complete()
    time.sleep(0.25)
    session.start_subagent_task("young").complete()
    running = session.start_subagent_task("running")
    assert session.forget_finished(0.15) == 1
    assert session.subagent_task("old") is None
    assert session.subagent_task("young") is not None
    assert session.forget_finished(3600) == 0
    assert session.forget_finished(0) == 1
    assert [task.task_id for task in session.subagent_tasks()] == ["running"]
    # A pending task is never forgotten, however old; a forgotten id may start again.
    running.complete()
    assert session.forget_finished(0) == 1
    with session.start_subagent_task("old"):
        pass
    task = session.subagent_task("old")
    assert task is not None and task.status is SubagentStatus.COMPLETED


def test_a_task_forgotten_for_its_age_frees_its_place_in_the_bound() -> None:
    """A task forgotten for its age stops counting against ``max_finished_tasks``, as an evicted one does: the
    tasks that finish after it are all kept. A reservation cancelled before its claim ages the same way."""
    session = Session(max_finished_tasks=2, max_finished_age=0.1)
    reserved = session.reserve_subagent_task("reserved")
    assert session.cancel_subagent_task(reserved)
    session.start_subagent_task("old").complete()
    time.sleep(0.2)
    assert session.subagent_tasks() == []
    for task_id in ("b", "c"):
        session.start_subagent_task(task_id).complete()
    assert [task.task_id for task in session.subagent_tasks()] == ["b", "c"]


def test_max_finished_age_hides_a_task_from_every_query_once_it_is_old_enough(
    aged_session: BlockingSession,
) -> None:
    aged_session.start_subagent_task("a").complete()
    running = aged_session.start_subagent_task("b")
    task = aged_session.subagent_task("a")
    assert task is not None and task.finished
    time.sleep(0.5)
    # No end has happened since: the queries themselves leave it out.
    assert aged_session.subagent_task("a") is None
    assert [task.task_id for task in aged_session.subagent_tasks()] == ["b"]
    assert aged_session.subagent_task("b") is not None
    running.complete()
    assert aged_session.forget_finished(3600) == 0


@pytest.mark.parametrize("value", [-1, float("nan"), "1", True])
def test_bad_ages_are_refused(session: BlockingSession, value: object) -> None:
    with pytest.raises((TypeError, ValueError), match="older_than"):
        session.forget_finished(value)  # type: ignore[arg-type]
    with pytest.raises((TypeError, ValueError), match="max_finished_age"):
        Session(max_finished_age=value)  # type: ignore[arg-type]
    with pytest.raises((TypeError, ValueError), match="max_finished_age"):
        Registry().session("s", max_finished_age=value)  # type: ignore[arg-type]


@pytest.mark.parametrize("value", [-1, float("nan"), "1", True])
def test_bad_ages_are_refused_by_redis_registries_before_any_call(
    module_redis_server: RedisServer, value: object
) -> None:
    registry = RedisRegistry(module_redis_server.url)
    with pytest.raises((TypeError, ValueError), match="max_finished_age"):
        registry.session(f"bad-age-{next(_IDS)}", max_finished_age=value)  # type: ignore[arg-type]
    assert registry.sessions() == [] or all(not name.startswith("bad-age-") for name in registry.sessions())


def test_a_waiter_and_a_handle_see_a_task_that_ages_at_once(module_redis_server: RedisServer) -> None:
    registry = RedisRegistry(module_redis_server.url)
    session = registry.session(f"aged-now-{next(_IDS)}", max_finished_age=0)
    handle = session.start_subagent_task("a")

    async def scenario() -> None:
        threading.Timer(0.1, handle.complete, args=("done",)).start()
        finished = await session.wait_subagent_task("a", timeout=10)
        assert finished.status is SubagentStatus.COMPLETED and finished.result == "done"

    asyncio.run(scenario())
    snapshot = handle.snapshot()
    assert snapshot is not None and snapshot.finished
    assert session.subagent_task("a") is None


def test_an_in_memory_waiter_sees_a_task_that_ages_at_once() -> None:
    session = Session(max_finished_age=0)
    handle = session.start_subagent_task("a")

    async def scenario() -> None:
        asyncio.get_running_loop().call_later(0.05, handle.complete, "done")
        finished = await session.wait_subagent_task("a", timeout=10)
        assert finished.status is SubagentStatus.COMPLETED and finished.result == "done"

    asyncio.run(scenario())
    assert handle.snapshot().finished
    assert session.subagent_task("a") is None


def test_forgetting_races_ends_without_losing_a_pending_task(session: BlockingSession) -> None:
    stop = threading.Event()
    forgotten: list[int] = []

    def forget() -> None:
        while not stop.is_set():
            forgotten.append(session.forget_finished(0))

    forgetting = threading.Thread(target=forget)
    forgetting.start()
    try:
        for round_number in range(200):
            task_id = f"t{round_number % 10}"
            with session.start_subagent_task(task_id):
                assert session.subagent_task(task_id) is not None, "a pending task was forgotten"
    finally:
        stop.set()
        forgetting.join(timeout=10)
    session.forget_finished(0)
    assert session.subagent_tasks() == []


def test_the_asyncio_redis_api_forgets_too(module_redis_server: RedisServer) -> None:
    async def scenario() -> None:
        registry = await AsyncRedisRegistry.connect(module_redis_server.url)
        session = await registry.session(f"aged-async-{next(_IDS)}", max_finished_age=3600)
        handle = await session.start_subagent_task("a")
        await handle.complete()
        assert await session.forget_finished(0) == 1
        assert await session.subagent_task("a") is None

    asyncio.run(scenario())
