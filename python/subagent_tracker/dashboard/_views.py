"""What the dashboard shows of a task and of a session, as JSON.

Results, metadata and errors can hold user data, so they are left out unless the dashboard was made with
``details=True``. Status, timing, progress and cancel reasons are always shown.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any, Protocol

from subagent_tracker._native import SubagentTask
from subagent_tracker._status import SubagentStatus

#: The fields of a task that every view carries.
_ALWAYS = (
    "task_id",
    "parent_id",
    "agent",
    "description",
    "finished",
    "started_at",
    "queued_at",
    "claimed_at",
    "cancelled_at",
    "ended_at",
    "deadline",
    "progress",
    "progress_count",
    "cancel_reason",
    "cancel_origin",
    "cancel_cause",
    "pause_reason",
    "worker",
    "detached",
    "escalated",
)

#: The fields shown only with ``details=True``: they can hold user data.
_DETAILS = ("metadata", "result", "error", "error_type", "error_code")


class RegistryLike(Protocol):
    """What the dashboard needs of a registry: ``Registry`` and ``RedisRegistry`` both have it."""

    def sessions(self) -> list[str]: ...
    def get_session(self, session_id: str) -> Any: ...


def task_view(task: SubagentTask, details: bool) -> dict[str, Any]:
    view: dict[str, Any] = {name: getattr(task, name) for name in _ALWAYS}
    view["status"] = task.status.value
    # The page takes which statuses are pending from here, so that the rule lives in the core alone.
    view["pending"] = task.status.is_pending
    if details:
        for name in _DETAILS:
            view[name] = _jsonable(getattr(task, name))
    return view


def session_view(session_id: str, tasks: Iterable[SubagentTask]) -> dict[str, Any]:
    counts = Counter(task.status for task in tasks)
    return {
        "session_id": session_id,
        "counts": {status.value: counts.get(status, 0) for status in SubagentStatus},
        "pending": sum(count for status, count in counts.items() if status.is_pending),
        "total": sum(counts.values()),
    }


def pending_in_subtree(tasks: Iterable[SubagentTask], root_id: str) -> int:
    """How many tasks a cancel of ``root_id`` reaches: the task if pending, and its pending descendants (a
    cancel cascades through finished tasks too, to their running children)."""
    children: dict[str, list[SubagentTask]] = {}
    by_id: dict[str, SubagentTask] = {}
    for task in tasks:
        by_id[task.task_id] = task
        if task.parent_id is not None:
            children.setdefault(task.parent_id, []).append(task)
    root = by_id.get(root_id)
    if root is None or not root.status.is_pending:
        return 0
    reached, stack = 0, [root]
    while stack:
        task = stack.pop()
        reached += task.status.is_pending
        stack.extend(children.get(task.task_id, ()))
    return reached


def _jsonable(value: object) -> object:
    """``value`` if JSON can carry it, else its ``repr`` (a result may be any Python object)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(item) for item in value]
    if isinstance(value, dict):
        return {str(key): _jsonable(item) for key, item in value.items()}
    if hasattr(value, "items"):
        return {str(key): _jsonable(item) for key, item in value.items()}
    return repr(value)
