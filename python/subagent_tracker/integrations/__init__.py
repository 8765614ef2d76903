"""Tracking the runs of agent frameworks: the framework-agnostic core.

Every framework adapter of this package is built on :func:`tracked`, and the runs of any other framework (ADK,
agno, CrewAI, a loop of your own) can be wrapped in it directly::

    from subagent_tracker import Session
    from subagent_tracker.integrations import tracked

    session = Session()

    async def research(question: str) -> str:
        async with tracked(session, agent="researcher") as task:
            answer = await my_framework_run(question, should_stop=task.token.is_cancelled)
            task.complete(answer)
            return answer

Runs nest through the current context (:mod:`contextvars`), whichever framework each belongs to: a run tracked
inside another run of the same session is its child, so cancelling the outer run cancels the inner one. A run
inside a run of another session is linked to that run's token instead (a session holds only its own tasks), so
the cancel still reaches it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from types import EllipsisType
from typing import Any, Final

from subagent_tracker._errors import TaskCancelledError
from subagent_tracker._native import CancellationToken
from subagent_tracker.integrations._support import (
    CancelledRun,
    TrackedHandle,
    TrackedSession,
    answers_for_subagents,
    cancelled_run_text,
    check_session,
    check_task_id,
    report_cancelled_run,
    resolved,
    same_session,
)

__all__ = [
    "FRAMEWORK_CANCEL_REASON",
    "RUN_STOPPED_REASON",
    "STREAM_CLOSED_REASON",
    "TrackedHandle",
    "TrackedSession",
    "answers_for_subagents",
    "cancelled_run_text",
    "current_task",
    "tracked",
]

#: The cancel reason of a run stopped by asyncio alone, its token unfired: its framework cancelled its asyncio
#: task, or the code awaiting it (a delegating run tearing down the tool call that ran it) gave up on it.
RUN_STOPPED_REASON: Final = "the run's asyncio task was cancelled: its framework or its caller stopped it"
#: The cancel reason of a run whose caller stopped reading its stream before the run ended (a ``break``,
#: ``aclose()``, or a dropped iterator): the run is stopped, never left running unread.
STREAM_CLOSED_REASON: Final = "the caller stopped reading the run's stream before the run ended"
#: The cancel reason of a run cancelled through its framework's own cancel (``RunResultStreaming.cancel()``,
#: Strands' ``agent.cancel()``) rather than through the tracker.
FRAMEWORK_CANCEL_REASON: Final = "the run was cancelled through its framework's own cancel"


@dataclass
class _Run:
    session: TrackedSession
    handle: TrackedHandle
    #: The run this one was started inside, if any.
    outer: _Run | None
    ended: bool = False


#: The innermost tracked run of the current context.
_CURRENT: ContextVar[_Run | None] = ContextVar("subagent_tracker_current_run", default=None)

#: Where a failure to record a cancelled run's end goes (the cancel itself still propagates).
_LOG = logging.getLogger("subagent_tracker")


def _current_run() -> _Run | None:
    """The innermost run of the current context that has not ended. A run inside an async generator that was
    dropped unclosed ends in asyncio's finalizer, in a context of its own, and cannot take itself out of the
    context that iterated it: it is passed over here, so it is nobody's parent."""
    run = _CURRENT.get()
    while run is not None and run.ended:
        run = run.outer
    return run


def current_task() -> TrackedHandle | None:
    """The handle of the innermost run tracked in the current context (this asyncio task, thread, or a
    context copied from one) that has not ended, or ``None`` outside any."""
    run = _current_run()
    return None if run is None else run.handle


def tracked(
    session: TrackedSession,
    *,
    agent: str | None,
    task_id: str | Callable[[], str] | None = None,
    parent: str | EllipsisType | None = ...,
    timeout: float | None = None,
    description: str | None = None,
    metadata: Mapping[str, Any] | None = None,
    linked: list[CancellationToken] | None = None,
    partial_output: Callable[[], object] | None = None,
) -> contextlib.AbstractAsyncContextManager[TrackedHandle]:
    """An async context manager that runs its body as a task of ``session``.

    It starts the task, makes it the current run for everything inside (so runs tracked inside become its
    children), gives the body the handle, and ends the task from how the body exits, as the handle's own
    ``async with`` does: a normal exit completes it (unless the body already ended it, with its output as the
    result), an exception fails it, and ``TaskCancelledError`` or ``asyncio.CancelledError`` leaves it
    ``CANCELLED`` and finished.

    A body cancelled by asyncio alone (``asyncio.CancelledError`` with the token unfired: the framework's own
    cancel, or the code awaiting the run gave up on it) cancels the task first, with
    :data:`RUN_STOPPED_REASON`, so its cascade reaches the run's subagents and its state says why.

    - ``agent``: the framework agent's name, shown on the task.
    - ``task_id``: a string, a zero-argument callable that returns one (called once per run), or ``None``
      for a generated id, unique per run.
    - ``parent``: by default the innermost tracked run of the current context, if it is a run of this session;
      a run of another session is linked instead (its cancel reaches this run). ``None`` makes a top-level
      task; a string names the parent's task id in this session.
    - ``timeout``: seconds until the run's deadline cancels it.
    - ``description``, ``metadata`` and ``linked`` are passed to ``start_subagent_task`` as they are.
    - ``partial_output``: called when the body leaves cancelled; what it returns (unless ``None``) becomes the
      task's ``result`` through a late end (contract §2), so the output the run had made survives the cancel.
      The run then reports itself, reason and partial output, to the tool call of an adapter that ran it,
      whichever framework that call belongs to, so the delegating run can answer the call with them.

    ``session`` may be of either API: ``Session`` or ``RedisSession``, whose calls block (instantly, in
    memory), or ``AsyncRedisSession`` or ``AwaitableSession``, whose calls are awaited; the body gets that
    session's own kind of handle.

    Raises ``TypeError`` at once for a ``session`` that is none of those, and for a ``task_id`` or ``parent``
    of another type. Starting the task (on entering) raises what
    ``start_subagent_task`` raises, and leaves the current run as it was.
    """
    check_session(session)
    check_task_id(task_id)
    if parent is not ... and parent is not None and not isinstance(parent, str):
        raise TypeError(
            "parent must be a task id (str), None for a top-level task, or left out for the current run, "
            f"got {type(parent).__name__}"
        )
    return _tracked(session, agent, task_id, parent, timeout, description, metadata, linked, partial_output)


@contextlib.asynccontextmanager
async def _tracked(
    session: TrackedSession,
    agent: str | None,
    task_id: str | Callable[[], str] | None,
    parent: str | EllipsisType | None,
    timeout: float | None,
    description: str | None,
    metadata: Mapping[str, Any] | None,
    linked: list[CancellationToken] | None,
    partial_output: Callable[[], object] | None,
) -> AsyncIterator[TrackedHandle]:
    if callable(task_id):
        task_id = task_id()
        if not isinstance(task_id, str):
            raise TypeError(f"the task_id callable must return a str, got {type(task_id).__name__}")
    links = list(linked or [])
    parent_id: str | None = None
    if isinstance(parent, str):
        parent_id = parent
    elif parent is ...:
        outer = _current_run()
        if outer is not None and same_session(outer.session, session):
            parent_id = outer.handle.task_id
        elif outer is not None:
            links.append(outer.handle.token)
    handle: TrackedHandle = await resolved(
        session.start_subagent_task(
            task_id,
            parent_id=parent_id,
            agent=agent,
            description=description,
            metadata=metadata,
            timeout=timeout,
            linked=links or None,
        )
    )
    run = _Run(session, handle, _current_run())
    current = _CURRENT.set(run)
    try:
        async with handle:
            try:
                yield handle
            except (asyncio.CancelledError, TaskCancelledError) as cancel:
                # Before the handle's exit: once the runner has ended, a late end is refused.
                await _end_cancelled(session, handle, agent, cancel, partial_output)
                raise
    finally:
        run.ended = True
        # A run inside an async generator that was dropped unclosed is ended by asyncio's finalizer, in a
        # context of its own where this run was never current: there is nothing to restore there.
        with contextlib.suppress(ValueError):
            _CURRENT.reset(current)


async def _end_cancelled(
    session: TrackedSession,
    handle: TrackedHandle,
    agent: str | None,
    cancel: asyncio.CancelledError | TaskCancelledError,
    partial_output: Callable[[], object] | None,
) -> None:
    """Ends a run whose body left cancelled: cancels its task if its token has not fired (asyncio cancelled
    it, or the body raised another token's cancel), keeps its partial output, and reports it to the tool call
    that ran it. None of it may hide the cancel on its way out: a failure here (Redis unreachable, a
    ``partial_output`` that raises) is logged. The report comes before any wait on the session, so that a
    second cancel of this task during that wait cannot lose it."""
    cancelling = not handle.token.is_cancelled
    if cancelling:
        reason = cancel.reason if isinstance(cancel, TaskCancelledError) else RUN_STOPPED_REASON
    else:
        reason = handle.token.reason or RUN_STOPPED_REASON
    partial = None
    try:
        partial = None if partial_output is None else partial_output()
    except Exception:
        _LOG.exception("could not read the partial output of the cancelled run %r", handle.task_id)
    report_cancelled_run(
        CancelledRun(
            agent=agent,
            task_id=handle.task_id,
            reason=reason,
            partial=None if partial is None else str(partial),
        )
    )
    try:
        if cancelling:
            await resolved(session.cancel_subagent_task(handle.task_id, reason=reason))
        if partial is not None:
            await resolved(handle.complete(partial))
    except Exception:
        _LOG.exception("could not record the end of the cancelled run %r", handle.task_id)
