"""Listings page by page (contract §6): every retained (or pending) task of a session, read one bounded page
at a time, so that no call holds a Redis node long whatever the size of the session."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

from subagent_tracker._native import SubagentTask
from subagent_tracker._protocols import AsyncSessionProtocol, SessionProtocol


def iter_subagent_tasks(
    session: SessionProtocol, *, pending: bool = False, limit: int | None = None
) -> Iterator[SubagentTask]:
    """Every retained task of ``session`` (with ``pending``, every pending one), page by page
    (``subagent_tasks_page``): each once, as its page read it. A task started or finished while the pages are
    read may or may not come."""
    seen: set[str] = set()
    cursor: str | None = None
    while True:
        tasks, cursor = session.subagent_tasks_page(cursor, limit=limit, pending=pending)
        for task in tasks:
            if task.task_id not in seen:
                seen.add(task.task_id)
                yield task
        if cursor is None:
            return


async def aiter_subagent_tasks(
    session: AsyncSessionProtocol, *, pending: bool = False, limit: int | None = None
) -> AsyncIterator[SubagentTask]:
    """:func:`iter_subagent_tasks` for a session of the awaited API (``AsyncRedisSession``,
    ``AwaitableSession``): ``async for task in aiter_subagent_tasks(session)``."""
    seen: set[str] = set()
    cursor: str | None = None
    while True:
        tasks, cursor = await session.subagent_tasks_page(cursor, limit=limit, pending=pending)
        for task in tasks:
            if task.task_id not in seen:
                seen.add(task.task_id)
                yield task
        if cursor is None:
            return
