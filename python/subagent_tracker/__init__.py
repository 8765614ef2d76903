"""Start, watch and stop thousands of concurrent subagent tasks.

Quick start::

    from subagent_tracker import Session

    session = Session()
    with session.start_subagent_task("researcher") as task:
        for chunk in stream:
            task.token.raise_if_cancelled()
            ...

    session.cancel_subagent_task("researcher", reason="user pressed stop")
"""

from __future__ import annotations

import atexit

from subagent_tracker._checkpoints import (
    GuardedStream,
    ToolCall,
    ToolOutcome,
    run_tool_calls,
    run_until_cancelled,
)
from subagent_tracker._errors import (
    DuplicateTaskError,
    SessionClosedError,
    SubagentTrackerError,
    TaskCancelledError,
    UnknownTaskError,
)
from subagent_tracker._native import (
    DEFAULT_MAX_FINISHED_TASKS,
    MAX_TASK_ID_BYTES,
    CancelCallbackRegistration,
    CancellationToken,
    SubagentEvent,
    SubagentTask,
    SubagentTaskHandle,
    _interpreter_exiting,
    pending_deadlines,
)
from subagent_tracker._session import DEFAULT_GRACE_SECONDS, EventStream, Session, SpawnedSubagent
from subagent_tracker._status import SubagentStatus

# Deadlines may pass while the interpreter shuts down; the timer thread must then leave Python alone.
atexit.register(_interpreter_exiting)

__all__ = [
    "DEFAULT_GRACE_SECONDS",
    "DEFAULT_MAX_FINISHED_TASKS",
    "MAX_TASK_ID_BYTES",
    "CancelCallbackRegistration",
    "CancellationToken",
    "DuplicateTaskError",
    "EventStream",
    "GuardedStream",
    "Session",
    "SessionClosedError",
    "SpawnedSubagent",
    "SubagentEvent",
    "SubagentStatus",
    "SubagentTask",
    "SubagentTaskHandle",
    "SubagentTrackerError",
    "TaskCancelledError",
    "ToolCall",
    "ToolOutcome",
    "UnknownTaskError",
    "pending_deadlines",
    "run_tool_calls",
    "run_until_cancelled",
]
