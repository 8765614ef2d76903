"""A token by id (contract §4): ``session.token(task_id)`` gives any retained task's ``CancellationToken`` to
code that holds no handle (a web route, a watchdog). It fires when the task is cancelled, has fired if it was,
and never fires for a task that completed or failed; an id not retained raises ``UnknownTaskError``. In
memory, and on Redis for a task any process runs."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time

import pytest
import redis
from redis_support import RedisServer

from subagent_tracker import AsyncRedisRegistry, CancellationToken, RedisRegistry, UnknownTaskError
from subagent_tracker.integrations._support import BlockingSession

_IDS = itertools.count()


@pytest.fixture
def session(tracked_session: BlockingSession) -> BlockingSession:
    return tracked_session


def test_a_token_by_id_fires_with_its_task(session: BlockingSession) -> None:
    handle = session.start_subagent_task("job")
    session.reserve_subagent_task("queued")
    token = session.token("job")
    queued = session.token("queued")
    assert token.task_id == "job" and not token.is_cancelled
    session.cancel_subagent_task("job", "user pressed stop")
    session.cancel_subagent_task("queued")
    assert token.wait(5) and queued.wait(5)
    assert token.reason == "user pressed stop"
    assert session.token("queued").is_cancelled, "asked after the end: fired at once"
    handle.complete()


def test_a_finished_task_s_token_is_in_its_final_state(session: BlockingSession) -> None:
    with session.start_subagent_task("done"):
        pass
    session.start_subagent_task("failed").fail("boom")
    for task_id in ("done", "failed"):
        token = session.token(task_id)
        assert not token.is_cancelled and not token.wait(0.05)
    live = session.start_subagent_task("later")
    watched = session.token("later")
    live.complete()
    time.sleep(0.1)
    assert not watched.is_cancelled, "a token never fires for a completed task"


def test_an_unknown_id_raises_and_a_bad_one_is_refused(session: BlockingSession) -> None:
    with pytest.raises(UnknownTaskError, match="nobody"):
        session.token("nobody")
    with pytest.raises(TypeError, match="task_id must be a str"):
        session.token(42)  # type: ignore[arg-type]


def test_callbacks_and_awaits_on_a_token_by_id_run_on_cancel(session: BlockingSession) -> None:
    handle = session.start_subagent_task("job")
    token = session.token("job")
    called = threading.Event()
    token.on_cancel(called.set)

    async def wait() -> None:
        waiting = asyncio.ensure_future(token.cancelled())
        await asyncio.sleep(0.01)
        session.cancel_subagent_task("job")
        await asyncio.wait_for(waiting, 5)

    asyncio.run(wait())
    assert called.wait(5)
    handle.complete()


def test_a_cancel_racing_the_token_call_is_never_missed(session: BlockingSession) -> None:
    for round_number in range(20):
        task_id = f"race-{round_number}"
        handle = session.start_subagent_task(task_id)
        barrier = threading.Barrier(2)

        def cancel(task_id: str, barrier: threading.Barrier) -> None:
            barrier.wait()
            session.cancel_subagent_task(task_id)

        canceller = threading.Thread(target=cancel, args=(task_id, barrier))
        canceller.start()
        barrier.wait()
        token = session.token(task_id)
        canceller.join(10)
        assert token.wait(5), f"round {round_number}: the cancel never reached the token"
        handle.complete()


def test_a_token_by_id_from_another_process_s_registry(module_redis_server: RedisServer) -> None:
    """The task runs under one registry (as in one process) and is watched through another."""
    session_id = f"token-{next(_IDS)}"
    runner = RedisRegistry(module_redis_server.url, worker_id="runner").session(session_id)
    watcher = RedisRegistry(module_redis_server.url, worker_id="watcher").session(session_id)
    handles = [runner.start_subagent_task(f"t{index}") for index in range(5)]
    tokens = [watcher.token(f"t{index}") for index in range(5)]
    began = time.monotonic()
    runner.cancel_subagent_task("t3", "stop")
    assert tokens[3].wait(5) and time.monotonic() - began < 1
    assert tokens[3].reason == "stop"
    for handle in handles:
        handle.complete()
    time.sleep(0.1)
    assert [token.is_cancelled for token in tokens] == [False, False, False, True, False]


def test_the_asyncio_redis_session_gives_a_token_by_id(module_redis_server: RedisServer) -> None:
    async def scenario() -> None:
        registry = await AsyncRedisRegistry.connect(module_redis_server.url)
        session = await registry.session(f"token-async-{next(_IDS)}")
        handle = await session.start_subagent_task("job")
        token = await session.token("job")
        await session.cancel_subagent_task("job", "stop")
        await asyncio.wait_for(token.cancelled(), 5)
        assert token.reason == "stop"
        with pytest.raises(UnknownTaskError):
            await session.token("nobody")
        await handle.complete()

    asyncio.run(scenario())


def test_concurrent_first_calls_and_a_watch_right_after_another_all_fire(session: BlockingSession) -> None:
    """Many threads ask at once (on Redis the first opens the reader and the others wait for it); a watch
    asked just as the last one ended still fires."""
    handles = [session.start_subagent_task(f"c{index}") for index in range(8)]
    tokens: dict[str, CancellationToken] = {}
    barrier = threading.Barrier(len(handles))

    def ask(task_id: str) -> None:
        barrier.wait()
        tokens[task_id] = session.token(task_id)

    threads = [threading.Thread(target=ask, args=(handle.task_id,)) for handle in handles]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    for handle in handles:
        session.cancel_subagent_task(handle.task_id, "stop")
    for handle in handles:
        token = session.token(handle.task_id)
        assert token.wait(5) and token.reason == "stop"
        handle.complete()
    first = session.start_subagent_task("first")
    watched = session.token("first")
    first.complete()
    second = session.start_subagent_task("second")
    token = session.token("second")
    session.cancel_subagent_task("second")
    assert token.wait(5) and not watched.is_cancelled
    second.complete()


def test_a_token_reaches_only_its_own_run_across_a_restart_of_the_id(session: BlockingSession) -> None:
    first = session.start_subagent_task("job")
    old = session.token("job")
    session.cancel_subagent_task("job", "first run stopped")
    first.complete()
    assert old.wait(5) and old.reason == "first run stopped"
    again = session.start_subagent_task("job")
    new = session.token("job")
    assert not new.is_cancelled
    session.cancel_subagent_task("job", "second run stopped")
    assert new.wait(5) and new.reason == "second run stopped"
    assert old.reason == "first run stopped"
    again.complete()
    third = session.start_subagent_task("job")
    completed = session.token("job")
    third.complete()
    fourth = session.start_subagent_task("job")
    session.cancel_subagent_task("job")
    time.sleep(0.2)
    assert not completed.is_cancelled, "a later run's cancel never reaches an earlier run's token"
    fourth.complete()


def test_the_reader_lets_its_connection_go_once_nothing_is_watched(module_redis_server: RedisServer) -> None:
    admin = redis.Redis(host="127.0.0.1", port=module_redis_server.port)

    def connections() -> int:
        listed: list[dict[str, object]] = admin.client_list()  # type: ignore[assignment]
        return len(listed)

    session = RedisRegistry(module_redis_server.url).session(f"token-reader-{next(_IDS)}")
    handle = session.start_subagent_task("job")
    before = connections()
    token = session.token("job")
    assert connections() == before + 1, "one reader, on a connection of its own"
    handle.complete()
    deadline = time.monotonic() + 10
    while connections() > before:
        assert time.monotonic() < deadline, "the reader kept its connection after the last watch ended"
        time.sleep(0.05)
    assert not token.is_cancelled
