"""Redis losing writes: a restart from an older snapshot, as a restore from a backup or a failover to a
lagging replica leaves the server. One regression test per defect a hostile run found (each failed before
its fix), against a real ``redis-server`` started again from its own ``SAVE``. CONTRACT §§2, 3, 18, 20, 21;
the Rust suite (``crates/subagent-tracker-redis/tests/stores/lost_writes.rs``) covers the same faults."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis_support import RedisServer, until_answered

from subagent_tracker import (
    LEASE_LOST_REASON,
    ORPHANED_RUN_ERROR,
    WORKER_LOST_ERROR,
    RedisRegistry,
    RedisSession,
    RegistryUnavailableError,
    SubagentEvent,
    SubagentStatus,
)


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    yield server
    server.stop()


def _registry(url: str, lease: float = 10.0) -> RedisRegistry:
    return RedisRegistry(url, reconcile_interval=0.2, timeout=0.5, lease=lease)


def _wait_for_status(
    session: RedisSession, task_id: str, status: SubagentStatus, seconds: float
) -> str | None:
    """Waits until the task has finished with ``status``; returns its error."""
    deadline = time.monotonic() + seconds
    while True:
        snapshot = until_answered(lambda: session.subagent_task(task_id), 5)
        if snapshot is not None and snapshot.finished and snapshot.status is status:
            return snapshot.error
        assert time.monotonic() < deadline, f"{task_id} is {snapshot and snapshot.status}"
        time.sleep(0.05)


def test_a_run_lost_to_a_restore_never_has_its_number_handed_out_again(redis_server: RedisServer) -> None:
    """Defect 1: the rerun of a lost task got the lost run's number, so the old runner completed the rerun."""
    old = _registry(redis_server.url).session("s")
    kept = old.start_subagent_task("kept")
    snapshot = redis_server.save_snapshot()
    stale = old.start_subagent_task("t")
    stale_other = old.start_subagent_task("u")
    server = redis_server.restart_from_snapshot(snapshot)
    try:
        new = _registry(server.url).session("s")
        rerun = new.start_subagent_task("t")
        rerun_other = new.start_subagent_task("u")
        assert until_answered(lambda: stale.complete("stale"), 5) is False
        assert rerun.complete("fresh") is True
        finished = new.subagent_task("t")
        assert finished is not None
        assert finished.result == "fresh"
        assert new.cancel_subagent_task("u", "the rerun") is True
        assert rerun_other.token.wait(5)
        time.sleep(0.4)
        assert not stale_other.token.is_cancelled
        assert not kept.token.is_cancelled
    finally:
        server.stop()


def test_a_run_whose_end_was_lost_is_ended_by_its_live_worker(redis_server: RedisServer) -> None:
    """Defect 2: a task whose acknowledged end was lost stayed ``RUNNING`` for good under its live worker."""
    session = _registry(redis_server.url).session("s")
    handle = session.start_subagent_task("t")
    snapshot = redis_server.save_snapshot()
    assert handle.complete("done") is True
    server = redis_server.restart_from_snapshot(snapshot)
    try:
        assert _wait_for_status(session, "t", SubagentStatus.FAILED, 10) == ORPHANED_RUN_ERROR
    finally:
        server.stop()


def test_a_live_worker_whose_runs_were_reaped_fires_their_tokens(redis_server: RedisServer) -> None:
    """Defect 3: a reaper failed a live worker's run after a restore whose lease of it had lapsed, and the
    live worker never fired the run's token. Its ACL user does not survive the restart, which keeps it out
    until the reaper has failed the run, as a worker cut off by a failover would be."""
    grant = ("ACL", "SETUSER", "runner", "on", ">secret", "~*", "&*", "+@all")
    assert redis_server.admin(*grant) == b"+OK"
    runner_url = f"redis://runner:secret@127.0.0.1:{redis_server.port}/0"
    handle = _registry(runner_url, lease=3.0).session("s").start_subagent_task("t")
    snapshot = redis_server.save_snapshot()
    time.sleep(3.5)
    server = redis_server.restart_from_snapshot(snapshot)
    try:
        reaper = _registry(server.url, lease=0.3).session("s")
        assert _wait_for_status(reaper, "t", SubagentStatus.FAILED, 5) == WORKER_LOST_ERROR
        assert not handle.token.is_cancelled
        assert server.admin(*grant) == b"+OK"
        assert handle.token.wait(5), "the live worker fires the reaped run's token"
        assert handle.token.reason == LEASE_LOST_REASON
        assert handle.complete("late") is False
    finally:
        server.stop()


def test_a_handle_handed_out_cancelled_has_fired_from_the_reply_alone(redis_server: RedisServer) -> None:
    """Defect 10: a token handed out already cancelled fired only through one more server call; the reply now
    carries the cancel, and the slow log, set to log every command, shows no further call of this session (the
    registries of earlier tests on this server still reconcile their own)."""
    session = RedisRegistry(redis_server.url, reconcile_interval=30.0).session("handed-out-cancelled")
    parent = session.start_subagent_task("p")
    assert session.cancel_subagent_task("p", "stop the tree") is True
    session.reserve_subagent_task("queued")
    assert session.cancel_subagent_task("queued", "not wanted") is True
    # The worker's own calls settle first: it subscribes to its cancels with its first held run, and reads its
    # held runs' states once subscribed (a cancel may have come before), which is not the call counted here.
    assert parent.token.wait(5)
    time.sleep(0.3)
    redis_server.admin("CONFIG", "SET", "slowlog-log-slower-than", "0")
    redis_server.admin("SLOWLOG", "RESET")
    child = session.start_subagent_task("child", parent_id="p")
    assert child.token.is_cancelled
    assert child.token.reason == "stop the tree"
    claimed = session.claim_subagent_task("queued")
    assert claimed.token.is_cancelled
    assert claimed.token.reason == "not wanted"
    entries: list[dict[str, Any]] = redis.Redis(port=redis_server.port).slowlog_get(1000)  # type: ignore[assignment]
    calls = [entry["command"].decode() for entry in entries]
    of_this_session = [call.split()[1] for call in calls if "{s:handed-out-cancelled}" in call]
    assert "stv2_open" in of_this_session
    assert "stv2_claim" in of_this_session
    assert "stv2_status" not in of_this_session
    assert parent.token.is_cancelled


def test_an_event_reader_after_a_restore_reads_every_new_event_after_a_lagged(
    redis_server: RedisServer,
) -> None:
    """Defect 4: after the restore the stream numbered new events from its restored last id, which a reader
    had passed: it saw none of them, and no ``lagged``. Now it reads a ``lagged`` that counts the events it
    had read that Redis lost, then every new event."""
    session = _registry(redis_server.url).session("s")
    events = session.events()
    handle = session.start_subagent_task("t")
    for index in range(9):
        handle.progress(f"before {index}")
    snapshot = redis_server.save_snapshot()
    for index in range(30):
        handle.progress(f"lost {index}")

    async def read(count: int) -> list[SubagentEvent]:
        read: list[SubagentEvent] = []
        while len(read) < count:
            try:
                read.append(await asyncio.wait_for(events.__anext__(), timeout=5))
            except RegistryUnavailableError:
                continue  # the reader's connection died with the server: the next read connects again
        return read

    assert [event.kind for event in asyncio.run(read(40))] == ["started"] + ["progress"] * 39
    server = redis_server.restart_from_snapshot(snapshot)
    try:
        _registry(server.url).session("s").start_subagent_task("after")
        lagged, started = asyncio.run(read(2))
        assert (lagged.kind, lagged.missed) == ("lagged", 30)
        assert (started.kind, started.task_id) == ("started", "after")
    finally:
        server.stop()
