"""CONTRACT §8: lifecycle events, their order, and bounded subscriber buffers."""

from __future__ import annotations

import asyncio
import threading
import time

from subagent_tracker import AwaitableSession, Session, SubagentStatus


def test_events_follow_the_lifecycle_in_order() -> None:
    session = Session()

    async def main() -> list[tuple[str | None, str, SubagentStatus | None]]:
        before = session.start_subagent_task("before")
        events = session.events()  # the subscription starts here
        handle = session.start_subagent_task("a")
        handle.progress("reading")
        session.cancel_subagent_task("a", reason="stop")
        handle.complete()
        before.complete()
        seen: list[tuple[str | None, str, SubagentStatus | None]] = []
        async for event in events:
            seen.append((event.task_id, event.kind, event.status))
            if event.kind == "cancelled":
                assert event.reason == "stop"
            if event.kind == "progress":
                assert event.message == "reading"
            assert event.timestamp > 0
            if len(seen) == 5:
                break
        events.close()
        return seen

    assert asyncio.run(main()) == [
        ("a", "started", SubagentStatus.RUNNING),
        ("a", "progress", SubagentStatus.RUNNING),
        ("a", "cancelled", SubagentStatus.CANCELLED),
        ("a", "ended", SubagentStatus.CANCELLED),
        ("before", "ended", SubagentStatus.COMPLETED),
    ]


def test_an_awaited_session_s_subscription_starts_at_the_call_not_at_the_await() -> None:
    """``AwaitableSession.events()`` is awaited for its stream, but what happens between the call and the
    ``await`` is not missed; what happened before the call is not seen."""
    session = AwaitableSession(Session())

    async def main() -> list[tuple[str | None, str]]:
        await (await session.start_subagent_task("before")).complete()
        subscribing = session.events()
        await (await session.start_subagent_task("between")).complete()
        seen: list[tuple[str | None, str]] = []

        async def read() -> None:
            async with await subscribing as events:
                async for event in events:
                    seen.append((event.task_id, event.kind))
                    if event.kind == "ended":
                        break

        # A subscription made at the await would see nothing, and wait: the timeout fails the test instead.
        await asyncio.wait_for(read(), 5)
        return seen

    assert asyncio.run(main()) == [("between", "started"), ("between", "ended")]


def test_a_subscriber_awaiting_is_woken_by_events_from_another_thread() -> None:
    session = Session()

    async def main() -> list[str]:
        events = session.events()

        def produce() -> None:
            time.sleep(0.02)
            session.start_subagent_task("x").complete()

        thread = threading.Thread(target=produce)
        thread.start()
        kinds: list[str] = []
        async for event in events:
            kinds.append(event.kind)
            if event.kind == "ended":
                break
        thread.join()
        return kinds

    assert asyncio.run(asyncio.wait_for(main(), 5)) == ["started", "ended"]


def test_a_slow_subscriber_gets_one_lagged_event_and_producers_never_wait() -> None:
    session = Session(event_buffer=16)

    async def main() -> None:
        events = session.events()
        started = time.perf_counter()
        for index in range(1_000):
            session.start_subagent_task(f"t{index}").complete()
        assert time.perf_counter() - started < 5
        first = await events.__anext__()
        assert first.kind == "lagged"
        assert first.missed == 2_000 - 16
        assert first.task_id is None and first.status is None
        rest = [await events.__anext__() for _ in range(16)]
        assert [event.task_id for event in rest[-2:]] == ["t999", "t999"]
        assert events._subscription.try_next() is None
        events.close()

    asyncio.run(main())


def test_a_closed_stream_stops_iterating() -> None:
    session = Session()

    async def main() -> None:
        events = session.events()
        events.close()
        async for _ in events:
            raise AssertionError("a closed stream yields nothing")

    asyncio.run(main())


def test_a_task_that_starts_cancelled_reports_started_then_cancelled() -> None:
    session = Session()

    async def main() -> list[tuple[str, str | None]]:
        parent = session.start_subagent_task("parent")
        session.cancel_subagent_task("parent", reason="stop")
        events = session.events()
        child = session.start_subagent_task("child", parent_id="parent")
        seen: list[tuple[str, str | None]] = [
            (event.kind, event.reason) for event in [await events.__anext__(), await events.__anext__()]
        ]
        del parent, child
        return seen

    assert asyncio.run(main()) == [("started", "stop"), ("cancelled", "stop")]
