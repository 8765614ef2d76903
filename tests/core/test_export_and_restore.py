"""Export and restore (contract §6): ``export_snapshots()`` is JSON-serialisable, and ``restore_snapshots()``
fills a session that has none of those ids: finished tasks as they were, pending ones failed with
``RESTORED_WITHOUT_RUNNER_ERROR``, never running without a runner. On every store, and across them."""

from __future__ import annotations

import json
import math
import threading
import time
from typing import Any

import pytest
from redis_support import FunctionCalls, RedisServer

from subagent_tracker import (
    RESTORED_WITHOUT_RUNNER_ERROR,
    DuplicateTaskError,
    RedisRegistry,
    Session,
    SessionClosedError,
    SubagentStatus,
)
from subagent_tracker.integrations._support import BlockingSession

#: The fields a restore keeps exactly, beside the times (compared to the microsecond).
KEPT: tuple[str, ...] = ("task_id", "parent_id", "agent", "description", "metadata", "status", "finished")
KEPT += ("cancel_reason", "cancel_origin", "cancel_cause", "detached", "progress", "progress_count", "result")
KEPT += ("error", "error_type", "error_code", "pause_reason")
TIMES = ("started_at", "queued_at", "claimed_at", "cancelled_at", "ended_at", "deadline")


@pytest.fixture
def session(tracked_session: BlockingSession) -> BlockingSession:
    return tracked_session


def _fill(session: BlockingSession) -> list[Any]:
    """A session with one task of every kind; returns the handles still held."""
    done = session.start_subagent_task("done", agent="coder", metadata={"user": "ana", "ids": [1, 2]})
    done.progress("half way", data={"step": 1})
    done.complete({"answer": 42})
    session.start_subagent_task("broken", parent_id=None).fail("boom", error_type="ToolError", error_code=7)
    stopped = session.start_subagent_task("stopped", timeout=60)
    session.cancel_subagent_task("stopped", "user pressed stop")
    with stopped:
        pass
    running = session.start_subagent_task("running", metadata={"user": "ana"})
    child = session.start_subagent_task("child", parent_id="running")
    assert child.pause("approval")
    stopping = session.start_subagent_task("stopping")
    session.cancel_subagent_task("stopping")
    session.reserve_subagent_task("queued")
    return [running, child, stopping]


def _same(restored: dict[str, Any], original: dict[str, Any]) -> None:
    assert {name: restored[name] for name in KEPT} == {name: original[name] for name in KEPT}
    for name in TIMES:
        if original[name] is None:
            assert restored[name] is None, name
        else:
            assert math.isclose(restored[name], original[name], abs_tol=1e-3), name
    assert [(entry["message"], entry["data"]) for entry in restored["progress_log"]] == [
        (entry["message"], entry["data"]) for entry in original["progress_log"]
    ]


def _check_restored(target: BlockingSession, exported: list[dict[str, Any]]) -> None:
    restored = {record["task_id"]: record for record in target.export_snapshots()}
    assert list(restored) == [record["task_id"] for record in exported], "in the exported order"
    for original in exported:
        task = restored[original["task_id"]]
        if original["status"] in ("queued", "running", "paused"):
            assert (task["status"], task["finished"], task["error"]) == (
                "failed",
                True,
                RESTORED_WITHOUT_RUNNER_ERROR,
            ), original["task_id"]
            assert task["ended_at"] is not None
        elif not original["finished"]:
            assert (task["status"], task["finished"]) == ("cancelled", True)
        else:
            _same(task, original)
    assert target.pending_subagent_tasks() == []


_SESSIONS = iter(range(10**6))


def _new_session(kind: str, server: RedisServer | None) -> BlockingSession:
    if kind == "memory":
        return Session()
    assert server is not None
    return RedisRegistry(server.url).session(f"restore-{next(_SESSIONS)}")


@pytest.mark.parametrize(
    ("source_kind", "target_kind"),
    [("memory", "memory"), ("redis", "redis"), ("memory", "redis"), ("redis", "memory")],
)
def test_an_export_round_trips_through_json_into_a_session_of_either_store(
    request: pytest.FixtureRequest, source_kind: str, target_kind: str
) -> None:
    needs_redis = "redis" in (source_kind, target_kind)
    server = request.getfixturevalue("module_redis_server") if needs_redis else None
    source = _new_session(source_kind, server)
    held = _fill(source)
    exported = json.loads(json.dumps(source.export_snapshots()))
    assert [record["task_id"] for record in exported] == [
        "done",
        "broken",
        "stopped",
        "running",
        "child",
        "stopping",
        "queued",
    ]
    target = _new_session(target_kind, server)
    assert target.restore_snapshots(exported) == 7
    _check_restored(target, exported)
    assert not target.cancel_subagent_task("running"), "a restored task is finished, never running"
    child = target.subagent_task("child")
    assert child is not None and child.pause_reason == "approval"
    for handle in held:
        with handle:
            pass


def test_a_restore_that_names_a_retained_or_repeated_id_restores_nothing(session: BlockingSession) -> None:
    source = Session()
    source.start_subagent_task("a").complete()
    source.start_subagent_task("b").complete()
    exported = source.export_snapshots()
    held = session.start_subagent_task("b")
    with pytest.raises(DuplicateTaskError, match='"b"'):
        session.restore_snapshots(exported)
    assert session.subagent_task("a") is None, "nothing restored"
    with pytest.raises(ValueError, match='"a"'):
        session.restore_snapshots([exported[0], exported[0]])
    assert session.subagent_task("a") is None
    held.complete()


@pytest.mark.parametrize(
    ("records", "error", "match"),
    [
        ({"task_id": "a"}, TypeError, "iterable of the mappings"),
        ("records", TypeError, "iterable of the mappings"),
        ([5], TypeError, "snapshot 0: is a int, not a mapping"),
        ([{"status": "completed", "started_at": 1.0}], TypeError, "snapshot 0: has no 'task_id'"),
        ([{"task_id": "a", "started_at": 1.0}], TypeError, "has no 'status'"),
        ([{"task_id": "a", "status": "done", "started_at": 1.0}], ValueError, "unknown status"),
        ([{"task_id": "a", "status": "completed"}], TypeError, "has no 'started_at'"),
        ([{"task_id": "a", "status": "completed", "started_at": "now"}], TypeError, "started_at"),
        ([{"task_id": "a", "status": "completed", "started_at": 1.0, "metadata": [1]}], TypeError, "mapping"),
    ],
)
def test_bad_records_are_refused_and_restore_nothing(
    session: BlockingSession, records: Any, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        session.restore_snapshots(records)
    assert session.subagent_tasks() == []


def test_cancels_racing_a_restore_find_nothing_to_cancel(session: BlockingSession) -> None:
    source = Session()
    handles = [source.start_subagent_task(f"t{index}") for index in range(50)]
    exported = source.export_snapshots()
    cancelled: list[bool] = []
    start = threading.Barrier(2)

    def cancel_all_the_time() -> None:
        start.wait(timeout=5)
        for index in range(50):
            cancelled.append(session.cancel_subagent_task(f"t{index}"))

    canceller = threading.Thread(target=cancel_all_the_time)
    canceller.start()
    start.wait(timeout=5)
    assert session.restore_snapshots(exported) == 50
    canceller.join(timeout=10)
    assert not any(cancelled), "a restored pending task is failed, never running"
    assert {task.status for task in session.subagent_tasks()} == {SubagentStatus.FAILED}
    for handle in handles:
        handle.complete()


def test_restored_tasks_count_against_the_bound() -> None:
    source = Session()
    for index in range(5):
        source.start_subagent_task(f"t{index}").complete()
    target = Session(max_finished_tasks=2)
    assert target.restore_snapshots(source.export_snapshots()) == 5
    assert [task.task_id for task in target.subagent_tasks()] == ["t3", "t4"]


def test_a_large_restore_goes_in_bounded_calls_checked_before_any_is_written(
    module_redis_server: RedisServer,
) -> None:
    """On Redis a restore of more than 64 tasks goes as several calls (contract §6): every refusal comes
    before the first task is written, and the tasks come back in the list's order."""
    source = Session()
    for index in range(200):
        source.start_subagent_task(f"t{index}").complete(index)
    exported = source.export_snapshots()
    target = RedisRegistry(module_redis_server.url).session("large-restore", max_finished_tasks=1_000)
    taken = target.start_subagent_task("t150")
    with pytest.raises(DuplicateTaskError, match="t150"):
        target.restore_snapshots(exported)
    assert [task.task_id for task in target.subagent_tasks()] == ["t150"]
    taken.complete()
    assert target.forget_finished(0) == 1
    with FunctionCalls(module_redis_server) as calls:
        assert target.restore_snapshots(exported) == 200
    assert calls.of("restore") >= 2 * (200 // 64), "checked, then written, at most 64 tasks per call"
    assert [(task.task_id, task.result) for task in target.subagent_tasks()] == [
        (f"t{index}", index) for index in range(200)
    ]


def test_a_close_racing_a_large_restore_comes_before_it_or_after_it(module_redis_server: RedisServer) -> None:
    """A close that comes while a restore of many calls writes comes after it: the restore writes on to its
    end, and is never left half written. The closes fall at points spread over one restore's time."""
    source = Session()
    for index in range(640):
        source.start_subagent_task(f"t{index}").complete()
    exported = source.export_snapshots()
    registry = RedisRegistry(module_redis_server.url)
    began = time.monotonic()
    assert registry.session("timed-restore", max_finished_tasks=10_000).restore_snapshots(exported) == 640
    one_restore = time.monotonic() - began
    for attempt in range(8):
        target = registry.session(f"restore-racing-close-{attempt}", max_finished_tasks=10_000)
        outcome: list[object] = []

        def restore(target: Any = target, outcome: list[object] = outcome) -> None:
            try:
                outcome.append(target.restore_snapshots(exported))
            except SessionClosedError as error:
                outcome.append(error)

        restoring = threading.Thread(target=restore)
        restoring.start()
        time.sleep(one_restore * attempt / 8)
        target.close()
        restoring.join(10)
        retained = len(target.subagent_tasks())
        if isinstance(outcome[0], SessionClosedError):
            assert retained == 0, f"attempt {attempt}: a refused restore wrote nothing"
        else:
            assert (outcome[0], retained) == (640, 640), f"attempt {attempt}"


def test_an_export_thaws_a_result_of_any_depth_without_recursing() -> None:
    """A memory result may nest deeper than the interpreter's recursion limit: the export walks it with a
    work list, and every read-only container comes out plain (mappings as dicts, tuples and frozensets as
    lists)."""
    session = Session()
    deepest: list[object] = []
    result = deepest
    for _ in range(100_000):
        inner: list[object] = []
        deepest.append(inner)
        deepest = inner
    handle = session.start_subagent_task("deep", metadata={"k": (1, {"x": frozenset([2])})})
    handle.progress("step", data={"d": (3,)})
    handle.complete(result)
    (record,) = session.export_snapshots()
    assert record["metadata"] == {"k": [1, {"x": [2]}]}
    assert record["progress_log"][0]["data"] == {"d": [3]}
    assert record["status"] == "completed"
    depth, level = 0, record["result"]
    while level:
        depth, level = depth + 1, level[0]
    assert depth == 100_000
