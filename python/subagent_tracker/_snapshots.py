"""Export (contract §6, export and restore): a session's snapshots as records of JSON's types, which
``restore_snapshots`` takes back, in this process or another, on either store."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from subagent_tracker._native import AsyncRedisSession, AwaitableSession, RedisSession, SubagentTask

#: The fields of a snapshot that a record keeps, in the snapshot's own order.
FIELDS = (
    "task_id",
    "parent_id",
    "agent",
    "description",
    "metadata",
    "status",
    "finished",
    "started_at",
    "queued_at",
    "claimed_at",
    "cancelled_at",
    "ended_at",
    "cancel_reason",
    "cancel_origin",
    "cancel_cause",
    "pause_reason",
    "deadline",
    "detached",
    "escalated",
    "progress",
    "progress_count",
    "progress_log",
    "result",
    "error",
    "error_type",
    "error_code",
    "worker",
)


def thawed(value: Any) -> Any:
    """``value`` with the read-only containers a session keeps made plain again (mappings to dicts, tuples
    and frozensets to lists), so that ``json.dumps`` takes it. Walks with a work list, never recursing."""
    root: list[Any] = [value]
    pending: list[tuple[Any, Any, Any]] = [(root, 0, value)]
    while pending:
        container, slot, item = pending.pop()
        if isinstance(item, Mapping):
            plain: Any = {}
            for key, inner in item.items():
                plain[key] = None
                pending.append((plain, key, inner))
        elif isinstance(item, (tuple, list, frozenset)):
            plain = [None] * len(item)
            for index, inner in enumerate(item):
                pending.append((plain, index, inner))
        else:
            plain = item
        container[slot] = plain
    return root[0]


def snapshot_record(task: SubagentTask) -> dict[str, Any]:
    """One snapshot as a record: its fields, the status as its name, every value of JSON's types (as far as
    the task's own metadata and result are)."""
    record = {name: getattr(task, name) for name in FIELDS}
    record["status"] = task.status.value
    record["progress_log"] = [
        {"at": entry.at, "message": entry.message, "data": entry.data} for entry in task.progress_log
    ]
    return thawed(record)  # type: ignore[no-any-return]


def export_snapshots(session: RedisSession) -> list[dict[str, Any]]:
    """A blocking session's ``export_snapshots()``."""
    return [snapshot_record(task) for task in session.subagent_tasks()]


async def export_snapshots_async(session: AsyncRedisSession | AwaitableSession) -> list[dict[str, Any]]:
    """An asyncio session's ``export_snapshots()``."""
    return [snapshot_record(task) for task in await session.subagent_tasks()]
