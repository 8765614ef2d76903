"""A bounded stress run across processes (§§2, 3, 19, 20, 21): worker processes start parents and children
and end them, canceller processes cancel whatever is pending, all on one session, for a few seconds. Each
records its history; the checks then read the history beside the final state in Redis. The run is repeated
with hostile ids, a reopened session, and after a gap of more than ten leases with no live worker."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis_support import RedisTarget, Worker, start_target

from subagent_tracker import WORKER_LOST_ERROR, RedisRegistry, RedisTaskHandle, SubagentStatus

PROCESS = Path(__file__).with_name("redis_stress_process.py")
SECONDS = 3.0


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


def _run(server: RedisTarget, scenario: str) -> list[dict[str, Any]]:
    session_id = _session_id(scenario)
    prefix = HOSTILE_PREFIX if scenario == "hostile ids" else ""
    roles = [("worker", "w0"), ("worker", "w1"), ("worker", "w2"), ("canceller", "c0"), ("canceller", "c1")]
    processes = [
        subprocess.Popen(
            [
                sys.executable,
                str(PROCESS),
                server.url,
                session_id,
                role,
                name,
                str(SECONDS),
                str(seed),
                prefix,
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for seed, (role, name) in enumerate(roles)
    ]
    history: list[dict[str, Any]] = []
    for process in processes:
        output, _ = process.communicate(timeout=SECONDS + 60)
        assert process.returncode == 0, output
        history.extend(json.loads(line) for line in output.splitlines())
    return history


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
    tasks = {task.task_id: task for task in session.subagent_tasks()}
    cancels_won: dict[str, int] = defaultdict(int)
    ends_won: dict[str, str] = {}
    started = []
    for entry in history:
        if entry["op"] == "cancel" and entry["returned"]:
            cancels_won[entry["task"]] += 1
        elif entry["op"] in ("complete", "fail") and entry["returned"]:
            ends_won[entry["task"]] = entry["op"]
        elif entry["op"] == "start" and "raised" not in entry:
            started.append(entry)
    assert len(started) > 100, "the run did some work"
    assert sum(cancels_won.values()) > 10, "and the cancellers won some races"

    # Exactly one winner per run (ids are never reused here): a cancel or an end, never both, never two.
    for task_id, won in cancels_won.items():
        assert won == 1, f"{task_id}: {won} cancels returned true"
        assert task_id not in ends_won, f"{task_id}: a cancel and an end both won"
    # Nothing is left pending, and each final status is the one the winner set.
    assert session.pending_subagent_tasks() == []
    for entry in started:
        task = tasks[entry["task"]]
        assert task.finished, task
        if entry["task"] in ends_won:
            expected = (
                SubagentStatus.COMPLETED if ends_won[entry["task"]] == "complete" else SubagentStatus.FAILED
            )
            assert task.status is expected, task
        else:
            assert task.status is SubagentStatus.CANCELLED, task
    # A cancel reached every child still running under a cancelled parent.
    for entry in started:
        child, parent_id = tasks[entry["task"]], entry["parent"]
        if parent_id is None:
            continue
        parent = tasks[parent_id]
        if parent.status is SubagentStatus.CANCELLED and parent.cancelled_at is not None:
            assert parent.cancelled_at is not None
            ended_first = child.ended_at is not None and child.ended_at <= parent.cancelled_at
            assert child.status is SubagentStatus.CANCELLED or ended_first, (parent, child)
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
