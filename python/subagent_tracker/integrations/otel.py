"""OpenTelemetry spans for a session's tasks: :class:`TaskSpans` reports one ``invoke_agent`` span per task,
as the GenAI semantic conventions describe an agent's invocation, parented as the task tree is, and ends each
exactly once, with the task's true end::

    from opentelemetry.sdk.trace import TracerProvider
    from subagent_tracker.integrations.otel import TaskSpans

    async with TaskSpans(session, tracer_provider=provider):
        await run_the_orchestrator(session)

The spans come from the session's events (contract §8), so one reporter sees every task of the session,
whichever process runs it on Redis: a task started in one process under a parent started in another has that
parent's span for its parent, and a task that a reaper ends because its worker was lost ends its span too.
Each span starts and ends at the task's own recorded times. A reporter that falls behind the events reads the
tasks again (the ``lagged`` event), so that no span is left open and none is missed; one that stops (the
``async with`` block ends, or is cancelled by Ctrl-C) first reads the tasks it has open spans for, and ends
the spans of tasks still unfinished then with ``subagent_tracker.task.unfinished`` set, so that none is left
open.

How a task's end maps to the span:

- ``COMPLETED``: status ``OK``.
- ``FAILED``: status ``ERROR`` with the error's message, and ``error.type`` set to the error's type (or
  ``"SubagentTaskFailed"`` when the failure named none).
- ``CANCELLED``: status ``UNSET``, with ``subagent_tracker.cancel.reason``, ``.cause`` and ``.origin``. A
  cancel is a stop that someone or something asked for (a user, a parent's cancel, a deadline, a session's
  close), not a failure of the agent: marked ``ERROR``, every stop button pressed would count against the
  agent's error rate; marked ``OK``, a stopped run would read as one that did its work. The conventions have
  no "cancelled" status yet, so the span says it in its attributes: ``subagent_tracker.task.status`` is
  ``"cancelled"``, and the cause (``task.cancel_cause``) tells a deadline (``"deadline"``) or a lost lease
  (``"lease"``) from a stop that was asked for (``"requested"``, ``"parent"``, ``"session"``...).

Every span has ``gen_ai.operation.name`` ``"invoke_agent"``, ``gen_ai.agent.name`` (the task's agent, when it
has one), ``gen_ai.conversation.id`` (the session's id), ``subagent_tracker.task.id`` and
``subagent_tracker.task.status``. Its name is ``invoke_agent {agent}`` (``invoke_agent`` for a task with no
agent), and its kind ``INTERNAL``.

Nothing is reported while no :class:`TaskSpans` runs: the module costs a lifecycle nothing until then.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final

from subagent_tracker._native import SubagentEvent, SubagentTask
from subagent_tracker._status import SubagentStatus
from subagent_tracker.integrations._support import (
    TrackedSession,
    check_session,
    missing_framework,
    resolved,
)

try:
    from opentelemetry import trace
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, SpanContext, SpanKind, Status, StatusCode, Tracer, TracerProvider
except ImportError as error:  # pragma: no cover - exercised without the extra installed
    raise missing_framework("otel", "otel", error) from error

__all__ = ["TaskSpans"]

#: Where a read that failed while reporting goes (the reporter goes on, and reads the tasks again).
_LOG = logging.getLogger("subagent_tracker")

#: The instrumentation scope the spans are reported under.
SCOPE: Final = "subagent_tracker"
#: ``error.type`` of a failed task whose failure named no type.
FAILED_WITHOUT_TYPE: Final = "SubagentTaskFailed"
#: How many ended tasks a reporter remembers, to parent a late child and to tell a task it has already
#: reported from one it missed while it lagged.
REMEMBERED_ENDS: Final = 100_000
#: How far (seconds) another process's clock may run behind this one's: a task whose recorded end is that
#: much before reporting began is still reported when first read.
CLOCK_MARGIN: Final = 5.0
#: The first pause (seconds) before a failed event stream is subscribed to again; it doubles up to the most.
RESUBSCRIBE_PAUSE: Final = 0.05
MAX_RESUBSCRIBE_PAUSE: Final = 2.0


def _nanoseconds(seconds: float) -> int:
    return int(seconds * 1_000_000_000)


def _same_time(one: float, other: float) -> bool:
    """Whether two recorded times of a run are one: a snapshot's and an event's may round apart."""
    return abs(one - other) < 1e-3


@dataclass
class _OpenSpan:
    span: Span
    #: The run the span reports: its start, which a restarted id does not share.
    started_at: float


class TaskSpans:
    """Reports one span per task of ``session`` for as long as it runs (``async with``, or :meth:`start` and
    :meth:`aclose`): every task started meanwhile, and every task unfinished when it starts.

    ``tracer_provider`` is the provider the spans go to (OpenTelemetry's global one by default);
    ``parent_context`` the context whose span the spans of top-level tasks are children of (none by default: a
    top-level task's span begins a trace). Runs on the event loop it is started in; on Redis, prefer an
    ``AsyncRedisSession``, whose reads never block that loop (a ``RedisSession``'s each block it for a round
    trip)."""

    def __init__(
        self,
        session: TrackedSession,
        *,
        tracer_provider: TracerProvider | None = None,
        parent_context: Context | None = None,
    ) -> None:
        check_session(session)
        if parent_context is not None and not isinstance(parent_context, Context):
            raise TypeError(
                "parent_context must be an opentelemetry Context or None, "
                f"not {type(parent_context).__name__}"
            )
        self._session = session
        self._tracer: Tracer = trace.get_tracer(SCOPE, tracer_provider=tracer_provider)
        self._parent_context = parent_context
        self._open: dict[str, _OpenSpan] = {}
        #: Ended tasks, oldest first: their run's start, and their span's context for late children.
        self._ended: OrderedDict[str, tuple[float, SpanContext]] = OrderedDict()
        self._reader: asyncio.Task[None] | None = None
        self._stopped = False
        #: When reporting began: a finished task first seen is reported if it ended since.
        self._since = math.inf

    async def __aenter__(self) -> TaskSpans:
        await self.start()
        return self

    async def __aexit__(
        self,
        _type: type[BaseException] | None,
        _exception: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    @property
    def open_spans(self) -> int:
        """How many spans are open: one per unfinished task seen."""
        return len(self._open)

    async def start(self) -> None:
        """Subscribes to the session's events, then opens the spans of the tasks unfinished now, and reports
        from then on in a task of the running loop. A start that fails (or is cancelled) leaves no span open
        and no subscription behind."""
        if self._reader is not None or self._stopped:
            raise RuntimeError("a TaskSpans reports once: start it once, and make another to report again")
        # Taken before subscribing, with a margin for the clocks of the other processes that end tasks on
        # Redis: a task that ends once reporting began is reported, whoever's clock recorded its end.
        self._since = time.time() - CLOCK_MARGIN
        # Subscribed first: a task that starts while the unfinished ones are read is seen either way.
        stream: Any = await resolved(self._session.events())
        try:
            await self._read_tasks_again(every_retained=False)
        except BaseException:
            stream.close()
            self._stopped = True
            self._end_unfinished()
            raise
        self._reader = asyncio.get_running_loop().create_task(self._report(stream))

    async def aclose(self) -> None:
        """Stops reporting: reads the tasks of the open spans once more, ends the spans of those that finished
        with their true end, and the others' spans with ``subagent_tracker.task.unfinished`` set."""
        if self._stopped:
            return
        self._stopped = True
        reader, self._reader = self._reader, None
        try:
            if reader is not None:
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reader
            for task_id in list(self._open):
                task = await resolved(self._session.subagent_task(task_id))
                self._report_task(task_id, task)
        finally:
            # Whatever stopped the reads (a cancel, a server gone), no span stays open.
            self._end_unfinished()

    def _end_unfinished(self) -> None:
        for task_id, opened in list(self._open.items()):
            opened.span.set_attribute("subagent_tracker.task.unfinished", True)
            self._end(task_id, opened)

    async def _report(self, stream: Any) -> None:
        """Reports each event until stopped. A read that fails (Redis unreachable for a moment) is logged,
        and what it would have reported is read again from the tasks; a stream that fails is subscribed to
        again, after a pause that grows while it keeps failing."""
        behind = False
        pause = RESUBSCRIBE_PAUSE
        while True:
            try:
                if behind:
                    behind = await self._read_again_or_log()
                async for event in _events(stream):
                    pause = RESUBSCRIBE_PAUSE
                    try:
                        if behind:
                            await self._read_tasks_again(every_retained=True)
                            behind = False
                        await self._on_event(event)
                    except Exception:
                        _LOG.exception("could not report the spans of an event; reading the tasks again next")
                        behind = True
                return
            except Exception:
                _LOG.exception("could not read the session's events; subscribing to them again")
            finally:
                stream.close()
            while True:
                await asyncio.sleep(pause)
                pause = min(pause * 2, MAX_RESUBSCRIBE_PAUSE)
                try:
                    stream = await resolved(self._session.events())
                    break
                except Exception:
                    _LOG.exception("could not subscribe to the session's events again; trying again")
            # Events were missed while no stream was open: the tasks are read again before the next event.
            behind = True

    async def _read_again_or_log(self) -> bool:
        """Reads the tasks again; whether they are still to be read again (the read failed)."""
        try:
            await self._read_tasks_again(every_retained=True)
        except Exception:
            _LOG.exception("could not read the tasks again; reading them again at the next event")
            return True
        return False

    async def _on_event(self, event: SubagentEvent) -> None:
        if event.kind == "lagged":
            await self._read_tasks_again(every_retained=True)
            return
        task_id = event.task_id
        if task_id is None or event.kind not in ("started", "ended"):
            return
        task = await resolved(self._session.subagent_task(task_id))
        if event.kind == "started":
            if task is not None and _same_time(task.started_at, event.timestamp):
                self._report_task(task_id, task)
            elif task_id not in self._open:
                # The run ended and left the session (or its id ran again) before its start was read: its span
                # is made from the events alone.
                self._open[task_id] = self._start_span(task_id, None, event.timestamp)
        elif task_id in self._open and not self._same_run(task_id, task):
            # The run left the session, or its id ran again, before its end was read: the event says how the
            # reported run ended.
            self._end_from_event(task_id, event)
        else:
            self._report_task(task_id, task)

    async def _read_tasks_again(self, *, every_retained: bool) -> None:
        """Reads the tasks, after events may have been missed: opens the spans of unfinished tasks not seen,
        ends those of tasks seen to finish, and (``every_retained``) reports the tasks that started and ended
        unseen, as far as the session retains them."""
        seen: set[str] = set()
        async for task in _tasks(self._session, pending=not every_retained):
            seen.add(task.task_id)
            self._report_task(task.task_id, task)
        for task_id in [task_id for task_id in self._open if task_id not in seen]:
            self._report_task(task_id, await resolved(self._session.subagent_task(task_id)))

    def _same_run(self, task_id: str, task: SubagentTask | None) -> bool:
        opened = self._open.get(task_id)
        return opened is not None and task is not None and _same_time(task.started_at, opened.started_at)

    def _report_task(self, task_id: str, task: SubagentTask | None) -> None:
        """Brings the span of ``task_id`` up to date with ``task``, its latest snapshot (``None``: gone)."""
        opened = self._open.get(task_id)
        if opened is not None and not self._same_run(task_id, task):
            # The reported run is gone (forgotten, evicted, or replaced by a new run of the id) with no end
            # seen: its span still ends, saying so.
            opened.span.set_attribute("subagent_tracker.task.unfinished", True)
            self._end(task_id, opened)
            opened = None
        if task is None:
            return
        if opened is None:
            remembered = self._ended.get(task_id)
            if remembered is not None and _same_time(remembered[0], task.started_at):
                return
            if task.finished and (task.ended_at or 0.0) < self._since:
                return
            opened = self._open_span(task)
        if task.finished:
            self._set_end(opened.span, task)
            self._end(task_id, opened, task.ended_at)

    def _open_span(self, task: SubagentTask) -> _OpenSpan:
        opened = self._start_span(task.task_id, task, task.started_at)
        self._open[task.task_id] = opened
        return opened

    def _start_span(self, task_id: str, task: SubagentTask | None, started_at: float) -> _OpenSpan:
        """The span of a run of ``task_id`` that started at ``started_at``; ``task`` is its snapshot, when the
        session still had it (a span made from the events alone has no agent and no parent)."""
        context = self._parent_context
        attributes: dict[str, str] = {
            "gen_ai.operation.name": "invoke_agent",
            "subagent_tracker.task.id": task_id,
        }
        agent = None
        if task is not None:
            attributes["gen_ai.conversation.id"] = task.session_id
            agent = task.agent
            if agent is not None:
                attributes["gen_ai.agent.name"] = agent
            if task.parent_id is not None:
                attributes["subagent_tracker.task.parent_id"] = task.parent_id
                parent = self._open.get(task.parent_id)
                parent_span_context = (
                    parent.span.get_span_context()
                    if parent is not None
                    else self._ended_context(task.parent_id)
                )
                if parent_span_context is not None:
                    context = trace.set_span_in_context(trace.NonRecordingSpan(parent_span_context))
        span = self._tracer.start_span(
            f"invoke_agent {agent}" if agent else "invoke_agent",
            context=context,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=_nanoseconds(started_at),
        )
        return _OpenSpan(span, started_at)

    def _ended_context(self, task_id: str) -> SpanContext | None:
        remembered = self._ended.get(task_id)
        return remembered[1] if remembered is not None else None

    @staticmethod
    def _set_end(span: Span, task: SubagentTask) -> None:
        span.set_attribute("subagent_tracker.task.status", task.status.value)
        if task.status is SubagentStatus.COMPLETED:
            span.set_status(Status(StatusCode.OK))
        elif task.status is SubagentStatus.FAILED:
            span.set_attribute("error.type", task.error_type or FAILED_WITHOUT_TYPE)
            span.set_status(Status(StatusCode.ERROR, task.error))
        elif task.status is SubagentStatus.CANCELLED:
            for name, value in (
                ("reason", task.cancel_reason),
                ("cause", task.cancel_cause),
                ("origin", task.cancel_origin),
            ):
                if value is not None:
                    span.set_attribute(f"subagent_tracker.cancel.{name}", value)

    def _end_from_event(self, task_id: str, event: SubagentEvent) -> None:
        opened = self._open[task_id]
        status = event.status
        if status is not None:
            opened.span.set_attribute("subagent_tracker.task.status", status.value)
        if status is SubagentStatus.COMPLETED:
            opened.span.set_status(Status(StatusCode.OK))
        elif status is SubagentStatus.FAILED:
            opened.span.set_attribute("error.type", FAILED_WITHOUT_TYPE)
            opened.span.set_status(Status(StatusCode.ERROR, event.message))
        elif status is SubagentStatus.CANCELLED and event.reason is not None:
            opened.span.set_attribute("subagent_tracker.cancel.reason", event.reason)
        self._end(task_id, opened, event.timestamp)

    def _end(self, task_id: str, opened: _OpenSpan, ended_at: float | None = None) -> None:
        del self._open[task_id]
        opened.span.end(end_time=_nanoseconds(ended_at) if ended_at is not None else None)
        self._ended.pop(task_id, None)
        self._ended[task_id] = (opened.started_at, opened.span.get_span_context())
        while len(self._ended) > REMEMBERED_ENDS:
            self._ended.popitem(last=False)


async def _events(stream: Any) -> AsyncIterator[SubagentEvent]:
    async for event in stream:
        yield event


async def _tasks(session: TrackedSession, *, pending: bool) -> AsyncIterator[SubagentTask]:
    """Every retained (or pending) task of ``session``, page by page, with either API."""
    cursor: str | None = None
    while True:
        tasks, cursor = await resolved(session.subagent_tasks_page(cursor, pending=pending))
        for task in tasks:
            yield task
        if cursor is None:
            return
