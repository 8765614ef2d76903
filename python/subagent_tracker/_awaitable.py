"""``AwaitableSession``: an in-memory ``Session`` seen through the asyncio API, so that code written
against ``AsyncSessionProtocol`` runs on either store. Its calls complete at once: memory never waits."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

from subagent_tracker._session import DEFAULT_GRACE_SECONDS, Session

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from subagent_tracker._native import CancellationToken, SubagentTask, SubagentTaskHandle
    from subagent_tracker._options import ReserveOptions, StartOptions
    from subagent_tracker._session import EventStream, SpawnedSubagent
    from subagent_tracker._status import SubagentStatus

__all__ = ["AwaitableSession", "AwaitableTaskHandle"]


class AwaitableTaskHandle:
    """An in-memory runner's handle seen through awaits: ``await handle.complete(result)``. ``async with``
    ends the task as the handle's own does."""

    __slots__ = ("handle",)

    def __init__(self, handle: SubagentTaskHandle) -> None:
        #: The in-memory handle, for its blocking calls.
        self.handle = handle

    @property
    def task_id(self) -> str:
        return self.handle.task_id

    @property
    def session_id(self) -> str:
        return self.handle.session_id

    @property
    def token(self) -> CancellationToken:
        return self.handle.token

    async def progress(self, message: str, *, data: Any = None) -> bool:
        return self.handle.progress(message, data=data)

    async def complete(self, result: Any = None) -> bool:
        return self.handle.complete(result)

    async def fail(
        self,
        error: str | BaseException,
        *,
        error_type: str | None = None,
        error_code: str | int | None = None,
    ) -> bool:
        return self.handle.fail(error, error_type=error_type, error_code=error_code)

    async def pause(self, reason: str | None = None) -> bool:
        return self.handle.pause(reason)

    def resumed(self) -> Awaitable[Any]:
        return self.handle.resumed()

    async def record_escalation(self) -> None:
        self.handle.record_escalation()

    async def snapshot(self) -> SubagentTask | None:
        return self.handle.snapshot()

    async def __aenter__(self) -> AwaitableTaskHandle:
        return self

    async def __aexit__(
        self,
        exception_type: type[BaseException] | None,
        exception: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        return self.handle.__exit__(exception_type, exception, traceback)

    def __repr__(self) -> str:
        return f"AwaitableTaskHandle({self.handle!r})"


class AwaitableSession:
    """``AwaitableSession(session)``: the in-memory ``session`` with every call awaited, as an
    ``AsyncRedisSession``'s are. The calls complete at once."""

    __slots__ = ("session",)

    def __init__(self, session: Session) -> None:
        if not isinstance(session, Session):
            raise TypeError(
                f"AwaitableSession wraps a subagent_tracker.Session, got {type(session).__name__}"
            )
        #: The in-memory session, for its blocking calls.
        self.session = session

    @property
    def session_id(self) -> str:
        return self.session.session_id

    @property
    def max_finished_tasks(self) -> int:
        return self.session.max_finished_tasks

    async def is_closed(self) -> bool:
        return self.session.closed

    async def start_subagent_task(
        self,
        task_id: str | None = None,
        **options: Unpack[StartOptions],
    ) -> AwaitableTaskHandle:
        handle = self.session.start_subagent_task(task_id, **options)
        return AwaitableTaskHandle(handle)

    async def reserve_subagent_task(
        self,
        task_id: str | None = None,
        **options: Unpack[ReserveOptions],
    ) -> str:
        return self.session.reserve_subagent_task(task_id, **options)

    async def start_subagent_tasks(self, tasks: Iterable[Mapping[str, Any]]) -> list[AwaitableTaskHandle]:
        return [AwaitableTaskHandle(handle) for handle in self.session.start_subagent_tasks(tasks)]

    async def reserve_subagent_tasks(
        self, tasks: Iterable[Mapping[str, Any]], *, claim_timeout: float | None = None
    ) -> list[str]:
        return self.session.reserve_subagent_tasks(tasks, claim_timeout=claim_timeout)

    async def claim_subagent_task(self, task_id: str) -> AwaitableTaskHandle:
        return AwaitableTaskHandle(self.session.claim_subagent_task(task_id))

    async def cancel_subagent_task(
        self, task_id: str, reason: str | None = None, *, before_start: bool = False
    ) -> bool:
        return self.session.cancel_subagent_task(task_id, reason, before_start=before_start)

    async def export_snapshots(self) -> list[dict[str, Any]]:
        return self.session.export_snapshots()

    async def restore_snapshots(self, snapshots: Iterable[Mapping[str, Any]]) -> int:
        return self.session.restore_snapshots(snapshots)

    async def record_event(self, event: Mapping[str, Any]) -> bool:
        return self.session.record_event(event)

    async def resume_subagent_task(self, task_id: str, value: Any = None) -> bool:
        return self.session.resume_subagent_task(task_id, value)

    async def end_subagent_task(
        self,
        task_id: str,
        *,
        result: Any = None,
        error: str | BaseException | None = None,
        error_type: str | None = None,
        error_code: str | int | None = None,
    ) -> bool:
        return self.session.end_subagent_task(
            task_id, result=result, error=error, error_type=error_type, error_code=error_code
        )

    async def end_subagent_tasks(self, ends: Iterable[Mapping[str, Any]]) -> list[bool]:
        return self.session.end_subagent_tasks(_in_memory_ends(ends))

    async def cancel_subagent_tasks(
        self,
        *,
        agent: str | None = None,
        status: SubagentStatus | str | None = None,
        metadata: Mapping[str, Any] | None = None,
        reason: str | None = None,
    ) -> list[str]:
        return self.session.cancel_subagent_tasks(
            agent=agent, status=status, metadata=metadata, reason=reason
        )

    async def cancel(self, reason: str | None = None) -> int:
        return self.session.cancel(reason)

    async def close(self, reason: str | None = None) -> int:
        return self.session.close(reason)

    async def token(self, task_id: str) -> CancellationToken:
        return self.session.token(task_id)

    async def subagent_task(self, task_id: str) -> SubagentTask | None:
        return self.session.subagent_task(task_id)

    async def subagent_tasks(self) -> list[SubagentTask]:
        return self.session.subagent_tasks()

    async def subagent_tasks_page(
        self, cursor: str | None = None, *, limit: int | None = None, pending: bool = False
    ) -> tuple[list[SubagentTask], str | None]:
        return self.session.subagent_tasks_page(cursor, limit=limit, pending=pending)

    async def forget_finished(self, older_than: float) -> int:
        return self.session.forget_finished(older_than)

    async def pending_subagent_tasks(self) -> list[SubagentTask]:
        return self.session.pending_subagent_tasks()

    async def wait_subagent_task(self, task_id: str, timeout: float | None = None) -> SubagentTask:
        return await self.session.wait_subagent_task(task_id, timeout)

    async def cancel_subagent_task_and_wait(
        self, task_id: str, reason: str | None = None, *, timeout: float | None = None
    ) -> SubagentTask:
        return await self.session.cancel_subagent_task_and_wait(task_id, reason, timeout=timeout)

    async def spawn_subagent_task(
        self,
        function: Callable[[AwaitableTaskHandle], Awaitable[Any]],
        task_id: str | None = None,
        *,
        grace: float = DEFAULT_GRACE_SECONDS,
        **options: Unpack[StartOptions],
    ) -> SpawnedSubagent:
        def run(handle: SubagentTaskHandle) -> Awaitable[Any]:
            return function(AwaitableTaskHandle(handle))

        return self.session.spawn_subagent_task(run, task_id, grace=grace, **options)

    async def events(self) -> EventStream:
        return self.session.events()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AwaitableSession) and other.session == self.session

    def __hash__(self) -> int:
        return hash(self.session)

    def __repr__(self) -> str:
        return f"AwaitableSession({self.session!r})"


def _in_memory_ends(ends: Iterable[Mapping[str, Any]]) -> Iterable[Mapping[str, Any]]:
    """A batch of ends as the in-memory session takes it: the handles its awaitable handles wrap. Anything but
    an iterable of ends goes as it is, for the session's own error."""
    if isinstance(ends, (str, bytes, Mapping)) or not isinstance(ends, Iterable):
        return ends
    return [
        {**end, "handle": end["handle"].handle}
        if isinstance(end, Mapping) and isinstance(end.get("handle"), AwaitableTaskHandle)
        else end
        for end in ends
    ]
