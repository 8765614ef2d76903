"""The two shapes of a session, as typing protocols: code written against one runs on either store.

- :class:`SessionProtocol`: the blocking API, which ``Session`` and ``RedisSession`` satisfy.
- :class:`AsyncSessionProtocol`: the asyncio API, where every call is awaited, which ``AsyncRedisSession``
  and ``AwaitableSession`` (an in-memory ``Session`` seen through awaits) satisfy.

Waiting for a task and iterating events are asynchronous in both.
"""

from __future__ import annotations

import types
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, runtime_checkable

if TYPE_CHECKING:
    from typing_extensions import Unpack

    # The calls each session class makes, declared once with their types in the native module's stub.
    from subagent_tracker._native import (
        _AsyncHandleCalls,
        _AsyncSessionCalls,
        _HandleCalls,
        _SessionCalls,
    )
    from subagent_tracker._options import StartOptions
    from subagent_tracker._session import EventStream, SpawnedSubagent

__all__ = ["AsyncSessionProtocol", "AsyncTaskHandleProtocol", "SessionProtocol", "TaskHandleProtocol"]

if not TYPE_CHECKING:
    from subagent_tracker import _native

    _Handle = TypeVar("_Handle", covariant=True)

    def _calls(name: str, *natives: type) -> Any:
        """At run time a protocol is the names of its members: here, the calls every native class of one
        shape has, so that ``isinstance`` checks each of them as the stub's declarations would."""
        shared = set.intersection(
            *({name for name in vars(native) if not name.startswith("_")} for native in natives)
        )
        return types.new_class(
            name,
            (Protocol[_Handle],) if name.endswith("SessionCalls") else (Protocol,),
            exec_body=lambda namespace: namespace.update(
                {call: getattr(natives[0], call) for call in sorted(shared)}
            ),
        )

    _SessionCalls = _calls("_SessionCalls", _native.Session, _native.RedisSession)
    _AsyncSessionCalls = _calls("_AsyncSessionCalls", _native.AsyncRedisSession, _native.AwaitableSession)
    _HandleCalls = _calls("_HandleCalls", _native.SubagentTaskHandle, _native.RedisTaskHandle)
    _AsyncHandleCalls = _calls("_AsyncHandleCalls", _native.AsyncRedisTaskHandle, _native.AwaitableTaskHandle)


@runtime_checkable
class TaskHandleProtocol(_HandleCalls, Protocol):
    """The runner's side of a task, blocking: ``SubagentTaskHandle`` and ``RedisTaskHandle``."""


@runtime_checkable
class AsyncTaskHandleProtocol(_AsyncHandleCalls, Protocol):
    """The runner's side of a task, awaited: ``AsyncRedisTaskHandle`` and ``AwaitableTaskHandle``.
    ``async with handle:`` ends the task from how the block exits."""

    def __aenter__(self) -> Awaitable[Any]: ...
    def __aexit__(self, exception_type: Any, exception: Any, traceback: Any, /) -> Awaitable[bool]: ...


@runtime_checkable
class SessionProtocol(_SessionCalls[TaskHandleProtocol], Protocol):
    """A session's blocking API: ``Session`` (in memory) and ``RedisSession`` (across processes).

    ``max_finished_tasks`` is fixed for the session's life, so reading it never waits; ``is_closed()`` is a
    method because on Redis it is a round trip (another process may close the session). ``with session:``
    closes an in-memory session when the block is left; a Redis session is shared by other processes, so
    leaving the block closes nothing there: call ``close()`` to close it for every process."""

    def spawn_subagent_task(
        self,
        function: Callable[[Any], Awaitable[Any]],
        task_id: str | None = None,
        *,
        grace: float = ...,
        **options: Unpack[StartOptions],
    ) -> SpawnedSubagent: ...
    def events(self) -> EventStream: ...
    def __enter__(self) -> Any: ...
    def __exit__(self, exception_type: Any, exception: Any, traceback: Any, /) -> Any: ...


@runtime_checkable
class AsyncSessionProtocol(_AsyncSessionCalls[AsyncTaskHandleProtocol], Protocol):
    """A session's asyncio API, every call awaited: ``AsyncRedisSession`` (across processes, never blocking
    the event loop) and ``AwaitableSession`` (in memory; its calls complete at once)."""

    def spawn_subagent_task(
        self,
        function: Callable[[Any], Awaitable[Any]],
        task_id: str | None = None,
        *,
        grace: float = ...,
        **options: Unpack[StartOptions],
    ) -> Awaitable[SpawnedSubagent]: ...
    def events(self) -> Awaitable[EventStream]: ...


if TYPE_CHECKING:
    from subagent_tracker._native import (
        AsyncRedisTaskHandle,
        AwaitableTaskHandle,
        RedisTaskHandle,
        SubagentTaskHandle,
    )
    from subagent_tracker._session import AsyncRedisSession, AwaitableSession, RedisSession, Session

    # mypy proves here, on every lint run, that each class satisfies its protocol.
    def _blocking_sessions(session: Session | RedisSession) -> SessionProtocol:
        return session

    def _async_sessions(session: AsyncRedisSession | AwaitableSession) -> AsyncSessionProtocol:
        return session

    def _blocking_handles(handle: SubagentTaskHandle | RedisTaskHandle) -> TaskHandleProtocol:
        return handle

    def _async_handles(handle: AsyncRedisTaskHandle | AwaitableTaskHandle) -> AsyncTaskHandleProtocol:
        return handle
