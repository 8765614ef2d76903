"""The longest server call while one session of many tasks is cancelled, listed and cancelled whole: the
figure that says whether one session can freeze a Redis node that other sessions share.

Each scenario runs on a fresh ``redis-server`` with every call logged (``slowlog-log-slower-than 0``), and
reads the longest ``FCALL`` from ``SLOWLOG``:

- a cancel of a tree of ``--tasks`` tasks (a root, children of 100 grandchildren each);
- ``subagent_tasks()`` over as many retained tasks;
- ``session.cancel()`` over as many pending tasks.

Beside each, the time of the whole operation and how many function calls it took. The issue's bound is 2 ms
per call at 100k tasks (``--tasks 100000``, the default); ``--smoke`` runs 2,000.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import redis
from redis_bench import start_server

from subagent_tracker import RedisRegistry

#: A tree's fan-out: children of the root, each with this many children of its own.
FAN_OUT = 100


def longest_call(admin: redis.Redis, action: Callable[[], object]) -> tuple[float, str, float, float, int]:
    """Runs ``action`` with every server call logged: the longest ``FCALL`` in seconds and its function, the
    99.9th percentile of the calls, the action's own time, and how many function calls were made meanwhile
    (the worker's own housekeeping included). A call's time is the server's wall clock: on a shared machine it
    includes any moment the server was not scheduled, which the percentile sets apart."""
    admin.slowlog_reset()
    began = time.perf_counter()
    action()
    elapsed = time.perf_counter() - began
    entries: list[dict[str, Any]] = admin.slowlog_get(1_000_000)  # type: ignore[assignment]
    calls = [entry for entry in entries if b"FCALL" in bytes(entry.get("command", b"")).upper()]
    slowest = max(calls, key=lambda entry: int(entry["duration"]), default=None)
    if slowest is None:
        return 0.0, "", 0.0, elapsed, 0
    function = bytes(slowest["command"]).split()[1].decode()
    durations = sorted(int(entry["duration"]) for entry in calls)
    p999 = durations[min(len(durations) - 1, len(durations) * 999 // 1000)]
    return int(slowest["duration"]) / 1e6, function, p999 / 1e6, elapsed, len(calls)


def tree_of(session: Any, tasks: int) -> list[Any]:
    """A tree of about ``tasks`` tasks under "root"; the handles, kept (a handle let go of fails its task)."""
    handles = [session.start_subagent_task("root")]
    batch: list[dict[str, str]] = []
    child = 0
    while len(handles) + len(batch) < tasks:
        batch.append({"task_id": f"c{child}", "parent_id": "root"})
        for grandchild in range(min(FAN_OUT, tasks - len(handles) - len(batch))):
            batch.append({"task_id": f"c{child}-{grandchild}", "parent_id": f"c{child}"})
        child += 1
        if len(batch) >= 50:
            handles.extend(session.start_subagent_tasks(batch))
            batch = []
    if batch:
        handles.extend(session.start_subagent_tasks(batch))
    return handles


def flat(session: Any, tasks: int) -> list[Any]:
    handles: list[Any] = []
    for first in range(0, tasks, 50):
        handles.extend(
            session.start_subagent_tasks(
                [{"task_id": f"t{index}"} for index in range(first, min(tasks, first + 50))]
            )
        )
    return handles


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="2,000 tasks")
    parser.add_argument("--tasks", type=int, default=100_000)
    arguments = parser.parse_args()
    tasks = 2_000 if arguments.smoke else arguments.tasks
    print(f"| {tasks:,} tasks | longest server call | 99.9th percentile | whole operation | function calls |")
    print("|---|---|---|---|---|")
    scenarios: list[tuple[str, Callable[[Any, int], list[Any]], Callable[[Any], object]]] = [
        ("cancel of a tree", tree_of, lambda session: session.cancel_subagent_task("root")),
        ("subagent_tasks() over retained tasks", flat, lambda session: session.subagent_tasks()),
        ("session.cancel() over pending tasks", flat, lambda session: session.cancel()),
    ]
    for name, build, act in scenarios:
        server, url, port = start_server()
        try:
            admin = redis.Redis(port=port)
            admin.config_set("slowlog-log-slower-than", 0)
            admin.config_set("slowlog-max-len", 1_000_000)
            session = RedisRegistry(url).session(f"bounded-{name}", max_finished_tasks=tasks)
            handles = build(session, tasks)
            measured = longest_call(admin, lambda: act(session))  # noqa: B023 (called here)
            longest, function, p999, elapsed, calls = measured
            verdict = "met" if longest <= 0.002 else "missed"
            longest_text = f"{longest * 1e3:.2f} ms, {function} ({verdict}: ≤ 2 ms)"
            print(f"| {name} | {longest_text} | {p999 * 1e3:.2f} ms | {elapsed * 1e3:,.0f} ms | {calls:,} |")
            del handles
        finally:
            server.terminate()
            server.wait()


if __name__ == "__main__":
    main()
