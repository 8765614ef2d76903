"""OpenTelemetry spans (``subagent_tracker.integrations.otel``): one ``invoke_agent`` span per task, parented
as the task tree is, ended exactly once with the task's true end, whatever ends it, on either store and across
processes on Redis; read back through the SDK's in-memory exporter."""

from __future__ import annotations

import asyncio
import signal
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from redis_support import RedisServer, Worker

from subagent_tracker import AsyncRedisRegistry, Session, SubagentStatus
from subagent_tracker.integrations.otel import TaskSpans


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    yield server
    server.stop()


def _provider() -> tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def _by_task(spans: tuple[ReadableSpan, ...]) -> dict[str, ReadableSpan]:
    by_task = {str((span.attributes or {})["subagent_tracker.task.id"]): span for span in spans}
    assert len(by_task) == len(spans), "one span per task"
    return by_task


async def _settle() -> None:
    """Lets the reporter read what happened so far (a memory session's events are in the loop at once)."""
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_tree_s_spans_follow_it_and_end_with_each_task_s_true_end() -> None:
    provider, exporter = _provider()

    async def main() -> None:
        session = Session()
        async with TaskSpans(session, tracer_provider=provider) as spans:
            root = session.start_subagent_task("root", agent="orchestrator")
            researcher = session.start_subagent_task("researcher", agent="researcher", parent_id="root")
            coder = session.start_subagent_task("coder", agent="coder", parent_id="root")
            helper = session.start_subagent_task("helper", parent_id="coder")
            await _settle()
            assert spans.open_spans == 4
            researcher.complete("found")
            helper.fail("tool broke", error_type="ToolError")
            session.cancel_subagent_task("coder", "user pressed stop")
            with coder:
                pass
            root.complete("done")
            await _settle()
            assert spans.open_spans == 0

    asyncio.run(main())
    spans = _by_task(exporter.get_finished_spans())
    assert set(spans) == {"root", "researcher", "coder", "helper"}
    root = spans["root"]
    assert root.name == "invoke_agent orchestrator"
    assert root.kind is trace.SpanKind.INTERNAL
    assert root.parent is None
    for child in ("researcher", "coder"):
        parent = spans[child].parent
        assert parent is not None and parent.span_id == root.context.span_id
        assert spans[child].context.trace_id == root.context.trace_id
    assert (
        spans["helper"].parent is not None
        and spans["helper"].parent.span_id == spans["coder"].context.span_id
    )
    assert spans["helper"].name == "invoke_agent"
    attributes = dict(spans["researcher"].attributes or {})
    assert attributes["gen_ai.operation.name"] == "invoke_agent"
    assert attributes["gen_ai.agent.name"] == "researcher"
    assert attributes["subagent_tracker.task.status"] == "completed"
    assert str(attributes["gen_ai.conversation.id"])
    assert spans["researcher"].status.status_code is StatusCode.OK
    failed = spans["helper"]
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.status.description == "tool broke"
    assert (failed.attributes or {})["error.type"] == "ToolError"
    cancelled = spans["coder"]
    assert cancelled.status.status_code is StatusCode.UNSET
    assert {
        "subagent_tracker.task.status": "cancelled",
        "subagent_tracker.cancel.reason": "user pressed stop",
        "subagent_tracker.cancel.cause": "requested",
    }.items() <= dict(cancelled.attributes or {}).items()
    assert "subagent_tracker.cancel.origin" in (cancelled.attributes or {})


def test_each_span_spans_its_task_s_recorded_times() -> None:
    provider, exporter = _provider()

    async def main() -> Any:
        session = Session()
        async with TaskSpans(session, tracer_provider=provider):
            handle = session.start_subagent_task("timed")
            await asyncio.sleep(0.05)
            handle.complete()
            await _settle()
        return session.subagent_task("timed")

    task = asyncio.run(main())
    (span,) = exporter.get_finished_spans()
    assert span.start_time == int(task.started_at * 1e9)
    assert span.end_time == int(task.ended_at * 1e9)


def test_top_level_spans_are_children_of_the_given_context_and_unfinished_tasks_are_reported() -> None:
    provider, exporter = _provider()
    tracer = provider.get_tracer("the application")

    async def main() -> None:
        session = Session()
        early = session.start_subagent_task("early")
        with tracer.start_as_current_span("request") as request:
            async with TaskSpans(
                session, tracer_provider=provider, parent_context=otel_context.get_current()
            ):
                early.complete()
                session.start_subagent_task("late").complete()
                await _settle()
        assert request.get_span_context().is_valid

    asyncio.run(main())
    spans = {span.name: span for span in exporter.get_finished_spans() if span.name == "request"}
    request = spans["request"]
    tasks = _by_task(tuple(span for span in exporter.get_finished_spans() if span.name != "request"))
    assert set(tasks) == {"early", "late"}
    for span in tasks.values():
        assert span.parent is not None and span.parent.span_id == request.context.span_id


def test_a_reporter_that_stops_ends_every_open_span_saying_the_task_was_unfinished() -> None:
    provider, exporter = _provider()

    async def main() -> None:
        session = Session()
        async with TaskSpans(session, tracer_provider=provider):
            running = session.start_subagent_task("still-running", agent="researcher")
            session.start_subagent_task("done").complete()
            await _settle()
        running.complete()  # after the reporter stopped: its span says the task was unfinished

    asyncio.run(main())
    spans = _by_task(exporter.get_finished_spans())
    assert (spans["still-running"].attributes or {})["subagent_tracker.task.unfinished"] is True
    assert spans["still-running"].status.status_code is StatusCode.UNSET
    assert "subagent_tracker.task.unfinished" not in (spans["done"].attributes or {})


def test_ten_thousand_tasks_ended_by_every_route_each_end_one_span_exactly_once() -> None:
    """10,000 tasks, far more than the reporter's event buffer holds while the producer runs: the reporter
    lags, reads the tasks again, and still ends every span once. Every route that ends a task: completion,
    failure, a cancel by id, a cascade from a parent, a deadline, a dropped handle, the session's cancel."""
    provider, exporter = _provider()
    count = 10_000

    async def main() -> dict[str, SubagentStatus]:
        session = Session(max_finished_tasks=2 * count)
        async with TaskSpans(session, tracer_provider=provider) as spans:
            held: list[Any] = []
            for index in range(0, count, 10):
                group = f"g{index}"
                parent = session.start_subagent_task(group, agent="orchestrator")
                children = [
                    session.start_subagent_task(f"{group}-{offset}", agent="worker", parent_id=group)
                    for offset in range(1, 6)
                ]
                children[0].complete(1)
                children[1].fail("broke", error_type="ToolError")
                session.cancel_subagent_task(f"{group}-3", "stop one")
                with children[2]:
                    pass
                held.extend(children[3:])  # cancelled by their parent's cancel
                held.append(session.start_subagent_task(f"{group}-6", timeout=0.001))  # by its deadline
                session.start_subagent_task(f"{group}-7", parent_id=group)  # its handle dropped at once
                held.append(session.start_subagent_task(f"{group}-8"))  # by the session's cancel
                held.append(session.start_subagent_task(f"{group}-9"))
                if index % 2_000 == 0:
                    await asyncio.sleep(0)  # the reporter reads now and then, and lags in between
                session.cancel_subagent_task(group, "cascade")
                with parent:
                    pass
            await asyncio.sleep(0.05)  # the deadlines pass
            session.cancel(reason="closing")
            for handle in held:
                with handle:
                    pass
            deadline = time.monotonic() + 30
            while spans.open_spans and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            assert spans.open_spans == 0, "every span ended from the events, before the reporter stops"
        return {task.task_id: task.status for task in session.subagent_tasks()}

    statuses = asyncio.run(main())
    assert len(statuses) == count
    spans = _by_task(exporter.get_finished_spans())
    assert set(spans) == set(statuses), "no task without its span, no span without its task"
    assert all(span.end_time is not None for span in spans.values())
    reported = Counter(
        str((span.attributes or {})["subagent_tracker.task.status"]) for span in spans.values()
    )
    assert reported == Counter(status.value for status in statuses.values())
    assert not [
        span for span in spans.values() if "subagent_tracker.task.unfinished" in (span.attributes or {})
    ]
    causes = Counter(
        str((span.attributes or {}).get("subagent_tracker.cancel.cause")) for span in spans.values()
    )
    assert {"requested", "parent", "deadline", "session"} <= set(causes), causes


def test_bad_arguments_are_refused_when_made() -> None:
    with pytest.raises(TypeError, match="session"):
        TaskSpans(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="parent_context must be an opentelemetry Context"):
        TaskSpans(Session(), parent_context={})  # type: ignore[arg-type]


def test_a_reporter_starts_once() -> None:
    async def main() -> None:
        spans = TaskSpans(Session(), tracer_provider=_provider()[0])
        await spans.start()
        with pytest.raises(RuntimeError, match="reports once"):
            await spans.start()
        await spans.aclose()
        await spans.aclose()

    asyncio.run(main())


def test_on_redis_spans_follow_the_tree_across_processes_and_a_lost_worker_s_task_ends_its_span(
    redis_server: RedisServer,
) -> None:
    """A child started by another process has its parent's span for parent; the task of a worker that dies is
    failed by the reaper, and its span ends with that failure."""
    provider, exporter = _provider()
    session_id = "spans-across-processes"

    async def main() -> None:
        registry = await AsyncRedisRegistry.connect(redis_server.url, lease=0.5, reconcile_interval=0.1)
        session = await registry.session(session_id)
        async with TaskSpans(session, tracer_provider=provider) as spans:
            root = await session.start_subagent_task("root", agent="orchestrator")
            worker = Worker(redis_server.url, "span-worker", lease=0.5)
            try:
                worker.ask(op="start", session=session_id, task="remote", parent="root")
                worker.ask(op="start", session=session_id, task="lost", parent="root")
                worker.ask(op="complete", session=session_id, task="remote", result="from afar")
                worker.signal(signal.SIGKILL)
            finally:
                worker.stop()
            deadline = time.monotonic() + 20
            while len(exporter.get_finished_spans()) < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            assert await root.complete() is True
            while spans.open_spans and time.monotonic() < deadline:
                await asyncio.sleep(0.05)

    asyncio.run(main())
    spans = _by_task(exporter.get_finished_spans())
    assert set(spans) == {"root", "remote", "lost"}
    for child in ("remote", "lost"):
        parent = spans[child].parent
        assert parent is not None and parent.span_id == spans["root"].context.span_id
    assert (spans["remote"].attributes or {})["gen_ai.conversation.id"] == session_id
    assert spans["remote"].status.status_code is StatusCode.OK
    assert spans["lost"].status.status_code is StatusCode.ERROR
    assert (spans["lost"].attributes or {})["subagent_tracker.task.status"] == "failed"


def test_a_reporter_interrupted_as_ctrl_c_interrupts_asyncio_run_leaves_no_span_open() -> None:
    """Ctrl-C cancels ``asyncio.run``'s main task: the ``async with`` block unwinds, and every open span
    ends."""
    provider, exporter = _provider()
    session = Session()
    handles: list[Any] = []

    async def main() -> None:
        async with TaskSpans(session, tracer_provider=provider):
            session.start_subagent_task("finished").complete()
            handles.append(session.start_subagent_task("running", agent="researcher"))
            await asyncio.sleep(3600)

    async def interrupted() -> None:
        reporting = asyncio.ensure_future(main())
        await asyncio.sleep(0.05)
        reporting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await reporting

    asyncio.run(interrupted())
    spans = _by_task(exporter.get_finished_spans())
    assert set(spans) == {"finished", "running"}
    assert all(span.end_time is not None for span in spans.values())
    assert (spans["running"].attributes or {})["subagent_tracker.task.unfinished"] is True
    assert spans["finished"].status.status_code is StatusCode.OK
    handles.pop().complete()


def test_a_read_that_fails_leaves_the_reporter_reporting(monkeypatch: pytest.MonkeyPatch) -> None:
    """A read of a task fails (Redis unreachable for a moment): the reporter logs it, reads the tasks again at
    the next event, and every span still ends with its task's end."""
    provider, exporter = _provider()
    reads = Counter[str]()
    read = Session.subagent_task

    def failing_once(self: Session, task_id: str) -> Any:
        reads[task_id] += 1
        if task_id == "unlucky" and reads[task_id] == 1:
            raise ConnectionError("the server went away for a moment")
        return read(self, task_id)

    async def main() -> None:
        session = Session()
        async with TaskSpans(session, tracer_provider=provider) as spans:
            monkeypatch.setattr(Session, "subagent_task", failing_once)
            session.start_subagent_task("unlucky").complete("done")
            await _settle()
            session.start_subagent_task("next").complete()
            await _settle()
            assert spans.open_spans == 0

    asyncio.run(main())
    spans = _by_task(exporter.get_finished_spans())
    assert set(spans) == {"unlucky", "next"}
    assert all(span.status.status_code is StatusCode.OK for span in spans.values())


def test_an_event_stream_that_fails_is_subscribed_to_again_and_no_end_is_lost(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The event stream itself fails (the connection behind it dropped): the reporter logs it, subscribes
    again, reads what it missed from the tasks, and every span ends with its task's true end."""
    from subagent_tracker.integrations import otel

    provider, exporter = _provider()
    subscriptions = Counter[str]()
    events = otel._events

    async def failing_first(stream: Any) -> Any:
        subscriptions["made"] += 1
        if subscriptions["made"] == 1:
            raise ConnectionError("the stream's connection dropped")
        async for event in events(stream):
            yield event

    monkeypatch.setattr(otel, "_events", failing_first)

    async def main() -> None:
        session = Session()
        async with TaskSpans(session, tracer_provider=provider) as spans:
            session.start_subagent_task("missed").complete("done")
            cancelled = session.start_subagent_task("cancelled")
            session.cancel_subagent_task("cancelled", "stop")
            cancelled.complete()
            deadline = time.monotonic() + 5
            while subscriptions["made"] < 2:
                assert time.monotonic() < deadline, "the reporter never subscribed again"
                await asyncio.sleep(0.01)
            session.start_subagent_task("after").complete()
            await _settle()
            assert spans.open_spans == 0

    asyncio.run(main())
    spans = _by_task(exporter.get_finished_spans())
    assert set(spans) == {"missed", "cancelled", "after"}
    assert spans["missed"].status.status_code is StatusCode.OK
    assert spans["cancelled"].attributes is not None
    assert spans["cancelled"].attributes["subagent_tracker.task.status"] == "cancelled"
    assert not any((span.attributes or {}).get("subagent_tracker.task.unfinished") for span in spans.values())


def test_a_start_that_fails_leaves_no_span_open_and_no_subscription(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first read of the unfinished tasks fails part way: the spans it opened end, and the stream it
    subscribed to is closed."""
    from subagent_tracker.integrations import otel

    provider, exporter = _provider()
    closed = Counter[str]()
    tasks = otel._tasks

    async def failing_after_one(session: Any, *, pending: bool) -> Any:
        async for task in tasks(session, pending=pending):
            yield task
            raise ConnectionError("the server went away part way")

    monkeypatch.setattr(otel, "_tasks", failing_after_one)

    async def main() -> None:
        session = Session()
        running = [session.start_subagent_task("running one"), session.start_subagent_task("running two")]
        events = Session.events

        def counted_events(self: Session) -> Any:
            stream = events(self)
            close = stream.close

            def counted_close() -> None:
                closed["stream"] += 1
                close()

            return _Closing(stream, counted_close)

        spans = TaskSpans(session, tracer_provider=provider)
        monkeypatch.setattr(Session, "events", counted_events)
        with pytest.raises(ConnectionError, match="part way"):
            await spans.start()
        assert spans.open_spans == 0
        assert closed["stream"] == 1
        del running

    asyncio.run(main())
    finished = exporter.get_finished_spans()
    assert len(finished) == 1
    assert (finished[0].attributes or {}).get("subagent_tracker.task.unfinished") is True


class _Closing:
    """An event stream whose ``close`` is counted."""

    def __init__(self, stream: Any, close: Any) -> None:
        self._stream = stream
        self.close = close

    def __aiter__(self) -> Any:
        return self._stream.__aiter__()
