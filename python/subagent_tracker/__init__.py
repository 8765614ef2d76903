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
import os

from subagent_tracker import _errors, _native
from subagent_tracker._checkpoints import (
    GuardedStream,
    ToolCall,
    ToolOutcome,
    run_cancel_handler,
    run_tool_calls,
    run_until_cancelled,
)
from subagent_tracker._default_registry import default_registry
from subagent_tracker._errors import (
    DuplicateTaskError,
    RegistryProtocolError,
    RegistryUnavailableError,
    ReplicationTimeoutError,
    SessionClosedError,
    SessionLostError,
    SubagentTrackerError,
    TaskCancelledError,
    UnknownTaskError,
)
from subagent_tracker._native import (
    BATCH_REFUSED_REASON,
    CHILD_FAILED_REASON,
    CLAIM_TIMEOUT_ERROR,
    DEADLINE_REASON,
    DEFAULT_CANCEL_REASON,
    DEFAULT_MAX_FINISHED_TASKS,
    DROPPED_HANDLE_ERROR,
    GROUP_ENDED_REASON,
    LEASE_LOST_REASON,
    MAX_SECONDS,
    MAX_TASK_ID_BYTES,
    ORPHANED_RUN_ERROR,
    RESTORED_WITHOUT_RUNNER_ERROR,
    SESSION_LOST_REASON,
    WORKER_LOST_ERROR,
    AsyncRedisRegistry,
    AsyncRedisTaskHandle,
    AwaitableTaskHandle,
    CancelCallbackRegistration,
    CancellationToken,
    RedisRegistry,
    RedisTaskHandle,
    Registry,
    SubagentEvent,
    SubagentTask,
    SubagentTaskHandle,
    __version__,
    _after_fork_in_child,
    _after_fork_in_parent,
    _before_fork,
    _interpreter_exiting,
)
from subagent_tracker._options import RegistryOptions, ReserveOptions, SessionOptions, StartOptions
from subagent_tracker._pages import aiter_subagent_tasks, iter_subagent_tasks
from subagent_tracker._progress import ProgressEntry
from subagent_tracker._protocols import (
    AsyncSessionProtocol,
    AsyncTaskHandleProtocol,
    SessionProtocol,
    TaskHandleProtocol,
)
from subagent_tracker._session import (
    DEFAULT_GRACE_SECONDS,
    AsyncRedisSession,
    AwaitableSession,
    EventStream,
    RedisSession,
    Session,
    SpawnedSubagent,
)
from subagent_tracker._status import SubagentStatus

# What the binding uses of this half, handed over before any session exists: the binding imports no module of
# the package, so every call goes one way, from here into the binding.
_native._bind_python_half(
    errors=_errors,
    status=SubagentStatus,
    progress_entry=ProgressEntry,
    guarded_stream=GuardedStream,
    run_until_cancelled=run_until_cancelled,
    run_cancel_handler=run_cancel_handler,
    session=Session,
    redis_session=RedisSession,
    async_redis_session=AsyncRedisSession,
)

# Deadlines may pass while the interpreter shuts down; the core's threads must then leave Python alone.
atexit.register(_interpreter_exiting)
# A forked child gets a deadline timer of its own, and the timer's locks unheld.
if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before_fork, after_in_parent=_after_fork_in_parent, after_in_child=_after_fork_in_child
    )

__all__ = [
    "BATCH_REFUSED_REASON",
    "CHILD_FAILED_REASON",
    "CLAIM_TIMEOUT_ERROR",
    "DEADLINE_REASON",
    "DEFAULT_CANCEL_REASON",
    "DEFAULT_GRACE_SECONDS",
    "DEFAULT_MAX_FINISHED_TASKS",
    "DROPPED_HANDLE_ERROR",
    "GROUP_ENDED_REASON",
    "LEASE_LOST_REASON",
    "MAX_SECONDS",
    "MAX_TASK_ID_BYTES",
    "ORPHANED_RUN_ERROR",
    "RESTORED_WITHOUT_RUNNER_ERROR",
    "SESSION_LOST_REASON",
    "WORKER_LOST_ERROR",
    "AsyncRedisRegistry",
    "AsyncRedisSession",
    "AsyncRedisTaskHandle",
    "AsyncSessionProtocol",
    "AsyncTaskHandleProtocol",
    "AwaitableSession",
    "AwaitableTaskHandle",
    "CancelCallbackRegistration",
    "CancellationToken",
    "DuplicateTaskError",
    "EventStream",
    "GuardedStream",
    "ProgressEntry",
    "RedisRegistry",
    "RedisSession",
    "RedisTaskHandle",
    "Registry",
    "RegistryOptions",
    "RegistryProtocolError",
    "RegistryUnavailableError",
    "ReplicationTimeoutError",
    "ReserveOptions",
    "Session",
    "SessionClosedError",
    "SessionLostError",
    "SessionOptions",
    "SessionProtocol",
    "SpawnedSubagent",
    "StartOptions",
    "SubagentEvent",
    "SubagentStatus",
    "SubagentTask",
    "SubagentTaskHandle",
    "SubagentTrackerError",
    "TaskCancelledError",
    "TaskHandleProtocol",
    "ToolCall",
    "ToolOutcome",
    "UnknownTaskError",
    "__version__",
    "aiter_subagent_tasks",
    "default_registry",
    "iter_subagent_tasks",
    "run_tool_calls",
    "run_until_cancelled",
]
