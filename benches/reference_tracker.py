"""A plain-Python tracker of the same contract, as a user would write it by hand: a dict, a threading.Lock
and asyncio futures. It is the benchmark's honest baseline, so it is reasonably optimised: a running index
(no scan to list pending tasks), a lock-free ``is_cancelled`` read, a bounded deque for retention, and direct
wake-ups when the canceller runs on the waiter's own loop (``call_soon_threadsafe`` per waiter otherwise).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import time
from collections import deque
from typing import Any

RUNNING, COMPLETED, FAILED, CANCELLED = "running", "completed", "failed", "cancelled"


class ReferenceTask:
    __slots__ = (
        "_session",
        "cancel_reason",
        "children",
        "ended_at",
        "finished",
        "parent",
        "result",
        "sequence",
        "started_at",
        "status",
        "task_id",
        "waiters",
    )

    def __init__(self, session: ReferenceSession, task_id: str, parent: ReferenceTask | None, sequence: int):
        self._session = session
        self.task_id = task_id
        self.parent = parent
        self.sequence = sequence
        self.children: set[ReferenceTask] | None = None
        self.status = RUNNING
        self.finished = False
        self.cancel_reason: str | None = None
        self.result: Any = None
        self.started_at = time.time()
        self.ended_at: float | None = None
        self.waiters: list[asyncio.Future[None]] | None = None

    @property
    def is_cancelled(self) -> bool:
        return self.status is CANCELLED

    def complete(self, result: Any = None) -> bool:
        return self._session._end(self, COMPLETED, result)

    def fail(self, error: str) -> bool:
        return self._session._end(self, FAILED, error)

    async def cancelled(self) -> None:
        if self.status is CANCELLED:
            return
        future = asyncio.get_running_loop().create_future()
        with self._session._lock:
            if self.status is CANCELLED:
                return
            if self.waiters is None:
                self.waiters = []
            self.waiters.append(future)
        await future

    def snapshot(self) -> dict[str, Any]:
        with self._session._lock:
            return {
                "task_id": self.task_id,
                "status": self.status,
                "finished": self.finished,
                "cancel_reason": self.cancel_reason,
                "result": self.result,
                "started_at": self.started_at,
                "ended_at": self.ended_at,
            }


class ReferenceSession:
    def __init__(self, max_finished_tasks: int = 10_000) -> None:
        self._lock = threading.Lock()
        self._tasks: dict[str, ReferenceTask] = {}
        self._running: dict[str, ReferenceTask] = {}
        self._finished: deque[ReferenceTask] = deque()
        self._max_finished = max_finished_tasks
        self._sequence = itertools.count()

    def start_subagent_task(self, task_id: str, parent_id: str | None = None) -> ReferenceTask:
        with self._lock:
            existing = self._tasks.get(task_id)
            if existing is not None and not existing.finished:
                raise ValueError(f"task {task_id!r} is already running")
            parent = None
            if parent_id is not None:
                parent = self._tasks.get(parent_id)
                if parent is None or parent.finished:
                    raise LookupError(parent_id)
            task = ReferenceTask(self, task_id, parent, next(self._sequence))
            self._tasks[task_id] = task
            if parent is not None and parent.status is CANCELLED:
                task.status = CANCELLED
                task.cancel_reason = parent.cancel_reason
                return task
            if parent is not None:
                if parent.children is None:
                    parent.children = set()
                parent.children.add(task)
            self._running[task_id] = task
            return task

    def _end(self, task: ReferenceTask, status: str, payload: Any) -> bool:
        with self._lock:
            if task.finished:
                return False
            won = task.status is RUNNING
            if won:
                task.status = status
                del self._running[task.task_id]
            task.result = payload
            task.finished = True
            task.ended_at = time.time()
            task.waiters = None
            if task.parent is not None and task.parent.children is not None:
                task.parent.children.discard(task)
            task.children = None
            self._finished.append(task)
            if len(self._finished) > self._max_finished:
                evicted = self._finished.popleft()
                if self._tasks.get(evicted.task_id) is evicted:
                    del self._tasks[evicted.task_id]
            return won

    def _cancel_locked(self, root: ReferenceTask, reason: str, woken: list[asyncio.Future[None]]) -> int:
        if root.status is not RUNNING:
            return 0
        moved = 0
        stack = [root]
        while stack:
            task = stack.pop()
            if task.status is not RUNNING:
                continue
            task.status = CANCELLED
            task.cancel_reason = reason
            del self._running[task.task_id]
            moved += 1
            if task.waiters:
                woken.extend(task.waiters)
                task.waiters = None
            if task.children:
                stack.extend(task.children)
        return moved

    def cancel_subagent_task(self, task_id: str, reason: str = "cancelled") -> bool:
        woken: list[asyncio.Future[None]] = []
        with self._lock:
            task = self._tasks.get(task_id)
            moved = 0 if task is None else self._cancel_locked(task, reason, woken)
        _wake(woken)
        return moved > 0

    def cancel(self, reason: str = "cancelled") -> int:
        woken: list[asyncio.Future[None]] = []
        with self._lock:
            moved = sum(self._cancel_locked(task, reason, woken) for task in list(self._running.values()))
        _wake(woken)
        return moved

    def pending_subagent_tasks(self) -> list[dict[str, Any]]:
        with self._lock:
            running = list(self._running.values())
        return [task.snapshot() for task in running]

    def subagent_task(self, task_id: str) -> dict[str, Any] | None:
        task = self._tasks.get(task_id)
        return None if task is None else task.snapshot()


def _set_result(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _wake(futures: list[asyncio.Future[None]]) -> None:
    if not futures:
        return
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    for future in futures:
        loop = future.get_loop()
        if loop is running:
            _set_result(future)
        else:
            loop.call_soon_threadsafe(_set_result, future)
