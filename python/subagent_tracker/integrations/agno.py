"""Tracking Agno runs: :class:`SubagentCancellationManager`, a run cancellation manager built on a
session, installed with Agno's own ``set_cancellation_manager()``, that makes every agent, team and workflow
run a task.

::

    from agno.agent import Agent
    from agno.run.cancel import set_cancellation_manager
    from subagent_tracker import Session
    from subagent_tracker.integrations.agno import SubagentCancellationManager

    session = Session()
    set_cancellation_manager(SubagentCancellationManager(session))
    researcher = Agent(name="researcher", model=model)
    researcher.run("...")  # a task of the session, stoppable by id, subtree, session, deadline or process

Agno asks its manager at each of its checkpoints (before and after each model call and each tool, between
stream chunks) whether the run was cancelled. Here the answer is the run's token: a cancel by id (Agno's own
``cancel_run`` too), a parent's cascade, the session's cancel, a deadline, or a cancel from another process
over Redis, which arrives by push. No checkpoint makes a server call. A team's members are its children, so a
team's cancel reaches every running member, in any process; a cancel recorded before the run registers
cancels it as it starts. The run's task ends as Agno ended the run: completed with its output, failed with
its error, or cancelled with the reason and the partial output; a delegating run of any adapter gets
:func:`~subagent_tracker.integrations.cancelled_run_text` for the call that ran it.
"""

from __future__ import annotations

import collections
import contextlib
import sys
import threading
from contextvars import Token
from dataclasses import dataclass
from types import FrameType
from typing import Any, Final

from subagent_tracker._errors import DuplicateTaskError
from subagent_tracker._session import _in_background
from subagent_tracker.integrations import _CURRENT, FRAMEWORK_CANCEL_REASON, _current_run, _Run
from subagent_tracker.integrations._support import (
    CancelledRun,
    TrackedHandle,
    TrackedSession,
    blocking_twin,
    cancelled_run_text,
    check_session,
    check_timeout,
    missing_framework,
    report_cancelled_run,
    resolved,
    same_session,
)

try:
    from agno.exceptions import RunCancelledException
    from agno.run.agent import RunOutput
    from agno.run.base import RunStatus
    from agno.run.cancellation_management.base import BaseRunCancellationManager
    from agno.run.team import TeamRunOutput
    from agno.run.workflow import WorkflowRunOutput
    from agno.workflow.workflow import Workflow
except ImportError as error:  # pragma: no cover - exercised without the extra installed
    raise missing_framework("agno", "agno", error) from error

__all__ = ["AGNO_CANCEL_REASON", "PAUSED_REASON", "SubagentCancellationManager"]

#: The cancel reason of a run cancelled through Agno's own ``cancel_run``.
AGNO_CANCEL_REASON: Final = "the run was cancelled through Agno's cancel_run"
#: The pause reason of a run Agno paused for a human's confirmation or input.
PAUSED_REASON: Final = "the Agno run is waiting for a human's confirmation or input"
#: How many calling frames are searched for the output Agno is running a run with.
_FRAMES_SEARCHED: Final = 6
#: How many cancels of runs not registered here are remembered for ``is_cancelled``.
_REMEMBERED_INTENTS: Final = 10_000


@dataclass
class _AgnoRun:
    handle: TrackedHandle
    run: _Run
    agent: str | None
    #: Whether another run (a team, a tracked run of any framework) delegated this one.
    delegated: bool
    #: What makes the run current in the context that runs it, to undo as it ends (``None`` until a
    #: registration from that context: a background run registers first from its caller's).
    current: Token[_Run | None] | None
    #: What the run's ``RunCancelledException`` says, to tell Agno's text for a cancel from partial output.
    cancel_message: str | None = None


class SubagentCancellationManager(BaseRunCancellationManager):
    """An Agno run cancellation manager whose runs are tasks of ``session``.

    ``session`` is a ``Session`` or ``RedisSession``, or an ``AsyncRedisSession`` or ``AwaitableSession``,
    whose calls Agno's async runs await (its sync runs call the blocking twin). ``timeout`` is each run's
    deadline in seconds. A run is the task ``run_id`` (Agno's run id), with the agent's (or the team's, or the
    workflow's) name, under the innermost tracked run of the current context (of any framework), or under its
    team's run for a team's member.

    Raises ``TypeError`` for a ``session`` that is none of those, and ``TypeError`` or ``ValueError`` for a
    bad ``timeout``, when made."""

    def __init__(self, session: TrackedSession, *, timeout: float | None = None) -> None:
        check_session(session)
        check_timeout(timeout)
        self._session = session
        self._blocking = blocking_twin(session)
        self._timeout = timeout
        self._lock = threading.Lock()
        self._runs: dict[str, _AgnoRun] = {}
        #: Member run → its team's run, recorded before the member registers.
        self._teams: dict[str, str] = {}
        self._members: dict[str, set[str]] = {}
        #: Cancels of runs not registered here, oldest first.
        self._intents: collections.OrderedDict[str, None] = collections.OrderedDict()
        #: Runs Agno paused for a human (their tasks are ``PAUSED``), until ``continue_run`` registers them.
        self._paused: dict[str, _AgnoRun] = {}

    # Registering: the run becomes a task, and the current run of its context.

    def register_run(self, run_id: str) -> None:
        """Starts ``run_id``'s task (or resumes it, for a run Agno paused), unless this manager already runs
        it."""
        caller = sys._getframe(1)
        if self._runs_already(run_id, caller):
            return
        paused = self._continued(run_id)
        if paused is not None:
            self._blocking.resume_subagent_task(run_id)
            self._registered(run_id, paused.handle, paused.agent, caller)
            return
        parent_id, linked = self._parent_of(run_id)
        agent = _agent_of(_output_of(run_id, caller)) or _workflow_of(caller)
        try:
            handle = self._blocking.start_subagent_task(
                run_id, parent_id=parent_id, agent=agent, timeout=self._timeout, linked=linked
            )
        except DuplicateTaskError:
            return
        self._registered(run_id, handle, agent, caller)

    async def aregister_run(self, run_id: str) -> None:
        """``register_run``, awaited."""
        caller = sys._getframe(1)
        if self._runs_already(run_id, caller):
            return
        paused = self._continued(run_id)
        if paused is not None:
            await resolved(self._session.resume_subagent_task(run_id))
            self._registered(run_id, paused.handle, paused.agent, caller)
            return
        parent_id, linked = self._parent_of(run_id)
        agent = _agent_of(_output_of(run_id, caller)) or _workflow_of(caller)
        try:
            handle: TrackedHandle = await resolved(
                self._session.start_subagent_task(
                    run_id, parent_id=parent_id, agent=agent, timeout=self._timeout, linked=linked
                )
            )
        except DuplicateTaskError:
            return
        self._registered(run_id, handle, agent, caller)

    def _runs_already(self, run_id: str, caller: FrameType) -> bool:
        """Whether ``run_id`` is registered here already; a background run registered from its caller's
        context becomes current in the context that runs it, which registers it again."""
        run = self._runs.get(run_id)
        if run is None:
            return False
        if run.current is None and not _spawns_its_run(caller):
            run.current = _CURRENT.set(run.run)
        return True

    def _continued(self, run_id: str) -> _AgnoRun | None:
        with self._lock:
            return self._paused.pop(run_id, None)

    def _parent_of(self, run_id: str) -> tuple[str | None, list[Any] | None]:
        """The parent task of a new run: its team's run, else the innermost tracked run of this session;
        a run of another session is linked instead."""
        with self._lock:
            self._intents.pop(run_id, None)
            team = self._teams.get(run_id)
        if team is not None:
            return team, None
        outer = _current_run()
        if outer is None:
            return None, None
        if same_session(outer.session, self._session):
            return outer.handle.task_id, None
        return None, [outer.handle.token]

    def _registered(self, run_id: str, handle: TrackedHandle, agent: str | None, caller: FrameType) -> None:
        run = _Run(self._session, handle, _current_run())
        delegated = run.outer is not None or run_id in self._teams
        # Set in the context of Agno's run function, which called this: the runs it starts inside (a team's
        # members, a tool's subagents) are this run's children. A function that starts a background run
        # returns to its caller, whose later runs are no children of it: the run's own task sets the mark.
        current = None if _spawns_its_run(caller) else _CURRENT.set(run)
        with self._lock:
            self._runs[run_id] = _AgnoRun(handle, run, agent, delegated, current)

    # Cancelling and asking: the token, never the server.

    def cancel_run(self, run_id: str) -> bool:
        """Cancels the run's task (and its subtree), here or in any process; a cancel of a run not started yet
        is recorded, and cancels it as it starts. True if the run was registered here."""
        self._remember_intent(run_id)
        self._blocking.cancel_subagent_task(run_id, reason=AGNO_CANCEL_REASON, before_start=True)
        return run_id in self._runs

    async def acancel_run(self, run_id: str) -> bool:
        """``cancel_run``, awaited."""
        self._remember_intent(run_id)
        await resolved(
            self._session.cancel_subagent_task(run_id, reason=AGNO_CANCEL_REASON, before_start=True)
        )
        return run_id in self._runs

    def _remember_intent(self, run_id: str) -> None:
        if run_id in self._runs:
            return
        with self._lock:
            self._intents[run_id] = None
            while len(self._intents) > _REMEMBERED_INTENTS:
                self._intents.popitem(last=False)

    def is_cancelled(self, run_id: str) -> bool:
        """Whether the run's token has fired (or, for a run not registered here, whether it was cancelled
        through this manager)."""
        run = self._runs.get(run_id)
        if run is None:
            return run_id in self._intents
        return run.handle.token.is_cancelled

    async def ais_cancelled(self, run_id: str) -> bool:
        """``is_cancelled``, awaited."""
        return self.is_cancelled(run_id)

    def raise_if_cancelled(self, run_id: str) -> None:
        """Raises Agno's ``RunCancelledException``, with the cancel's reason, once the run is cancelled."""
        if not self.is_cancelled(run_id):
            return
        run = self._runs.get(run_id)
        reason = (run.handle.token.reason if run is not None else None) or AGNO_CANCEL_REASON
        message = f"Run {run_id} was cancelled: {reason}"
        if run is not None:
            run.cancel_message = message
        raise RunCancelledException(message)

    async def araise_if_cancelled(self, run_id: str) -> None:
        """``raise_if_cancelled``, awaited."""
        self.raise_if_cancelled(run_id)

    def get_active_runs(self) -> dict[str, bool]:
        """Each run registered here, with whether it is cancelled, and each cancel made before its run."""
        with self._lock:
            active = {run_id: run.handle.token.is_cancelled for run_id, run in self._runs.items()}
            active.update((run_id, True) for run_id in self._intents)
        return active

    async def aget_active_runs(self) -> dict[str, bool]:
        """``get_active_runs``, awaited."""
        return self.get_active_runs()

    # Ending: the task ends as Agno ended the run.

    def cleanup_run(self, run_id: str) -> None:
        """Ends the run's task from how Agno ended the run."""
        ending = self._ending(run_id, _output_of(run_id, sys._getframe(1)))
        if ending is not None:
            _in_background(ending())

    async def acleanup_run(self, run_id: str) -> None:
        """``cleanup_run``, awaited."""
        ending = self._ending(run_id, _output_of(run_id, sys._getframe(1)))
        if ending is not None:
            await resolved(ending())

    def _ending(self, run_id: str, output: Any) -> Any:
        """The call that ends ``run_id``'s task, or ``None`` for a run not registered here."""
        with self._lock:
            run = self._runs.pop(run_id, None)
            self._intents.pop(run_id, None)
        if run is None:
            return None
        run.run.ended = True
        # Agno cleans a run up in the context it registered it in; elsewhere the run is passed over as ended.
        if run.current is not None:
            with contextlib.suppress(ValueError):
                _CURRENT.reset(run.current)
        handle = run.handle
        status = getattr(output, "status", None)
        content = getattr(output, "content", None)
        if handle.token.is_cancelled or status is RunStatus.cancelled:
            reason = handle.token.reason or FRAMEWORK_CANCEL_REASON
            partial = None if content is None or str(content) == run.cancel_message else str(content)
            report_cancelled_run(
                CancelledRun(agent=run.agent, task_id=run_id, reason=reason, partial=partial)
            )
            if output is not None and run.delegated:
                # The delegating run reads this as the run's answer, the reason and the partial output, and
                # goes on: Agno stops a team whose member's output says cancelled, and a stop must never
                # stop the rest. Agno has stored the run as cancelled already; the task says so too.
                output.content = cancelled_run_text(
                    agent=run.agent, task_id=run_id, reason=reason, partial=partial
                )
                output.status = RunStatus.completed
            if not handle.token.is_cancelled:
                # Agno stopped the run itself (an interrupt): its subtree stops too.
                self._blocking.cancel_subagent_task(run_id, reason=reason)
            return lambda: handle.complete(partial)
        if status is RunStatus.paused:
            # Waiting for a human (a tool that needs confirmation or input): Agno's continue_run registers
            # the run again, which resumes the task.
            with self._lock:
                self._paused[run_id] = run
            return lambda: handle.pause(PAUSED_REASON)
        if status is RunStatus.error:
            return lambda: handle.fail(str(content) if content is not None else "the Agno run failed")
        return lambda: handle.complete(content)

    # A team's members: children of the team's run.

    def register_member_run(self, team_run_id: str, member_run_id: str) -> None:
        """Records that ``member_run_id`` is a member run of ``team_run_id``: its task is the team's child."""
        with self._lock:
            self._teams[member_run_id] = team_run_id
            self._members.setdefault(team_run_id, set()).add(member_run_id)

    async def aregister_member_run(self, team_run_id: str, member_run_id: str) -> None:
        """``register_member_run``, awaited."""
        self.register_member_run(team_run_id, member_run_id)

    def get_member_run_ids(self, team_run_id: str) -> set[str]:
        """The member runs of ``team_run_id`` recorded here."""
        with self._lock:
            return set(self._members.get(team_run_id, ()))

    async def aget_member_run_ids(self, team_run_id: str) -> set[str]:
        """``get_member_run_ids``, awaited."""
        return self.get_member_run_ids(team_run_id)

    def cleanup_member_runs(self, team_run_id: str) -> None:
        """Forgets the member runs of a team run that has finished."""
        with self._lock:
            for member_run_id in self._members.pop(team_run_id, ()):
                self._teams.pop(member_run_id, None)

    async def acleanup_member_runs(self, team_run_id: str) -> None:
        """``cleanup_member_runs``, awaited."""
        self.cleanup_member_runs(team_run_id)


def _output_of(run_id: str, frame: FrameType | None) -> Any:
    """The output object Agno runs ``run_id`` with (``RunOutput``, ``TeamRunOutput``, ``WorkflowRunOutput``),
    from the locals of the frames that called the manager: Agno's manager interface names the run only by its
    id, and says neither whose run it is nor how it ended, which that object does."""
    for _ in range(_FRAMES_SEARCHED):
        if frame is None:
            return None
        for value in frame.f_locals.values():
            if isinstance(value, (RunOutput, TeamRunOutput, WorkflowRunOutput)) and value.run_id == run_id:
                return value
        frame = frame.f_back
    return None


def _spawns_its_run(frame: FrameType) -> bool:
    """Whether the Agno function that registers a run (past ``agno.run.cancel``'s module functions, which
    call the manager) is one that registers a background run and returns before it runs
    (``_arun_background``, ``_astart_background``...): the run goes on in a task of its own."""
    caller: FrameType | None = frame
    while caller is not None and caller.f_globals.get("__name__") == "agno.run.cancel":
        caller = caller.f_back
    return caller is not None and "background" in caller.f_code.co_name


def _workflow_of(frame: FrameType | None) -> str | None:
    """The name of the workflow whose run registers from ``frame``'s callers: a workflow registers its run
    before it makes the run's output, which names the run's agent or team."""
    for _ in range(_FRAMES_SEARCHED):
        if frame is None:
            return None
        runner = frame.f_locals.get("self")
        if isinstance(runner, Workflow):
            return runner.name
        frame = frame.f_back
    return None


def _agent_of(output: Any) -> str | None:
    for name in ("agent_name", "team_name", "workflow_name"):
        value = getattr(output, name, None)
        if value:
            return str(value)
    return None
