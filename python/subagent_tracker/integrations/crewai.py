"""Tracking CrewAI kickoffs: :func:`tracked_kickoff_async` and :func:`tracked_kickoff` run a crew as a task of
a session, and :func:`tracked_kickoff_stream` streams a crew's kickoff as one; a cancel stops the crew at its
next model call, tool call or delegation, through CrewAI's own interception hooks.

::

    from crewai import Agent, Crew, Task
    from subagent_tracker import Session
    from subagent_tracker.integrations.crewai import tracked_kickoff_async

    session = Session()
    crew = Crew(name="research", agents=[researcher], tasks=[find_it])
    output = await tracked_kickoff_async(session, crew, {"topic": "..."})

CrewAI's engine is synchronous: a kickoff runs its agents in threads, and each tool call in the thread of its
agent. Nothing can stop a thread from outside, so a cancel stops the crew where CrewAI asks its hooks: before
each model call, each tool call (a delegation to a coworker is one) and each task. The hooks read the crew's
token, so they make no server call; a cancel from another process over Redis reaches the token by push.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable, Iterator
from typing import Any, Final

from subagent_tracker._errors import TaskCancelledError
from subagent_tracker._native import CancellationToken
from subagent_tracker.integrations import STREAM_CLOSED_REASON, TrackedSession, tracked
from subagent_tracker.integrations._support import (
    cancel_in_background,
    check_run_options,
    delegating_call,
    missing_framework,
    resolved,
)

try:
    from crewai import Crew
    from crewai.crews.crew_output import CrewOutput
    from crewai.hooks.dispatch import (
        HookAborted,
        InterceptionPoint,
        get_scoped_hooks,
        register_scoped,
        scoped_hooks,
    )
    from crewai.types.streaming import CrewStreamingOutput, StreamChunk
except ImportError as error:  # pragma: no cover - depends on the environment
    raise missing_framework("crewai", "crewai", error) from error

__all__ = ["CHECKPOINTS", "tracked_kickoff", "tracked_kickoff_async", "tracked_kickoff_stream"]

#: Where CrewAI asks the adapter's hooks whether the crew was cancelled: before each model call, each tool
#: call (a delegation to a coworker too: CrewAI answers the call as blocked, and the crew stops at its next
#: model call) and each task.
CHECKPOINTS: Final = (
    InterceptionPoint.PRE_MODEL_CALL,
    InterceptionPoint.PRE_TOOL_CALL,
    InterceptionPoint.PRE_STEP,
)
#: The ``source`` of the ``HookAborted`` the adapter's hooks raise, which CrewAI records with the abort.
HOOK_SOURCE: Final = "subagent_tracker"


async def tracked_kickoff_async(
    session: TrackedSession,
    crew: Crew,
    inputs: dict[str, Any] | None = None,
    *,
    task_id: str | Callable[[], str] | None = None,
    timeout: float | None = None,
) -> CrewOutput:
    """Kicks ``crew`` off (``crew.kickoff_async``) as a task of ``session``, and returns its output.

    - The task's ``agent`` is the crew's name; its parent is the innermost tracked run of the current context,
      of any framework; ``task_id`` is a string or a zero-argument callable, generated when ``None``;
      ``timeout`` gives the kickoff a deadline.
    - A cancel (by id, cascade, session cancel, deadline, or over Redis) stops the crew at its next
      checkpoint (:data:`CHECKPOINTS`); the kickoff then raises ``TaskCancelledError`` with the reason (so
      does a crew that finished after a cancel that no checkpoint saw), and the task ends ``CANCELLED``, its
      result the raw output of the tasks this kickoff finished (one line each), if any. A tool call of
      another adapter that ran the crew is answered with
      :func:`~subagent_tracker.integrations.cancelled_run_text`. A call that asyncio cancels (a ``wait_for``
      around it) returns at once: its task is cancelled, and the crew's thread runs on to its next checkpoint.
    - A crew that finishes ends its task ``COMPLETED`` with the crew's raw output; one that raises (another
      hook's own ``HookAborted`` included) ends it ``FAILED``.

    Raises ``TypeError`` for a ``session`` that is not a session of this package, a ``crew`` that is not a
    CrewAI ``Crew`` (or one made with ``stream=True``: use :func:`tracked_kickoff_stream`), or a ``task_id``
    of another type; ``timeout`` is checked as the session checks it (``TypeError``, ``ValueError``). Nothing
    starts then.
    """
    _check(session, crew, task_id, timeout, streaming=False)
    earlier = _outputs(crew)
    async with tracked(
        session,
        agent=crew.name,
        task_id=task_id,
        timeout=timeout,
        partial_output=lambda: _finished_output(crew, earlier),
    ) as handle:
        with _checkpoints(handle.token):
            try:
                output = await crew.kickoff_async(inputs)
            except HookAborted as aborted:
                _raise_if_cancelled(handle.task_id, handle.token, aborted)
                raise
        _raise_if_cancelled(handle.task_id, handle.token, None)
        assert isinstance(output, CrewOutput)
        await resolved(handle.complete(output.raw))
        return output


def tracked_kickoff(
    session: TrackedSession,
    crew: Crew,
    inputs: dict[str, Any] | None = None,
    *,
    task_id: str | Callable[[], str] | None = None,
    timeout: float | None = None,
) -> CrewOutput:
    """:func:`tracked_kickoff_async` for code with no running event loop (a sync tool of another framework, a
    script): runs it on an event loop of its own, in a copy of the current context. Raises ``RuntimeError``
    where an event loop runs in this thread: await :func:`tracked_kickoff_async` there."""
    _check(session, crew, task_id, timeout, streaming=False)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(tracked_kickoff_async(session, crew, inputs, task_id=task_id, timeout=timeout))
    raise RuntimeError("tracked_kickoff() was called where an event loop runs: await tracked_kickoff_async()")


async def tracked_kickoff_stream(
    session: TrackedSession,
    crew: Crew,
    inputs: dict[str, Any] | None = None,
    *,
    task_id: str | Callable[[], str] | None = None,
    timeout: float | None = None,
) -> AsyncGenerator[StreamChunk, None]:
    """Streams the kickoff of ``crew`` (made with ``stream=True``) as a task of ``session``: the chunks of
    its ``CrewStreamingOutput``, as :func:`tracked_kickoff_async` runs a crew.

    A consumer that goes away before the stream ends (``break``, ``aclose()``, a dropped iterator, a client
    disconnected) cancels the task with ``STREAM_CLOSED_REASON``, keeping the output of the tasks the crew
    finished: the crew stops at its next checkpoint rather than running on unread in its thread. A cancel ends
    the stream with ``TaskCancelledError``. The kickoff runs in an asyncio task of its own, so nothing of it
    (the current run, the hooks) is left in the consumer's context, wherever the consumer reads it from."""
    _check(session, crew, task_id, timeout, streaming=True)
    earlier = _outputs(crew)
    chunks: asyncio.Queue[Any] = asyncio.Queue()
    started: list[str] = []

    async def kick_off() -> None:
        try:
            async with tracked(
                session,
                agent=crew.name,
                task_id=task_id,
                timeout=timeout,
                partial_output=lambda: _finished_output(crew, earlier),
            ) as handle:
                started.append(handle.task_id)
                with _checkpoints(handle.token):
                    streaming = await crew.kickoff_async(inputs)
                    assert isinstance(streaming, CrewStreamingOutput)
                    try:
                        async for chunk in streaming:
                            chunks.put_nowait(chunk)
                    except HookAborted as aborted:
                        _raise_if_cancelled(handle.task_id, handle.token, aborted)
                        raise
                    finally:
                        await streaming.aclose()
                _raise_if_cancelled(handle.task_id, handle.token, None)
                await resolved(handle.complete(streaming.result.raw))
        finally:
            chunks.put_nowait(_END)

    kickoff = asyncio.get_running_loop().create_task(kick_off())
    try:
        while (chunk := await chunks.get()) is not _END:
            yield chunk
        await kickoff
    finally:
        if not kickoff.done():
            # The consumer went away: the crew's thread stops at its next checkpoint. Nothing here waits, so
            # that a stream dropped unclosed and closed by asyncio's finalizer ends it as well.
            if started:
                cancel_in_background(session, started[0], STREAM_CLOSED_REASON)
            kickoff.cancel()


#: What the kickoff's task puts last in its queue of chunks.
_END: Final = object()


def _check(
    session: TrackedSession, crew: object, task_id: object, timeout: float | None, *, streaming: bool
) -> None:
    check_run_options(session, task_id, timeout)
    if not isinstance(crew, Crew):
        raise TypeError(f"crew must be a crewai Crew, got {type(crew).__name__}")
    if crew.stream != streaming:
        entry = "tracked_kickoff_stream()" if crew.stream else "tracked_kickoff_async() or tracked_kickoff()"
        raise TypeError(f"a crew made with stream={crew.stream} is kicked off with {entry}")


@contextlib.contextmanager
def _checkpoints(token: CancellationToken) -> Iterator[None]:
    """CrewAI's hooks, for the kickoff started in the block (CrewAI carries the context into the threads that
    run it): each checkpoint aborts once ``token`` is cancelled. The caller's own scoped hooks stay, before
    them. The crew is no tool call of the caller's: a subagent that its own tools run, and that ends
    cancelled, reports to the crew's tool call (if it opted in), never past the crew."""

    def checkpoint(_context: Any) -> None:
        if token.is_cancelled:
            raise HookAborted(token.reason or "cancelled", source=HOOK_SOURCE)

    inherited = {point: get_scoped_hooks(point) for point in InterceptionPoint}
    with scoped_hooks(inherited), delegating_call():
        for point in CHECKPOINTS:
            register_scoped(point, checkpoint)
        yield


def _raise_if_cancelled(task_id: str, token: CancellationToken, aborted: BaseException | None) -> None:
    """Raises the cancel for a kickoff that the adapter's checkpoint aborted (another hook's own abort goes on
    as it is), or (``aborted`` ``None``) that finished after a cancel no checkpoint saw."""
    ours = aborted is None or getattr(aborted, "source", None) == HOOK_SOURCE
    if ours and token.is_cancelled:
        raise TaskCancelledError(task_id, token.reason or str(aborted)) from aborted


def _outputs(crew: Crew) -> dict[int, Any]:
    """The output each of the crew's tasks holds now: CrewAI keeps a task's output from kickoff to kickoff."""
    return {id(task): task.output for task in crew.tasks}


def _finished_output(crew: Crew, earlier: dict[int, Any]) -> str | None:
    """The raw output of the crew's tasks that this kickoff finished: a cancelled crew's partial output."""
    outputs = [
        str(task.output.raw)
        for task in crew.tasks
        if task.output is not None and task.output is not earlier.get(id(task)) and task.output.raw
    ]
    return "\n".join(outputs) or None
