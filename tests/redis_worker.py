"""A worker process for the cross-process tests: connects a registry through the API named on its command
line (``blocking`` or ``asyncio``) and carries out JSON commands read from stdin, one per line, answering each
with one JSON line on stdout."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

from redis_support import connect

from subagent_tracker import RegistryUnavailableError, SubagentTrackerError

#: How many slow cancel handlers have finished, by task.
CLEANUPS: dict[str, int] = {}


def carry_out(registry: Any, handles: dict[str, Any], command: dict[str, Any]) -> object:
    try:
        return run_command(registry, handles, command)
    except RegistryUnavailableError:
        raise
    except SubagentTrackerError as error:
        return {"raised": type(error).__name__, "message": str(error)}


def run_command(registry: Any, handles: dict[str, Any], command: dict[str, Any]) -> object:
    session = registry.session(command["session"])
    operation = command["op"]
    if operation == "start":
        handle = session.start_subagent_task(command["task"], parent_id=command.get("parent"))
        handles[command["task"]] = handle
        return {"cancelled": handle.token.is_cancelled, "reason": handle.token.reason}
    if operation == "claim":
        handle = session.claim_subagent_task(command["task"])
        handles[command["task"]] = handle
        return {"cancelled": handle.token.is_cancelled, "reason": handle.token.reason}
    if operation == "wait_cancelled":
        token = handles[command["task"]].token
        return {"cancelled": token.wait(command["timeout"]), "reason": token.reason}
    if operation == "complete":
        return handles.pop(command["task"]).complete(command.get("result"))
    if operation == "slow_cleanup":
        # A cancel handler that takes `seconds`, counted once done, for the canceller that waits for it.
        task_id, seconds = command["task"], command["seconds"]

        def cleanup() -> None:
            time.sleep(seconds)
            CLEANUPS[task_id] = CLEANUPS.get(task_id, 0) + 1

        handles[task_id].token.on_cancel(cleanup)
        return True
    if operation == "cleanups_done":
        return CLEANUPS.get(command["task"], 0)
    if operation == "pause":
        return handles[command["task"]].pause(command.get("reason"))
    if operation == "wait_resumed":
        return {"value": handles[command["task"]].wait_resumed(command["timeout"])}
    if operation == "progress":
        return handles[command["task"]].progress(command["message"])
    if operation == "fail":
        return handles.pop(command["task"]).fail(command["error"])
    if operation == "cancel":
        return session.cancel_subagent_task(command["task"], command.get("reason"))
    return {"error": f"unknown op {operation}"}


def main() -> None:
    url, worker_id, api = sys.argv[1], sys.argv[2], sys.argv[3]
    lease = float(sys.argv[4]) if len(sys.argv) > 4 else None
    assert api in ("blocking", "asyncio")
    registry = connect(api, url, worker_id=worker_id, lease=lease, reconcile_interval=0.5)
    handles: dict[str, Any] = {}
    print(json.dumps({"ready": worker_id}), flush=True)
    for line in sys.stdin:
        command: dict[str, Any] = json.loads(line)
        try:
            answer = carry_out(registry, handles, command)
        except RegistryUnavailableError:
            # The first call after a server restart finds the old connection dead; the next one reconnects.
            time.sleep(0.1)
            answer = carry_out(registry, handles, command)
        print(json.dumps({"answer": answer}), flush=True)


if __name__ == "__main__":
    main()
