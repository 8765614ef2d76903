"""CONTRACT §6, listings in pages: ``subagent_tasks_page`` gives a bounded page and the cursor of the next, on
every store and API; ``iter_subagent_tasks`` and ``aiter_subagent_tasks`` go through every page; the whole
listings keep their meaning."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from redis_support import RedisServer

from subagent_tracker import (
    AsyncRedisRegistry,
    AwaitableSession,
    RedisRegistry,
    Session,
    SubagentStatus,
    aiter_subagent_tasks,
    iter_subagent_tasks,
)

_SESSIONS = itertools.count()


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    yield server
    server.stop()


def _filled(session: Any, count: int) -> list[Any]:
    """Starts ``count`` tasks in ``session``; every even one completes. Returns the handles of the rest."""
    running = []
    for index in range(count):
        handle = session.start_subagent_task(f"t{index:03}")
        if index % 2 == 0:
            handle.complete()
        else:
            running.append(handle)
    return running


@pytest.fixture(params=["memory", "redis"])
def blocking_session(request: pytest.FixtureRequest) -> Any:
    if request.param == "memory":
        return Session()
    server: RedisServer = request.getfixturevalue("redis_server")
    return RedisRegistry(server.url).session(f"pages-{next(_SESSIONS)}")


def test_pages_go_through_every_task_and_the_whole_listing_keeps_start_order(blocking_session: Any) -> None:
    running = _filled(blocking_session, 230)
    cursor: str | None = None
    listed: list[str] = []
    pages = 0
    while True:
        tasks, cursor = blocking_session.subagent_tasks_page(cursor, limit=40)
        assert len(tasks) <= 40
        listed.extend(task.task_id for task in tasks)
        pages += 1
        if cursor is None:
            break
    assert pages >= 6
    assert sorted(listed) == [f"t{index:03}" for index in range(230)]
    assert [task.task_id for task in iter_subagent_tasks(blocking_session, limit=25)] == listed
    in_start_order = [f"t{index:03}" for index in range(230)]
    assert [task.task_id for task in blocking_session.subagent_tasks()] == in_start_order
    pending = [task.task_id for task in iter_subagent_tasks(blocking_session, pending=True, limit=7)]
    assert pending == [f"t{index:03}" for index in range(1, 230, 2)]
    assert all(task.status == SubagentStatus.RUNNING for task in blocking_session.pending_subagent_tasks())
    del running


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ({"cursor": "not-a-cursor"}, ValueError, "is not one that a page of this listing gave"),
        ({"cursor": 7}, TypeError, "cursor must be a str"),
        ({"limit": 0}, ValueError, "limit must be a positive int, got 0"),
        ({"limit": -1}, ValueError, "limit must be a non-negative int"),
        ({"limit": "10"}, TypeError, "limit must be an int"),
    ],
)
def test_a_page_with_a_bad_cursor_or_limit_is_refused(
    blocking_session: Any, arguments: dict[str, Any], error: type[Exception], message: str
) -> None:
    keywords = dict(arguments)
    cursor = keywords.pop("cursor", None)
    with pytest.raises(error, match=message):
        blocking_session.subagent_tasks_page(cursor, **keywords)


async def _filled_awaited(session: Any, count: int) -> list[Any]:
    """``_filled`` through the awaited API."""
    running = []
    for index in range(count):
        handle = await session.start_subagent_task(f"t{index:03}")
        if index % 2 == 0:
            await handle.complete()
        else:
            running.append(handle)
    return running


def test_the_awaited_apis_page_and_iterate_alike(redis_server: RedisServer) -> None:
    async def through(session: Any) -> tuple[list[str], list[str]]:
        running = await _filled_awaited(session, 60)
        tasks, cursor = await session.subagent_tasks_page(limit=10)
        assert len(tasks) == 10 and cursor is not None
        every = [task.task_id async for task in aiter_subagent_tasks(session, limit=16)]
        pending = [task.task_id async for task in aiter_subagent_tasks(session, pending=True)]
        del running
        return every, pending

    async def on_redis() -> tuple[list[str], list[str]]:
        registry = await AsyncRedisRegistry.connect(redis_server.url)
        return await through(await registry.session(f"pages-{next(_SESSIONS)}"))

    async def in_memory() -> tuple[list[str], list[str]]:
        return await through(AwaitableSession(Session()))

    for every, pending in (asyncio.run(on_redis()), asyncio.run(in_memory())):
        assert sorted(every) == [f"t{index:03}" for index in range(60)]
        assert pending == [f"t{index:03}" for index in range(1, 60, 2)]
