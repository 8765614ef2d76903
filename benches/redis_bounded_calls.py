"""The longest server call while one session of many tasks is cancelled, listed and cancelled whole: the
figure that says whether one session can freeze a Redis node that other sessions share.

Each scenario runs on a fresh ``redis-server`` with every call logged (``slowlog-log-slower-than 0``), and
reads the longest ``FCALL`` from ``SLOWLOG``:

- a cancel of a tree of ``--tasks`` tasks (a root, children of 100 grandchildren each);
- ``subagent_tasks()`` over as many retained tasks;
- ``session.cancel()`` over as many pending tasks;
- the sweep of an idle session that retains as many finished tasks (``session_ttl`` passed);
- the reaper ending as many running tasks of a worker process that died (its lease expired).

Beside each, the time of the whole operation and how many function calls it took. The issue's bound is 2 ms
per call at 100k tasks (``--tasks 100000``, the default); ``--smoke`` runs 2,000.

Then what another session sees meanwhile: while one session cancels a tree of ``--tasks`` tasks, a cancel
from one process reaches its runner in another (from the call to the token firing), taking turns with a bare
``PUBLISH`` from the same process to a redis-py subscriber in another. The issue's bound is a cancel's 99th
percentile at most twice the ``PUBLISH``'s, under the same load. Times across processes are read from
``time.monotonic`` (CLOCK_MONOTONIC, one clock for the whole machine).
"""

from __future__ import annotations

import argparse
import multiprocessing
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import redis
from redis_latency import percentiles, start_server

from subagent_tracker import RedisRegistry

#: A tree's fan-out: children of the root, each with this many children of its own.
FAN_OUT = 100


def longest_call(
    admin: redis.Redis, action: Callable[[], object]
) -> tuple[float, str, float, float, int, int]:
    """Runs ``action`` with every server call logged: the longest ``FCALL`` in seconds and its function, the
    99.9th percentile of the calls, the action's own time, how many function calls were made meanwhile (the
    worker's own housekeeping included), and how many of them took over 2 ms. A call's time is the server's
    wall clock: on a shared machine it includes any moment the server was not scheduled, which the percentile
    sets apart."""
    admin.slowlog_reset()
    began = time.perf_counter()
    action()
    elapsed = time.perf_counter() - began
    entries: list[dict[str, Any]] = admin.slowlog_get(1_000_000)  # type: ignore[assignment]
    calls = [entry for entry in entries if b"FCALL" in bytes(entry.get("command", b"")).upper()]
    slowest = max(calls, key=lambda entry: int(entry["duration"]), default=None)
    if slowest is None:
        return 0.0, "", 0.0, elapsed, 0, 0
    function = bytes(slowest["command"]).split()[1].decode()
    durations = sorted(int(entry["duration"]) for entry in calls)
    p999 = durations[min(len(durations) - 1, len(durations) * 999 // 1000)]
    over = sum(duration > 2_000 for duration in durations)
    return int(slowest["duration"]) / 1e6, function, p999 / 1e6, elapsed, len(calls), over


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


def finished(session: Any, tasks: int) -> list[Any]:
    for handles in (flat(session, min(50_000, tasks - first)) for first in range(0, tasks, 50_000)):
        for first in range(0, len(handles), 500):
            session.end_subagent_tasks([{"handle": handle} for handle in handles[first : first + 500]])
    return []


def until_swept(url: str, session_id: str) -> None:
    """Waits (at most a minute) while a worker whose sweep runs often removes the idle session."""
    sweeper = RedisRegistry(url, worker_id="bench-sweeper", lease=0.2, session_ttl=0.05)
    deadline = time.monotonic() + 60
    while sweeper.get_session(session_id) is not None or redis.Redis.from_url(url).exists(
        f"subagent-tracker:v2:{{s:{session_id}}}:finished"
    ):
        if time.monotonic() > deadline:
            raise RuntimeError("the sweep did not remove the idle session within a minute")
        time.sleep(0.05)


def dying_worker(url: str, tasks: int, connection: Connection) -> None:
    """Starts ``tasks`` tasks, says so, and waits to be killed: its lease then expires with them running."""
    session = RedisRegistry(url, worker_id="bench-dying", lease=0.5).session(
        "reaped", max_finished_tasks=tasks
    )
    handles = flat(session, tasks)
    connection.send("started")
    connection.recv()
    del handles


def dead_worker_tasks(url: str, tasks: int) -> list[Any]:
    """Starts ``tasks`` tasks in a process, and kills it: they are left running, their worker gone."""
    spawn = multiprocessing.get_context("spawn")
    parent, child = spawn.Pipe()
    process = spawn.Process(target=dying_worker, args=(url, tasks, child))
    process.start()
    assert parent.recv() == "started"
    process.kill()
    process.join()
    return []


def until_reaped(url: str) -> None:
    """Waits (at most a minute) while a worker's reaper ends the tasks of the dead one."""
    reaper = RedisRegistry(url, worker_id="bench-reaper", lease=0.2).session("reaped")
    deadline = time.monotonic() + 60
    while reaper.subagent_tasks_page(pending=True, limit=1)[0]:
        if time.monotonic() > deadline:
            raise RuntimeError("the reaper did not end the dead worker's tasks within a minute")
        time.sleep(0.05)


def runner_process(url: str, connection: Connection) -> None:
    """Starts a task, says so, and reports when its token fired; again, until told to stop."""
    session = RedisRegistry(url, worker_id="bench-runner").session("other-session")
    index = 0
    while connection.recv() == "start":
        handle = session.start_subagent_task(f"job-{index}")
        connection.send("started")
        connection.send(time.monotonic() if handle.token.wait(10) else float("nan"))
        handle.complete()
        index += 1


def subscriber_process(port: int, connection: Connection) -> None:
    """Reports when each message published on "bench" arrived, until told to stop."""
    pubsub = redis.Redis(port=port).pubsub()  # type: ignore[no-untyped-call]
    pubsub.subscribe("bench")
    pubsub.get_message(timeout=5)
    while connection.recv() == "listen":
        connection.send("ready")
        message = pubsub.get_message(timeout=10) or pubsub.get_message(timeout=10)
        connection.send(time.monotonic() if message is not None else float("nan"))


def tree_process(url: str, tasks: int, connection: Connection) -> None:
    """Starts a tree of ``tasks`` tasks and holds its runners; cancels it when told, and says when done."""
    session = RedisRegistry(url, worker_id="bench-tree").session("tree", max_finished_tasks=tasks)
    handles = tree_of(session, tasks)
    connection.send("built")
    assert connection.recv() == "cancel"
    session.cancel_subagent_task("root")
    connection.send("cancelled")
    connection.recv()
    del handles


def cancel_latency_beside_a_tree_cancel(tasks: int, most: int) -> None:
    """Cancels in one session, and bare ``PUBLISH``es, taking turns while another session, whose runners are
    in a process of their own, cancels a tree."""
    server, url, port = start_server()
    spawn = multiprocessing.get_context("spawn")
    runner_end, runner_side = spawn.Pipe()
    subscriber_end, subscriber_side = spawn.Pipe()
    tree_end, tree_side = spawn.Pipe()
    runner = spawn.Process(target=runner_process, args=(url, runner_side))
    subscriber = spawn.Process(target=subscriber_process, args=(port, subscriber_side))
    tree = spawn.Process(target=tree_process, args=(url, tasks, tree_side))
    try:
        for process in (tree, runner, subscriber):
            process.start()
        assert tree_end.recv() == "built"
        canceller = RedisRegistry(url, worker_id="bench-canceller").session("other-session")
        publisher = redis.Redis(port=port)
        cancels: list[float] = []
        publishes: list[float] = []
        rounds = iter(range(1_000_000))

        def one_of_each() -> None:
            runner_end.send("start")
            assert runner_end.recv() == "started"
            sent = time.monotonic()
            canceller.cancel_subagent_task(f"job-{next(rounds)}")
            cancels.append(runner_end.recv() - sent)
            subscriber_end.send("listen")
            assert subscriber_end.recv() == "ready"
            sent = time.monotonic()
            publisher.publish("bench", "go")
            publishes.append(subscriber_end.recv() - sent)

        one_of_each()  # both sides connected and warm before the tree's cancel begins
        cancels.clear()
        publishes.clear()
        began = time.monotonic()
        tree_end.send("cancel")
        while not tree_end.poll() and len(cancels) < most:
            one_of_each()
        assert tree_end.recv() == "cancelled"
        walked = time.monotonic() - began
        for end in (runner_end, subscriber_end, tree_end):
            end.send("stop")
        if any(sample != sample for sample in cancels + publishes):
            raise RuntimeError("a cancel or a message did not arrive within 20 s")
        cancel_median, cancel_p99 = percentiles(cancels)
        publish_median, publish_p99 = percentiles(publishes)
        verdict = "met" if cancel_p99 <= 2 * publish_p99 else "missed"
        print(
            f"\nWhile another session cancels a tree of {tasks:,} tasks ({walked * 1e3:,.0f} ms), "
            f"{len(cancels):,} of each, taking turns:\n"
        )
        print("| from one process to another | median | 99th percentile |")
        print("|---|---|---|")
        print(
            f"| a bare `PUBLISH` to a redis-py subscriber | {publish_median * 1e6:,.0f} µs "
            f"| {publish_p99 * 1e6:,.0f} µs |"
        )
        print(
            f"| a cancel, to its runner's token | {cancel_median * 1e6:,.0f} µs | {cancel_p99 * 1e6:,.0f} µs "
            f"({cancel_p99 / publish_p99:.2f}x the `PUBLISH`'s; {verdict}: ≤ 2x) |"
        )
    finally:
        for process in (runner, subscriber, tree):
            if process.is_alive():
                process.join(15)
            if process.is_alive():
                process.kill()
        server.terminate()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="2,000 tasks")
    parser.add_argument("--tasks", type=int, default=100_000)
    arguments = parser.parse_args()
    tasks = 2_000 if arguments.smoke else arguments.tasks
    print(
        f"| {tasks:,} tasks | longest server call | 99.9th percentile | whole operation | function calls "
        "| over 2 ms |"
    )
    print("|---|---|---|---|---|---|")
    Scenario = tuple[str, Callable[[Any, int, str], list[Any]], Callable[[Any, str], object]]
    scenarios: list[Scenario] = [
        (
            "cancel of a tree",
            lambda session, tasks, url: tree_of(session, tasks),
            lambda session, url: session.cancel_subagent_task("root"),
        ),
        (
            "subagent_tasks() over retained tasks",
            lambda session, tasks, url: flat(session, tasks),
            lambda session, url: session.subagent_tasks(),
        ),
        (
            "session.cancel() over pending tasks",
            lambda session, tasks, url: flat(session, tasks),
            lambda session, url: session.cancel(),
        ),
        (
            "the sweep of an idle session's retained tasks",
            lambda session, tasks, url: finished(session, tasks),
            lambda session, url: until_swept(url, "bench"),
        ),
        (
            "the reaper, over a dead worker's tasks",
            lambda session, tasks, url: dead_worker_tasks(url, tasks),
            lambda session, url: until_reaped(url),
        ),
    ]
    for name, build, act in scenarios:
        server, url, port = start_server()
        try:
            admin = redis.Redis(port=port)
            admin.config_set("slowlog-log-slower-than", 0)
            admin.config_set("slowlog-max-len", 1_000_000)
            session = RedisRegistry(url).session("bench", max_finished_tasks=tasks)
            handles = build(session, tasks, url)
            measured = longest_call(admin, lambda: act(session, url))  # noqa: B023 (called here)
            longest, function, p999, elapsed, calls, over = measured
            verdict = "met" if longest <= 0.002 else "missed"
            longest_text = f"{longest * 1e3:.2f} ms, {function} ({verdict}: ≤ 2 ms)"
            print(
                f"| {name} | {longest_text} | {p999 * 1e3:.2f} ms | {elapsed * 1e3:,.0f} ms | {calls:,} "
                f"| {over:,} |"
            )
            del handles
        finally:
            server.terminate()
            server.wait()
    cancel_latency_beside_a_tree_cancel(tasks, most=20 if arguments.smoke else 2_000)


if __name__ == "__main__":
    main()
