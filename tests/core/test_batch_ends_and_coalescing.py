"""CONTRACT §22, batch ends and coalescing: ``end_subagent_tasks`` ends many tasks in one call (one round trip
on Redis), by handle or by id, with a result per end; on Redis the starts and ends that wait together in one
process go to the server as one call, each keeping its own outcome."""

from __future__ import annotations

import asyncio
import inspect
import itertools
from collections.abc import Iterator
from typing import Any

import pytest
from redis_support import FunctionCalls, RedisServer

from subagent_tracker import (
    AsyncRedisRegistry,
    AwaitableSession,
    DuplicateTaskError,
    RedisRegistry,
    Session,
    SubagentStatus,
    SubagentTask,
    UnknownTaskError,
)

_SESSIONS = itertools.count()


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    yield server
    server.stop()


class _CallsWaitingTogether(FunctionCalls):
    """Makes the calls of a block wait together, and counts the server calls they took.

    The server holds writes for a moment as the block begins (``CLIENT PAUSE ... WRITE``): the first call
    waits for the server, and every call made meanwhile waits to be sent, as under load. The count names the
    function (a worker's own housekeeping calls others)."""

    def __enter__(self) -> _CallsWaitingTogether:
        super().__enter__()
        self.server.cli("CLIENT", "PAUSE", "100", "WRITE")
        return self


class Store:
    """One store and API, driven alike from the tests: memory, Redis blocking, Redis through asyncio."""

    def __init__(self, kind: str, server: RedisServer | None) -> None:
        self.kind, self.server = kind, server
        self.loop = asyncio.new_event_loop()
        if kind == "memory":
            self.session: Any = Session()
        elif kind == "redis":
            assert server is not None
            self.session = RedisRegistry(server.url).session(f"ends-{next(_SESSIONS)}")
        else:
            assert server is not None
            self.session = self.run(self._async_session(server.url))

    @staticmethod
    async def _async_session(url: str) -> Any:
        registry = await AsyncRedisRegistry.connect(url)
        return await registry.session(f"ends-{next(_SESSIONS)}")

    def run(self, value: Any) -> Any:
        """`value`, awaited on this store's loop if it is awaitable."""
        if asyncio.isfuture(value) or asyncio.iscoroutine(value):
            return self.loop.run_until_complete(value)
        return value

    def call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """The session's method `name`, called (and awaited) on this store's loop."""
        return self.on(self.session, name, *args, **kwargs)

    def on(self, target: Any, name: str, *args: Any, **kwargs: Any) -> Any:
        """The method `name` of `target` (a session or a handle of this store), called on the store's loop."""
        return self.run(self._awaiting(getattr(target, name), *args, **kwargs))

    async def _awaiting(self, method: Any, *args: Any, **kwargs: Any) -> Any:
        value = method(*args, **kwargs)
        return await value if inspect.isawaitable(value) else value

    def close(self) -> None:
        self.loop.close()


@pytest.fixture(params=["memory", "redis", "redis-asyncio"])
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    server = None if request.param == "memory" else request.getfixturevalue("redis_server")
    made = Store(request.param, server)
    yield made
    made.close()


def test_a_batch_ends_handles_and_ids_with_a_result_each(store: Store) -> None:
    done = store.call("start_subagent_task", "done")
    stopped = store.call("start_subagent_task", "stopped")
    # Kept: a runner's handle let go of fails its task.
    by_id = store.call("start_subagent_task", "by-id")
    assert store.call("cancel_subagent_task", "stopped", "no longer needed")
    moved = store.call(
        "end_subagent_tasks",
        [
            {"handle": done, "result": {"answer": 42}},
            {"handle": stopped},
            {"task_id": "by-id", "error": "it broke", "error_type": "ValueError", "error_code": 7},
            {"task_id": "unknown"},
        ],
    )
    assert moved == [True, False, True, False]
    snapshot = {task.task_id: task for task in store.call("subagent_tasks")}
    assert (snapshot["done"].status, snapshot["done"].result) == (SubagentStatus.COMPLETED, {"answer": 42})
    assert (snapshot["stopped"].status, snapshot["stopped"].finished) == (SubagentStatus.CANCELLED, True)
    failed = snapshot["by-id"]
    assert (failed.status, failed.error, failed.error_type, failed.error_code) == (
        SubagentStatus.FAILED,
        "it broke",
        "ValueError",
        "7",
    )
    # A handle that a batch ended has ended: its own later end changes nothing; the runner of a task ended by
    # id finds it finished.
    assert store.on(done, "complete") is False
    assert store.on(by_id, "complete") is False


@pytest.mark.parametrize(
    ("ends", "error", "message"),
    [
        ("done", TypeError, "ends must be an iterable of mappings"),
        ({"task_id": "done"}, TypeError, "ends must be an iterable of mappings"),
        ([{"task_id": "done"}, "done"], TypeError, "end 1 of the batch is a str, not a mapping"),
        ([{"result": 1}], TypeError, "end 0 of the batch must name its task by one of handle and task_id"),
        ([{"task_id": "done", "handle": None, "colour": 1}], TypeError, "has the unknown key 'colour'"),
        ([{"task_id": "done", "result": 1, "error": "no"}], ValueError, "a result or an error, not both"),
        ([{"task_id": ""}], ValueError, "end 0 of the batch task_id must be"),
        ([{"task_id": "done"}, {"task_id": "done"}], ValueError, "appears more than once in the batch"),
        ([{"handle": "done"}], TypeError, "end 0 of the batch has a handle that is a str"),
    ],
)
def test_a_batch_refused_for_its_input_ends_nothing(
    store: Store, ends: Any, error: type[Exception], message: str
) -> None:
    handle = store.call("start_subagent_task", "done")
    with pytest.raises(error, match=message):
        store.call("end_subagent_tasks", ends)
    assert store.call("subagent_task", "done").status == SubagentStatus.RUNNING
    assert store.on(handle, "complete") is True


def test_a_batch_naming_a_handle_of_another_session_ends_nothing(store: Store) -> None:
    mine = store.call("start_subagent_task", "mine")
    other = Store(store.kind, store.server)
    theirs = other.call("start_subagent_task", "theirs")
    with pytest.raises(ValueError, match='the handle of task "theirs" is of another session'):
        store.call("end_subagent_tasks", [{"handle": mine}, {"handle": theirs}])
    assert store.call("subagent_task", "mine").status == SubagentStatus.RUNNING
    assert store.on(mine, "complete") is True
    assert other.on(theirs, "complete") is True
    other.close()


def test_an_awaitable_session_ends_its_awaitable_handles_in_a_batch() -> None:
    session = AwaitableSession(Session())

    async def scenario() -> list[bool]:
        first = await session.start_subagent_task("first")
        second = await session.start_subagent_task("second")
        ended = await session.end_subagent_tasks([{"handle": first}, {"task_id": "second", "error": "no"}])
        assert await second.complete() is False
        return ended

    async def tasks() -> list[SubagentTask]:
        return await session.subagent_tasks()

    assert asyncio.run(scenario()) == [True, True]
    statuses = [task.status for task in asyncio.run(tasks())]
    assert statuses == [SubagentStatus.COMPLETED, SubagentStatus.FAILED]


def test_starts_that_wait_together_go_as_one_call_and_keep_their_own_refusals(
    redis_server: RedisServer,
) -> None:
    async def scenario() -> tuple[list[Any], list[Any], int]:
        registry = await AsyncRedisRegistry.connect(redis_server.url)
        session = await registry.session(f"coalesced-{next(_SESSIONS)}")
        taken = await session.start_subagent_task("taken")

        async def start(index: int) -> Any:
            if index == 20:
                return await session.start_subagent_task("taken")
            if index == 40:
                return await session.start_subagent_task("orphan", parent_id="no-such-parent")
            return await session.start_subagent_task(f"t{index}")

        with _CallsWaitingTogether(redis_server) as waiting:
            outcomes = await asyncio.gather(*(start(index) for index in range(60)), return_exceptions=True)
        listed = await session.subagent_tasks()
        assert await taken.complete() is True
        return outcomes, listed, waiting.of("open")

    outcomes, listed, calls = asyncio.run(scenario())
    # The first start is sent alone; the 59 that waited for it go together (at most 128 in a call).
    assert 1 <= calls <= 3, f"60 starts waiting together took {calls} server calls"
    assert isinstance(outcomes[20], DuplicateTaskError)
    assert isinstance(outcomes[40], UnknownTaskError)
    started = [outcome for index, outcome in enumerate(outcomes) if index not in (20, 40)]
    assert not any(isinstance(outcome, BaseException) for outcome in started)
    # Every start that went through is whole; the refused ones left nothing behind.
    expected = {"taken", *(f"t{index}" for index in range(60))} - {"t20", "t40"}
    assert {task.task_id for task in listed} == expected
    assert all(task.status == SubagentStatus.RUNNING for task in listed)


def test_ends_that_wait_together_go_as_one_call_and_keep_their_own_results(redis_server: RedisServer) -> None:
    async def scenario() -> tuple[list[bool], list[Any], int]:
        registry = await AsyncRedisRegistry.connect(redis_server.url)
        session = await registry.session(f"coalesced-{next(_SESSIONS)}")
        handles = await session.start_subagent_tasks([{"task_id": f"t{index}"} for index in range(40)])
        assert await session.cancel_subagent_task("t7")
        with _CallsWaitingTogether(redis_server) as waiting:
            ended = await asyncio.gather(
                *(
                    handle.complete(index) if index % 2 == 0 else handle.fail("odd")
                    for index, handle in enumerate(handles)
                )
            )
        return ended, await session.subagent_tasks(), waiting.of("end")

    ended, listed, calls = asyncio.run(scenario())
    assert 1 <= calls <= 3, f"40 ends waiting together took {calls} server calls"
    assert ended == [index != 7 for index in range(40)]
    for index, task in enumerate(listed):
        expected = (
            SubagentStatus.CANCELLED
            if index == 7
            else SubagentStatus.COMPLETED
            if index % 2 == 0
            else SubagentStatus.FAILED
        )
        assert (task.status, task.finished) == (expected, True), task.task_id
        if expected == SubagentStatus.COMPLETED:
            assert task.result == index
