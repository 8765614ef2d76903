"""CONTRACT §2, §3, §10: the first transition wins under many threads; cascades race child starts."""

from __future__ import annotations

import asyncio
import sys
import threading

import pytest

from subagent_tracker import (
    Session,
    SessionClosedError,
    SubagentStatus,
    SubagentTaskHandle,
    UnknownTaskError,
)

TASKS = 3_000


@pytest.fixture(autouse=True)
def _switch_threads_often() -> object:
    # Make the interpreter hand the GIL over far more often, so threads really interleave between calls.
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(previous)


def _race(session: Session, end: str) -> None:
    handles = [session.start_subagent_task(f"t{index}") for index in range(TASKS)]
    cancel_results: list[list[bool]] = [[], []]
    end_results: list[bool] = []
    barrier = threading.Barrier(3)

    def cancel_all(slot: int) -> None:
        barrier.wait()
        order = range(TASKS) if slot == 0 else reversed(range(TASKS))
        results = {index: session.cancel_subagent_task(f"t{index}") for index in order}
        cancel_results[slot] = [results[index] for index in range(TASKS)]

    def end_all() -> None:
        barrier.wait()
        for handle in handles:
            end_results.append(handle.complete("ok") if end == "complete" else handle.fail("error"))

    threads = [threading.Thread(target=cancel_all, args=(slot,)) for slot in (0, 1)]
    threads.append(threading.Thread(target=end_all))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    expected_end = SubagentStatus.COMPLETED if end == "complete" else SubagentStatus.FAILED
    for index, handle in enumerate(handles):
        snapshot = handle.snapshot()
        cancel_won = cancel_results[0][index] + cancel_results[1][index]
        assert cancel_won <= 1, f"t{index}: two cancels returned True"
        assert (cancel_won == 1) == (snapshot.status is SubagentStatus.CANCELLED), f"t{index}"
        assert end_results[index] == (snapshot.status is expected_end), f"t{index}"
        assert cancel_won + end_results[index] == 1, f"t{index}: exactly one winner"
        assert handle.token.is_cancelled == (cancel_won == 1)
        assert snapshot.finished


def test_cancel_racing_complete_has_exactly_one_winner(session: Session) -> None:
    _race(session, "complete")


def test_cancel_racing_fail_has_exactly_one_winner(session: Session) -> None:
    _race(session, "fail")


def _cascade_racing_spawns() -> None:
    session = Session(max_finished_tasks=100_000)
    root = session.start_subagent_task("root")
    barrier = threading.Barrier(3)
    held: list[SubagentTaskHandle] = []
    lock = threading.Lock()

    def spawn(prefix: str) -> None:
        barrier.wait()
        previous = "root"
        for index in range(200):
            try:
                handle = session.start_subagent_task(f"{prefix}{index}", parent_id=previous)
            except UnknownTaskError:
                continue
            with lock:
                held.append(handle)
            previous = "root" if index % 4 == 0 else handle.task_id

    threads = [threading.Thread(target=spawn, args=(prefix,)) for prefix in ("a", "b")]
    for thread in threads:
        thread.start()
    barrier.wait()
    assert session.cancel_subagent_task("root", reason="race") is True
    for thread in threads:
        thread.join()
    assert session.pending_subagent_tasks() == []
    for snapshot in session.subagent_tasks():
        assert snapshot.status is SubagentStatus.CANCELLED, snapshot
        assert snapshot.cancel_origin == "root"
        assert not snapshot.finished, "every runner still holds its handle"
    assert root.token.is_cancelled


def test_cascade_racing_child_starts_leaves_no_orphan_running() -> None:
    for _ in range(20):
        _cascade_racing_spawns()


def _concurrent_cancels() -> list[bool]:
    session = Session()
    handle = session.start_subagent_task("a")
    barrier = threading.Barrier(4)
    results: list[bool] = []

    def cancel() -> None:
        barrier.wait()
        results.append(session.cancel_subagent_task("a"))

    threads = [threading.Thread(target=cancel) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert handle.token.is_cancelled
    return sorted(results)


def test_of_many_concurrent_cancels_exactly_one_returns_true() -> None:
    for _ in range(100):
        assert _concurrent_cancels() == [False, False, False, True]


def _starts_racing_close() -> list[SubagentTaskHandle]:
    session = Session()
    barrier = threading.Barrier(2)
    started: list[SubagentTaskHandle] = []

    def start_many() -> None:
        barrier.wait()
        for index in range(300):
            try:
                started.append(session.start_subagent_task(f"t{index}"))
            except SessionClosedError:
                return

    starter = threading.Thread(target=start_many)
    starter.start()
    barrier.wait()
    session.close(reason="closing")
    starter.join()
    assert session.pending_subagent_tasks() == [], "a start raced past close and kept running"
    return started


def test_a_start_racing_close_is_refused_or_starts_cancelled() -> None:
    for _ in range(50):
        assert all(handle.token.is_cancelled for handle in _starts_racing_close())


def _events_of_a_raced_task() -> list[str]:
    session = Session()

    async def collect() -> list[str]:
        stream = session.events()
        handle = session.start_subagent_task("a")
        racers = [
            threading.Thread(target=session.cancel_subagent_task, args=("a",)),
            threading.Thread(target=handle.complete),
        ]
        for racer in racers:
            racer.start()
        for racer in racers:
            racer.join()
        kinds: list[str] = []
        while (event := stream._subscription.try_next()) is not None:
            kinds.append(event.kind)
        stream.close()
        return kinds

    return asyncio.run(collect())


def test_events_of_one_task_stay_in_order_when_threads_race() -> None:
    for _ in range(100):
        kinds = _events_of_a_raced_task()
        assert kinds[0] == "started" and kinds[-1] == "ended", kinds
        assert kinds.count("ended") == 1
