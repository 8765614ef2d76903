"""What a session shows of itself on either store (``SessionProtocol``): ``max_finished_tasks`` (fixed for the
session's life, never a network call), ``is_closed()`` (a round trip on Redis, awaited under asyncio), what
``with session:`` does, the setting a Redis session refuses, and a handle's snapshot of its own run alone."""

from __future__ import annotations

import asyncio
import inspect
import itertools
import time
from collections.abc import Callable

import pytest
from redis_support import RedisServer

import subagent_tracker
from subagent_tracker import (
    AsyncRedisRegistry,
    AwaitableSession,
    RedisRegistry,
    Session,
    SessionProtocol,
)

_IDS = itertools.count()


def _fresh(prefix: str) -> str:
    return f"{prefix}-{next(_IDS)}"


@pytest.fixture(params=["memory", "redis"])
def make_session(request: pytest.FixtureRequest) -> Callable[[int], SessionProtocol]:
    def memory(max_finished: int) -> SessionProtocol:
        return Session(max_finished_tasks=max_finished)

    def redis(max_finished: int) -> SessionProtocol:
        server: RedisServer = request.getfixturevalue("module_redis_server")
        return RedisRegistry(server.url).session(_fresh("shape"), max_finished_tasks=max_finished)

    return memory if request.param == "memory" else redis


def test_max_finished_tasks_and_is_closed_read_alike_on_either_store(
    make_session: Callable[[int], SessionProtocol],
) -> None:
    session = make_session(3)
    assert session.max_finished_tasks == 3
    assert session.is_closed() is False
    handle = session.start_subagent_task("a")
    assert session.close("done") == 1
    assert session.is_closed() is True
    handle.complete()


def test_a_joined_redis_session_keeps_the_bound_it_was_made_with_and_reads_it_offline() -> None:
    server = RedisServer()
    try:
        session_id = _fresh("bound")
        made = RedisRegistry(server.url).session(session_id, max_finished_tasks=5)
        joined = RedisRegistry(server.url).session(session_id, max_finished_tasks=7)
        looked_up = RedisRegistry(server.url).get_session(session_id)
        assert looked_up is not None
        assert (made.max_finished_tasks, joined.max_finished_tasks, looked_up.max_finished_tasks) == (5, 5, 5)
    finally:
        server.stop()
    assert made.max_finished_tasks == 5, "reading it makes no call to the stopped server"


def test_is_closed_sees_a_close_from_another_process_and_an_ended_incarnation(
    module_redis_server: RedisServer,
) -> None:
    session_id = _fresh("closed")
    here = RedisRegistry(module_redis_server.url).session(session_id)
    there = RedisRegistry(module_redis_server.url).get_session(session_id)
    assert there is not None
    assert here.is_closed() is False
    handle = here.start_subagent_task("a")
    assert there.close() == 1
    assert here.is_closed() is True
    handle.complete()
    reopened = RedisRegistry(module_redis_server.url).session(session_id)
    assert reopened.is_closed() is False
    assert here.is_closed() is True, "its incarnation has ended"


def test_leaving_with_closes_an_in_memory_session_and_nothing_on_redis(
    module_redis_server: RedisServer,
) -> None:
    with Session() as memory:
        memory.start_subagent_task("a")
    assert memory.is_closed()
    session_id = _fresh("with")
    with RedisRegistry(module_redis_server.url).session(session_id) as shared:
        handle = shared.start_subagent_task("a")
    other = RedisRegistry(module_redis_server.url).get_session(session_id)
    assert other is not None and other.is_closed() is False, "another process's session stays open"
    assert shared.is_closed() is False
    assert not handle.token.is_cancelled
    task = other.subagent_task("a")
    assert task is not None and task.status.value == "running"
    handle.complete()


def test_a_redis_session_refuses_an_event_buffer_by_name_on_both_apis(
    module_redis_server: RedisServer,
) -> None:
    registry = RedisRegistry(module_redis_server.url)
    session_id = _fresh("buffer")
    with pytest.raises(ValueError, match="event_buffer does not apply to a Redis session"):
        registry.session(session_id, event_buffer=16)
    assert registry.get_session(session_id) is None, "the refused call made no session"
    assert registry.session(session_id, event_buffer=4096).max_finished_tasks == 10_000

    async def main() -> None:
        async_registry = await AsyncRedisRegistry.connect(module_redis_server.url)
        with pytest.raises(ValueError, match="event_buffer does not apply"):
            await async_registry.session(_fresh("buffer"), event_buffer=1)

    asyncio.run(main())


def test_the_asyncio_forms_await_is_closed_and_read_the_bound_at_once(
    module_redis_server: RedisServer,
) -> None:
    async def main() -> None:
        registry = await AsyncRedisRegistry.connect(module_redis_server.url)
        session = await registry.session(_fresh("async"), max_finished_tasks=2)
        awaitable = AwaitableSession(Session(max_finished_tasks=2))
        for shape in (session, awaitable):
            assert shape.max_finished_tasks == 2
            assert await shape.is_closed() is False
            await shape.close()
            assert await shape.is_closed() is True

    asyncio.run(main())


def test_a_redis_handle_reads_its_own_run_never_the_one_that_replaced_it(
    module_redis_server: RedisServer,
) -> None:
    session = RedisRegistry(module_redis_server.url).session(_fresh("runs"), max_finished_tasks=1)
    first = session.start_subagent_task("a")
    first.complete(1)
    snapshot = first.snapshot()
    assert snapshot is not None and snapshot.result == 1
    second = session.start_subagent_task("a")
    assert first.snapshot() is None, "run 1 is no longer retained: it has no snapshot, and never run 2's"
    current = second.snapshot()
    assert current is not None and current.status.value == "running"
    second.complete()
    session.start_subagent_task("b").complete()
    deadline = time.monotonic() + 5
    while second.snapshot() is not None:
        assert time.monotonic() < deadline, "the evicted run's handle still has a snapshot"
        time.sleep(0.01)


def test_every_public_class_and_function_has_a_docstring() -> None:
    """``help()`` on anything the package exports says what it is (a native class keeps its doc comment)."""
    undocumented = [
        name
        for name in subagent_tracker.__all__
        if callable(item := getattr(subagent_tracker, name)) and not (item.__doc__ or "").strip()
    ]
    assert undocumented == []


def test_help_shows_the_session_s_real_defaults_and_no_private_keyword() -> None:
    parameters = inspect.signature(subagent_tracker.Session).parameters
    assert "_state" not in parameters
    defaults = {name: parameter.default for name, parameter in parameters.items()}
    assert defaults == {
        "session_id": None,
        "max_finished_tasks": subagent_tracker.DEFAULT_MAX_FINISHED_TASKS,
        "event_buffer": 4096,
        "max_finished_age": None,
        "early_cancel_ttl": 60,
        "progress_log_size": 16,
    }
    assert "claimed" in (subagent_tracker.Session.events.__doc__ or "")


def test_every_registry_hands_out_the_package_s_session_classes(module_redis_server: RedisServer) -> None:
    """Spawning and the event stream are written in Python, on the package's subclass of each native session:
    every registry builds its sessions as those classes, so these calls go into the binding and never back."""
    url = module_redis_server.url

    async def asyncio_sessions() -> tuple[object, object, object]:
        session = await (await AsyncRedisRegistry.connect(url)).session(_fresh("classes"))
        stream = await session.events()
        stream.close()
        return session, session._blocking(), stream

    memory = subagent_tracker.Registry().session(_fresh("classes"))
    redis = RedisRegistry(url).session(_fresh("classes"))
    asyncio_session, blocking_twin, asyncio_stream = asyncio.run(asyncio_sessions())
    assert type(memory) is Session
    assert type(redis) is subagent_tracker.RedisSession
    assert type(asyncio_session) is subagent_tracker.AsyncRedisSession
    assert type(blocking_twin) is subagent_tracker.RedisSession
    assert type(asyncio_stream) is subagent_tracker.EventStream
    stream = redis.events()
    assert type(stream) is subagent_tracker.EventStream
    stream.close()
    with pytest.raises(TypeError, match="_state"):
        subagent_tracker.RedisSession()  # type: ignore[call-arg]
