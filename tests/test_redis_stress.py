"""A bounded stress run across processes (§§2, 3, 20): worker processes start parents and children and end
them, canceller processes cancel whatever is pending, all on one session, for a few seconds. Each records its
history; the checks then read the history beside the final state in Redis."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis_support import RedisServer

from subagent_tracker import RedisRegistry, SubagentStatus

PROCESS = Path(__file__).with_name("redis_stress_process.py")
SECONDS = 4.0


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    yield server
    server.stop()


def _run(server: RedisServer) -> list[dict[str, Any]]:
    # Made first, so its bound holds: every run stays retained for the checks.
    RedisRegistry(server.url).session("stress", max_finished_tasks=1_000_000)
    roles = [("worker", "w0"), ("worker", "w1"), ("worker", "w2"), ("canceller", "c0"), ("canceller", "c1")]
    processes = [
        subprocess.Popen(
            [sys.executable, str(PROCESS), server.url, "stress", role, name, str(SECONDS), str(seed)],
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


def test_many_workers_and_cancellers_on_one_session_keep_every_rule(redis_server: RedisServer) -> None:
    history = _run(redis_server)
    session = RedisRegistry(redis_server.url).session("stress")
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
