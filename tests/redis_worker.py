"""A worker process for the cross-process tests: connects a RedisRegistry and carries out JSON commands read
from stdin, one per line, answering each with one JSON line on stdout."""

from __future__ import annotations

import json
import sys
from typing import Any

from subagent_tracker import RedisRegistry, RedisTaskHandle, SubagentTrackerError


def main() -> None:
    url, worker_id = sys.argv[1], sys.argv[2]
    lease = float(sys.argv[3]) if len(sys.argv) > 3 else None
    registry = RedisRegistry(url, worker_id=worker_id, lease=lease, reconcile_interval=0.5)
    handles: dict[str, RedisTaskHandle] = {}
    print(json.dumps({"ready": worker_id}), flush=True)
    for line in sys.stdin:
        command: dict[str, Any] = json.loads(line)
        session = registry.session(command["session"])
        operation = command["op"]
        try:
            if operation == "start":
                handle = session.start_subagent_task(command["task"], parent_id=command.get("parent"))
                handles[command["task"]] = handle
                answer: object = {"cancelled": handle.token.is_cancelled, "reason": handle.token.reason}
            elif operation == "claim":
                handle = session.claim_subagent_task(command["task"])
                handles[command["task"]] = handle
                answer = {"cancelled": handle.token.is_cancelled, "reason": handle.token.reason}
            elif operation == "wait_cancelled":
                token = handles[command["task"]].token
                answer = {"cancelled": token.wait(command["timeout"]), "reason": token.reason}
            elif operation == "complete":
                answer = handles.pop(command["task"]).complete(command.get("result"))
            elif operation == "progress":
                answer = handles[command["task"]].progress(command["message"])
            elif operation == "fail":
                answer = handles.pop(command["task"]).fail(command["error"])
            elif operation == "cancel":
                answer = session.cancel_subagent_task(command["task"], command.get("reason"))
            else:
                answer = {"error": f"unknown op {operation}"}
        except SubagentTrackerError as error:
            answer = {"raised": type(error).__name__, "message": str(error)}
        print(json.dumps({"answer": answer}), flush=True)


if __name__ == "__main__":
    main()
