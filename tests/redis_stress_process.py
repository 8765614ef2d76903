"""A process of the Redis stress run (``test_redis_stress.py``): a worker that starts parents and children
and ends them, or a canceller that cancels what is pending, until a deadline. It prints its history as JSON
lines, each with when its call began and returned (``began``, ``at``: the wall clock, for the runs where Redis
loses writes or moves a slot part way). A call that says Redis is unavailable is recorded as such: an end is
made again until it has an answer, since the runner still holds its run."""

from __future__ import annotations

import json
import random
import sys
import time
from functools import partial
from typing import Any

from redis_support import until_answered

from subagent_tracker import RedisRegistry, RedisTaskHandle, RegistryUnavailableError, SubagentTrackerError


def record(began: float, **entry: Any) -> None:
    print(json.dumps({**entry, "began": began, "at": time.time()}), flush=True)


def work(
    session_id: str, registry: RedisRegistry, name: str, until: float, rng: random.Random, prefix: str
) -> None:
    # Started late on a busy machine, a process may first call while the slot moves: it calls again, as every
    # call of the run does.
    session = until_answered(partial(registry.session, session_id))
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
            began = time.time()
            try:
                handle = session.start_subagent_task(task_id, parent_id=parent)
            except SubagentTrackerError as error:
                record(began, op="start", task=task_id, raised=type(error).__name__)
                continue
            record(began, op="start", task=task_id, parent=parent)
            running.append((task_id, handle))
        elif running:
            task_id, handle = running.pop(rng.randrange(len(running)))
            how = rng.choice(["complete", "fail"])
            began = time.time()
            ended = until_answered(
                partial(handle.complete, "done") if how == "complete" else partial(handle.fail, "broke")
            )
            record(began, op=how, task=task_id, returned=ended)
    for task_id, handle in running:
        began = time.time()
        record(began, op="complete", task=task_id, returned=until_answered(partial(handle.complete, "done")))


def cancel(session_id: str, registry: RedisRegistry, until: float, rng: random.Random) -> None:
    session = until_answered(partial(registry.session, session_id))
    while time.monotonic() < until:
        try:
            pending = session.pending_subagent_tasks()
        except RegistryUnavailableError:
            time.sleep(0.01)
            continue
        if not pending:
            time.sleep(0.001)
            continue
        task_id = rng.choice(pending).task_id
        began = time.time()
        try:
            record(began, op="cancel", task=task_id, returned=session.cancel_subagent_task(task_id))
        except RegistryUnavailableError:
            # Whether it took effect is not known: the checks take it for neither a win nor a loss.
            record(began, op="cancel", task=task_id, raised="RegistryUnavailableError")


def main() -> None:
    url, session_id, role, name, seconds, seed = sys.argv[1:7]
    prefix = sys.argv[7] if len(sys.argv) > 7 else ""
    # Shorter for the runs where Redis loses writes: a run whose end was lost is ended by the orphan check,
    # twice the timeout after it was found.
    timeout = float(sys.argv[8]) if len(sys.argv) > 8 else 5.0
    key_prefix = sys.argv[9] if len(sys.argv) > 9 else "subagent-tracker:"
    registry = until_answered(
        partial(RedisRegistry, url, worker_id=name, lease=5.0, timeout=timeout, key_prefix=key_prefix)
    )
    rng = random.Random(int(seed))
    until = time.monotonic() + float(seconds)
    if role == "worker":
        work(session_id, registry, name, until, rng, prefix)
    else:
        cancel(session_id, registry, until, rng)


if __name__ == "__main__":
    main()
