"""The progress log (contract §5): ``handle.progress(message, *, data=None)``; snapshots keep the latest
``progress_log_size`` reports (a session setting, default 16) as ``ProgressEntry(at, message, data)``, oldest
first, with read-only data. In memory and on Redis."""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from types import MappingProxyType
from typing import Any

import pytest
from redis_support import RedisServer

from subagent_tracker import (
    AsyncRedisRegistry,
    ProgressEntry,
    RedisRegistry,
    Session,
    SubagentTask,
    TaskHandleProtocol,
)
from subagent_tracker.integrations._support import BlockingSession

_IDS = itertools.count()


@pytest.fixture(params=["memory", "redis"])
def store(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _session(
    request: pytest.FixtureRequest, store: str, progress_log_size: int | None = None
) -> BlockingSession:
    if store == "memory":
        return Session(progress_log_size=progress_log_size)
    server: RedisServer = request.getfixturevalue("module_redis_server")
    return RedisRegistry(server.url).session(f"progress-{next(_IDS)}", progress_log_size=progress_log_size)


def _snapshot(handle: TaskHandleProtocol) -> SubagentTask:
    snapshot = handle.snapshot()
    assert snapshot is not None
    return snapshot


def test_the_latest_reports_are_kept_oldest_first_with_read_only_data(
    request: pytest.FixtureRequest, store: str
) -> None:
    session = _session(request, store, progress_log_size=3)
    before = time.time()
    with session.start_subagent_task("job") as handle:
        assert handle.progress("searching")
        for step in range(1, 5):
            assert handle.progress(f"step {step}", data={"step": step, "found": [step, step * 2]})
        snapshot = _snapshot(handle)
    assert snapshot.progress_count == 5 and snapshot.progress == "step 4"
    log = snapshot.progress_log
    assert [entry.message for entry in log] == ["step 2", "step 3", "step 4"]
    assert all(isinstance(entry, ProgressEntry) for entry in log)
    assert before - 1 <= log[0].at <= log[1].at <= log[2].at <= time.time() + 1
    data = log[2].data
    assert isinstance(data, MappingProxyType) and data == {"step": 4, "found": (4, 8)}
    with pytest.raises(TypeError):
        data["step"] = 5  # type: ignore[index]
    _at, message, kept = log[0]
    assert (message, kept["step"]) == ("step 2", 2)
    finished = session.subagent_task("job")
    assert finished is not None and finished.progress_log == log, "kept once finished"


def test_the_default_keeps_sixteen_and_zero_keeps_none(request: pytest.FixtureRequest, store: str) -> None:
    session = _session(request, store)
    with session.start_subagent_task("job") as handle:
        for step in range(20):
            handle.progress(str(step))
        assert [entry.message for entry in _snapshot(handle).progress_log] == [str(s) for s in range(4, 20)]
        assert all(entry.data is None for entry in _snapshot(handle).progress_log)
    silent = _session(request, store, progress_log_size=0)
    with silent.start_subagent_task("job") as handle:
        handle.progress("step", data={"a": 1})
        snapshot = _snapshot(handle)
    assert snapshot.progress_log == [] and snapshot.progress == "step"


def test_a_report_after_the_end_is_refused_and_not_logged(request: pytest.FixtureRequest, store: str) -> None:
    session = _session(request, store)
    handle = session.start_subagent_task("job")
    handle.progress("working")
    handle.complete()
    assert not handle.progress("late", data={"x": 1})
    snapshot = session.subagent_task("job")
    assert snapshot is not None and [entry.message for entry in snapshot.progress_log] == ["working"]


def test_reports_racing_a_cancel_and_the_end_are_logged_only_when_accepted(
    request: pytest.FixtureRequest, store: str
) -> None:
    session = _session(request, store, progress_log_size=1000)
    handle = session.start_subagent_task("job")
    barrier = threading.Barrier(2)
    accepted: list[int] = []

    def report() -> None:
        barrier.wait()
        accepted.extend(step for step in range(100) if handle.progress(str(step), data={"step": step}))

    reporter = threading.Thread(target=report)
    reporter.start()
    barrier.wait()
    session.cancel_subagent_task("job")
    handle.complete()
    reporter.join(30)
    snapshot = session.subagent_task("job")
    assert snapshot is not None
    assert [entry.message for entry in snapshot.progress_log] == [str(step) for step in accepted]
    assert snapshot.progress_count == len(accepted)


@pytest.mark.parametrize(
    ("settings", "error", "message"),
    [
        ({"progress_log_size": -1}, ValueError, "progress_log_size must be a non-negative int, got -1"),
        ({"progress_log_size": 1025}, ValueError, "progress_log_size must be at most 1024, got 1025"),
        ({"progress_log_size": "16"}, TypeError, "progress_log_size must be an int, got str"),
        ({"progress_log_size": True}, TypeError, "progress_log_size must be an int, got bool"),
    ],
)
def test_bad_sizes_are_refused(
    request: pytest.FixtureRequest,
    store: str,
    settings: dict[str, Any],
    error: type[Exception],
    message: str,
) -> None:
    with pytest.raises(error, match=message):
        _session(request, store, **settings)


def test_bad_data_is_refused_and_nothing_is_recorded(request: pytest.FixtureRequest, store: str) -> None:
    session = _session(request, store)
    with session.start_subagent_task("job") as handle:
        with pytest.raises(TypeError, match="message must be a str"):
            handle.progress(42)  # type: ignore[arg-type]
        if store == "redis":
            with pytest.raises(TypeError, match="data"):
                handle.progress("step", data={"when": object()})
        snapshot = _snapshot(handle)
    assert snapshot.progress_count == 0 and snapshot.progress_log == []


def test_the_asyncio_redis_handle_reports_with_data(module_redis_server: RedisServer) -> None:
    async def scenario() -> None:
        registry = await AsyncRedisRegistry.connect(module_redis_server.url)
        session = await registry.session(f"progress-async-{next(_IDS)}", progress_log_size=2)
        handle = await session.start_subagent_task("job")
        for step in range(3):
            assert await handle.progress(f"step {step}", data=[step])
        snapshot = await handle.snapshot()
        assert snapshot is not None
        assert [(entry.message, entry.data) for entry in snapshot.progress_log] == [
            ("step 1", (1,)),
            ("step 2", (2,)),
        ]
        await handle.complete()

    asyncio.run(scenario())


def test_data_leaving_the_log_is_dropped_with_no_lock_held() -> None:
    """A report's data may be any object in memory; its finalizer, run as the report leaves the log, may read
    the task without deadlocking."""
    session = Session(progress_log_size=1)
    handle = session.start_subagent_task("job")
    seen: list[int] = []

    class Finalized:
        def __del__(self) -> None:
            snapshot = handle.snapshot()
            seen.append(snapshot.progress_count)

    handle.progress("first", data={"owner": Finalized()})
    finished = threading.Event()

    def second_report() -> None:
        handle.progress("second")
        finished.set()

    reporter = threading.Thread(target=second_report, daemon=True)
    reporter.start()
    assert finished.wait(5), "the finalizer deadlocked on the task's lock"
    assert seen == [2]
    handle.complete()
