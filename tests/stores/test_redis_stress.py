"""A bounded stress run across processes (§§2, 3, 19, 20, 21): worker processes start parents and children
and end them, canceller processes cancel whatever is pending, all on one session, for a few seconds. Each
records its history; the checks then read the history beside the final state in Redis. The run is repeated
with hostile ids, a reopened session, after a gap of more than ten leases with no live worker, across a
restart of the server from an older snapshot, and across a migration of the session's cluster slot."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from redis_support import (
    RedisCluster,
    RedisServer,
    RedisTarget,
    SlotMigration,
    Worker,
    start_target,
    until_answered,
)

from subagent_tracker import (
    ORPHANED_RUN_ERROR,
    WORKER_LOST_ERROR,
    RedisRegistry,
    RedisSession,
    RedisTaskHandle,
    SubagentStatus,
    SubagentTask,
)

PROCESS = Path(__file__).parents[1] / "redis_stress_process.py"
#: How long each run lasts: a few seconds here, longer in the soak (``scripts/redis_fault_soak.sh``).
SECONDS = float(os.environ.get("SUBAGENT_TRACKER_STRESS_SECONDS", "3"))


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisTarget]:
    """One server; a cluster under ``scripts/cluster_reruns.sh`` (``SUBAGENT_TRACKER_TEST_REDIS=cluster``)."""
    target = start_target(tmp_path)
    yield target
    target.stop()


#: The scenarios the run is repeated in: plain; with ids that would have reached into a neighbour session
#: (`s}:t:x` beside `s`); with the session closed and reopened first, its old runners ending meanwhile; and
#: after a worker died and no worker was alive for more than ten of its leases.
SCENARIOS = ["plain", "hostile ids", "reopened session", "restart gap"]

#: What the processes prefix task ids with, and the session they share, per scenario.
HOSTILE_PREFIX = "x}:t:"


def _session_id(scenario: str) -> str:
    return "s}:t:x" if scenario == "hostile ids" else "stress"


def _start(
    url: str, session_id: str, prefix: str = "", timeout: float = 5.0, key_prefix: str = "subagent-tracker:"
) -> list[tuple[subprocess.Popen[bytes], IO[str]]]:
    """The run's processes, three workers and two cancellers on one session for ``SECONDS``, each with the
    file it writes its history to (a pipe nobody reads until the end would hold a process up once full)."""
    roles = [("worker", "w0"), ("worker", "w1"), ("worker", "w2"), ("canceller", "c0"), ("canceller", "c1")]
    started: list[tuple[subprocess.Popen[bytes], IO[str]]] = []
    for seed, (role, name) in enumerate(roles):
        output = tempfile.TemporaryFile("w+")
        arguments = [url, session_id, role, name, str(SECONDS), str(seed), prefix, str(timeout), key_prefix]
        started.append((subprocess.Popen([sys.executable, str(PROCESS), *arguments], stdout=output), output))
    return started


def _until_working(session: RedisSession, seconds: float = 60) -> None:
    """Waits for the run's first start: on a busy machine its processes may take longer to start than the
    run's first third, and a fault injected before any call would meet none."""
    deadline = time.monotonic() + seconds
    while not until_answered(session.subagent_tasks):
        assert time.monotonic() < deadline, "the run's processes never started a task"
        time.sleep(0.05)


def _collect(processes: list[tuple[subprocess.Popen[bytes], IO[str]]]) -> list[dict[str, Any]]:
    """The histories of the run's processes, once each has ended."""
    history: list[dict[str, Any]] = []
    for process, output in processes:
        with output:
            assert process.wait(timeout=SECONDS + 120) == 0
            output.seek(0)
            history.extend(json.loads(line) for line in output)
    return history


def _run(server: RedisTarget, scenario: str) -> list[dict[str, Any]]:
    prefix = HOSTILE_PREFIX if scenario == "hostile ids" else ""
    return _collect(_start(server.url, _session_id(scenario), prefix))


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_many_workers_and_cancellers_on_one_session_keep_every_rule(
    redis_server: RedisTarget, scenario: str
) -> None:
    session_id = _session_id(scenario)
    # Made first, so its bound holds whoever opens it next: every run stays retained for the checks. (The
    # temporary registry is gone at once, so no worker is alive during a restart gap.)
    RedisRegistry(redis_server.url).session(session_id, max_finished_tasks=1_000_000)
    neighbours: list[RedisTaskHandle] = []
    stale: list[RedisTaskHandle] = []
    reused: list[RedisTaskHandle] = []
    dead: list[str] = []
    if scenario == "hostile ids":
        # Under the old key layout, task `x}:t:<id>` of session `s` was task `<id>` of session `s}:t:x`.
        neighbour = RedisRegistry(redis_server.url).session("s")
        neighbours = [
            neighbour.start_subagent_task(f"{HOSTILE_PREFIX}{HOSTILE_PREFIX}w{worker}-{index}")
            for worker in range(3)
            for index in range(40)
        ]
    elif scenario == "reopened session":
        registry = RedisRegistry(redis_server.url)
        old = registry.session(session_id)
        names = [f"reused-{index}" for index in range(60)]
        stale = [old.start_subagent_task(task_id) for task_id in names]
        old.close(reason="reopened")
        for handle in stale:
            old.end_subagent_task(handle.task_id, error="ended by id")
        # The new incarnation starts the same ids in the same order: were run numbers counted anew, each old
        # runner's number would be its new run's.
        new = registry.session(session_id, max_finished_tasks=1_000_000)
        reused = [new.start_subagent_task(task_id) for task_id in names]
    elif scenario == "restart gap":
        lease = 0.2
        lost = Worker(redis_server.url, "lost", lease=lease)
        dead = [f"dead-{index}" for index in range(5)]
        for task_id in dead:
            lost.ask(op="start", session=session_id, task=task_id)
        time.sleep(lease * 2)  # it has worked for a while: renewed its lease, and what it announced with it
        lost.signal(signal.SIGKILL)
        lost.process.wait(timeout=10)
        time.sleep(lease * 12)

    late_ends: list[bool] = []
    ender = threading.Timer(
        SECONDS / 2, lambda: late_ends.extend(handle.complete("stale") for handle in stale)
    )
    ender.start()
    history = _run(redis_server, scenario)
    ender.join()
    assert late_ends == [False] * len(stale), "a runner of the closed incarnation never ends a new run"
    fresh_ends = {handle.task_id: handle.complete("fresh") for handle in reused}
    # Ids are never reused within the run: a refused start is one that met another session's task.
    assert not [entry for entry in history if entry.get("raised") == "DuplicateTaskError"]

    session = RedisRegistry(redis_server.url).session(session_id)
    tasks, cancels_won = _check_history(history, session)
    # The new incarnation's runs ended as their runners or the cancellers did, never as the old runners did.
    for task_id, ended in fresh_ends.items():
        task = tasks[task_id]
        assert task.result != "stale", task
        if ended:
            assert (task.status, task.result) == (SubagentStatus.COMPLETED, "fresh"), task
        else:
            assert task.status is SubagentStatus.CANCELLED and cancels_won[task_id] == 1, task
    # Nothing reached the neighbour session.
    for handle in neighbours:
        assert not handle.token.is_cancelled, handle.task_id
        assert handle.complete()
    # The dead worker's tasks ended once workers were alive again: failed, unless a canceller won first.
    for task_id in dead:
        task = tasks[task_id]
        assert task.finished, task
        if cancels_won.get(task_id):
            assert task.status is SubagentStatus.CANCELLED, task
        else:
            assert (task.status, task.error) == (SubagentStatus.FAILED, WORKER_LOST_ERROR), task


def test_a_restore_to_older_state_part_way_keeps_every_rule_for_what_redis_kept() -> None:
    """The run on one server that is restarted, a third of the way in, from a snapshot taken a third of the
    way before: what was acknowledged in between is lost. Tasks whose calls all came before the snapshot or
    after the restart keep every rule; those with a call in between only finish (a lost end is ended by its
    worker as an orphan, a lost start never was); nothing stays pending, and no run number is handed out
    twice."""
    server = RedisServer()
    try:
        observer = RedisRegistry(server.url).session("stress", max_finished_tasks=1_000_000)
        processes = _start(server.url, "stress", timeout=0.5)
        _until_working(observer)
        time.sleep(SECONDS / 3)
        snapshot_began = time.time()
        snapshot = server.save_snapshot()
        time.sleep(SECONDS / 3)
        server = server.restart_from_snapshot(snapshot)
        restarted = time.time()
        history = _collect(processes)
        window = (snapshot_began, restarted)
        touched = {
            entry["task"] for entry in history if entry["began"] <= window[1] and entry["at"] >= window[0]
        }
        session = RedisRegistry(server.url, reconcile_interval=0.2).session("stress")
        # Ends lost with the restore are the orphans of workers that have gone: reaped once their leases pass.
        deadline = time.monotonic() + 30
        while session.pending_subagent_tasks():
            assert time.monotonic() < deadline, session.pending_subagent_tasks()
            time.sleep(0.2)
        tasks, _ = _check_history(history, session, unsure=touched.__contains__)
        lost_ends = [
            task
            for task_id, task in tasks.items()
            if task_id in touched and task.error in (ORPHANED_RUN_ERROR, WORKER_LOST_ERROR)
        ]
        assert touched, "the restore met some calls"
        started = {entry["task"] for entry in history if entry["op"] == "start"}
        print(
            f"{len(touched)} of {len(started)} tasks met the restore; {len(lost_ends)} lost ends ended again"
        )
    finally:
        server.stop()


def test_a_slot_migration_part_way_keeps_every_rule(redis_cluster: RedisCluster) -> None:
    """The run on the cluster while the session's slot moves to another primary a few keys at a time, as
    ``redis-cli --cluster reshard`` moves it: calls are refused while it moves and the processes call
    again, and nothing is lost, so every rule holds for every task."""
    key_prefix = "migrating:"
    session_id = "stress-migration"
    observer = RedisRegistry(redis_cluster.url, key_prefix=key_prefix).session(
        session_id, max_finished_tasks=1_000_000
    )
    processes = _start(redis_cluster.url, session_id, timeout=1.0, key_prefix=key_prefix)
    _until_working(observer)
    time.sleep(SECONDS / 3)
    migration = SlotMigration(redis_cluster, f"{key_prefix}v2:{{s:{session_id}}}:session")
    migration.finish(batch=10, pause=0.005)
    history = _collect(processes)
    assert migration.target.cli("CLUSTER", "COUNTKEYSINSLOT", migration.slot) != ["0"], "the slot moved"
    session = RedisRegistry(redis_cluster.url, key_prefix=key_prefix).session(session_id)
    _check_history(history, session)


def _check_history(
    history: list[dict[str, Any]], session: RedisSession, unsure: Callable[[str], bool] = lambda _: False
) -> tuple[dict[str, SubagentTask], dict[str, int]]:
    """Checks the run's history beside the final state of ``session``: every task finished, exactly one winner
    per run, each final status the winner's, and every cascade whole. For a task that ``unsure`` names (one
    whose calls met a loss of writes), only that it finished. Returns the tasks and the cancels each won."""
    tasks = {task.task_id: task for task in session.subagent_tasks()}
    cancels_won: dict[str, int] = defaultdict(int)
    ends_won: dict[str, str] = {}
    started: list[dict[str, Any]] = []
    for entry in history:
        if entry["op"] == "cancel" and entry.get("returned"):
            cancels_won[entry["task"]] += 1
        elif entry["op"] in ("complete", "fail") and entry["returned"]:
            ends_won[entry["task"]] = entry["op"]
        elif entry["op"] == "start" and "raised" not in entry:
            started.append(entry)
    assert len(started) > 100, "the run did some work"
    assert sum(cancels_won.values()) > 10, "and the cancellers won some races"
    assert session.pending_subagent_tasks() == []
    for task_id, won in cancels_won.items():
        if not unsure(task_id):
            assert won == 1, f"{task_id}: {won} cancels returned true"
            assert task_id not in ends_won, f"{task_id}: a cancel and an end both won"
    for entry in started:
        task_id = entry["task"]
        if unsure(task_id):
            assert task_id not in tasks or tasks[task_id].finished, tasks[task_id]
            continue
        task = tasks[task_id]
        assert task.finished, task
        # Each final status is the one the winner set (ids are never reused here).
        if task_id in ends_won:
            expected = SubagentStatus.COMPLETED if ends_won[task_id] == "complete" else SubagentStatus.FAILED
            assert task.status is expected, task
        else:
            assert task.status is SubagentStatus.CANCELLED, task
    # A cancel reached every child still running under a cancelled parent.
    for entry in started:
        parent_id = entry["parent"]
        if parent_id is None or unsure(entry["task"]) or unsure(parent_id):
            continue
        child, parent = tasks[entry["task"]], tasks[parent_id]
        if parent.status is SubagentStatus.CANCELLED and parent.cancelled_at is not None:
            ended_first = child.ended_at is not None and child.ended_at <= parent.cancelled_at
            assert child.status is SubagentStatus.CANCELLED or ended_first, (parent, child)
    return tasks, cancels_won
