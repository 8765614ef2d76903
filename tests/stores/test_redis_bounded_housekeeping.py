"""Contract §3 and §20 on Redis: the work that goes through a whole session or tree is done in server calls of
a bounded number of tasks each, so that one session never freezes the node that others share. A session is
removed (by the sweep, or before its id opens a new incarnation) at most 64 tasks per call, and leaves at the
first; cancel-and-wait reads a tree's cancel handlers at most 32 tasks per call."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from redis_support import FunctionCalls, RedisServer

from subagent_tracker import RedisRegistry, SessionClosedError, SubagentStatus

#: The most tasks one call deletes of a session being removed (`REMOVAL_STEP` in `session_state.lua`).
REMOVAL_STEP = 64


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    yield server
    server.stop()


def _keys(server: RedisServer, pattern: str) -> list[str]:
    return [key for key in server.cli("KEYS", pattern) if key]


def _finished_tasks(session: Any, count: int) -> None:
    for first in range(0, count, 100):
        handles = session.start_subagent_tasks(
            [{"task_id": f"t{index}"} for index in range(first, min(count, first + 100))]
        )
        assert session.end_subagent_tasks([{"handle": handle} for handle in handles]) == [True] * len(handles)


def test_an_idle_session_of_many_tasks_is_swept_in_bounded_calls(redis_server: RedisServer) -> None:
    registry = RedisRegistry(redis_server.url, key_prefix="sweep:", lease=0.2, session_ttl=0.3)
    tasks = 4 * REMOVAL_STEP + 1
    _finished_tasks(registry.session("big", max_finished_tasks=10_000), tasks)
    with FunctionCalls(redis_server) as calls:
        deadline = time.monotonic() + 15
        while _keys(redis_server, "sweep:v2:{s:big}*"):
            assert time.monotonic() < deadline, "the sweep removes every key of the idle session"
            time.sleep(0.05)
    assert calls.of("sweep") > tasks // REMOVAL_STEP
    assert registry.get_session("big") is None


def test_a_closed_session_is_removed_in_bounded_calls_before_its_id_opens_again(
    redis_server: RedisServer,
) -> None:
    registry = RedisRegistry(redis_server.url, key_prefix="reopen:")
    tasks = 3 * REMOVAL_STEP + 1
    session = registry.session("s", max_finished_tasks=10_000)
    _finished_tasks(session, tasks)
    session.close()
    with FunctionCalls(redis_server) as calls:
        again = registry.session("s")
    assert calls.of("touch") > tasks // REMOVAL_STEP
    assert again.subagent_tasks() == []
    assert _keys(redis_server, "reopen:v2:{s:s}:t:*") == []
    with pytest.raises(SessionClosedError):
        session.start_subagent_task("late")
    again.start_subagent_task("t0").complete()


def test_what_a_lost_session_left_is_removed_before_its_id_opens_again(redis_server: RedisServer) -> None:
    """The session's hash is lost (evicted, or an older state restored) and the sweep has taken one step of
    removing what is left, with no hash left to say so: opening the id again finishes that removal first."""
    registry = RedisRegistry(redis_server.url, key_prefix="lost:")
    tasks = 3 * REMOVAL_STEP
    _finished_tasks(registry.session("s", max_finished_tasks=10_000), tasks)
    session_key = "lost:v2:{s:s}:session"
    redis_server.cli("DEL", session_key)
    assert redis_server.cli("FCALL", "stv2_sweep", "1", session_key, "0") == ["-3"]
    again = registry.session("s")
    assert again.subagent_tasks() == []
    assert again.subagent_task("t1") is None
    again.start_subagent_task("t0").complete()
    assert _keys(redis_server, "lost:v2:{s:s}:t:*") == ["lost:v2:{s:s}:t:t0"]


def test_cancel_and_wait_reads_a_large_tree_in_bounded_calls(redis_server: RedisServer) -> None:
    registry = RedisRegistry(redis_server.url, key_prefix="wait:")
    session = registry.session("s")
    root = session.start_subagent_task("root")
    children = session.start_subagent_tasks(
        [{"task_id": f"c{index}", "parent_id": "root"} for index in range(100)]
    )
    cleaned: list[str] = []

    def stop_when_cancelled(handle: Any) -> None:
        assert handle.token.wait(10)
        with handle:
            pass

    last = children[-1]

    def slow_cleanup() -> None:
        time.sleep(0.2)
        cleaned.append(last.task_id)

    last.token.on_cancel(slow_cleanup)
    runners = [threading.Thread(target=stop_when_cancelled, args=(handle,)) for handle in [root, *children]]
    for runner in runners:
        runner.start()

    async def cancel_and_wait() -> Any:
        return await asyncio.wait_for(session.cancel_subagent_task_and_wait("root", "stop"), 10)

    with FunctionCalls(redis_server) as calls:
        task = asyncio.run(cancel_and_wait())
    for runner in runners:
        runner.join()
    assert cleaned == ["c99"], "the handler of the tree's last task finished before the wait returned"
    assert (task.status, task.finished) == (SubagentStatus.CANCELLED, True)
    assert calls.of("handling") >= 101 // 32
