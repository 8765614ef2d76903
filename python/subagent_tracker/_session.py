"""The session classes: each native session plus the parts that are best written in Python (a spawned
subagent's asyncio task, the event stream's async iteration)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, TypeVar

from subagent_tracker import _native
from subagent_tracker._errors import TaskCancelledError, UnknownTaskError
from subagent_tracker._native import (
    _EVENT_STREAM_BUSY,
    _check_seconds,
    _quoted,  # how every message quotes an id: the core's rule
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from subagent_tracker._native import (
        AsyncRedisTaskHandle,
        AwaitableTaskHandle,
        EventSubscription,
        RedisEventReader,
        RedisTaskHandle,
        SubagentEvent,
        SubagentTask,
        SubagentTaskHandle,
    )
    from subagent_tracker._options import StartOptions

_T = TypeVar("_T")

#: Where the failure of a call made in the background goes.
_LOG = logging.getLogger("subagent_tracker")


async def _resolved(value: _T | Awaitable[_T]) -> _T:
    """``value``, awaited if the call that gave it was an asyncio one: code shared by the blocking and the
    asyncio sessions calls, then resolves."""
    if inspect.isawaitable(value):
        return await value
    return value


def _in_background(outcome: object) -> None:
    """Lets a call of either API run on without awaiting it: an asyncio one's failure is logged, not lost (a
    blocking one has already run, and raised if it failed)."""
    if isinstance(outcome, asyncio.Future):
        outcome.add_done_callback(_log_failure)


def _log_failure(future: asyncio.Future[Any]) -> None:
    if not future.cancelled() and future.exception() is not None:
        _LOG.error("a call made in the background failed", exc_info=future.exception())


#: How long a spawned subagent may take to stop cooperatively after a cancel before it is stopped by force.
DEFAULT_GRACE_SECONDS = 5.0


def _spawn_subagent_task(
    session: _native.Session | _native.RedisSession,
    function: Callable[[Any], Awaitable[Any]],
    task_id: str | None = None,
    *,
    grace: float = DEFAULT_GRACE_SECONDS,
    **options: Unpack[StartOptions],
) -> SpawnedSubagent:
    """Starts a task and runs ``await function(handle)`` as an asyncio task of the running loop.

    The task completes with the function's return value, fails with its exception, or ends cancelled. A
    cancel is cooperative first (the function sees its token fire); if the function has not returned
    ``grace`` seconds later, its asyncio task is cancelled by force and the snapshot shows ``escalated``.
    Await the returned object for the final snapshot.
    """
    _check_seconds(grace, "grace")
    # Asked before the start, so that a call outside a running loop leaves no task behind.
    loop = asyncio.get_running_loop()
    handle = session.start_subagent_task(task_id, **options)
    return SpawnedSubagent(handle, function, grace, loop)


async def _spawn_subagent_task_async(
    session: _native.AsyncRedisSession | _native.AwaitableSession,
    function: Callable[[Any], Awaitable[Any]],
    task_id: str | None = None,
    *,
    grace: float = DEFAULT_GRACE_SECONDS,
    **options: Unpack[StartOptions],
) -> SpawnedSubagent:
    """``_spawn_subagent_task`` for a session whose start is awaited."""
    _check_seconds(grace, "grace")
    loop = asyncio.get_running_loop()
    handle = await session.start_subagent_task(task_id, **options)
    return SpawnedSubagent(handle, function, grace, loop)


class Session(_native.Session):
    """A scope that owns subagent tasks: start them, cancel one, a subtree or all, query them, await them.

    ``Session(session_id=None, *, max_finished_tasks=10_000, event_buffer=4096, max_finished_age=None,
    early_cancel_ttl=60)``: finished tasks beyond ``max_finished_tasks`` are evicted oldest first, and with
    ``max_finished_age`` (in seconds) each is forgotten once that long has passed since it ended; each
    ``events()`` subscriber buffers up to ``event_buffer`` events; a cancel recorded with
    ``cancel_subagent_task(..., before_start=True)`` waits ``early_cancel_ttl`` seconds for its task's start.
    Every method may be called from any thread and any event loop.
    """

    __slots__ = ()

    spawn_subagent_task = _spawn_subagent_task

    def events(self) -> EventStream:
        """An async iterator of lifecycle events from this call on (the subscription starts here, not at
        the first ``await``).

        Each event has ``task_id``, ``kind`` (``"started"``, ``"claimed"``, ``"progress"``, ``"cancelled"``,
        ``"ended"``),
        ``status``, ``timestamp`` and, where it applies, ``reason`` or ``message``. A subscriber that falls
        more than its buffer behind gets one ``"lagged"`` event carrying ``missed``; producers never wait.
        """
        return EventStream(self._subscribe())

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *_exception: object) -> None:
        """Leaving ``with session:`` closes the session: it lives in this process alone."""
        self.close()


class RedisSession(_native.RedisSession):
    """A session kept in Redis, seen from this process: one incarnation of its id. Once that incarnation
    has ended (closed and drained with its id opened again, swept after ``session_ttl``, or lost with a
    server that restarted empty), its transitions, and its queries once its keys are gone, raise
    ``SessionClosedError``. Metadata and results cross processes as JSON: mappings with ``str`` keys,
    lists, tuples, ``str``, ``int``, ``float``, ``bool`` or ``None``, nested at most 64 deep."""

    __slots__ = ()

    spawn_subagent_task = _spawn_subagent_task

    def events(self) -> EventStream:
        """``Session.events()``, with the events of every process that shares the session."""
        return EventStream(self._subscribe())


class AsyncRedisSession(_native.AsyncRedisSession):
    """A session kept in Redis, for asyncio programs: ``RedisSession`` with every call awaited."""

    __slots__ = ()

    spawn_subagent_task = _spawn_subagent_task_async

    def events(self) -> Coroutine[Any, Any, EventStream]:
        """``RedisSession.events()``, awaited; the subscription starts at this call."""
        return _event_stream(self._subscribe())


class AwaitableSession(_native.AwaitableSession):
    """``AwaitableSession(session)``: the in-memory ``session`` with every call awaited, as an
    ``AsyncRedisSession``'s are. The calls complete at once."""

    __slots__ = ()

    spawn_subagent_task = _spawn_subagent_task_async

    def events(self) -> Coroutine[Any, Any, EventStream]:
        """``Session.events()``, awaited; the subscription starts at this call."""
        return _event_stream(self._subscribe())


async def _event_stream(subscription: EventSubscription | Awaitable[RedisEventReader]) -> EventStream:
    return EventStream(await _resolved(subscription))


class SpawnedSubagent:
    """A subagent running as an asyncio task; ``await`` it for its final snapshot."""

    __slots__ = ("_escalated", "handle", "task")

    def __init__(
        self,
        handle: SubagentTaskHandle | RedisTaskHandle | AsyncRedisTaskHandle | AwaitableTaskHandle,
        function: Callable[[Any], Awaitable[Any]],
        grace: float,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self.handle = handle
        self._escalated = False
        self.task: asyncio.Task[SubagentTask] = loop.create_task(self._run(function))

        def escalate() -> None:
            if not self.task.done():
                self._escalated = True
                _in_background(handle.record_escalation())
                self.task.cancel()

        def arm() -> None:
            # On the loop's thread: the cancel may have come from any thread.
            loop.call_later(grace, escalate)

        def on_cancel() -> None:
            # A closed loop has nothing left to escalate against.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(arm)

        handle.token.on_cancel(on_cancel)

    async def _run(self, function: Callable[[Any], Awaitable[Any]]) -> SubagentTask:
        handle = self.handle
        try:
            async with handle:
                result = await function(handle)
                await _resolved(handle.complete(result))
        except asyncio.CancelledError:
            if not self._escalated:
                raise
        except (TaskCancelledError, Exception):
            pass  # The handle recorded the outcome; the snapshot tells it.
        snapshot = await _resolved(handle.snapshot())
        if snapshot is None:
            # Only a Redis task can be gone: its session kept no finished task (`max_finished_tasks=0`).
            raise UnknownTaskError(f"task {_quoted(handle.task_id)} finished and is no longer retained")
        return snapshot

    @property
    def task_id(self) -> str:
        return self.handle.task_id

    def __await__(self) -> Generator[Any, None, SubagentTask]:
        return self.task.__await__()


class EventStream:
    """The async iterator returned by ``Session.events()``. ``close()`` (or ``async with``) unsubscribes, and
    ends an iteration that is waiting for the next event.

    One coroutine iterates a stream at a time, as with an async generator: a second concurrent ``__anext__``
    raises ``RuntimeError``. Open one stream per consumer instead.
    """

    __slots__ = ("_iterating", "_subscription")

    def __init__(self, subscription: EventSubscription | RedisEventReader) -> None:
        self._subscription = subscription
        self._iterating = False

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> SubagentEvent:
        if self._iterating:
            raise RuntimeError(_EVENT_STREAM_BUSY)
        self._iterating = True
        try:
            while True:
                if self._subscription.closed:
                    raise StopAsyncIteration
                event = self._subscription.try_next()
                if event is not None:
                    return event
                readable = self._subscription.readable()
                if readable is not None:
                    await readable
        finally:
            self._iterating = False

    def close(self) -> None:
        """Unsubscribes: iteration ends (a waiting ``__anext__`` wakes and stops), and the session stops
        buffering events for this stream."""
        self._subscription.close()

    async def aclose(self) -> None:
        """Async spelling of ``close()``, so that ``contextlib.aclosing`` works."""
        self.close()

    async def __aenter__(self) -> EventStream:
        return self

    async def __aexit__(self, *_exception: object) -> None:
        self.close()
