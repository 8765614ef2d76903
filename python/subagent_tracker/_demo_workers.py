"""The multi-process demo: one session on Redis, worker processes that claim and run the subagents, and this
process as the orchestrator that queues the work and stops parts of it.

``python -m subagent_tracker demo --workers 3 [--redis URL]``: without a URL it starts a ``redis-server`` of
its own on a free loopback port (Debian's ``redis-server`` package), says so, and stops it at the end. The
workers run ``python -m subagent_tracker._demo_workers``, a command no user types. The scenario:
queue parents and children, let the workers claim them, cancel one task by id, cancel a subtree, kill one
worker outright (its tasks fail once its lease has passed), and finally cancel the session. Every latency is
measured, ``ended_at - cancelled_at`` of each cancelled task, both stamped by the Redis server's clock. Ctrl-C
cancels the session, with the reason the last line shows, and stops the workers.
"""

from __future__ import annotations

import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from subagent_tracker import (
    DuplicateTaskError,
    RedisRegistry,
    RedisSession,
    SubagentStatus,
    SubagentTask,
    TaskCancelledError,
)
from subagent_tracker._command_errors import connect_redis
from subagent_tracker._loopback import free_port
from subagent_tracker._native import _quoted  # how every message quotes an id: the core's rule

SESSION = "demo"
LEASE = 1.0
#: How long the orchestrator's scenario runs at speed 1, from the workers' start to the session's cancel.
SCENARIO_SECONDS = 6.0
#: How long a worker's slot stays once nothing is queued, at speed 1: the workers leave that long after the
#: end.
IDLE_SECONDS = 3.0
#: The reason of the session cancel that Ctrl-C makes.
CTRL_C_REASON = "stopped by Ctrl-C"
#: How long Ctrl-C waits for the workers to report their cancelled runs' ends before it stops them.
CTRL_C_WAIT_SECONDS = 0.5


@dataclass(frozen=True)
class WorkersOptions:
    workers: int = 3
    subagents: int = 60
    seed: int = 7
    speed: float = 1.0
    redis_url: str | None = None


@dataclass(frozen=True)
class WorkersOutcome:
    """How the multi-process demo ended, for the command's exit status."""

    #: Whether every task finished (none was left running, by the workers or the reaper).
    all_finished: bool
    #: Whether Ctrl-C stopped the run, by a session cancel with ``CTRL_C_REASON``.
    interrupted: bool = False


def start_redis() -> tuple[subprocess.Popen[bytes], str]:
    if shutil.which("redis-server") is None:
        raise SystemExit(
            "the multi-process demo needs redis-server (Debian: apt-get install redis-server), or --redis URL"
        )
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--bind", "127.0.0.1", "--port", str(port), "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        # Out of the terminal's process group: a Ctrl-C goes to the orchestrator alone, which still needs the
        # server to cancel the session, and stops it after.
        start_new_session=True,
    )
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return server, f"redis://127.0.0.1:{port}/0"
        except OSError:
            if time.monotonic() > deadline:
                server.kill()
                raise SystemExit("redis-server did not start") from None
            time.sleep(0.01)


#: How many subagents one worker process runs at once, each in a thread of its own.
SLOTS = 4


def run_worker(url: str, name: str, speed: float, seed: int) -> None:
    """A worker process: claims queued subagents and runs them, several at once, each until it ends or is
    stopped; it leaves once nothing has been queued for a while."""
    session = RedisRegistry(url, worker_id=name, lease=LEASE).session(SESSION)
    slots = [
        threading.Thread(target=run_slot, args=(session, random.Random(f"{seed}:{name}:{slot}"), speed))
        for slot in range(SLOTS)
    ]
    for slot in slots:
        slot.start()
    for slot in slots:
        slot.join()


def run_slot(session: RedisSession, rng: random.Random, speed: float) -> None:
    idle_since = time.monotonic()
    while time.monotonic() - idle_since < IDLE_SECONDS / speed:
        queued = [task for task in session.pending_subagent_tasks() if task.status is SubagentStatus.QUEUED]
        if not queued:
            time.sleep(0.02 / speed)
            continue
        try:
            handle = session.claim_subagent_task(rng.choice(queued).task_id)
        except DuplicateTaskError:
            continue  # another worker was first
        idle_since = time.monotonic()
        try:
            with handle:
                for chunk in range(rng.randint(8, 20)):
                    handle.token.raise_if_cancelled()
                    if handle.token.wait(rng.uniform(0.02, 0.08) / speed):
                        handle.token.raise_if_cancelled()
                    if chunk % 5 == 0:
                        handle.progress(f"chunk {chunk}")
        except TaskCancelledError:
            pass


def counts_by_worker(tasks: list[SubagentTask]) -> dict[str, Counter[str]]:
    table: dict[str, Counter[str]] = {}
    for task in tasks:
        table.setdefault(task.worker or "(queued)", Counter())[task.status.value] += 1
    return table


def show(tasks: list[SubagentTask], elapsed: float) -> None:
    print(f"{elapsed:5.1f}s", end="")
    for worker, counts in sorted(counts_by_worker(tasks).items()):
        summary = " ".join(f"{status}={count}" for status, count in sorted(counts.items()))
        print(f"  [{worker}: {summary}]", end="")
    print(flush=True)


def queue_work(session: RedisSession, options: WorkersOptions) -> list[str]:
    """Queues parents with children under them; returns the parents' ids."""
    rng = random.Random(options.seed)
    parents: list[str] = []
    index = 0
    while index < options.subagents:
        parent = f"plan-{len(parents)}"
        session.reserve_subagent_task(parent, agent="planner")
        parents.append(parent)
        index += 1
        for child in range(rng.randint(2, 5)):
            if index >= options.subagents:
                break
            session.reserve_subagent_task(
                f"{parent}-step-{child}", parent_id=parent, agent=rng.choice(["coder", "researcher"])
            )
            index += 1
    return parents


def cancel_running(session: RedisSession, subtree: bool) -> str:
    """Cancels a subagent a worker is running now (or, with ``subtree``, its plan and everything under it)."""
    running = [task for task in session.pending_subagent_tasks() if task.status is SubagentStatus.RUNNING]
    if subtree:
        running = [task for task in running if task.parent_id is not None]
    if not running:
        return "nothing was running"
    target = running[-1]
    task_id = target.parent_id if subtree and target.parent_id else target.task_id
    reason = "plan withdrawn" if subtree else "user pressed stop"
    return f"{task_id} (running on {target.worker}): {session.cancel_subagent_task(task_id, reason=reason)}"


def kill(process: subprocess.Popen[bytes]) -> str:
    process.send_signal(signal.SIGKILL)
    return f"pid {process.pid} killed"


def run_workers_demo(options: WorkersOptions) -> WorkersOutcome:
    began = time.monotonic()
    server, url = (None, options.redis_url) if options.redis_url else start_redis()
    processes: list[subprocess.Popen[bytes]] = []
    session: RedisSession | None = None
    try:
        if server is not None:
            print(f"started a redis-server of its own at {url} (stopped at the end)", flush=True)
        where = None if server is None else "(the redis-server the demo started)"
        registry = connect_redis(url, where, worker_id="orchestrator", lease=LEASE)
        seconds = (SCENARIO_SECONDS + IDLE_SECONDS) / options.speed
        print(
            f"an orchestrator queues {options.subagents} subagents on Redis for {options.workers} worker "
            f"processes, and stops parts of them for about {seconds:.0f} s (Ctrl-C cancels the whole "
            "session)",
            flush=True,
        )
        session = registry.session(SESSION, max_finished_tasks=100_000)
        session.cancel("a new demo run")
        parents = queue_work(session, options)
        print(
            f"queued {options.subagents} subagents under {len(parents)} plans; "
            f"starting {options.workers} worker processes"
        )
        for index in range(options.workers):
            processes.append(start_worker(url, f"worker-{index}", options))
        return run_scenario(session, processes, options)
    except KeyboardInterrupt:
        return stop_on_ctrl_c(session, began, options.speed)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
        if server is not None:
            server.kill()
            server.wait()


def start_worker(url: str, name: str, options: WorkersOptions) -> subprocess.Popen[bytes]:
    command = ["-m", "subagent_tracker._demo_workers", url, name, str(options.speed), str(options.seed)]
    # Out of the terminal's process group, as the server: the orchestrator stops the workers on Ctrl-C, and a
    # worker given the signal too would print a traceback of its own.
    return subprocess.Popen([sys.executable, *command], start_new_session=True)


def run_scenario(
    session: RedisSession, processes: list[subprocess.Popen[bytes]], options: WorkersOptions
) -> WorkersOutcome:
    """The scenario's steps, timed from the workers' start, then the summary."""
    started = time.monotonic()
    steps: list[tuple[float, str, Callable[[], str]]] = [
        (1.0, "cancel a running subagent by id", lambda: cancel_running(session, subtree=False)),
        (
            1.5,
            "cancel the plan of a running subagent, subtree and all",
            lambda: cancel_running(session, subtree=True),
        ),
        (2.0, "kill worker-0; its subagents fail once its lease has passed", lambda: kill(processes[0])),
    ]
    while time.monotonic() - started < SCENARIO_SECONDS / options.speed:
        elapsed = (time.monotonic() - started) * options.speed
        while steps and elapsed >= steps[0][0]:
            _, what, step = steps.pop(0)
            print(f"{elapsed:5.1f}s  {what}: {step()}", flush=True)
        show(session.subagent_tasks(), elapsed)
        time.sleep(0.5 / options.speed)
    moved = session.cancel("demo over")
    elapsed = (time.monotonic() - started) * options.speed
    print(f"{elapsed:5.1f}s  cancelled the session: {moved} still pending")
    for process in processes:
        process.wait(timeout=30)
    deadline = time.monotonic() + 10
    while session.pending_subagent_tasks() and time.monotonic() < deadline:
        time.sleep(0.05)
    tasks = session.subagent_tasks()
    show(tasks, (time.monotonic() - started) * options.speed)
    latencies = [
        (task.ended_at - task.cancelled_at) * 1000
        for task in tasks
        if task.status is SubagentStatus.CANCELLED and task.ended_at and task.cancelled_at and task.worker
    ]
    lost = [task for task in tasks if task.error and "worker" in task.error]
    print(f"worker-0's tasks failed as lost: {len(lost)}")
    if latencies:
        print(
            f"cancel-to-stopped across processes: median {statistics.median(latencies):.1f} ms, "
            f"max {max(latencies):.1f} ms over {len(latencies)} tasks"
        )
    unfinished = [task for task in tasks if not task.finished]
    print("every task finished" if not unfinished else f"{len(unfinished)} tasks unfinished")
    return WorkersOutcome(all_finished=not unfinished)


def stop_on_ctrl_c(session: RedisSession | None, began: float, speed: float) -> WorkersOutcome:
    """Cancels the session with ``CTRL_C_REASON`` and gives the workers a moment to report their runs' ends;
    the caller then stops the workers and the server."""
    elapsed = (time.monotonic() - began) * speed
    if session is None:
        print(f"{elapsed:5.1f}s  stopped by Ctrl-C before the session was made", flush=True)
        return WorkersOutcome(all_finished=True, interrupted=True)
    moved = session.cancel(CTRL_C_REASON)
    deadline = time.monotonic() + CTRL_C_WAIT_SECONDS
    while session.pending_subagent_tasks() and time.monotonic() < deadline:
        time.sleep(0.02)
    pending = len(session.pending_subagent_tasks())
    print(
        f"{elapsed:5.1f}s  stopped by Ctrl-C: cancelled the session, {moved} tasks, with reason "
        f"{_quoted(CTRL_C_REASON)}; {pending} still stopping as the workers are stopped",
        flush=True,
    )
    return WorkersOutcome(all_finished=pending == 0, interrupted=True)


def worker_main(argv: list[str]) -> None:
    url, name, speed, seed = argv
    run_worker(url, name, float(speed), int(seed))


if __name__ == "__main__":
    worker_main(sys.argv[1:])
