"""Checkpoints that let an agent loop stop promptly: guarded streams, interruptible tools, tool batches.

A tracker alone does not stop an agent; the loop must reach a checkpoint. These helpers race the work
against the task's token, so that a cancel stops a silent stream or a running tool at once, and every tool
call gets an outcome the conversation can record.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from subagent_tracker._errors import TaskCancelledError
from subagent_tracker._native import DEFAULT_CANCEL_REASON

if TYPE_CHECKING:
    from subagent_tracker._native import CancellationToken, HandlerCompletion

_T = TypeVar("_T")

#: Where a cancel handler's exception goes: the logger plain handlers' exceptions go to.
_LOG = logging.getLogger("subagent_tracker")


def _cancelled_error(token: CancellationToken, partial: list[Any] | None = None) -> TaskCancelledError:
    try:
        token.raise_if_cancelled()
    except TaskCancelledError as cancelled:
        cancelled.partial = partial
        return cancelled
    return TaskCancelledError(token.task_id or "", token.reason or DEFAULT_CANCEL_REASON, partial)


class GuardedStream(AsyncIterator[_T], Generic[_T]):
    """Passes chunks through until the token fires; then closes the source and raises
    ``TaskCancelledError`` whose ``partial`` holds the chunks delivered so far.

    Each next chunk is raced against the token, so a cancel stops a stream that has gone silent too.
    """

    __slots__ = ("_cancelled", "_source", "_token", "partial")

    def __init__(self, token: CancellationToken, stream: AsyncIterable[_T]) -> None:
        self._token = token
        self._source: AsyncIterator[_T] = stream.__aiter__()
        self._cancelled: asyncio.Future[None] | None = None
        self.partial: list[_T] = []

    def __aiter__(self) -> GuardedStream[_T]:
        return self

    async def __anext__(self) -> _T:
        if self._token.is_cancelled:
            await self._stop(None)
        if self._cancelled is None:
            self._cancelled = asyncio.ensure_future(self._token.cancelled())
        next_chunk: asyncio.Future[_T] = asyncio.ensure_future(self._source.__anext__())
        racers: set[asyncio.Future[Any]] = {next_chunk, self._cancelled}
        try:
            await asyncio.wait(racers, return_when=asyncio.FIRST_COMPLETED)
        except asyncio.CancelledError:
            next_chunk.cancel()
            self._cancelled.cancel()
            raise
        if next_chunk.done():
            try:
                chunk = next_chunk.result()
            except StopAsyncIteration:
                self._cancelled.cancel()
                raise
            self.partial.append(chunk)
            return chunk
        await self._stop(next_chunk)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _stop(self, pending: asyncio.Future[_T] | None) -> None:
        if self._cancelled is not None:
            self._cancelled.cancel()
        if pending is not None:
            pending.cancel()
            # Let the source see its cancellation before closing it, or aclose() finds it still running.
            with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration, Exception):
                await pending
        close = getattr(self._source, "aclose", None)
        if close is not None:
            with contextlib.suppress(Exception):
                await close()
        raise _cancelled_error(self._token, list(self.partial))

    async def aclose(self) -> None:
        """Closes the source stream without waiting for the token."""
        if self._cancelled is not None:
            self._cancelled.cancel()
        close = getattr(self._source, "aclose", None)
        if close is not None:
            await close()


async def run_until_cancelled(token: CancellationToken, work: Awaitable[_T]) -> _T:
    """Awaits ``work`` (a coroutine or future); if the token fires first, cancels it, lets it clean up, and
    raises ``TaskCancelledError``. Cancelling the caller cancels ``work`` too."""
    task = asyncio.ensure_future(work)
    if token.is_cancelled:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        raise _cancelled_error(token)
    cancelled = asyncio.ensure_future(token.cancelled())
    racers: set[asyncio.Future[Any]] = {task, cancelled}
    try:
        await asyncio.wait(racers, return_when=asyncio.FIRST_COMPLETED)
    except asyncio.CancelledError:
        task.cancel()
        raise
    finally:
        cancelled.cancel()
    if task.done():
        return task.result()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    raise _cancelled_error(token)


@dataclass(frozen=True)
class ToolCall:
    """One tool call requested by a model: an id, the tool's name, and a zero-argument function to run it.

    ``run`` may be a coroutine function (awaited on the loop) or a plain function, which runs in a worker
    thread so that it never blocks the loop. A thread cannot be stopped: when the token fires, the call's
    outcome is ``interrupted`` at once and the thread's late result, when it comes, is dropped.
    """

    call_id: str
    name: str
    run: Callable[[], Awaitable[Any]] | Callable[[], Any]


@dataclass(frozen=True)
class ToolOutcome:
    """What became of one tool call. ``interrupted`` and ``not_started`` are the cancel's synthetic outcomes:
    every call gets one, so the conversation history stays valid (each tool call has a result). ``vetoed`` is
    a call that ``before_call`` refused, with its message as ``error``."""

    call_id: str
    name: str
    status: Literal["completed", "failed", "interrupted", "not_started", "vetoed"]
    result: Any = None
    error: str | None = None

    @property
    def cancelled(self) -> bool:
        """True for calls the cancel stopped or never let start (a veto is not a cancel)."""
        return self.status in ("interrupted", "not_started")

    def as_tool_message(self) -> dict[str, Any]:
        """A chat-style tool-result message for this call."""
        if self.status == "completed":
            content = str(self.result)
        elif self.status == "failed":
            content = f"error: {self.error}"
        elif self.status == "interrupted":
            content = f"cancelled while running: {self.error}"
        elif self.status == "vetoed":
            content = f"not run: {self.error}"
        else:
            content = f"cancelled before it started: {self.error}"
        return {"role": "tool", "tool_call_id": self.call_id, "name": self.name, "content": content}


BeforeCall = Callable[[ToolCall], "str | Awaitable[str | None] | None"]
"""``before_call`` of :func:`run_tool_calls`: ``None`` runs the call, a message vetoes it."""


async def run_tool_calls(
    token: CancellationToken,
    calls: Sequence[ToolCall],
    *,
    concurrent: bool = False,
    before_call: BeforeCall | None = None,
) -> list[ToolOutcome]:
    """Runs a batch of tool calls, one after another or all at once, and returns an outcome for every call.

    On cancel, completed calls keep their results, running ones are interrupted, and calls that never started
    get a synthetic ``not_started`` outcome. A tool that raises gets ``failed`` and the batch goes on. This
    never raises ``TaskCancelledError``: check ``token.is_cancelled`` (or the outcomes) afterwards.

    ``before_call(call)``, a function or a coroutine function, is asked just before each call runs: it
    returns ``None`` to run it, or a message (a ``str``) to veto it. A vetoed call gets a ``vetoed`` outcome
    with that message as ``error``; the batch goes on and the token is untouched. A cancel wins over a veto:
    a call whose token fired before or while ``before_call`` ran is ``not_started``, and an awaitable
    ``before_call`` (one waiting for a person's approval, say) is interrupted when the token fires. A
    ``before_call`` that raises, or returns anything but ``None`` or a ``str``, fails that call (its outcome
    says why) and the batch goes on.
    """
    if before_call is not None and not callable(before_call):
        raise TypeError(f"before_call must be a callable or None, not {type(before_call).__name__}")

    async def one(call: ToolCall) -> ToolOutcome:
        if token.is_cancelled:
            return ToolOutcome(call.call_id, call.name, "not_started", error=token.reason)
        if before_call is not None:
            try:
                veto = await _veto(before_call, call, token)
            except TaskCancelledError:
                return ToolOutcome(call.call_id, call.name, "not_started", error=token.reason)
            except Exception as failure:
                return ToolOutcome(
                    call.call_id,
                    call.name,
                    "failed",
                    error=f"before_call: {type(failure).__name__}: {failure}",
                )
            if token.is_cancelled:
                return ToolOutcome(call.call_id, call.name, "not_started", error=token.reason)
            if veto is not None:
                return ToolOutcome(call.call_id, call.name, "vetoed", error=veto)
        try:
            result = await run_until_cancelled(token, _start(call.run))
        except TaskCancelledError as cancelled:
            return ToolOutcome(call.call_id, call.name, "interrupted", error=cancelled.reason)
        except Exception as failure:
            return ToolOutcome(
                call.call_id, call.name, "failed", error=f"{type(failure).__name__}: {failure}"
            )
        return ToolOutcome(call.call_id, call.name, "completed", result=result)

    if concurrent:
        return list(await asyncio.gather(*(one(call) for call in calls)))
    return [await one(call) for call in calls]


async def _veto(before_call: BeforeCall, call: ToolCall, token: CancellationToken) -> str | None:
    """``before_call``'s verdict on ``call``, awaited if it is awaitable, and then raced against the token
    (a check waiting for a person's approval must not hold a cancelled batch back)."""
    verdict = before_call(call)
    if inspect.isawaitable(verdict):
        verdict = await run_until_cancelled(token, verdict)
    if verdict is not None and not isinstance(verdict, str):
        raise TypeError(f"before_call must return None or a str message, not {type(verdict).__name__}")
    return verdict


async def _start(run: Callable[[], Awaitable[Any]] | Callable[[], Any]) -> Any:
    """Runs a tool: a coroutine function on the loop; anything else in a worker thread, awaiting what it
    returns if that is awaitable (a lambda that returns a coroutine, say)."""
    if inspect.iscoroutinefunction(run):
        return await run()
    outcome = await asyncio.to_thread(run)
    if inspect.isawaitable(outcome):
        return await outcome
    return outcome


async def run_cancel_handler(handler: Awaitable[object], done: HandlerCompletion) -> None:
    """Runs an async ``on_cancel`` handler on the loop that registered it, and marks its work done when it
    ends, however it ends, for a canceller that waits for the handlers (``cancel_subagent_task_and_wait``).
    An exception is logged, as a plain handler's is."""
    try:
        await handler
    except Exception:
        _LOG.exception("a cancel callback raised")
    finally:
        done.finish()
