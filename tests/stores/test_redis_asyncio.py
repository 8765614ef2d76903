"""The asyncio API of the Redis store: the blocking API's semantics and errors, awaited, never blocking the
event loop; what a cancelled ``await`` leaves behind; and the protocols that let one piece of code run on
either store."""

from __future__ import annotations

import asyncio
import gc
import os
import time
import warnings
import weakref
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from redis_support import RedisServer

from subagent_tracker import (
    DROPPED_HANDLE_ERROR,
    AsyncRedisRegistry,
    AsyncRedisSession,
    AsyncRedisTaskHandle,
    AsyncSessionProtocol,
    AsyncTaskHandleProtocol,
    AwaitableSession,
    AwaitableTaskHandle,
    DuplicateTaskError,
    RedisRegistry,
    RedisSession,
    RedisTaskHandle,
    Session,
    SessionProtocol,
    SubagentStatus,
    SubagentTaskHandle,
    TaskCancelledError,
    TaskHandleProtocol,
    UnknownTaskError,
)


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    yield server
    server.stop()


_SESSIONS = iter(range(1_000_000))


async def _redis_session(server: RedisServer, **options: Any) -> AsyncRedisSession:
    registry = await AsyncRedisRegistry.connect(server.url, reconcile_interval=0.1, **options)
    return await registry.session(f"asyncio-{next(_SESSIONS)}")


async def _finished(session: AsyncRedisSession, task_id: str, timeout: float = 5.0) -> Any:
    """The task's snapshot once it has finished. A handle nobody received is let go of by reference counting;
    one collection first covers a cycle (collecting on every poll costs seconds in a large test process)."""
    gc.collect()
    deadline = time.monotonic() + timeout
    while True:
        snapshot = await session.subagent_task(task_id)
        if snapshot is not None and snapshot.finished:
            return snapshot
        assert time.monotonic() < deadline, f"task {task_id!r} never finished: {snapshot}"
        await asyncio.sleep(0.02)


def test_every_call_is_awaited_with_the_blocking_api_s_semantics(redis_server: RedisServer) -> None:
    async def main() -> None:
        registry = await AsyncRedisRegistry.connect(redis_server.url)
        session = await registry.session("semantics")
        assert session.session_id == "semantics"
        assert "semantics" in await registry.sessions()
        assert await registry.get_session("semantics") == session
        assert await registry.get_session("never-made") is None

        root = await session.start_subagent_task("root", agent="planner", metadata={"step": 1})
        assert isinstance(root, AsyncRedisTaskHandle)
        assert await root.progress("planning") is True
        child_id = await session.reserve_subagent_task("child", parent_id="root")
        child = await session.claim_subagent_task(child_id)
        assert [task.task_id for task in await session.pending_subagent_tasks()] == ["root", "child"]

        with pytest.raises(DuplicateTaskError):
            await session.start_subagent_task("root")
        with pytest.raises(UnknownTaskError):
            await session.claim_subagent_task("never-reserved")

        assert await session.cancel_subagent_task("root", reason="stop") is True
        # The child runs in this process: its token has fired when the cancel returns (contract §20).
        assert child.token.is_cancelled
        assert child.token.reason == "stop"
        async with child:
            pass
        async with root:
            pass
        snapshot = await session.subagent_task("child")
        assert snapshot is not None
        assert (snapshot.status, snapshot.cancel_cause) == (SubagentStatus.CANCELLED, "parent")

        ended = await session.start_subagent_task("by-id")
        assert await session.end_subagent_task("by-id", result={"answer": 42}) is True
        assert await ended.complete("late") is False
        assert (await session.wait_subagent_task("by-id", timeout=5)).result == {"answer": 42}

        running = await session.start_subagent_task("running")
        assert await session.cancel(reason="all") == 1
        await asyncio.wait_for(running.token.cancelled(), 5)
        assert await running.fail("stopped anyway") is False
        assert await session.close(reason="done") == 0
        assert [task.task_id for task in await session.subagent_tasks()] == [
            "root",
            "child",
            "by-id",
            "running",
        ]

    asyncio.run(main())


def test_async_with_ends_the_task_from_how_the_block_exits(redis_server: RedisServer) -> None:
    async def main() -> None:
        session = await _redis_session(redis_server)
        async with await session.start_subagent_task("completes"):
            pass
        with pytest.raises(RuntimeError):
            async with await session.start_subagent_task("fails"):
                raise RuntimeError("boom")
        with pytest.raises(TaskCancelledError):
            async with await session.start_subagent_task("cancelled") as handle:
                await session.cancel_subagent_task("cancelled", reason="pressed stop")
                await asyncio.wait_for(handle.token.cancelled(), 5)
                handle.token.raise_if_cancelled()
        statuses = {task.task_id: (task.status, task.finished) for task in await session.subagent_tasks()}
        assert statuses == {
            "completes": (SubagentStatus.COMPLETED, True),
            "fails": (SubagentStatus.FAILED, True),
            "cancelled": (SubagentStatus.CANCELLED, True),
        }
        failed = await session.subagent_task("fails")
        assert failed is not None and failed.error == "RuntimeError: boom"

    asyncio.run(main())


def test_spawn_and_events_are_awaited(redis_server: RedisServer) -> None:
    async def main() -> None:
        session = await _redis_session(redis_server)
        events = await session.events()

        async def work(handle: AsyncRedisTaskHandle) -> str:
            await handle.progress("half way")
            return "done"

        spawned = await session.spawn_subagent_task(work, "spawned")
        assert (await spawned).result == "done"
        seen = []
        async with events:
            async for event in events:
                seen.append(event.kind)
                if event.kind == "ended":
                    break
        assert seen == ["started", "progress", "ended"]

    asyncio.run(main())


def test_bad_input_is_refused_before_anything_is_sent(redis_server: RedisServer) -> None:
    async def main() -> None:
        session = await _redis_session(redis_server)
        with pytest.raises(TypeError, match="task_id"):
            session.start_subagent_task(42)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="task_id"):
            session.start_subagent_task("")
        with pytest.raises(TypeError, match="JSON"):
            session.start_subagent_task("x", metadata={"handle": object()})
        with pytest.raises(ValueError):
            await AsyncRedisRegistry.connect("not a url")
        assert await session.subagent_tasks() == []

    asyncio.run(main())
    with pytest.raises(TypeError, match=r"await AsyncRedisRegistry.connect"):
        AsyncRedisRegistry(redis_server.url)


def test_connect_checks_its_arguments_at_the_call_and_needs_a_loop_only_when_awaited(
    redis_server: RedisServer,
) -> None:
    # Refused at the call: no coroutine is made, so none is left unawaited.
    with pytest.raises(TypeError, match="lease"):
        _ = AsyncRedisRegistry.connect(redis_server.url, lease="1")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="worker_id"):
        _ = AsyncRedisRegistry.connect(redis_server.url, worker_id="")
    connecting = AsyncRedisRegistry.connect(redis_server.url, worker_id="run-by-asyncio-run")
    assert asyncio.iscoroutine(connecting)
    registry = asyncio.run(connecting)
    assert isinstance(registry, AsyncRedisRegistry) and registry.worker_id == "run-by-asyncio-run"

    async def round_trip() -> bool:
        session = await registry.session("made-after-asyncio-run")
        handle = await session.start_subagent_task("a")
        return await handle.complete("done")

    assert asyncio.run(round_trip()) is True
    with pytest.raises(ValueError, match="not a Redis URL"):
        asyncio.run(AsyncRedisRegistry.connect("not a url"))


def test_a_call_outside_a_running_loop_raises_and_changes_nothing(redis_server: RedisServer) -> None:
    session = asyncio.run(_redis_session(redis_server))
    with pytest.raises(RuntimeError, match="no running event loop"):
        session.start_subagent_task("outside")

    async def listed() -> list[Any]:
        return await session.subagent_tasks()

    assert asyncio.run(listed()) == []


def test_a_cancelled_await_of_a_start_never_leaves_the_task_running(redis_server: RedisServer) -> None:
    """The start is never cut in half: it completes on the runtime, and the handle nobody received is dropped,
    which ends the task as any dropped handle does."""

    async def main() -> None:
        session = await _redis_session(redis_server)
        abandoned = 0
        for index in range(20):
            starting = asyncio.ensure_future(session.start_subagent_task(f"abandoned-{index}"))
            await asyncio.sleep(0)
            starting.cancel()
            try:
                # A start whose reply came within the one turn of the loop returns its handle, dropped here
                # unused: the task must end the same way.
                await starting
            except asyncio.CancelledError:
                abandoned += 1
            del starting  # the done task holds a handle it returned
        assert abandoned > 0, "the awaits were cancelled before the starts' replies came"
        for index in range(20):
            snapshot = await _finished(session, f"abandoned-{index}")
            assert (snapshot.status, snapshot.error) == (SubagentStatus.FAILED, DROPPED_HANDLE_ERROR)
        assert await session.pending_subagent_tasks() == []

    asyncio.run(main())


def test_a_cancelled_await_of_a_cancel_still_cancels(redis_server: RedisServer) -> None:
    async def main() -> None:
        session = await _redis_session(redis_server)
        handle = await session.start_subagent_task("job")
        cancelling = asyncio.ensure_future(session.cancel_subagent_task("job", reason="abandoned await"))
        await asyncio.sleep(0)
        cancelling.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelling
        await asyncio.wait_for(handle.token.cancelled(), 5)
        assert handle.token.reason == "abandoned await"

    asyncio.run(main())


def test_a_cancelled_wait_stops_waiting(redis_server: RedisServer) -> None:
    async def main() -> None:
        session = await _redis_session(redis_server)
        handle = await session.start_subagent_task("long")
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(session.wait_subagent_task("long"), 0.1)
        await handle.complete()
        assert (await session.wait_subagent_task("long", timeout=5)).status is SubagentStatus.COMPLETED

    asyncio.run(main())


class _LoopLag:
    """A heartbeat coroutine that measures the event loop's largest lag: how late its 1 ms sleeps wake."""

    def __init__(self) -> None:
        self.largest = 0.0
        self._running = True

    async def beat(self) -> None:
        while self._running:
            before = time.monotonic()
            await asyncio.sleep(0.001)
            self.largest = max(self.largest, time.monotonic() - before - 0.001)

    def stop(self) -> None:
        self._running = False


async def _lag_during(call: Callable[[], Awaitable[object]]) -> float:
    lag = _LoopLag()
    heartbeat = asyncio.ensure_future(lag.beat())
    await asyncio.sleep(0.01)
    await call()
    lag.stop()
    await heartbeat
    return lag.largest


def test_the_asyncio_api_never_blocks_the_loop_while_the_server_is_paused(redis_server: RedisServer) -> None:
    """CONTRACT: with the server paused for 2 s (``CLIENT PAUSE``), a blocking call stalls every coroutine for
    about the pause; an awaited one leaves the loop free (its largest lag under 5 % of the blocking one's)."""
    pause_ms = 2000
    blocking = RedisRegistry(redis_server.url, timeout=10).session("paused")

    async def main() -> tuple[float, float]:
        awaited = await _redis_session(redis_server, timeout=10)

        async def blocking_call() -> None:
            blocking.start_subagent_task("blocking").complete()

        async def awaited_call() -> None:
            handle = await awaited.start_subagent_task("awaited")
            await handle.complete()

        assert redis_server.admin("CLIENT", "PAUSE", str(pause_ms), "ALL") == b"+OK"
        blocking_lag = await _lag_during(blocking_call)
        assert redis_server.admin("CLIENT", "PAUSE", str(pause_ms), "ALL") == b"+OK"
        awaited_lag = await _lag_during(awaited_call)
        return blocking_lag, awaited_lag

    blocking_lag, awaited_lag = asyncio.run(main())
    assert blocking_lag >= pause_ms / 1000 * 0.5, f"the blocking call stalled the loop {blocking_lag:.3f} s"
    assert awaited_lag < blocking_lag * 0.05, (
        f"the awaited call stalled the loop {awaited_lag * 1e3:.1f} ms, the blocking one {blocking_lag:.3f} s"
    )


async def _lifecycle_on_any_store(session: AsyncSessionProtocol) -> list[tuple[str, SubagentStatus]]:
    """Code written once against the asyncio protocol."""
    parent = await session.start_subagent_task("parent", agent="orchestrator")
    child = await session.start_subagent_task("child", parent_id="parent")
    assert await child.progress("reading")
    assert await session.cancel_subagent_task("parent", reason="stop") is True
    await asyncio.wait_for(child.token.cancelled(), 5)
    async with child:
        pass
    async with parent:
        pass
    return [(task.task_id, task.status) for task in await session.subagent_tasks()]


@pytest.fixture(params=["memory", "redis"])
def async_session_factory(
    request: pytest.FixtureRequest, redis_server: RedisServer
) -> Callable[[], Awaitable[AsyncSessionProtocol]]:
    async def memory() -> AsyncSessionProtocol:
        return AwaitableSession(Session())

    async def redis() -> AsyncSessionProtocol:
        return await _redis_session(redis_server)

    return memory if request.param == "memory" else redis


def test_code_written_against_the_asyncio_protocol_runs_on_either_store(
    async_session_factory: Callable[[], Awaitable[AsyncSessionProtocol]],
) -> None:
    async def main() -> list[tuple[str, SubagentStatus]]:
        return await _lifecycle_on_any_store(await async_session_factory())

    assert asyncio.run(main()) == [("parent", SubagentStatus.CANCELLED), ("child", SubagentStatus.CANCELLED)]


def test_each_class_has_its_protocol_s_members(redis_server: RedisServer) -> None:
    """``isinstance`` checks members only (the two shapes share their names); that each class satisfies its
    protocol, awaitables included, is proved by mypy in ``_protocols.py`` on every lint run."""
    session = Session()
    handle = session.start_subagent_task("memory")
    redis_session = RedisRegistry(redis_server.url).session("protocols")
    redis_handle = redis_session.start_subagent_task("redis")
    assert isinstance(session, SessionProtocol) and isinstance(redis_session, SessionProtocol)
    assert isinstance(handle, SubagentTaskHandle) and isinstance(handle, TaskHandleProtocol)
    assert isinstance(redis_handle, RedisTaskHandle) and isinstance(redis_handle, TaskHandleProtocol)
    handle.complete()
    redis_handle.complete()

    async def main() -> None:
        awaitable = AwaitableSession(session)
        async_session = await _redis_session(redis_server)
        assert isinstance(awaitable, AsyncSessionProtocol) and isinstance(async_session, AsyncSessionProtocol)
        memory_handle = await awaitable.start_subagent_task("awaited")
        async_handle = await async_session.start_subagent_task("awaited")
        assert isinstance(memory_handle, AwaitableTaskHandle)
        assert isinstance(memory_handle, AsyncTaskHandleProtocol)
        assert isinstance(async_handle, AsyncTaskHandleProtocol)
        await memory_handle.complete()
        await async_handle.complete()

    asyncio.run(main())
    assert not isinstance(redis_session, AsyncRedisSession) and isinstance(redis_session, RedisSession)
    with pytest.raises(TypeError, match=r"subagent_tracker\.Session"):
        AwaitableSession(redis_session)  # type: ignore[arg-type]


def test_a_handle_that_reported_its_end_answers_a_second_end_without_a_round_trip() -> None:
    """``async with handle:`` around a runner that completes ends the block with a second end: the handle
    answers it as the server would, false, without a round trip (it does so with the server gone)."""
    server = RedisServer()

    async def main() -> list[bool]:
        session = await _redis_session(server)
        async with await session.start_subagent_task("a") as handle:
            assert await handle.complete("done") is True
        snapshot = await session.subagent_task("a")
        assert snapshot is not None and snapshot.result == "done"
        # Done at once: its first step gives the answer, where a call to Redis would first yield to the loop.
        with pytest.raises(StopIteration) as answered:
            next(handle.complete("again").__await__())
        assert answered.value.value is False
        server.stop()
        return [await handle.complete("again"), await handle.fail("late")]

    try:
        assert asyncio.run(main()) == [False, False]
    finally:
        server.stop()


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts descriptors through /proc")
def test_loops_run_one_after_another_on_a_thread_leave_no_descriptor_open(redis_server: RedisServer) -> None:
    """Each loop that awaits Redis watches a socket of its own for its outcomes; the socket is closed once the
    loop has closed, so a thread that runs loop after loop (``asyncio.run`` per request) holds no more."""

    async def lifecycle(session: AsyncRedisSession) -> None:
        handle = await session.start_subagent_task()
        assert await handle.complete() is True

    session = asyncio.run(_redis_session(redis_server))
    for _ in range(3):
        asyncio.run(lifecycle(session))
    gc.collect()
    before = _open_descriptors()
    for _ in range(40):
        asyncio.run(lifecycle(session))
    gc.collect()
    assert _open_descriptors() <= before + 2


class _LoopWithoutReaders(asyncio.SelectorEventLoop):
    """A loop that cannot watch a socket, as Windows' proactor loop cannot."""

    def add_reader(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]  # refuses any
        raise NotImplementedError


def test_a_loop_that_cannot_watch_a_socket_still_gets_every_outcome(redis_server: RedisServer) -> None:
    async def main() -> list[Any]:
        session = await _redis_session(redis_server)
        handles = await asyncio.gather(*(session.start_subagent_task(f"t{index}") for index in range(20)))
        ends = await asyncio.gather(*(handle.complete(index) for index, handle in enumerate(handles)))
        return [ends, [task.result for task in await session.subagent_tasks()]]

    loop = _LoopWithoutReaders()
    try:
        ends, results = loop.run_until_complete(main())
    finally:
        loop.close()
    assert ends == [True] * 20
    assert sorted(results) == list(range(20))


def test_a_loop_left_with_awaits_gets_their_outcomes_when_it_runs_again(redis_server: RedisServer) -> None:
    """A thread runs one loop at a time, but a loop stopped with awaits outstanding may run again after
    another loop ran on the thread: what the runtime settled for it meanwhile is waiting for it."""
    first = asyncio.new_event_loop()
    try:
        session = first.run_until_complete(_redis_session(redis_server))

        async def start() -> AsyncRedisTaskHandle:
            return await session.start_subagent_task("left")

        started = first.create_task(start())
        first.run_until_complete(asyncio.sleep(0))  # the start is sent; its reply comes later

        async def other_loop() -> bool:
            other = await _redis_session(redis_server)
            handle = await other.start_subagent_task("meanwhile")
            return await handle.complete()

        assert asyncio.run(other_loop()) is True
        handle = first.run_until_complete(asyncio.wait_for(started, 5))

        async def complete() -> bool:
            return await handle.complete("back")

        assert first.run_until_complete(complete()) is True
    finally:
        first.close()


def _finished_seen_from_another_thread(session: AsyncRedisSession, task_id: str) -> Any:
    """Waits for the task's end on a loop of another thread: a new loop on this thread would let go of the
    last one's inbox, and so end its tasks, whether or not the inbox drops what arrives after its loop."""
    with ThreadPoolExecutor(1) as elsewhere:
        return elsewhere.submit(asyncio.run, _finished(session, task_id)).result()


def _until_replied(server: RedisServer, session: AsyncRedisSession, task_id: str) -> None:
    """Waits until the start of ``task_id`` has run on the server (once it takes writes again), then a moment
    more for its reply to cross loopback and be queued for its loop."""
    key = f"subagent-tracker:v2:{{s:{session.session_id}}}:t:{task_id}"
    deadline = time.monotonic() + 10
    while server.cli("EXISTS", key) != ["1"]:
        assert time.monotonic() < deadline, "the start never ran on the server"
        time.sleep(0.01)
    time.sleep(0.2)


def _reply_held_back(server: RedisServer, milliseconds: int) -> None:
    """The server holds every write (a start among them) for a moment, so its reply comes after the await."""
    server.cli("CLIENT", "PAUSE", str(milliseconds), "WRITE")


def test_a_start_whose_loop_closed_before_its_reply_ends_its_task(redis_server: RedisServer) -> None:
    """``asyncio.run(asyncio.wait_for(start, ...))`` that times out: the start completes on the runtime after
    the loop has closed, and the handle nobody can receive any more is dropped at once, so the task ends as
    any dropped handle's does instead of running for the life of the process."""
    session = asyncio.run(_redis_session(redis_server))

    async def start_given_up_on() -> None:
        await asyncio.wait_for(session.start_subagent_task("outlived-its-loop"), 0.01)

    _reply_held_back(redis_server, 300)
    with pytest.raises(asyncio.TimeoutError):
        asyncio.run(start_given_up_on())

    snapshot = _finished_seen_from_another_thread(session, "outlived-its-loop")
    assert (snapshot.status, snapshot.error) == (SubagentStatus.FAILED, DROPPED_HANDLE_ERROR)


def test_a_loop_dropped_unclosed_with_outcomes_waiting_is_collected_and_ends_their_tasks(
    redis_server: RedisServer,
) -> None:
    """A loop stopped while a start was under way, then dropped without ``close()``: the outcome that arrives
    for it waits in its inbox, holding its future and so the loop. The collector still finds that loop, and
    the handle nobody received ends its task."""
    session = asyncio.run(_redis_session(redis_server))
    dropped = asyncio.new_event_loop()
    _reply_held_back(redis_server, 200)

    async def start() -> AsyncRedisTaskHandle:
        return await session.start_subagent_task("outlived-its-dropped-loop")

    started = dropped.create_task(start())
    dropped.run_until_complete(asyncio.sleep(0.01))
    assert not started.done()
    _until_replied(redis_server, session, "outlived-its-dropped-loop")  # to a loop that will never run
    collected = weakref.ref(dropped)
    del dropped, started
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # the unclosed loop's and its socket's, on purpose
        gc.collect()
    assert collected() is None

    snapshot = _finished_seen_from_another_thread(session, "outlived-its-dropped-loop")
    assert (snapshot.status, snapshot.error) == (SubagentStatus.FAILED, DROPPED_HANDLE_ERROR)


def test_a_loop_that_cannot_watch_a_socket_closed_with_an_outcome_waiting_ends_its_task(
    redis_server: RedisServer,
) -> None:
    """A loop woken through ``call_soon_threadsafe`` (it cannot watch a socket) that closes with a wake-up
    scheduled and not run: the outcome waiting for it is dropped, so the handle nobody received ends its task,
    and no later outcome of the thread waits behind it."""
    session = asyncio.run(_redis_session(redis_server))
    loop = _LoopWithoutReaders()
    _reply_held_back(redis_server, 200)

    async def start() -> AsyncRedisTaskHandle:
        return await session.start_subagent_task("outlived-its-readerless-loop")

    started = loop.create_task(start())
    loop.run_until_complete(asyncio.sleep(0.01))
    _until_replied(redis_server, session, "outlived-its-readerless-loop")
    started.cancel()  # what asyncio.run does with the tasks left when its main one returns
    loop.close()
    snapshot = _finished_seen_from_another_thread(session, "outlived-its-readerless-loop")
    assert (snapshot.status, snapshot.error) == (SubagentStatus.FAILED, DROPPED_HANDLE_ERROR)
