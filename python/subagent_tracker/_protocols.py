"""The two shapes of a session, as typing protocols: code written against one runs on either store.

- :class:`SessionProtocol`: the blocking API, which ``Session`` and ``RedisSession`` satisfy.
- :class:`AsyncSessionProtocol`: the asyncio API, where every call is awaited, which ``AsyncRedisSession``
  and ``AwaitableSession`` (an in-memory ``Session`` seen through awaits) satisfy.

Waiting for a task and iterating events are asynchronous in both.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    from subagent_tracker._native import CancellationToken, SubagentTask
    from subagent_tracker._session import EventStream, SpawnedSubagent
    from subagent_tracker._status import SubagentStatus

__all__ = ["AsyncSessionProtocol", "AsyncTaskHandleProtocol", "SessionProtocol", "TaskHandleProtocol"]


@runtime_checkable
class TaskHandleProtocol(Protocol):
    """The runner's side of a task, blocking: ``SubagentTaskHandle`` and ``RedisTaskHandle``."""

    @property
    def task_id(self) -> str: ...
    @property
    def session_id(self) -> str: ...
    @property
    def token(self) -> CancellationToken: ...
    def progress(self, message: str, *, data: Any = None) -> bool: ...
    def complete(self, result: Any = None) -> bool: ...
    def fail(
        self,
        error: str | BaseException,
        *,
        error_type: str | None = None,
        error_code: str | int | None = None,
    ) -> bool: ...
    def pause(self, reason: str | None = None) -> bool: ...
    def resumed(self) -> Awaitable[Any]: ...
    def wait_resumed(self, timeout: float | None = None) -> Any: ...
    def snapshot(self) -> SubagentTask | None: ...


@runtime_checkable
class AsyncTaskHandleProtocol(Protocol):
    """The runner's side of a task, awaited: ``AsyncRedisTaskHandle`` and ``AwaitableTaskHandle``.
    ``async with handle:`` ends the task from how the block exits."""

    @property
    def task_id(self) -> str: ...
    @property
    def session_id(self) -> str: ...
    @property
    def token(self) -> CancellationToken: ...
    def progress(self, message: str, *, data: Any = None) -> Awaitable[bool]: ...
    def complete(self, result: Any = None) -> Awaitable[bool]: ...
    def fail(
        self,
        error: str | BaseException,
        *,
        error_type: str | None = None,
        error_code: str | int | None = None,
    ) -> Awaitable[bool]: ...
    def pause(self, reason: str | None = None) -> Awaitable[bool]: ...
    def resumed(self) -> Awaitable[Any]: ...
    def snapshot(self) -> Awaitable[SubagentTask | None]: ...
    def __aenter__(self) -> Awaitable[Any]: ...
    def __aexit__(self, exception_type: Any, exception: Any, traceback: Any, /) -> Awaitable[bool]: ...


@runtime_checkable
class SessionProtocol(Protocol):
    """A session's blocking API: ``Session`` (in memory) and ``RedisSession`` (across processes).

    ``max_finished_tasks`` is fixed for the session's life, so reading it never waits; ``is_closed()`` is a
    method because on Redis it is a round trip (another process may close the session). ``with session:``
    closes an in-memory session when the block is left; a Redis session is shared by other processes, so
    leaving the block closes nothing there: call ``close()`` to close it for every process."""

    @property
    def session_id(self) -> str: ...
    @property
    def max_finished_tasks(self) -> int: ...
    def is_closed(self) -> bool: ...
    def start_subagent_task(
        self,
        task_id: str | None = None,
        *,
        parent_id: str | None = None,
        agent: str | None = None,
        description: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        deadline: float | None = None,
        detached: bool = False,
        structured: bool = False,
        linked: Iterable[CancellationToken] | None = None,
    ) -> TaskHandleProtocol: ...
    def reserve_subagent_task(
        self,
        task_id: str | None = None,
        *,
        parent_id: str | None = None,
        agent: str | None = None,
        description: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        deadline: float | None = None,
        detached: bool = False,
        structured: bool = False,
        linked: Iterable[CancellationToken] | None = None,
        claim_timeout: float | None = None,
    ) -> str: ...
    def start_subagent_tasks(self, tasks: Iterable[Mapping[str, Any]]) -> Sequence[TaskHandleProtocol]: ...
    def reserve_subagent_tasks(
        self, tasks: Iterable[Mapping[str, Any]], *, claim_timeout: float | None = None
    ) -> list[str]: ...
    def claim_subagent_task(self, task_id: str) -> TaskHandleProtocol: ...
    def cancel_subagent_task(
        self, task_id: str, reason: str | None = None, *, before_start: bool = False
    ) -> bool: ...
    def export_snapshots(self) -> list[dict[str, Any]]: ...
    def restore_snapshots(self, snapshots: Iterable[Mapping[str, Any]]) -> int: ...
    def record_event(self, event: Mapping[str, Any]) -> bool: ...
    def resume_subagent_task(self, task_id: str, value: Any = None) -> bool: ...
    def end_subagent_task(
        self,
        task_id: str,
        *,
        result: Any = None,
        error: str | BaseException | None = None,
        error_type: str | None = None,
        error_code: str | int | None = None,
    ) -> bool: ...
    def end_subagent_tasks(self, ends: Iterable[Mapping[str, Any]]) -> list[bool]: ...
    def cancel_subagent_tasks(
        self,
        *,
        agent: str | None = None,
        status: SubagentStatus | str | None = None,
        metadata: Mapping[str, Any] | None = None,
        reason: str | None = None,
    ) -> list[str]: ...
    def cancel(self, reason: str | None = None) -> int: ...
    def close(self, reason: str | None = None) -> int: ...
    def token(self, task_id: str) -> CancellationToken: ...
    def subagent_task(self, task_id: str) -> SubagentTask | None: ...
    def subagent_tasks(self) -> list[SubagentTask]: ...
    def subagent_tasks_page(
        self, cursor: str | None = None, *, limit: int | None = None, pending: bool = False
    ) -> tuple[list[SubagentTask], str | None]: ...
    def forget_finished(self, older_than: float) -> int: ...
    def pending_subagent_tasks(self) -> list[SubagentTask]: ...
    def wait_subagent_task(self, task_id: str, timeout: float | None = None) -> Awaitable[SubagentTask]: ...
    def cancel_subagent_task_and_wait(
        self, task_id: str, reason: str | None = None, *, timeout: float | None = None
    ) -> Awaitable[SubagentTask]: ...
    def spawn_subagent_task(
        self,
        function: Callable[[Any], Awaitable[Any]],
        task_id: str | None = None,
        *,
        grace: float = ...,
        parent_id: str | None = None,
        agent: str | None = None,
        description: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        deadline: float | None = None,
        detached: bool = False,
        structured: bool = False,
        linked: Iterable[CancellationToken] | None = None,
    ) -> SpawnedSubagent: ...
    def events(self) -> EventStream: ...
    def __enter__(self) -> Any: ...
    def __exit__(self, exception_type: Any, exception: Any, traceback: Any, /) -> Any: ...


@runtime_checkable
class AsyncSessionProtocol(Protocol):
    """A session's asyncio API, every call awaited: ``AsyncRedisSession`` (across processes, never blocking
    the event loop) and ``AwaitableSession`` (in memory; its calls complete at once)."""

    @property
    def session_id(self) -> str: ...
    @property
    def max_finished_tasks(self) -> int: ...
    def is_closed(self) -> Awaitable[bool]: ...
    def start_subagent_task(
        self,
        task_id: str | None = None,
        *,
        parent_id: str | None = None,
        agent: str | None = None,
        description: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        deadline: float | None = None,
        detached: bool = False,
        structured: bool = False,
        linked: Iterable[CancellationToken] | None = None,
    ) -> Awaitable[AsyncTaskHandleProtocol]: ...
    def reserve_subagent_task(
        self,
        task_id: str | None = None,
        *,
        parent_id: str | None = None,
        agent: str | None = None,
        description: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        deadline: float | None = None,
        detached: bool = False,
        structured: bool = False,
        linked: Iterable[CancellationToken] | None = None,
        claim_timeout: float | None = None,
    ) -> Awaitable[str]: ...
    def start_subagent_tasks(
        self, tasks: Iterable[Mapping[str, Any]]
    ) -> Awaitable[Sequence[AsyncTaskHandleProtocol]]: ...
    def reserve_subagent_tasks(
        self, tasks: Iterable[Mapping[str, Any]], *, claim_timeout: float | None = None
    ) -> Awaitable[list[str]]: ...
    def claim_subagent_task(self, task_id: str) -> Awaitable[AsyncTaskHandleProtocol]: ...
    def cancel_subagent_task(
        self, task_id: str, reason: str | None = None, *, before_start: bool = False
    ) -> Awaitable[bool]: ...
    def export_snapshots(self) -> Awaitable[list[dict[str, Any]]]: ...
    def restore_snapshots(self, snapshots: Iterable[Mapping[str, Any]]) -> Awaitable[int]: ...
    def record_event(self, event: Mapping[str, Any]) -> Awaitable[bool]: ...
    def resume_subagent_task(self, task_id: str, value: Any = None) -> Awaitable[bool]: ...
    def end_subagent_task(
        self,
        task_id: str,
        *,
        result: Any = None,
        error: str | BaseException | None = None,
        error_type: str | None = None,
        error_code: str | int | None = None,
    ) -> Awaitable[bool]: ...
    def end_subagent_tasks(self, ends: Iterable[Mapping[str, Any]]) -> Awaitable[list[bool]]: ...
    def cancel_subagent_tasks(
        self,
        *,
        agent: str | None = None,
        status: SubagentStatus | str | None = None,
        metadata: Mapping[str, Any] | None = None,
        reason: str | None = None,
    ) -> Awaitable[list[str]]: ...
    def cancel(self, reason: str | None = None) -> Awaitable[int]: ...
    def close(self, reason: str | None = None) -> Awaitable[int]: ...
    def token(self, task_id: str) -> Awaitable[CancellationToken]: ...
    def subagent_task(self, task_id: str) -> Awaitable[SubagentTask | None]: ...
    def subagent_tasks(self) -> Awaitable[list[SubagentTask]]: ...
    def subagent_tasks_page(
        self, cursor: str | None = None, *, limit: int | None = None, pending: bool = False
    ) -> Awaitable[tuple[list[SubagentTask], str | None]]: ...
    def forget_finished(self, older_than: float) -> Awaitable[int]: ...
    def pending_subagent_tasks(self) -> Awaitable[list[SubagentTask]]: ...
    def wait_subagent_task(self, task_id: str, timeout: float | None = None) -> Awaitable[SubagentTask]: ...
    def cancel_subagent_task_and_wait(
        self, task_id: str, reason: str | None = None, *, timeout: float | None = None
    ) -> Awaitable[SubagentTask]: ...
    def spawn_subagent_task(
        self,
        function: Callable[[Any], Awaitable[Any]],
        task_id: str | None = None,
        *,
        grace: float = ...,
        parent_id: str | None = None,
        agent: str | None = None,
        description: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        deadline: float | None = None,
        detached: bool = False,
        structured: bool = False,
        linked: Iterable[CancellationToken] | None = None,
    ) -> Awaitable[SpawnedSubagent]: ...
    def events(self) -> Awaitable[EventStream]: ...


if TYPE_CHECKING:
    from subagent_tracker._awaitable import AwaitableSession, AwaitableTaskHandle
    from subagent_tracker._native import (
        AsyncRedisSession,
        AsyncRedisTaskHandle,
        RedisSession,
        RedisTaskHandle,
        SubagentTaskHandle,
    )
    from subagent_tracker._session import Session

    # mypy proves here, on every lint run, that each class satisfies its protocol.
    def _blocking_sessions(session: Session | RedisSession) -> SessionProtocol:
        return session

    def _async_sessions(session: AsyncRedisSession | AwaitableSession) -> AsyncSessionProtocol:
        return session

    def _blocking_handles(handle: SubagentTaskHandle | RedisTaskHandle) -> TaskHandleProtocol:
        return handle

    def _async_handles(handle: AsyncRedisTaskHandle | AwaitableTaskHandle) -> AsyncTaskHandleProtocol:
        return handle
