"""A process of the Redis stress run (tests/test_redis_stress.py): a worker that starts parents and children
and ends them, or a canceller that cancels what is pending, until a deadline. It prints its history as JSON
lines."""

from __future__ import annotations

import json
import random
import sys
import time

from subagent_tracker import RedisRegistry, RedisTaskHandle, SubagentTrackerError


def work(
    session_id: str, registry: RedisRegistry, name: str, until: float, rng: random.Random, prefix: str
) -> None:
    session = registry.session(session_id)
    running: list[tuple[str, RedisTaskHandle]] = []
    index = 0
    while time.monotonic() < until:
        if len(running) < 6 and rng.random() < 0.6:
            task_id = f"{prefix}{name}-{index}"
            index += 1
            parents = [candidate for candidate, _ in running if "-c" not in candidate]
            parent = rng.choice(parents) if parents and rng.random() < 0.5 else None
            if parent is not None:
                task_id = f"{parent}-c{index}"
            try:
                handle = session.start_subagent_task(task_id, parent_id=parent)
            except SubagentTrackerError as error:
                print(
                    json.dumps({"op": "start", "task": task_id, "raised": type(error).__name__}), flush=True
                )
                continue
            print(json.dumps({"op": "start", "task": task_id, "parent": parent}), flush=True)
            running.append((task_id, handle))
        elif running:
            task_id, handle = running.pop(rng.randrange(len(running)))
            how = rng.choice(["complete", "fail"])
            ended = handle.complete("done") if how == "complete" else handle.fail("broke")
            print(json.dumps({"op": how, "task": task_id, "returned": ended}), flush=True)
    for task_id, handle in running:
        print(
            json.dumps({"op": "complete", "task": task_id, "returned": handle.complete("done")}), flush=True
        )


def cancel(session_id: str, registry: RedisRegistry, until: float, rng: random.Random) -> None:
    session = registry.session(session_id)
    while time.monotonic() < until:
        pending = session.pending_subagent_tasks()
        if not pending:
            time.sleep(0.001)
            continue
        task_id = rng.choice(pending).task_id
        print(
            json.dumps({"op": "cancel", "task": task_id, "returned": session.cancel_subagent_task(task_id)}),
            flush=True,
        )


def main() -> None:
    url, session_id, role, name, seconds, seed = sys.argv[1:7]
    prefix = sys.argv[7] if len(sys.argv) > 7 else ""
    registry = RedisRegistry(url, worker_id=name, lease=5.0)
    rng = random.Random(int(seed))
    until = time.monotonic() + float(seconds)
    if role == "worker":
        work(session_id, registry, name, until, rng, prefix)
    else:
        cancel(session_id, registry, until, rng)


if __name__ == "__main__":
    main()
