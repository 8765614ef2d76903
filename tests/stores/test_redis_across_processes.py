"""CONTRACT §§2, 3, 18 and 20 across real OS processes that share one real Redis server (``redis-server``,
started by the fixture on 127.0.0.1 on a free port, without persistence, and stopped after)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator

import pytest
import redis
from redis_support import RedisCluster, RedisServer, RedisTarget, Worker

from subagent_tracker import (
    CLAIM_TIMEOUT_ERROR,
    LEASE_LOST_REASON,
    WORKER_LOST_ERROR,
    DuplicateTaskError,
    RedisRegistry,
    RedisTaskHandle,
    RegistryUnavailableError,
    Session,
    SubagentStatus,
    SubagentTrackerError,
    UnknownTaskError,
)
from subagent_tracker._loopback import free_port


@pytest.fixture(scope="module", params=["one server", "cluster"])
def redis_server(request: pytest.FixtureRequest) -> Iterator[RedisTarget]:
    """Each test runs on one server and on the run's Redis Cluster (which the registries find by asking)."""
    if request.param == "cluster":
        yield request.getfixturevalue("redis_cluster")
        return
    server = RedisServer()
    yield server
    server.stop()


@pytest.fixture
def workers(redis_server: RedisTarget) -> Iterator[list[Worker]]:
    # Started together: each pays the interpreter's start-up, and they are independent.
    slots: list[Worker | None] = [None] * 3

    def start(index: int) -> None:
        slots[index] = Worker(redis_server.url, f"w{index}")

    threads = [threading.Thread(target=start, args=(index,)) for index in range(len(slots))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    started = [worker for worker in slots if worker is not None]
    assert len(started) == len(slots), "a worker process did not start"
    yield started
    for worker in started:
        worker.stop()


_sessions = iter(range(1_000_000))


@pytest.fixture
def session_id() -> str:
    return f"session-{next(_sessions)}"


def test_a_cancel_from_this_process_fires_the_token_in_the_runner_s_process(
    redis_server: RedisTarget, workers: list[Worker], session_id: str
) -> None:
    runner = workers[0]
    assert runner.ask(op="start", session=session_id, task="job") == {"cancelled": False, "reason": None}
    session = RedisRegistry(redis_server.url).session(session_id)
    snapshot = session.subagent_task("job")
    assert snapshot is not None and snapshot.status is SubagentStatus.RUNNING
    assert session.cancel_subagent_task("job", reason="user pressed stop")
    assert not session.cancel_subagent_task("job")
    assert runner.ask(op="wait_cancelled", session=session_id, task="job", timeout=5) == {
        "cancelled": True,
        "reason": "user pressed stop",
    }
    assert runner.ask(op="complete", session=session_id, task="job", result="late") is False
    final = session.subagent_task("job")
    assert final is not None
    assert (final.status, final.finished, final.result) == (SubagentStatus.CANCELLED, True, "late")


def test_of_concurrent_cancels_from_several_processes_exactly_one_is_true(
    redis_server: RedisTarget, workers: list[Worker], session_id: str
) -> None:
    session = RedisRegistry(redis_server.url).session(session_id)
    for round_ in range(10):
        task_id = f"job-{round_}"
        handle = session.start_subagent_task(task_id)
        for worker in workers:
            worker.send(op="cancel", session=session_id, task=task_id)
        outcomes = [worker.answer() for worker in workers]
        assert outcomes.count(True) == 1, (round_, outcomes)
        assert handle.token.wait(5)
        handle.complete()


def test_an_end_racing_a_cancel_from_another_process_has_one_winner(
    redis_server: RedisTarget, workers: list[Worker], session_id: str
) -> None:
    session = RedisRegistry(redis_server.url).session(session_id)
    for round_ in range(10):
        task_id = f"job-{round_}"
        workers[0].ask(op="start", session=session_id, task=task_id)
        workers[0].send(op="complete", session=session_id, task=task_id)
        workers[1].send(op="cancel", session=session_id, task=task_id)
        completed, cancelled = workers[0].answer(), workers[1].answer()
        assert completed != cancelled, round_
        snapshot = session.subagent_task(task_id)
        assert snapshot is not None
        assert snapshot.status is (SubagentStatus.COMPLETED if completed else SubagentStatus.CANCELLED)


def test_a_cascade_reaches_a_subtree_spanning_three_processes(
    redis_server: RedisTarget, workers: list[Worker], session_id: str
) -> None:
    first, second, third = workers
    first.ask(op="start", session=session_id, task="root")
    second.ask(op="start", session=session_id, task="child", parent="root")
    third.ask(op="start", session=session_id, task="grandchild", parent="child")
    third.ask(op="start", session=session_id, task="bystander")
    assert RedisRegistry(redis_server.url).session(session_id).cancel_subagent_task("root", reason="stop all")
    for worker, task_id in ((first, "root"), (second, "child"), (third, "grandchild")):
        assert worker.ask(op="wait_cancelled", session=session_id, task=task_id, timeout=5) == {
            "cancelled": True,
            "reason": "stop all",
        }, task_id
    assert (
        third.ask(op="wait_cancelled", session=session_id, task="bystander", timeout=0.3)["cancelled"]
        is False
    )
    snapshot = RedisRegistry(redis_server.url).session(session_id).subagent_task("grandchild")
    assert snapshot is not None and snapshot.cancel_origin == "root" and snapshot.cancel_cause == "parent"


def test_a_child_started_under_a_parent_cancelled_in_another_process_starts_cancelled(
    redis_server: RedisTarget, workers: list[Worker], session_id: str
) -> None:
    workers[0].ask(op="start", session=session_id, task="parent")
    assert workers[1].ask(op="cancel", session=session_id, task="parent", reason="budget") is True
    assert workers[2].ask(op="start", session=session_id, task="child", parent="parent") == {
        "cancelled": True,
        "reason": "budget",
    }


def test_a_cancel_before_a_claim_in_another_process_is_never_lost(
    redis_server: RedisTarget, workers: list[Worker], session_id: str
) -> None:
    queue = RedisRegistry(redis_server.url).session(session_id)
    queue.reserve_subagent_task("kept")
    queue.reserve_subagent_task("stopped")
    assert queue.cancel_subagent_task("stopped", reason="user pressed stop")
    stopped = queue.subagent_task("stopped")
    assert stopped is not None and stopped.finished and stopped.status is SubagentStatus.CANCELLED
    assert workers[0].ask(op="claim", session=session_id, task="stopped") == {
        "cancelled": True,
        "reason": "user pressed stop",
    }
    assert workers[1].ask(op="claim", session=session_id, task="stopped")["raised"] == "DuplicateTaskError"
    assert workers[1].ask(op="claim", session=session_id, task="kept") == {"cancelled": False, "reason": None}
    assert queue.cancel_subagent_task("kept")
    assert (
        workers[1].ask(op="wait_cancelled", session=session_id, task="kept", timeout=5)["cancelled"] is True
    )


def test_of_claims_from_several_processes_exactly_one_succeeds(
    redis_server: RedisTarget, workers: list[Worker], session_id: str
) -> None:
    queue = RedisRegistry(redis_server.url).session(session_id)
    for round_ in range(10):
        task_id = f"job-{round_}"
        queue.reserve_subagent_task(task_id)
        for worker in workers:
            worker.send(op="claim", session=session_id, task=task_id)
        outcomes = [worker.answer() for worker in workers]
        claimed = [outcome for outcome in outcomes if "cancelled" in outcome]
        refused = [outcome for outcome in outcomes if outcome.get("raised") == "DuplicateTaskError"]
        assert (len(claimed), len(refused)) == (1, 2), (round_, outcomes)


def test_registries_look_sessions_up_by_id_and_refuse_what_the_contract_refuses(
    redis_server: RedisTarget, session_id: str
) -> None:
    registry = RedisRegistry(redis_server.url)
    assert registry.get_session(session_id) is None
    session = registry.session(session_id)
    assert session_id in RedisRegistry(redis_server.url).sessions()
    handle = session.start_subagent_task("job", metadata={"prompt": "fix it"})
    with pytest.raises(DuplicateTaskError):
        session.start_subagent_task("job")
    snapshot = session.subagent_task("job")
    assert snapshot is not None and snapshot.metadata == {"prompt": "fix it"}
    with pytest.raises(TypeError, match="JSON"):
        session.start_subagent_task("other", metadata={"handle": object()})
    assert session.subagent_task("other") is None
    assert session.close() == 1
    with pytest.raises(SubagentTrackerError):
        session.start_subagent_task("late")
    with handle:
        pass
    assert registry.get_session(session_id) is None, "a closed session leaves once its tasks are finished"


def test_an_unreachable_redis_raises_registry_unavailable_within_the_timeout() -> None:
    server = RedisServer()
    registry = RedisRegistry(server.url, timeout=0.5)
    session = registry.session("s")
    server.stop()
    started = time.monotonic()
    with pytest.raises(RegistryUnavailableError) as raised:
        session.cancel_subagent_task("job")
    assert isinstance(raised.value, ConnectionError)
    assert time.monotonic() - started < 3
    with pytest.raises(RegistryUnavailableError):
        RedisRegistry(f"redis://127.0.0.1:{free_port()}/0", timeout=0.5)


def test_a_wait_returns_once_the_runner_in_another_process_has_stopped(
    redis_server: RedisTarget, workers: list[Worker], session_id: str
) -> None:
    runner = workers[0]
    runner.ask(op="start", session=session_id, task="job")
    session = RedisRegistry(redis_server.url).session(session_id)

    async def main() -> None:
        waiting = asyncio.ensure_future(session.wait_subagent_task("job", timeout=10))
        assert session.cancel_subagent_task("job")
        await asyncio.sleep(0.2)
        assert not waiting.done(), "cancelled is not finished while the runner runs"
        with pytest.raises(TimeoutError, match="still running"):
            await session.wait_subagent_task("job", timeout=0.1)
        runner.send(op="fail", session=session_id, task="job", error="stopped")
        final = await waiting
        assert (final.status, final.finished, final.error) == (SubagentStatus.CANCELLED, True, "stopped")
        assert runner.answer() is False
        with pytest.raises(UnknownTaskError):
            await session.wait_subagent_task("nobody")

    asyncio.run(asyncio.wait_for(main(), 20))


def test_events_from_every_process_arrive_in_the_order_they_took_effect(
    redis_server: RedisTarget, workers: list[Worker], session_id: str
) -> None:
    session = RedisRegistry(redis_server.url).session(session_id)

    async def main() -> list[tuple[str | None, str, str | None]]:
        events = session.events()
        workers[0].ask(op="start", session=session_id, task="job")
        workers[0].ask(op="progress", session=session_id, task="job", message="half way")
        workers[1].ask(op="cancel", session=session_id, task="job", reason="stop")
        workers[0].ask(op="complete", session=session_id, task="job")
        seen: list[tuple[str | None, str, str | None]] = []
        async for event in events:
            seen.append((event.task_id, event.kind, event.reason or event.message))
            if len(seen) == 4:
                events.close()
        return seen

    assert asyncio.run(asyncio.wait_for(main(), 20)) == [
        ("job", "started", None),
        ("job", "progress", "half way"),
        ("job", "cancelled", "stop"),
        ("job", "ended", None),
    ]


def test_closing_an_event_stream_ends_a_waiting_iteration(redis_server: RedisTarget, session_id: str) -> None:
    session = RedisRegistry(redis_server.url).session(session_id)

    async def main() -> None:
        events = session.events()
        waiting = asyncio.ensure_future(anext(events))
        await asyncio.sleep(0.05)
        events.close()
        with pytest.raises(StopAsyncIteration):
            await waiting

    asyncio.run(asyncio.wait_for(main(), 10))


def test_a_second_concurrent_iteration_of_one_event_stream_is_refused(
    redis_server: RedisTarget, session_id: str
) -> None:
    session = RedisRegistry(redis_server.url).session(session_id)

    async def main() -> None:
        events = session.events()
        first = asyncio.ensure_future(anext(events))
        await asyncio.sleep(0.05)
        with pytest.raises(RuntimeError, match="already being iterated"):
            await anext(events)
        handle = session.start_subagent_task("job")
        assert (await first).kind == "started"
        # The stream is free again once the first iteration returned; a waiting one cancelled loses nothing.
        waiting = asyncio.ensure_future(anext(events))
        await asyncio.sleep(0.05)
        waiting.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        handle.complete()
        assert (await anext(events)).kind == "ended"
        events.close()

    asyncio.run(asyncio.wait_for(main(), 10))


def test_the_tasks_of_a_killed_worker_fail_within_a_lease(redis_server: RedisTarget, session_id: str) -> None:
    doomed = Worker(redis_server.url, "doomed", lease=0.6)
    doomed.ask(op="start", session=session_id, task="running")
    doomed.ask(op="start", session=session_id, task="stopping")
    survivor = RedisRegistry(redis_server.url, worker_id="survivor", lease=0.6)
    session = survivor.session(session_id)
    assert session.cancel_subagent_task("stopping")
    doomed.process.kill()
    doomed.process.wait(timeout=10)
    killed_at = time.monotonic()

    async def main() -> None:
        running = await session.wait_subagent_task("running", timeout=10)
        assert (running.status, running.error) == (SubagentStatus.FAILED, WORKER_LOST_ERROR)
        stopping = await session.wait_subagent_task("stopping", timeout=10)
        assert (stopping.status, stopping.finished) == (SubagentStatus.CANCELLED, True)

    asyncio.run(asyncio.wait_for(main(), 20))
    # One lease after the last renewal, plus the reaper's tick (a third of a lease) and some slack.
    assert time.monotonic() - killed_at < 0.6 + 0.2 + 1.0


def test_a_worker_that_cannot_renew_its_lease_stops_its_runners() -> None:
    server = RedisServer()
    registry = RedisRegistry(server.url, lease=0.3, timeout=0.2)
    handle = registry.session("s").start_subagent_task("job")
    server.stop()
    assert handle.token.wait(5), "the worker fenced itself"
    assert handle.token.reason == LEASE_LOST_REASON


def test_deadlines_and_claim_timeouts_fire_on_the_server_s_timers(
    redis_server: RedisTarget, session_id: str
) -> None:
    session = RedisRegistry(redis_server.url).session(session_id)
    handle = session.start_subagent_task("bounded", timeout=0.2)
    session.reserve_subagent_task("unclaimed", claim_timeout=0.2)
    assert handle.token.wait(5)
    snapshot = session.subagent_task("bounded")
    assert snapshot is not None and snapshot.cancel_cause == "deadline" and snapshot.deadline is not None

    async def main() -> None:
        unclaimed = await session.wait_subagent_task("unclaimed", timeout=5)
        assert unclaimed.status is SubagentStatus.FAILED
        assert unclaimed.error is not None and unclaimed.error.startswith(CLAIM_TIMEOUT_ERROR)

    asyncio.run(asyncio.wait_for(main(), 10))
    with pytest.raises(ValueError, match="claim_timeout"):
        session.reserve_subagent_task("bad", claim_timeout=-1)


def test_a_redis_task_linked_to_a_local_token_is_cancelled_where_it_runs(
    redis_server: RedisTarget, workers: list[Worker], session_id: str
) -> None:
    requests = Session()
    request = requests.start_subagent_task("request")
    queue = RedisRegistry(redis_server.url).session(session_id)
    queue.reserve_subagent_task("job", linked=[request.token])
    assert workers[0].ask(op="claim", session=session_id, task="job") == {"cancelled": False, "reason": None}
    assert requests.cancel_subagent_task("request", reason="client went away")
    assert workers[0].ask(op="wait_cancelled", session=session_id, task="job", timeout=5) == {
        "cancelled": True,
        "reason": "client went away",
    }
    snapshot = queue.subagent_task("job")
    assert snapshot is not None and snapshot.cancel_cause == "linked"
    request.complete()


def test_one_snapshot_and_one_listing_cost_one_call_each(redis_server: RedisTarget, session_id: str) -> None:
    if isinstance(redis_server, RedisCluster):
        pytest.skip("counts the calls that one server sees")
    session = RedisRegistry(redis_server.url).session(session_id)
    handle = session.start_subagent_task("job")
    admin = redis.Redis(port=redis_server.port)
    # The slow log keeps every command once its threshold is 0; the workers' own loops call other functions.
    admin.config_set("slowlog-log-slower-than", 0)
    admin.slowlog_reset()
    assert session.subagent_task("job") is not None
    assert len(session.pending_subagent_tasks()) == 1
    log: list[dict[str, bytes]] = admin.slowlog_get(1000)  # type: ignore[assignment]
    called = [entry["command"].split()[:2] for entry in log]
    assert called.count([b"FCALL", b"stv2_get"]) == 1
    assert called.count([b"FCALL", b"stv2_list"]) == 1
    admin.config_set("slowlog-log-slower-than", 10_000)
    handle.complete()


def test_spawned_subagents_run_on_redis_as_in_memory_and_escalate_after_their_grace(
    redis_server: RedisTarget, session_id: str
) -> None:
    session = RedisRegistry(redis_server.url, worker_id="spawner").session(session_id)
    other = RedisRegistry(redis_server.url, worker_id="canceller").session(session_id)

    async def answers(handle: RedisTaskHandle) -> str:
        handle.progress("thinking")
        return "42"

    async def ignores_its_token(handle: RedisTaskHandle) -> None:
        await asyncio.sleep(3600)

    async def main() -> None:
        done = await session.spawn_subagent_task(answers, "answers", agent="oracle")
        assert (done.status, done.result, done.progress) == (SubagentStatus.COMPLETED, "42", "thinking")
        stuck = session.spawn_subagent_task(ignores_its_token, "stuck", grace=0.2)
        await asyncio.sleep(0.05)
        assert other.cancel_subagent_task("stuck", reason="stop")  # from another registry
        final = await asyncio.wait_for(stuck, 10)
        assert (final.status, final.finished, final.escalated) == (SubagentStatus.CANCELLED, True, True)
        async with session.start_subagent_task("with-async") as handle:
            handle.progress("inside")
        ended = session.subagent_task("with-async")
        assert ended is not None and ended.status == SubagentStatus.COMPLETED

    asyncio.run(main())
    with pytest.raises(RuntimeError):
        session.spawn_subagent_task(answers, "outside-a-loop")
    assert session.subagent_task("outside-a-loop") is None


def test_a_resume_from_another_process_reaches_the_paused_runner(
    redis_server: RedisTarget, session_id: str
) -> None:
    """Contract §5, pause and resume: the runner's process waits; any process resumes, with a value."""
    runner = Worker(redis_server.url, "runner")
    try:
        runner.ask(op="start", session=session_id, task="needs-approval")
        assert runner.ask(op="pause", session=session_id, task="needs-approval", reason="approve the plan")
        session = RedisRegistry(redis_server.url, worker_id="reviewer").session(session_id)
        task = session.subagent_task("needs-approval")
        assert task is not None and task.status is SubagentStatus.PAUSED
        assert task.pause_reason == "approve the plan"
        runner.send(op="wait_resumed", session=session_id, task="needs-approval", timeout=10)
        assert session.resume_subagent_task("needs-approval", {"approved": True, "by": "ana"})
        assert runner.answer() == {"value": {"approved": True, "by": "ana"}}
        resumed = session.subagent_task("needs-approval")
        assert resumed is not None and (resumed.status, resumed.pause_reason) == (
            SubagentStatus.RUNNING,
            None,
        )
        assert runner.ask(op="complete", session=session_id, task="needs-approval")
    finally:
        runner.stop()


def test_a_paused_task_of_a_killed_worker_fails_within_a_lease(
    redis_server: RedisTarget, session_id: str
) -> None:
    doomed = Worker(redis_server.url, "doomed", lease=0.6)
    doomed.ask(op="start", session=session_id, task="paused")
    assert doomed.ask(op="pause", session=session_id, task="paused")
    session = RedisRegistry(redis_server.url, worker_id="survivor", lease=0.6).session(session_id)
    doomed.process.kill()
    doomed.process.wait(timeout=10)

    async def main() -> None:
        paused = await session.wait_subagent_task("paused", timeout=10)
        assert (paused.status, paused.error) == (SubagentStatus.FAILED, WORKER_LOST_ERROR)

    asyncio.run(asyncio.wait_for(main(), 20))
