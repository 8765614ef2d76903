"""Tracking Google ADK runs: :class:`SubagentTrackerPlugin`, an ADK plugin that makes every invocation of its
app a task of a session: the top-level run, and the run of each agent that an ``AgentTool`` calls.

::

    from google.adk.apps import App
    from google.adk.runners import Runner
    from subagent_tracker import Session
    from subagent_tracker.integrations.adk import SubagentTrackerPlugin

    session = Session()
    app = App(name="research", root_agent=orchestrator, plugins=[SubagentTrackerPlugin(session)])
    runner = Runner(app=app, session_service=session_service)

What ADK itself does: ``Runner.run_async(..., abort_signal=event)`` stops one invocation when the caller
sets ``event``: it cancels the invocation's running tool, answers every function call left without a
response (``INVOCATION_ABORTED``), and ends the run normally. An ``AgentTool`` passes its caller's signal to
the agent it runs, so that an abort of the caller aborts it too.

What the adapter adds, on that signal: each run's own signal, set by the run's token, so that a cancel by id,
a parent's cascade, a session cancel, a deadline or a cancel from another process over Redis stops exactly
that run (and its subtree), while the agent that called it through an ``AgentTool`` goes on; that call is
answered with :func:`~subagent_tracker.integrations.cancelled_run_text` (the reason and the partial output),
and the calls a cancel leaves without a response are answered with the reason rather than ADK's generic
text. A caller's own ``abort_signal`` still aborts the run it was given to, and that run's subagents.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import sys
import weakref
from asyncio import CancelledError
from collections.abc import Callable, Coroutine, Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Final, TypeVar

from subagent_tracker.integrations import (
    _CURRENT,
    FRAMEWORK_CANCEL_REASON,
    RUN_STOPPED_REASON,
    STREAM_CLOSED_REASON,
    TrackedHandle,
    TrackedSession,
    _Run,
    tracked,
)
from subagent_tracker.integrations._support import (
    DelegatingCall,
    cancel_in_background,
    cancelled_tool_call_text,
    check_run_options,
    delegating_call,
    missing_framework,
    on_cancel_in_loop,
    resolved,
)

try:
    from google.adk.agents.invocation_context import InvocationContext
    from google.adk.events.event import Event
    from google.adk.plugins.base_plugin import BasePlugin
    from google.adk.tools.base_tool import BaseTool
    from google.adk.tools.tool_context import ToolContext
except ImportError as error:  # pragma: no cover - depends on the environment
    if sys.version_info < (3, 11):
        raise ImportError(
            "subagent_tracker.integrations.adk needs Python 3.11 or later, as google-adk does "
            f"(this is Python {sys.version_info[0]}.{sys.version_info[1]})"
        ) from error
    raise missing_framework("adk", "adk", error) from error

__all__ = ["PLUGIN_NAME", "SubagentTrackerPlugin"]

#: The plugin's name among an app's plugins (ADK requires each to have a unique one).
PLUGIN_NAME: Final = "subagent_tracker"
_T = TypeVar("_T")
#: Where a failure to record a run's end goes (the run still ends).
_LOG = logging.getLogger("subagent_tracker")
#: ADK's ``error_code`` of the events that answer the calls an aborted invocation left without a response.
_INVOCATION_ABORTED: Final = "INVOCATION_ABORTED"


class _RunText:
    """The text a run's agent has answered so far, response by response: its output, or a cancelled run's
    partial output. Streamed chunks (partial events) count until their whole response arrives."""

    __slots__ = ("_chunks", "_responses")

    def __init__(self) -> None:
        self._responses: list[str] = []
        self._chunks: list[str] = []

    def add(self, text: str, *, partial: bool) -> None:
        if partial:
            self._chunks.append(text)
            return
        self._chunks.clear()
        self._responses.append(text.strip())

    @property
    def last(self) -> str | None:
        """The last whole response's text: what the run answers its caller with."""
        return self._responses[-1] if self._responses else None

    @property
    def partial(self) -> str | None:
        """Every response so far, and the chunks of the one being streamed: one line each."""
        texts = [*self._responses, "".join(self._chunks).strip()]
        return "\n".join(text for text in texts if text) or None


@dataclass(eq=False)
class _AdkCall:
    """A running tool call of a tracked invocation: the tracked subagents inside it report to ``delegating``,
    and an agent an ``AgentTool`` runs inside it is one of its ``runs``."""

    owner: _AdkRun
    delegating: DelegatingCall
    #: What makes the block the call (its delegating call, the invocation's current-run mark), undone as it
    #: ends.
    exits: contextlib.ExitStack
    runs: list[_AdkRun] = field(default_factory=list)


@dataclass(eq=False)
class _AdkRun:
    """One invocation of the app (or of an agent an ``AgentTool`` runs): its task, and what the plugin needs
    to stop it and to report it."""

    handle: TrackedHandle
    #: ``tracked``'s block, and the cancel's hand-off to the loop, left as the invocation ends.
    exits: contextlib.AsyncExitStack
    loop: asyncio.AbstractEventLoop
    #: The invocation's own context, a copy of its caller's: ``tracked`` keeps its current-run mark there, not
    #: in the caller's context, where it would make the caller's later runs children of this one.
    context: contextvars.Context
    #: The mark, set in each of the invocation's tool calls: what they start is the invocation's child.
    mark: _Run
    #: The invocation's abort state, which ADK shares among every copy of its context: what the run is found
    #: by (an invocation id is reused by a retried or resumed invocation).
    state: weakref.ref[Any]
    #: An exception the caller was handling as the invocation began: not the invocation's when it ends.
    outer_error: BaseException | None
    text: _RunText = field(default_factory=_RunText)
    #: The running tool calls, by function call id.
    calls: dict[str, _AdkCall] = field(default_factory=dict)
    #: The function calls whose tool started, to tell a cancelled running call from one never started.
    started: set[str] = field(default_factory=set)
    #: The calls whose tracked subagent ended cancelled, by function call id.
    cancelled_calls: dict[str, DelegatingCall] = field(default_factory=dict)
    #: The runs started inside this one's tool calls (agents an ``AgentTool`` ran).
    children: list[_AdkRun] = field(default_factory=list)
    #: The task that sets the run's own signal when the signal it was given (its caller's, or the calling
    #: agent's) is set.
    follower: asyncio.Task[None] | None = None
    #: The asyncio task that drives the invocation (its caller's): a run it leaves unended ends with it.
    driver: asyncio.Task[Any] | None = None
    on_driver_done: Callable[[asyncio.Task[Any]], None] | None = None
    ended: bool = False


#: The tool call of a tracked invocation that the current context runs in.
_CALL: ContextVar[_AdkCall | None] = ContextVar("subagent_tracker_adk_call", default=None)


class SubagentTrackerPlugin(BasePlugin):
    """An ADK plugin (``App(..., plugins=[SubagentTrackerPlugin(session)])``) that makes every invocation a
    task of ``session``: the app's own runs, and the run of each agent an ``AgentTool`` calls (``AgentTool``
    passes its caller's plugins on to it).

    - The task's ``agent`` is the invoked agent's name (the app's, for a workflow); its parent is the
      innermost tracked run of the current context, of any framework (an agent run by an ``AgentTool`` has
      the calling agent's run as its parent);
      ``task_id`` is a string or a zero-argument callable (called once per run), generated when ``None``;
      ``timeout`` gives each run a deadline. What the invocation's tools start is its child; its caller's own
      context is left as it was.
    - A cancel of the task (by id, cascade, session cancel, deadline, or over Redis) aborts that invocation
      through ADK's own abort signal: its running tool is cancelled, the calls left without a response are
      answered with the reason, and the run ends; its task ends ``CANCELLED`` with the text the agents had
      answered as the result. An abort through the caller's own ``abort_signal`` ends it ``CANCELLED`` too.
    - The ``AgentTool`` call that ran a cancelled agent is answered with
      :func:`~subagent_tracker.integrations.cancelled_run_text`, and the calling agent goes on.
    - A run that ends normally ends ``COMPLETED`` with the last answer of its agents as the result; one that
      raises ends ``FAILED``.

    Raises ``TypeError`` at once for a ``session`` that is not a session of this package or a ``task_id`` of
    another type; ``timeout`` is checked as the session checks it (``TypeError``, ``ValueError``).
    """

    def __init__(
        self,
        session: TrackedSession,
        *,
        task_id: str | Callable[[], str] | None = None,
        timeout: float | None = None,
    ) -> None:
        check_run_options(session, task_id, timeout)
        super().__init__(name=PLUGIN_NAME)
        self._session = session
        self._task_id = task_id
        self._timeout = timeout
        #: The runs in flight, by the identity of their invocation's abort state (see ``_AdkRun.state``).
        self._runs: dict[int, _AdkRun] = {}
        #: The ends of abandoned runs, running (held here: the loop keeps only weak references to its tasks).
        self._ending: set[asyncio.Task[None]] = set()

    # A run: the invocation starts its task, and ends it from how ADK ended the invocation.

    async def before_run_callback(self, *, invocation_context: InvocationContext) -> None:
        """Starts the invocation's task, and gives the invocation a signal of its own that the task's cancel
        sets."""
        context = invocation_context
        outer_error = sys.exc_info()[1]
        loop = asyncio.get_running_loop()
        own_context = contextvars.copy_context()
        exits = contextlib.AsyncExitStack()
        run: _AdkRun | None = None
        entering = tracked(
            self._session,
            agent=_agent_name(context),
            task_id=self._task_id,
            timeout=self._timeout,
            partial_output=lambda: None if run is None else run.text.partial,
        )
        handle = await _in_context(own_context, exits.enter_async_context(entering))
        mark = own_context[_CURRENT]
        assert mark is not None
        state = context._abort_state
        run = _AdkRun(handle, exits, loop, own_context, mark, weakref.ref(state), outer_error)
        try:
            # The signal the invocation was given is its caller's, or (for an agent an AgentTool runs) the
            # calling agent's: aborting through it would abort them too. The invocation gets its own, which
            # follows the one it was given. ADK allows the swap until the invocation's first step, which comes
            # after this callback.
            given = context._abort_signal
            own = asyncio.Event()
            context._attach_abort_signal(own)
            if given.is_set():
                own.set()
            else:
                run.follower = loop.create_task(_follow(given, own))
            invocation = weakref.ref(context)
            await exits.enter_async_context(on_cancel_in_loop(handle.token, lambda: _abort(invocation)))
        except BaseException as error:
            await self._end(run, error)
            raise
        self._runs[id(state)] = run
        call = _CALL.get()
        if call is not None:
            call.runs.append(run)
            call.owner.children.append(run)
        # ADK calls neither after_run nor on_run_error for an invocation that asyncio cancelled without an
        # abort (its caller's task cancelled, a sibling tool call's failure): the run ends with the task that
        # drove it, or, failing that, once the invocation is collected.
        run.driver = asyncio.current_task()
        if run.driver is not None:
            run.on_driver_done = lambda _driver: self._abandoned(run)
            run.driver.add_done_callback(run.on_driver_done)
        weakref.finalize(context, self._abandoned, run)

    async def after_run_callback(self, *, invocation_context: InvocationContext) -> None:
        """Ends the invocation's task: ``CANCELLED`` for an aborted invocation or one whose caller stopped
        reading it, ``COMPLETED`` with its last answer otherwise."""
        run = self._taken(invocation_context)
        if run is None:
            return
        in_flight = sys.exc_info()[1]
        if invocation_context.is_aborted:
            await self._end(run, FRAMEWORK_CANCEL_REASON)
        elif in_flight is not run.outer_error and isinstance(in_flight, (GeneratorExit, CancelledError)):
            # The caller stopped reading the run (``break``, ``aclose()``): the run was abandoned, not done.
            await self._end(run, STREAM_CLOSED_REASON)
        else:
            await self._end(run, None)

    async def on_run_error_callback(self, *, invocation_context: InvocationContext, error: Exception) -> None:
        """Ends the invocation's task ``FAILED`` with ``error``."""
        run = self._taken(invocation_context)
        if run is not None:
            await self._end(run, error)

    async def on_event_callback(self, *, invocation_context: InvocationContext, event: Event) -> None:
        """Keeps the text the invocation's agents answer; answers the calls an abort left without a response
        with the cancel's reason (and a call that ran a cancelled subagent with its cancelled text). The event
        is changed in place, so that the plugins after this one see it too."""
        run = self._run_of(invocation_context)
        if run is None or event.content is None or not event.content.parts:
            return
        if event.error_code == _INVOCATION_ABORTED:
            reason = run.handle.token.reason or FRAMEWORK_CANCEL_REASON
            for part in event.content.parts:
                response = part.function_response
                if response is not None and response.id is not None:
                    text = _cancelled_call_text(run, response.id, response.name, reason)
                    response.response = {"error": text}
            return
        if event.author != "user":
            text = "".join(part.text for part in event.content.parts if part.text and not part.thought)
            if text:
                run.text.add(text, partial=bool(event.partial))

    # A tool call: what it starts is the invocation's child, and reports to it if it ends cancelled.

    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> None:
        run = self._run_of(tool_context._invocation_context)
        call_id = tool_context.function_call_id
        if run is None or call_id is None:
            return
        run.started.add(call_id)
        # ADK runs the callbacks and the tool in one context, the call's own: what the tool starts inside
        # finds the call, and the invocation as its current run, there.
        exits = contextlib.ExitStack()
        call = _AdkCall(run, exits.enter_context(delegating_call()), exits)
        exits.enter_context(_set(_CURRENT, run.mark))
        exits.enter_context(_set(_CALL, call))
        run.calls[call_id] = call

    async def after_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext, result: Any
    ) -> dict[str, Any] | None:
        """The call's result, or the cancelled text of a tracked subagent that ended cancelled inside it."""
        call = self._left_call(tool_context)
        if call is None or call.delegating.cancelled_run is None:
            return None
        return {"result": call.delegating.cancelled_run.text()}

    async def on_tool_error_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext, error: BaseException
    ) -> dict[str, Any] | None:
        """A call whose tool raised because the subagent it ran was cancelled is answered with its cancelled
        text; a call cancelled itself (its run aborted, a sibling call failed) ends the runs it started, and
        is answered when ADK seals the run."""
        call = self._left_call(tool_context)
        if call is None:
            return None
        if isinstance(error, asyncio.CancelledError):
            for run in call.runs:
                await self._end_stopped(run)
            return None
        if call.delegating.cancelled_run is None:
            return None
        return {"result": call.delegating.cancelled_run.text()}

    def _left_call(self, tool_context: ToolContext) -> _AdkCall | None:
        run = self._run_of(tool_context._invocation_context)
        call_id = tool_context.function_call_id
        if run is None or call_id is None:
            return None
        call = run.calls.pop(call_id, None)
        if call is None:
            return None
        _close(call.exits)
        if call.delegating.cancelled_run is not None:
            run.cancelled_calls[call_id] = call.delegating
        return call

    # Finding and ending a run.

    def _run_of(self, context: InvocationContext) -> _AdkRun | None:
        state = context._abort_state
        run = self._runs.get(id(state))
        return run if run is not None and run.state() is state else None

    def _taken(self, context: InvocationContext) -> _AdkRun | None:
        run = self._run_of(context)
        if run is not None:
            del self._runs[id(context._abort_state)]
        return run

    def _forget(self, run: _AdkRun) -> None:
        state = run.state()
        key = id(state) if state is not None else None
        if key is not None and self._runs.get(key) is run:
            del self._runs[key]

    async def _end(self, run: _AdkRun, how: BaseException | str | None) -> None:
        """Ends ``run``: ``None`` completes it, an exception fails it, a reason cancels it (its token's own
        reason when its token fired: otherwise ADK or the caller stopped it, and ``reason`` says so to the
        subtree too). It ends in the invocation's own context, where ``tracked`` keeps its mark."""
        await _in_context(run.context, self._finish(run, how))

    async def _end_stopped(self, run: _AdkRun) -> None:
        if not run.ended:
            self._forget(run)
            await self._end(run, RUN_STOPPED_REASON)

    async def _finish(self, run: _AdkRun, how: BaseException | str | None) -> None:
        if run.ended:
            return
        run.ended = True
        if run.follower is not None:
            run.follower.cancel()
        if run.driver is not None and run.on_driver_done is not None:
            run.driver.remove_done_callback(run.on_driver_done)
        for call in run.calls.values():
            _close(call.exits)
        reason = how if isinstance(how, str) else None
        error = how if isinstance(how, BaseException) else None
        try:
            for child in run.children:
                await self._end_stopped(child)
            if reason is not None:
                if not run.handle.token.is_cancelled:
                    await resolved(self._session.cancel_subagent_task(run.handle.task_id, reason=reason))
            elif error is None:
                await resolved(run.handle.complete(run.text.last))
        except Exception:
            _LOG.exception("could not record the end of the ADK run %r", run.handle.task_id)
        finally:
            # Leaving `tracked` cancelled keeps the partial output as the task's result (a late end), and
            # reports the run to the tool call that ran it; failed, it fails the task.
            if reason is not None:
                error = CancelledError(run.handle.token.reason or reason)
            if error is None:
                await run.exits.aclose()
            else:
                await run.exits.__aexit__(type(error), error, error.__traceback__)

    def _abandoned(self, run: _AdkRun) -> None:
        """The task that drove the invocation is done, or the invocation is gone, and ADK's callbacks did not
        end the run: it ends as stopped, on its loop, or (the loop closed) is cancelled and left to end as a
        dropped handle ends."""
        if run.ended:
            return
        self._forget(run)
        try:
            run.loop.call_soon_threadsafe(self._end_abandoned, run)
        except RuntimeError:
            run.ended = True
            cancel_in_background(self._session, run.handle.task_id, RUN_STOPPED_REASON)

    def _end_abandoned(self, run: _AdkRun) -> None:
        if run.ended:
            return
        ending = _in_context(run.context, self._finish(run, RUN_STOPPED_REASON))
        self._ending.add(ending)
        ending.add_done_callback(self._ending.discard)


def _in_context(context: contextvars.Context, coroutine: Coroutine[Any, Any, _T]) -> asyncio.Task[_T]:
    """A task of the running loop that runs ``coroutine`` in ``context`` itself (not a copy, as a task made
    there would): what it sets stays in ``context``. Python 3.11 or later, as google-adk is."""
    loop = asyncio.get_running_loop()
    return loop.create_task(coroutine, context=context)  # type: ignore[call-arg,unused-ignore]


def _cancelled_call_text(run: _AdkRun, call_id: str, tool: str | None, reason: str) -> str:
    delegating = run.cancelled_calls.get(call_id)
    if delegating is not None and delegating.cancelled_run is not None:
        return delegating.cancelled_run.text()
    return cancelled_tool_call_text(tool=tool, reason=reason, started=call_id in run.started)


@contextlib.contextmanager
def _set(variable: ContextVar[Any], value: Any) -> Iterator[None]:
    token = variable.set(value)
    try:
        yield
    finally:
        # Left in another context when ADK cancels the call from outside it: nothing to restore there.
        with contextlib.suppress(ValueError):
            variable.reset(token)


def _close(exits: contextlib.ExitStack) -> None:
    with contextlib.suppress(ValueError):
        exits.close()


def _agent_name(context: InvocationContext) -> str:
    """The invoked agent's name; the app's, for an invocation of a workflow, which ADK's context names no
    agent for."""
    return context.session.app_name if context.agent is None else context.agent.name


async def _follow(given: asyncio.Event, own: asyncio.Event) -> None:
    await given.wait()
    own.set()


def _abort(invocation: weakref.ref[InvocationContext]) -> None:
    """Aborts the invocation, through ADK's own abort, if it is still there."""
    context = invocation()
    if context is not None:
        context.abort()
