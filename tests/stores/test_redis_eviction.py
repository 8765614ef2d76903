"""A Redis that evicts keys under memory pressure (``maxmemory`` with ``allkeys-lru``, as managed Redis used
as a cache often is), against a real ``redis-server``: refused when connecting unless allowed; once
allowed, a session whose keys were evicted raises ``SessionLostError``, never ``SessionClosedError``, its
runners stop with ``SESSION_LOST_REASON``, and the sweep removes what eviction left. The regression test of
defect 8 of the hostile run on the store; ``crates/subagent-tracker-redis/tests/stores/eviction.rs`` is its
Rust twin."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from redis_support import RedisServer

from subagent_tracker import (
    SESSION_LOST_REASON,
    AsyncRedisRegistry,
    RedisRegistry,
    SessionClosedError,
    SessionLostError,
)


@pytest.fixture
def evicting_server() -> Iterator[RedisServer]:
    server = RedisServer(
        extra_arguments=(
            "--maxmemory",
            "4mb",
            "--maxmemory-policy",
            "allkeys-lru",
            "--maxmemory-samples",
            "10",
        )
    )
    yield server
    server.stop()


def test_an_evicting_server_is_refused_unless_allowed(evicting_server: RedisServer) -> None:
    with pytest.raises(ValueError, match=r"maxmemory-policy allkeys-lru.*allow_eviction=True"):
        RedisRegistry(evicting_server.url)

    async def connect() -> None:
        await AsyncRedisRegistry.connect(evicting_server.url)

    import asyncio

    with pytest.raises(ValueError, match="allkeys-lru"):
        asyncio.run(connect())
    with pytest.raises(TypeError):
        RedisRegistry(evicting_server.url, allow_eviction="yes")  # type: ignore[arg-type]
    RedisRegistry(evicting_server.url, allow_eviction=True).session("s").start_subagent_task("t").complete()


def test_an_evicted_session_is_lost_never_closed_and_its_runners_stop(evicting_server: RedisServer) -> None:
    registry = RedisRegistry(
        evicting_server.url,
        allow_eviction=True,
        key_prefix="ev:",
        reconcile_interval=0.1,
        lease=0.6,
        session_ttl=1.0,
        timeout=1.0,
    )
    session = registry.session("keep")
    runner = session.start_subagent_task("t")
    # Fill the server past its memory: the session's hash, idle for seconds (the server counts idle time in
    # whole seconds), goes first; the index, read after every write, is among the most recently used.
    time.sleep(2.5)
    deadline = time.monotonic() + 30
    for round in range(400):
        if evicting_server.cli("EXISTS", "ev:v2:{s:keep}:session") == ["0"]:
            break
        assert time.monotonic() < deadline
        evicting_server.cli("SETRANGE", f"filler:{round}", "262143", "x")
        evicting_server.cli("ZSCORE", "ev:v2:{registry}:sessions", "keep")
    else:
        pytest.fail("the session's hash was not evicted")

    with pytest.raises(SessionLostError, match='session "keep" is lost'):
        session.subagent_task("t")
    with pytest.raises(SessionLostError):
        session.cancel_subagent_task("t")
    assert not isinstance(SessionLostError("x"), SessionClosedError)
    assert runner.token.wait(5), "the lost session's runner stops"
    assert runner.token.reason == SESSION_LOST_REASON

    deadline = time.monotonic() + 10
    while [key for key in evicting_server.cli("KEYS", "ev:v2:{s:keep}:*") if key]:
        assert time.monotonic() < deadline, "the sweep removes what eviction left"
        time.sleep(0.1)
    with pytest.raises(SessionLostError):
        session.subagent_tasks()
