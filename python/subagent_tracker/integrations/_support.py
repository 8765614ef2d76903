"""What every framework adapter shares, written once: the import error that names the extra, the argument
checks, the texts a tool call gets for a cancelled subagent or a cancelled call, the report a cancelled
subagent leaves for the tool call that ran it, the streamed text that becomes a cancelled run's partial
output, acting on a cancel from the run's own event loop, and calling a session of either API."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeAlias, TypeVar, cast

from subagent_tracker._install import install_hint
from subagent_tracker._native import (
    AsyncRedisTaskHandle,
    AwaitableTaskHandle,
    CancellationToken,
    RedisTaskHandle,
    SubagentTaskHandle,
    _check_seconds,
)
from subagent_tracker._session import (
    AsyncRedisSession,
    AwaitableSession,
    RedisSession,
    Session,
    _in_background,
    _resolved,
)

_T = TypeVar("_T")
_P = ParamSpec("_P")

#: The sessions a run can be tracked in: either API, either store.
TrackedSession: TypeAlias = Session | RedisSession | AsyncRedisSession | AwaitableSession
#: The handle a tracked run's body gets: its session's own kind.
TrackedHandle: TypeAlias = SubagentTaskHandle | RedisTaskHandle | AsyncRedisTaskHandle | AwaitableTaskHandle
#: A session whose calls block (instantly, in memory), and its handle.
BlockingSession: TypeAlias = Session | RedisSession
BlockingHandle: TypeAlias = SubagentTaskHandle | RedisTaskHandle

#: ``await resolved(session.call(...))`` makes one call on a session of either API.
resolved = _resolved


def cancel_in_background(session: TrackedSession, task_id: str, reason: str) -> None:
    """Cancels a task from code that cannot wait for it (a framework's synchronous callback, a teardown that a
    second cancel may interrupt): in memory at once; on Redis the call runs on, and a failure is logged."""
    calling = blocking_twin(session) if isinstance(session, AwaitableSession) else session
    _in_background(calling.cancel_subagent_task(task_id, reason=reason))


def same_session(one: TrackedSession, other: TrackedSession) -> bool:
    """True when both are views of one session, whichever API each offers."""
    return blocking_twin(one) == blocking_twin(other)


def blocking_twin(session: TrackedSession) -> BlockingSession:
    """The session with calls that block, for the steps a framework makes synchronous: an in-memory session's
    calls never wait, and an ``AsyncRedisSession``'s twin shares its connection (each such call blocks the
    event loop for one round trip)."""
    if isinstance(session, (AwaitableSession, AsyncRedisSession)):
        return session._blocking()
    return session


def missing_framework(module: str, extra: str, error: ImportError) -> ImportError:
    """The ``ImportError`` an adapter module raises when its framework is not installed: it names the extra
    that installs it, so the fix is one copied command."""
    return ImportError(
        f"subagent_tracker.integrations.{module} needs the {extra!r} extra ({error}): {install_hint(extra)}"
    )


def check_session(session: object) -> None:
    """Refuses, with ``TypeError``, anything that is not a session this package offers: at construction, so a
    mistake shows where it was made rather than at the first run."""
    if not isinstance(session, (Session, RedisSession, AsyncRedisSession, AwaitableSession)):
        raise TypeError(
            "session must be a subagent_tracker Session, RedisSession, AsyncRedisSession or "
            f"AwaitableSession, got {type(session).__name__}"
        )


def check_task_id(task_id: object) -> None:
    """Refuses, with ``TypeError``, a ``task_id`` that is neither a string, a zero-argument callable, nor
    ``None``."""
    if task_id is not None and not isinstance(task_id, str) and not callable(task_id):
        raise TypeError(
            "task_id must be a str, a zero-argument callable returning one, or None, "
            f"got {type(task_id).__name__}"
        )


def check_timeout(timeout: float | None) -> None:
    """Refuses a ``timeout`` the session would refuse when the run starts, as the session does (``TypeError``
    for a non-number, ``ValueError`` for a negative or non-finite one): at construction, before any run."""
    _check_seconds(timeout, "timeout")


def check_run_options(session: object, task_id: object, timeout: float | None) -> None:
    """The checks every adapter makes when it is built (or, for a call that returns a stream, when called):
    :func:`check_session`, :func:`check_task_id` and :func:`check_timeout`, so a mistake raises where it was
    made and before any task starts."""
    check_session(session)
    check_task_id(task_id)
    check_timeout(timeout)


def cancelled_run_text(*, agent: str | None, task_id: str, reason: str | None, partial: str | None) -> str:
    """What a delegating tool call returns for a subagent that was cancelled: the reason and the partial
    output, so the delegating model can go on with its turn (and tell the user what was stopped, and why)."""
    name = f"subagent {agent!r}" if agent else "subagent"
    text = f"The {name} (task {task_id!r}) was cancelled: {reason or 'no reason given'}."
    if partial:
        return f"{text}\nIts partial output before it stopped:\n{partial}"
    return f"{text}\nIt produced no output before it stopped."


def cancelled_tool_call_text(*, tool: str | None, reason: str | None, started: bool) -> str:
    """What a tool call stopped by a cancel returns (one that ran a tracked subagent gets
    :func:`cancelled_run_text` instead): that it was cancelled while running or before it started, and why,
    in the words of the core's ``ToolOutcome``."""
    name = f"The tool {tool!r}" if tool else "The tool call"
    when = "while running" if started else "before it started"
    return f"{name} was cancelled {when}: {reason or 'no reason given'}."


@dataclass(frozen=True)
class CancelledRun:
    """A tracked run that ended cancelled, as the tool call that ran it reports it: its
    :func:`cancelled_run_text`."""

    agent: str | None
    task_id: str
    reason: str | None
    partial: str | None

    def text(self) -> str:
        return cancelled_run_text(
            agent=self.agent, task_id=self.task_id, reason=self.reason, partial=self.partial
        )


class DelegatingCall:
    """A tool call of a tracked run, running: the subagent runs tracked inside it, of any framework, report
    here when they end cancelled. So a delegating run that tears the call down (its own cancel, which
    cascades) can still answer it with the subagent's reason and partial output, though the subagent's
    framework raised instead of answering."""

    __slots__ = ("cancelled_run",)

    def __init__(self) -> None:
        #: The latest subagent run inside the call that ended cancelled.
        self.cancelled_run: CancelledRun | None = None

    def answer(self, result: _T) -> _T | str:
        """What the call answers once its body returned ``result``: the text of a tracked subagent that ended
        cancelled inside it, if one did (whether its framework raised or returned), else ``result``."""
        return result if self.cancelled_run is None else self.cancelled_run.text()


_DELEGATING_CALL: ContextVar[DelegatingCall | None] = ContextVar(
    "subagent_tracker_delegating_call", default=None
)


@contextlib.contextmanager
def delegating_call() -> Iterator[DelegatingCall]:
    """Makes the block a tool call of a tracked run: the subagents it runs report to the call it yields."""
    call = DelegatingCall()
    previous = _DELEGATING_CALL.set(call)
    try:
        yield call
    finally:
        _DELEGATING_CALL.reset(previous)


def answers_for_subagents(
    function: Callable[_P, Awaitable[_T]],
) -> Callable[_P, Coroutine[Any, Any, _T | str]]:
    """Makes an async tool function a delegating tool call, for a framework whose adapter cannot reach its
    tools (a LangChain tool in a LangGraph graph): a tracked subagent of any framework that the tool runs, and
    that ends cancelled, answers the call with :func:`cancelled_run_text`, with its reason and partial output,
    whether its framework raised (the exception is taken as that report) or returned normally (the return is
    replaced by it). An asyncio cancel of the call itself goes on up. Applied twice, it wraps once."""
    if getattr(function, _ANSWERS_FOR_SUBAGENTS, False):
        return cast("Callable[_P, Coroutine[Any, Any, _T | str]]", function)

    @functools.wraps(function)
    async def delegating(*args: _P.args, **kwargs: _P.kwargs) -> _T | str:
        with delegating_call() as call:
            try:
                result = await function(*args, **kwargs)
            except Exception:
                if call.cancelled_run is None:
                    raise
                return call.cancelled_run.text()
        return call.answer(result)

    setattr(delegating, _ANSWERS_FOR_SUBAGENTS, True)
    return delegating


#: The mark of a function :func:`answers_for_subagents` made.
_ANSWERS_FOR_SUBAGENTS = "_subagent_tracker_answers_for_subagents"


def report_cancelled_run(run: CancelledRun) -> None:
    """Tells the innermost running tool call of the current context, if any, that ``run`` ended cancelled:
    ``tracked`` does it for every run that leaves cancelled, and an adapter whose tool answers before its
    subagent has ended does it itself."""
    call = _DELEGATING_CALL.get()
    if call is not None:
        call.cancelled_run = run


class StreamedText:
    """The text a run has streamed so far, kept response by response: a cancelled run's partial output."""

    __slots__ = ("_closed", "_responses")

    def __init__(self) -> None:
        self._responses: list[list[str]] = []
        self._closed = False

    def close(self) -> None:
        """Keeps the text as it is from now on: once a cancelled run's partial output has answered the call
        that ran it, the run's result must be that same text, though a chunk may still arrive before the run
        has stopped."""
        self._closed = True

    def new_response(self) -> None:
        """Starts the text of the run's next model response."""
        if not self._closed:
            self._responses.append([])

    def add(self, text: str) -> None:
        """Adds a streamed piece of the current response's text (starting the first response if none has)."""
        if self._closed:
            return
        if not self._responses:
            self._responses.append([])
        self._responses[-1].append(text)

    @property
    def text(self) -> str:
        """The text so far: one line per response that streamed any, each stripped."""
        return "\n".join(text for text in ("".join(parts).strip() for parts in self._responses) if text)


def absorb_own_cancel(task: asyncio.Task[Any]) -> bool:
    """Withdraws the one asyncio cancel request an adapter made of ``task`` (to stop the framework's awaits
    for a tracker cancel), once its ``CancelledError`` has been caught: ``False`` if another cancel request
    is still pending, whose ``CancelledError`` must go on up. Before Python 3.11 requests are not counted,
    and the one caught is taken as the adapter's own."""
    if sys.version_info >= (3, 11):
        return task.uncancel() == 0
    return True


@contextlib.asynccontextmanager
async def on_cancel_in_loop(token: CancellationToken, action: Callable[[], object]) -> AsyncIterator[None]:
    """Calls ``action()`` on the current event loop when ``token`` fires while the block runs (at once, on the
    loop, if it already has).

    A cancel can come from any thread (a deadline's timer, a Redis listener, another thread's session call),
    while the frameworks' own cancel calls belong to the loop that runs the agent, so ``action`` is handed to
    that loop. A cancel after the block has left does nothing: not even one already on its way to the loop
    (the action of a run that has ended could stop the agent's next run).
    """
    loop = asyncio.get_running_loop()
    live = True

    def act() -> None:
        if live:
            action()

    def hand_to_loop() -> None:
        # A plain callback, not a coroutine: a loop closed meanwhile drops it without a warning.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(act)

    registration = token.on_cancel(hand_to_loop)
    try:
        yield
    finally:
        live = False
        registration.remove()
