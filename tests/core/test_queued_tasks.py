"""CONTRACT §18: a reserved task is queued until claimed, and a cancel before the claim is never lost."""

from __future__ import annotations

import asyncio
import functools
import sys
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import pytest

from subagent_tracker import (
    CLAIM_TIMEOUT_ERROR,
    DuplicateTaskError,
    Session,
    SessionClosedError,
    SessionProtocol,
    SubagentStatus,
    SubagentTaskHandle,
    UnknownTaskError,
)
from subagent_tracker.integrations._support import BlockingSession

_T = TypeVar("_T")


def test_a_reservation_is_queued_pending_and_holds_its_id(session: Session) -> None:
    first = session.start_subagent_task("first")
    task_id = session.reserve_subagent_task("job", agent="coder", metadata={"prompt": "fix it"})
    assert task_id == "job"
    snapshot = session.subagent_task("job")
    assert snapshot is not None
    assert snapshot.status is SubagentStatus.QUEUED
    assert str(snapshot.status) == "queued"
    assert snapshot.status.is_pending and not snapshot.status.is_terminal
    assert not snapshot.finished
    assert snapshot.queued_at == snapshot.started_at
    assert snapshot.claimed_at is None
    assert snapshot.metadata == {"prompt": "fix it"}
    assert [task.task_id for task in session.pending_subagent_tasks()] == ["first", "job"]
    with pytest.raises(DuplicateTaskError):
        session.reserve_subagent_task("job")
    with pytest.raises(DuplicateTaskError):
        session.start_subagent_task("job")
    first.complete()


def test_a_generated_id_is_returned(session: Session) -> None:
    task_id = session.reserve_subagent_task()
    assert isinstance(task_id, str) and task_id
    snapshot = session.subagent_task(task_id)
    assert snapshot is not None and snapshot.status is SubagentStatus.QUEUED


def test_a_claim_hands_the_runner_a_running_task(session: Session) -> None:
    session.reserve_subagent_task("job")
    with session.claim_subagent_task("job") as handle:
        assert isinstance(handle, SubagentTaskHandle)
        snapshot = handle.snapshot()
        assert snapshot.status is SubagentStatus.RUNNING
        assert snapshot.claimed_at is not None and snapshot.queued_at is not None
        assert snapshot.claimed_at >= snapshot.queued_at
    final = session.subagent_task("job")
    assert final is not None and final.status is SubagentStatus.COMPLETED


def test_claims_of_unknown_claimed_or_started_tasks_are_refused(session: Session) -> None:
    with pytest.raises(UnknownTaskError):
        session.claim_subagent_task("nobody")
    session.reserve_subagent_task("job")
    handle = session.claim_subagent_task("job")
    with pytest.raises(DuplicateTaskError, match="already claimed"):
        session.claim_subagent_task("job")
    started = session.start_subagent_task("started")
    with pytest.raises(DuplicateTaskError):
        session.claim_subagent_task("started")
    handle.complete()
    started.complete()


def test_a_cancel_before_the_claim_finishes_the_task_and_reaches_the_runner(session: Session) -> None:
    session.reserve_subagent_task("job")
    assert session.cancel_subagent_task("job", reason="user pressed stop")
    assert not session.cancel_subagent_task("job")
    snapshot = session.subagent_task("job")
    assert snapshot is not None
    assert snapshot.status is SubagentStatus.CANCELLED
    assert snapshot.finished, "nothing runs, so nothing is waited for"
    assert snapshot.ended_at is not None
    assert session.pending_subagent_tasks() == []

    handle = session.claim_subagent_task("job")
    assert handle.token.is_cancelled
    assert handle.token.reason == "user pressed stop"
    ran = False
    with pytest.raises(Exception, match="user pressed stop"), handle:
        handle.token.raise_if_cancelled()
        ran = True
    assert not ran
    assert not handle.complete()
    claimed = session.subagent_task("job")
    assert claimed is not None and claimed.claimed_at is not None
    assert claimed.status is SubagentStatus.CANCELLED
    with pytest.raises(DuplicateTaskError):
        session.claim_subagent_task("job")


def test_a_waiter_on_a_queued_task_wakes_when_it_is_cancelled(session: Session) -> None:
    async def main() -> None:
        session.reserve_subagent_task("job")
        waiter = asyncio.ensure_future(session.wait_subagent_task("job", timeout=5))
        await asyncio.sleep(0)
        assert not waiter.done()
        session.cancel_subagent_task("job")
        final = await waiter
        assert final.status is SubagentStatus.CANCELLED and final.finished

    asyncio.run(asyncio.wait_for(main(), 10))


def test_cascades_session_cancels_and_deadlines_reach_queued_tasks(session: Session) -> None:
    parent = session.start_subagent_task("parent")
    session.reserve_subagent_task("queued-child", parent_id="parent")
    session.reserve_subagent_task("grandchild", parent_id="queued-child")
    assert session.cancel_subagent_task("parent")
    for task_id in ("queued-child", "grandchild"):
        snapshot = session.subagent_task(task_id)
        assert snapshot is not None
        assert snapshot.status is SubagentStatus.CANCELLED
        assert snapshot.cancel_origin == "parent"
        assert snapshot.cancel_cause == "parent"
        assert snapshot.finished
    session.reserve_subagent_task("late", parent_id="parent")
    late = session.subagent_task("late")
    assert late is not None and late.status is SubagentStatus.CANCELLED and late.finished
    parent.complete()

    session.reserve_subagent_task("a")
    session.reserve_subagent_task("b")
    assert session.cancel("shutdown") == 2
    assert session.pending_subagent_tasks() == []

    session.reserve_subagent_task("soon", timeout=0.02)
    deadline = time.monotonic() + 5
    while not (snapshot := session.subagent_task("soon")) or not snapshot.finished:
        assert time.monotonic() < deadline, "the deadline never reached the queued task"
        time.sleep(0.005)
    assert snapshot.cancel_cause == "deadline"


def test_a_linked_token_reaches_a_queued_task(session: Session) -> None:
    request = session.start_subagent_task("request")
    session.reserve_subagent_task("job", linked=[request.token])
    session.cancel_subagent_task("request", reason="client went away")
    snapshot = session.subagent_task("job")
    assert snapshot is not None and snapshot.cancel_cause == "linked" and snapshot.finished
    request.complete()


def test_a_link_reaches_only_the_run_it_was_linked_to(tracked_session: SessionProtocol) -> None:
    """A link holds a run, not an id: a later run of the same id is out of its reach, on either store, whether
    the linked run was a reservation or a start ended by id while its runner still holds the handle."""
    requests = Session()
    first, second = requests.start_subagent_task("first"), requests.start_subagent_task("second")
    tracked_session.reserve_subagent_task("queued", linked=[first.token])
    assert tracked_session.cancel_subagent_task("queued")
    tracked_session.reserve_subagent_task("queued")
    old_runner = tracked_session.start_subagent_task("running", linked=[second.token])
    assert tracked_session.end_subagent_task("running")
    new_runner = tracked_session.start_subagent_task("running")
    requests.cancel()
    # On Redis a linked cancel arrives a round trip later: give a wrong one time to land.
    time.sleep(0.2)
    queued, running = tracked_session.subagent_task("queued"), tracked_session.subagent_task("running")
    assert queued is not None and queued.status is SubagentStatus.QUEUED
    assert running is not None and running.status is SubagentStatus.RUNNING
    assert not new_runner.token.is_cancelled
    old_runner.complete()
    new_runner.complete()


def test_ending_a_reservation_by_id_wins_and_refuses_later_claims(session: Session) -> None:
    session.reserve_subagent_task("job")
    assert session.end_subagent_task("job", error="the worker pool is gone")
    assert not session.end_subagent_task("job", result="late")
    with pytest.raises(DuplicateTaskError, match="ended failed"):
        session.claim_subagent_task("job")


def test_an_unclaimed_reservation_fails_after_its_claim_timeout(session: Session) -> None:
    session.reserve_subagent_task("job", claim_timeout=0.02)
    deadline = time.monotonic() + 5
    while not (snapshot := session.subagent_task("job")) or not snapshot.finished:
        assert time.monotonic() < deadline
        time.sleep(0.005)
    assert snapshot.status is SubagentStatus.FAILED
    assert snapshot.error is not None and snapshot.error.startswith(CLAIM_TIMEOUT_ERROR)
    assert "0.02 seconds" in snapshot.error
    with pytest.raises(DuplicateTaskError):
        session.claim_subagent_task("job")


def test_a_claim_in_time_disarms_the_claim_timeout(session: Session) -> None:
    session.reserve_subagent_task("job", claim_timeout=0.03)
    handle = session.claim_subagent_task("job")
    time.sleep(0.1)
    assert handle.snapshot().status is SubagentStatus.RUNNING
    assert handle.complete()


@pytest.mark.parametrize(
    ("claim_timeout", "error"),
    [(-1, ValueError), (float("nan"), ValueError), ("5", TypeError), (True, TypeError)],
)
def test_a_bad_claim_timeout_is_refused_and_reserves_nothing(
    session: Session, claim_timeout: object, error: type[Exception]
) -> None:
    with pytest.raises(error, match="claim_timeout"):
        session.reserve_subagent_task("job", claim_timeout=claim_timeout)  # type: ignore[arg-type]
    assert session.subagent_task("job") is None


def test_a_closed_session_refuses_reservations(session: Session) -> None:
    session.reserve_subagent_task("job")
    assert session.close() == 1
    with pytest.raises(SessionClosedError):
        session.reserve_subagent_task("other")


def test_events_tell_the_reservation_and_the_claim(session: Session) -> None:
    async def main() -> None:
        events = session.events()
        session.reserve_subagent_task("job")
        session.claim_subagent_task("job").complete()
        seen = [await anext(events) for _ in range(3)]
        assert [(event.kind, event.status) for event in seen] == [
            ("started", "queued"),
            ("claimed", "running"),
            ("ended", "completed"),
        ]
        events.close()

    asyncio.run(asyncio.wait_for(main(), 10))


@pytest.fixture
def _switch_threads_often() -> object:
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(previous)


def _together(*calls: Callable[[], _T]) -> list[_T | Exception]:
    """Runs each call in a thread of its own, all released at once; returns each outcome, in order."""
    barrier = threading.Barrier(len(calls))
    outcomes: list[_T | Exception] = [RuntimeError("did not run")] * len(calls)

    def run(index: int) -> None:
        barrier.wait()
        try:
            outcomes[index] = calls[index]()
        except Exception as error:  # the outcome is the test's to judge
            outcomes[index] = error

    threads = [threading.Thread(target=run, args=(index,)) for index in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes


@pytest.mark.usefixtures("_switch_threads_often")
def test_of_concurrent_claims_exactly_one_succeeds(session: Session) -> None:
    for round_ in range(100):
        task_id = session.reserve_subagent_task(f"job-{round_}")
        outcomes = _together(*[functools.partial(session.claim_subagent_task, task_id)] * 4)
        handles = [outcome for outcome in outcomes if isinstance(outcome, SubagentTaskHandle)]
        refusals = [outcome for outcome in outcomes if isinstance(outcome, DuplicateTaskError)]
        assert (len(handles), len(refusals)) == (1, 3), (round_, outcomes)
        handles[0].complete()


@pytest.mark.usefixtures("_switch_threads_often")
def test_a_cancel_racing_a_claim_is_never_lost(session: Session) -> None:
    for round_ in range(200):
        task_id = session.reserve_subagent_task(f"job-{round_}")
        cancelled, handle = _together(
            functools.partial(session.cancel_subagent_task, task_id),
            functools.partial(session.claim_subagent_task, task_id),
        )
        assert cancelled is True, round_
        assert isinstance(handle, SubagentTaskHandle), handle
        assert handle.token.is_cancelled, round_
        assert not handle.complete()
        snapshot = session.subagent_task(task_id)
        assert snapshot is not None and snapshot.status is SubagentStatus.CANCELLED and snapshot.finished


@pytest.mark.parametrize(("task_id", "error"), [(5, TypeError), ("", ValueError), (None, TypeError)])
def test_a_bad_id_to_claim_is_refused(session: Session, task_id: object, error: type[Exception]) -> None:
    with pytest.raises(error, match="task_id"):
        session.claim_subagent_task(task_id)  # type: ignore[arg-type]


def test_a_claim_of_an_id_never_reserved_says_to_reserve_it_first(tracked_session: BlockingSession) -> None:
    """On both stores: the refusal names the id and the session, and says what a claim needs."""
    with pytest.raises(UnknownTaskError, match="reserve it first") as refused:
        tracked_session.claim_subagent_task("summarise")
    assert f'no task "summarise" is reserved in session "{tracked_session.session_id}"' in str(refused.value)
