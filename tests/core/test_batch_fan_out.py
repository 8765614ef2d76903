"""CONTRACT §22: ``start_subagent_tasks`` and ``reserve_subagent_tasks`` open every task of a batch or none,
in memory and on Redis (one round trip, through either API), and a cancel of a parent reaches every child a
batch opens under it, whenever the cancel lands."""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from redis_support import RedisServer, connect

from subagent_tracker import (
    DuplicateTaskError,
    RedisRegistry,
    RegistryUnavailableError,
    Session,
    SubagentStatus,
    UnknownTaskError,
)

_SESSIONS = itertools.count()


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    yield server
    server.stop()


@pytest.fixture(params=["memory", "redis", "redis-asyncio"])
def store(request: pytest.FixtureRequest) -> tuple[str, Any]:
    """A fresh session of each store and API: in memory, Redis blocking, Redis through the asyncio API."""
    if request.param == "memory":
        return "memory", Session(max_finished_tasks=10_000)
    server: RedisServer = request.getfixturevalue("redis_server")
    api = "blocking" if request.param == "redis" else "asyncio"
    return request.param, connect(api, server.url).session(f"batch-{next(_SESSIONS)}")


def _ids(session: Any) -> list[str]:
    return [task.task_id for task in session.subagent_tasks()]


def test_a_batch_starts_every_task_in_order_and_a_child_may_name_an_earlier_one(
    store: tuple[str, Any],
) -> None:
    _, session = store
    handles = session.start_subagent_tasks(
        [
            {"task_id": "plan", "agent": "planner", "metadata": {"goal": "ship"}},
            {"task_id": "step-1", "parent_id": "plan", "description": "read"},
            {"parent_id": "plan", "timeout": 60},
        ]
    )
    assert [handle.task_id for handle in handles][:2] == ["plan", "step-1"]
    generated = handles[2].task_id
    assert _ids(session) == ["plan", "step-1", generated]
    step = session.subagent_task("step-1")
    assert (step.parent_id, step.description, step.status) == ("plan", "read", SubagentStatus.RUNNING)
    assert session.subagent_task(generated).deadline is not None
    assert session.subagent_task("plan").metadata == {"goal": "ship"}
    assert session.cancel_subagent_task("plan", reason="stop")
    for handle in handles:
        assert handle.token.wait(5), f"{handle.task_id} was not reached by its parent's cancel"
    assert session.start_subagent_tasks([]) == []


@pytest.mark.parametrize(
    ("tasks", "error", "message"),
    [
        ([{"task_id": "a"}, {"task_id": ""}], ValueError, "task 1 of the batch"),
        ([{"task_id": "a"}, {"task_id": 7}], TypeError, "task 1 of the batch"),
        ([{"task_id": "a"}, {"task_id": "b", "colour": "red"}], TypeError, "unknown key 'colour'"),
        ([{"task_id": "a"}, "b"], TypeError, "not a mapping"),
        ([{"task_id": "a"}, {"task_id": "b", "agent": 5}], TypeError, "task 1 of the batch"),
        ([{"task_id": "a"}, {"task_id": "b", "metadata": 5}], TypeError, "task 1 of the batch"),
        ([{"task_id": "a"}, {"task_id": "a"}], ValueError, "more than once in the batch"),
        ([{"task_id": "a"}, {"task_id": "live"}], DuplicateTaskError, "live"),
        ([{"task_id": "a"}, {"task_id": "b", "parent_id": "missing"}], UnknownTaskError, "missing"),
        ([{"task_id": "child", "parent_id": "later"}, {"task_id": "later"}], UnknownTaskError, "later"),
    ],
)
def test_any_refusal_refuses_the_whole_batch_and_changes_nothing(
    store: tuple[str, Any], tasks: list[Any], error: type[Exception], message: str
) -> None:
    _, session = store
    live = session.start_subagent_task("live")
    with pytest.raises(error, match=message):
        session.start_subagent_tasks(tasks)
    assert _ids(session) == ["live"]
    live.complete()


def test_what_is_not_an_iterable_of_mappings_is_a_type_error(store: tuple[str, Any]) -> None:
    _, session = store
    for tasks in ("abc", {"task_id": "a"}, 42):
        with pytest.raises(TypeError, match="iterable of mappings"):
            session.start_subagent_tasks(tasks)
    assert _ids(session) == []


def test_a_reserved_batch_is_queued_with_each_claim_timeout(store: tuple[str, Any]) -> None:
    _, session = store
    parent = session.start_subagent_task("parent")
    reserved = session.reserve_subagent_tasks(
        [
            {"task_id": "quick", "parent_id": "parent", "claim_timeout": 0.05},
            {"task_id": "patient", "parent_id": "parent"},
        ],
        claim_timeout=60,
    )
    assert reserved == ["quick", "patient"]
    assert session.subagent_task("patient").status is SubagentStatus.QUEUED
    with pytest.raises(TypeError, match="unknown key 'claim_timeout'"):
        session.start_subagent_tasks([{"task_id": "x", "claim_timeout": 1}])
    claimed = session.claim_subagent_task("patient")
    claimed.complete("done")
    assert session.subagent_task("patient").result == "done"
    parent.complete()


def test_a_cancel_of_the_parent_racing_a_batch_reaches_every_child(store: tuple[str, Any]) -> None:
    kind, session = store
    for round_number in range(20 if kind == "memory" else 5):
        parent_id = f"parent-{round_number}"
        parent = session.start_subagent_task(parent_id)
        started = threading.Event()

        def cancel(parent_id: str = parent_id, started: threading.Event = started) -> None:
            started.wait(5)
            session.cancel_subagent_task(parent_id, reason="stop")

        canceller = threading.Thread(target=cancel)
        canceller.start()
        started.set()
        children = session.start_subagent_tasks(
            [{"task_id": f"{parent_id}-child-{index}", "parent_id": parent_id} for index in range(20)]
        )
        canceller.join(10)
        for child in children:
            assert child.token.wait(5), f"{child.task_id} escaped its parent's cancel"
            child.complete()
        parent.complete()
    assert session.pending_subagent_tasks() == []


def test_on_redis_a_batch_of_500_is_checked_and_opened_in_bounded_calls(redis_server: RedisServer) -> None:
    """Every command is logged (``slowlog-log-slower-than 0``): of the session's opening functions, the batch
    makes a call per part of at most 32 tasks to check them all, then one per part to open them, so that no
    call holds the node long. Other workers' housekeeping on the shared server is told apart by the function's
    name."""
    session = RedisRegistry(redis_server.url).session("bounded-calls")
    session.start_subagent_task("announces-the-worker").complete()
    admin: Any = redis.Redis(port=redis_server.port)
    admin.config_set("slowlog-max-len", 100_000)
    admin.config_set("slowlog-log-slower-than", 0)
    admin.slowlog_reset()
    try:
        live = session.start_subagent_task("r480")
        with pytest.raises(DuplicateTaskError, match="r480"):
            session.start_subagent_tasks([{"task_id": f"r{index}"} for index in range(500)])
        refused = admin.slowlog_get(-1)
        opened_by_the_refused_batch = [
            task.task_id for task in session.subagent_tasks() if task.task_id != "r480"
        ]
        admin.slowlog_reset()
        live.complete()
        handles = session.start_subagent_tasks([{"task_id": f"r{index}"} for index in range(500)])
        logged = admin.slowlog_get(-1)
    finally:
        admin.config_set("slowlog-log-slower-than", 10_000)

    def called(entries: list[Any]) -> list[bytes]:
        return [entry["command"].split()[1] for entry in entries if entry["command"].startswith(b"FCALL ")]

    parts = -(-500 // 32)
    assert called(refused).count(b"stv2_open_batch") == parts, "checked whole, refused before any part opens"
    assert opened_by_the_refused_batch == ["announces-the-worker"]
    assert called(logged).count(b"stv2_open_batch") == 2 * parts
    assert b"stv2_open" not in called(logged)
    assert len(handles) == 500 and len(session.pending_subagent_tasks()) == 500
    session.cancel(reason="done")


def test_a_reservation_that_would_finish_as_it_opens_cannot_parent_a_later_task(
    store: tuple[str, Any],
) -> None:
    """A reservation under a cancelled parent, or past its deadline, finishes as it opens: the batch that
    names it as a parent is refused whole, before anything opens."""
    _, session = store
    plan = session.start_subagent_task("plan")
    session.cancel_subagent_task("plan", reason="stopped")
    for batch in (
        [{"task_id": "a", "parent_id": "plan"}, {"task_id": "b", "parent_id": "a"}],
        [{"task_id": "a", "deadline": time.time() - 60}, {"task_id": "b", "parent_id": "a"}],
    ):
        with pytest.raises(UnknownTaskError, match="has already finished"):
            session.reserve_subagent_tasks(batch)
        assert _ids(session) == ["plan"]
    # Started, not reserved, the same tasks begin cancelled and wait for their runners.
    handles = session.start_subagent_tasks(
        [{"task_id": "a", "parent_id": "plan"}, {"task_id": "b", "parent_id": "a"}]
    )
    for handle in handles:
        snapshot = session.subagent_task(handle.task_id)
        assert (snapshot.status, snapshot.cancel_cause, snapshot.finished) == (
            SubagentStatus.CANCELLED,
            "parent",
            False,
        )
        handle.complete()
    plan.complete()


def test_on_redis_a_batch_refused_part_way_leaves_no_task_it_opened_running(
    redis_server: RedisServer,
) -> None:
    """A start of one of a large batch's ids that lands between its check and its last part refuses it
    part way; the tasks its earlier parts opened are ended at once. Here the server also refuses writes for a
    moment just after the racing start (out of memory), so that those ends may fail: such a task is left to
    the orphan check, which ends it. No task stays running with no runner. Each round has a session of its
    own, so that no other failed call sends the orphan check to it."""
    # A short timeout: the orphan check leaves runs younger than twice that, whose reply may be on the way.
    registry = RedisRegistry(
        redis_server.url, key_prefix="refused-part-way:", reconcile_interval=0.2, timeout=1.0
    )
    admin: Any = redis.Redis(port=redis_server.port)

    def batch_of(round_: int) -> list[dict[str, Any]]:
        return [{"task_id": f"r{round_}-{index}"} for index in range(100)]

    began = time.monotonic()
    registry.session("warm-up").start_subagent_tasks(batch_of(0))
    one_batch = time.monotonic() - began
    rounds: list[tuple[Any, list[Any]]] = []
    try:
        for round_ in range(30):
            session = registry.session(f"s{round_}")
            held: list[Any] = []

            def race(session: Any = session, round_: int = round_, held: list[Any] = held) -> None:
                time.sleep(one_batch * round_ / 30)
                with contextlib.suppress(DuplicateTaskError):
                    held.append(session.start_subagent_task(f"r{round_}-90"))
                admin.config_set("maxmemory", 1)
                time.sleep(0.03)
                admin.config_set("maxmemory", 0)

            racer = threading.Thread(target=race)
            racer.start()
            with contextlib.suppress(DuplicateTaskError, RegistryUnavailableError):
                held.extend(session.start_subagent_tasks(batch_of(round_)))
            racer.join()
            rounds.append((session, held))
    finally:
        admin.config_set("maxmemory", 0)
    deadline = time.monotonic() + 10
    for session, held in rounds:
        held_ids = {handle.task_id for handle in held}
        while running := [
            task.task_id for task in session.pending_subagent_tasks() if task.task_id not in held_ids
        ]:
            assert time.monotonic() < deadline, f"tasks running with no runner: {running}"
            time.sleep(0.05)
