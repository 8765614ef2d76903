"""Waiting for a resume: what ``handle.resumed()`` and ``handle.wait_resumed()`` do once the native handle has
waited (contract §5, pause and resume). Shared by the in-memory and the Redis handles."""

from __future__ import annotations

from typing import Any, Literal, Protocol

from subagent_tracker._native import _quoted

#: Where a paused task stands, as a native handle's ``_resumption()`` reports it with the resume value.
Resumption = tuple[Literal["paused", "resumed", "cancelled", "ended"], Any]


class _PausingHandle(Protocol):
    """What the waits need of a native handle, in memory or on Redis."""

    @property
    def task_id(self) -> str: ...
    @property
    def token(self) -> Any: ...
    def _resume_future(self) -> Any: ...
    def _wait_for_resume(self, timeout: float | None) -> bool: ...
    def _resumption(self) -> Resumption: ...


def _outcome(handle: _PausingHandle) -> Any:
    """The resume value, once the pause is over; ``TaskCancelledError`` for a task cancelled meanwhile. A task
    ended by id while paused gives ``None``: the runner's own end will change nothing."""
    state, value = handle._resumption()
    if state == "cancelled":
        handle.token.raise_if_cancelled()
    return value


async def resumed(handle: _PausingHandle) -> Any:
    """``await handle.resumed()``: waits while the task is paused, then returns the value passed to
    ``resume_subagent_task`` (at once if the task is not paused)."""
    future = handle._resume_future()
    if future is not None:
        await future
    return _outcome(handle)


def wait_resumed(handle: _PausingHandle, timeout: float | None) -> Any:
    """``handle.wait_resumed(timeout)``: the blocking form of ``resumed()``, for threads."""
    if not handle._wait_for_resume(timeout):
        raise TimeoutError(f"task {_quoted(handle.task_id)} was not resumed within {timeout} seconds")
    return _outcome(handle)
