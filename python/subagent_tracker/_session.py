"""``Session``: the native session plus the parts that are best written in Python (awaiting, iterating)."""

from __future__ import annotations

import asyncio
import math
from typing import TYPE_CHECKING

from subagent_tracker._native import Session as _NativeSession

if TYPE_CHECKING:
    from subagent_tracker._native import EventSubscription, SubagentEvent, SubagentTask


class Session(_NativeSession):
    """A scope that owns subagent tasks: start them, cancel one, a subtree or all, query them, await them.

    ``Session(session_id=None, *, max_finished_tasks=10_000, event_buffer=4096)``: finished tasks beyond
    ``max_finished_tasks`` are evicted oldest first; each ``events()`` subscriber buffers up to
    ``event_buffer`` events. Every method may be called from any thread and any event loop.
    """

    __slots__ = ()

    async def wait_subagent_task(self, task_id: str, timeout: float | None = None) -> SubagentTask:
        """Waits until the task is finished (its runner has stopped) and returns its final snapshot.

        Raises ``TimeoutError`` if ``timeout`` seconds pass first, and ``UnknownTaskError`` for an unknown id.
        A cancelled task whose runner still runs is not finished: this keeps waiting across that window.
        """
        _check_timeout(timeout)
        watch = self._watch(task_id)
        finished = watch.finished_future()
        if finished is not None:
            try:
                await asyncio.wait_for(finished, timeout)
            except asyncio.TimeoutError:
                raise TimeoutError(
                    f"task {task_id!r} did not finish within {timeout} seconds; its runner is still running"
                ) from None
        return watch.snapshot()

    def events(self) -> EventStream:
        """An async iterator of lifecycle events from this call on (the subscription starts here, not at
        the first ``await``).

        Each event has ``task_id``, ``kind`` (``"started"``, ``"progress"``, ``"cancelled"``, ``"ended"``),
        ``status``, ``timestamp`` and, where it applies, ``reason`` or ``message``. A subscriber that falls
        more than its buffer behind gets one ``"lagged"`` event carrying ``missed``; producers never wait.
        """
        return EventStream(self._subscribe())

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *_exception: object) -> None:
        self.close()


class EventStream:
    """The async iterator returned by ``Session.events()``. ``close()`` (or ``async with``) unsubscribes."""

    __slots__ = ("_subscription",)

    def __init__(self, subscription: EventSubscription) -> None:
        self._subscription = subscription

    def __aiter__(self) -> EventStream:
        return self

    async def __anext__(self) -> SubagentEvent:
        while True:
            if self._subscription.closed:
                raise StopAsyncIteration
            event = self._subscription.try_next()
            if event is not None:
                return event
            readable = self._subscription.readable()
            if readable is not None:
                await readable

    def close(self) -> None:
        """Unsubscribes: iteration ends, and the session stops buffering events for this stream."""
        self._subscription.close()

    async def aclose(self) -> None:
        """Async spelling of ``close()``, so that ``contextlib.aclosing`` works."""
        self.close()

    async def __aenter__(self) -> EventStream:
        return self

    async def __aexit__(self, *_exception: object) -> None:
        self.close()


def _check_timeout(timeout: float | None) -> None:
    if timeout is None:
        return
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds or None, got {type(timeout).__name__}")
    if not math.isfinite(timeout) or timeout < 0:
        raise ValueError(f"timeout must be a finite, non-negative number of seconds, got {timeout}")
