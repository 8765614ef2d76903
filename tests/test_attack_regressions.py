"""Regression tests for the 22 defects found under attack, numbered as in the report.

Anything that could crash or hang the interpreter runs in a child process of its own.
"""

from __future__ import annotations

import asyncio
import gc
import os
import subprocess
import sys
import textwrap
import threading
import time
import warnings
import weakref
from collections.abc import AsyncIterator
from typing import Any

import pytest

from subagent_tracker import (
    MAX_SECONDS,
    CancellationToken,
    Session,
    SubagentStatus,
    TaskCancelledError,
)


def run_child(code: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    """Runs `code` in a fresh interpreter and returns how it ended."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def assert_clean_exit(result: subprocess.CompletedProcess[str], expected_output: str = "ok") -> None:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:{result.stdout}\nstderr:{result.stderr}"
    assert expected_output in result.stdout, result.stdout


class Marker:
    """Something to hold a weak reference to, inside a cycle."""


# 1 ---------------------------------------------------------------------------------------------------------


def test_01_a_long_chain_of_linked_tasks_fires_without_recursion() -> None:
    result = run_child(
        """
        from subagent_tracker import Session
        session = Session(max_finished_tasks=100_000)
        handles = [session.start_subagent_task("t0")]
        for index in range(1, 20_000):
            handles.append(session.start_subagent_task(f"t{index}", linked=[handles[-1].token]))
        assert session.cancel_subagent_task("t0", reason="stop")
        assert all(handle.token.is_cancelled for handle in handles)
        assert session.subagent_task("t19999").cancel_cause == "linked"
        del handles
        print("ok")
        """
    )
    assert_clean_exit(result)


def test_01_deeply_nested_any_tokens_fire_and_drop_without_recursion() -> None:
    result = run_child(
        """
        import gc
        from subagent_tracker import CancellationToken, Session
        session = Session()
        root, other = session.start_subagent_task("root"), session.start_subagent_task("other")
        token = root.token
        for _ in range(20_000):
            token = CancellationToken.any(token, other.token)
        session.cancel_subagent_task("root")
        assert token.is_cancelled
        del token
        unfired = other.token
        for _ in range(20_000):
            unfired = CancellationToken.any(unfired)
        del unfired
        gc.collect()
        assert other.token.callback_count == 0
        print("ok")
        """
    )
    assert_clean_exit(result)


# 2 ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("attempt", range(3))
def test_02_exiting_while_deadlines_fire_with_callbacks_does_not_abort(attempt: int) -> None:
    result = run_child(
        """
        import time
        from subagent_tracker import Session
        session = Session()
        fired = []
        handles = []
        for index in range(2_000):
            handle = session.start_subagent_task(f"t{index}", timeout=(index % 50) / 1000)
            handle.token.on_cancel(lambda index=index: (fired.append(index), time.sleep(0.001)))
            handles.append(handle)
        time.sleep(0.02)
        print("ok")
        """
    )
    assert_clean_exit(result)


# 3 and 19 --------------------------------------------------------------------------------------------------


def test_03_a_huge_wait_timeout_is_refused_clearly_not_a_panic(session: Session) -> None:
    handle = session.start_subagent_task("a")
    token = handle.token
    with pytest.raises(ValueError, match="timeout"):
        token.wait(timeout=1e19)
    threading.Timer(0.05, session.cancel_subagent_task, args=("a",)).start()
    assert token.wait(timeout=MAX_SECONDS)  # the largest accepted timeout waits as long as it takes


def test_03_every_seconds_argument_keeps_one_rule(session: Session) -> None:
    waiting = session.start_subagent_task("w")
    for bad in (-1, float("nan"), float("inf"), MAX_SECONDS * 2, 10**400, -(10**400)):
        with pytest.raises(ValueError, match="timeout"):
            session.start_subagent_task("a", timeout=bad)
        with pytest.raises(ValueError, match="timeout"):
            waiting.token.wait(timeout=bad)
        with pytest.raises(ValueError, match="timeout"):
            asyncio.run(session.wait_subagent_task("w", timeout=bad))
    for bad_type in ("1", True, [1]):
        with pytest.raises(TypeError, match="timeout"):
            session.start_subagent_task("b", timeout=bad_type)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="deadline"):
        session.start_subagent_task("c", deadline=time.time() + MAX_SECONDS * 2)
    with pytest.raises(ValueError, match="deadline"):
        session.start_subagent_task("c", deadline=float("nan"))

    async def spawn_with(grace: float) -> None:
        async def work(handle: Any) -> None:
            return None

        session.spawn_subagent_task(work, "s", grace=grace)

    with pytest.raises(ValueError, match="grace"):
        asyncio.run(spawn_with(1e19))
    assert [task.task_id for task in session.subagent_tasks()] == ["w"], "a refused call left nothing behind"


def test_19_a_huge_timeout_is_refused_not_dropped(session: Session) -> None:
    with pytest.raises(ValueError, match="timeout"):
        session.start_subagent_task("a", timeout=1e19)
    with pytest.raises(ValueError, match="timeout") as raised:
        session.start_subagent_task("a", timeout=10**400)
    assert not isinstance(raised.value, OverflowError)
    assert session.subagent_task("a") is None
    handle = session.start_subagent_task("a", timeout=MAX_SECONDS)
    snapshot = handle.snapshot()
    assert snapshot.deadline is not None and snapshot.deadline > time.time() + MAX_SECONDS - 60


# 4 ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("from_thread", [False, True])
def test_04_closing_a_stream_ends_an_iteration_that_waits(session: Session, from_thread: bool) -> None:
    async def scenario() -> list[object]:
        stream = session.events()
        seen: list[object] = []

        async def iterate() -> None:
            async for event in stream:
                seen.append(event)

        iteration = asyncio.ensure_future(iterate())
        await asyncio.sleep(0.05)
        if from_thread:
            closer = threading.Thread(target=stream.close)
            closer.start()
            closer.join()
        else:
            stream.close()
        await asyncio.wait_for(iteration, 2)
        return seen

    assert asyncio.run(scenario()) == []


# 5 ---------------------------------------------------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_05_deadlines_fire_in_a_forked_child_and_still_in_the_parent() -> None:
    result = run_child(
        """
        import os, warnings
        warnings.simplefilter("ignore", DeprecationWarning)
        from subagent_tracker import Session
        session = Session()
        before = session.start_subagent_task("before-fork", timeout=0.3)
        pid = os.fork()
        if pid == 0:
            child = session.start_subagent_task("in-child", timeout=0.05)
            fired = child.token.wait(timeout=2) and before.token.wait(timeout=2)
            os._exit(0 if fired else 3)
        assert before.token.wait(timeout=2), "the parent's deadline did not fire"
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        print("ok")
        """
    )
    assert_clean_exit(result)


# 6 ---------------------------------------------------------------------------------------------------------


def test_06_a_slow_deadline_callback_delays_no_other_deadline() -> None:
    first, second = Session(), Session()
    slow = first.start_subagent_task("slow", timeout=0.05)
    callback_threads: list[str] = []

    def slow_callback() -> None:
        callback_threads.append(threading.current_thread().name)
        time.sleep(2)

    slow.token.on_cancel(slow_callback)
    started = time.monotonic()
    quick = second.start_subagent_task("quick", timeout=0.2)
    assert quick.token.wait(timeout=5)
    assert time.monotonic() - started < 1.0
    assert slow.token.wait(timeout=5)
    deadline = time.monotonic() + 5
    while not callback_threads and time.monotonic() < deadline:
        time.sleep(0.01)
    assert callback_threads and callback_threads[0] != "subagent-deadlines"


# 7 ---------------------------------------------------------------------------------------------------------


def test_07_a_callback_that_cancels_and_waits_on_a_loop_does_not_deadlock(session: Session) -> None:
    loop = asyncio.new_event_loop()
    loop_thread = threading.Thread(target=loop.run_forever, daemon=True)
    loop_thread.start()
    a = session.start_subagent_task("a")
    b = session.start_subagent_task("b")
    b_seen = threading.Event()

    async def wait_for_b() -> None:
        await b.token.cancelled()
        b_seen.set()

    asyncio.run_coroutine_threadsafe(wait_for_b(), loop)
    time.sleep(0.05)
    results: list[bool] = []

    def on_a_cancelled() -> None:
        session.cancel_subagent_task("b")
        results.append(b_seen.wait(3))

    a.token.on_cancel(on_a_cancelled)
    try:
        assert session.cancel_subagent_task("a")
        assert results == [True]
    finally:
        loop.call_soon_threadsafe(loop.stop)
        loop_thread.join(5)
        loop.close()


# 8 ---------------------------------------------------------------------------------------------------------


def test_08_a_second_concurrent_iterator_is_refused_clearly(session: Session) -> None:
    async def scenario() -> str:
        stream = session.events()
        first = asyncio.ensure_future(stream.__anext__())
        await asyncio.sleep(0.01)
        with pytest.raises(RuntimeError, match="already being iterated") as refused:
            await stream.__anext__()
        session.start_subagent_task("a").complete()
        event = await asyncio.wait_for(first, 2)
        assert event.kind == "started"
        second = await asyncio.wait_for(stream.__anext__(), 2)
        assert second.kind == "ended"
        stream.close()
        return str(refused.value)

    assert "already" in asyncio.run(scenario())


# 9 ---------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("from_thread", [False, True])
def test_09_a_waiter_resolved_or_cancelled_by_its_caller_stops_no_other(
    session: Session, from_thread: bool
) -> None:
    async def scenario() -> None:
        handle = session.start_subagent_task("a")
        futures = [handle.token.cancelled() for _ in range(6)]
        futures[1].set_result(None)
        futures[3].cancel()
        await asyncio.sleep(0)
        if from_thread:
            canceller = threading.Thread(target=session.cancel_subagent_task, args=("a",))
            canceller.start()
            canceller.join()
        else:
            session.cancel_subagent_task("a")
        others = [future for index, future in enumerate(futures) if index not in (1, 3)]
        await asyncio.wait_for(asyncio.gather(*others), 2)

    asyncio.run(scenario())


# 10 --------------------------------------------------------------------------------------------------------


def test_10_a_task_linked_to_an_unkept_any_token_is_cancelled(session: Session) -> None:
    stop = session.start_subagent_task("stop")
    budget = session.start_subagent_task("budget")
    job = session.start_subagent_task("job", linked=[CancellationToken.any(stop.token, budget.token)])
    gc.collect()
    assert session.cancel_subagent_task("stop", reason="user pressed stop")
    snapshot = job.snapshot()
    assert snapshot.status == SubagentStatus.CANCELLED
    assert (snapshot.cancel_cause, snapshot.cancel_reason) == ("linked", "user pressed stop")


# 11 --------------------------------------------------------------------------------------------------------


def test_11_a_cancel_reaches_a_grandchild_through_a_finished_parent(session: Session) -> None:
    a = session.start_subagent_task("a")
    b = session.start_subagent_task("b", parent_id="a")
    c = session.start_subagent_task("c", parent_id="b")
    assert b.complete()
    assert session.cancel_subagent_task("a")
    snapshot = c.snapshot()
    assert (snapshot.status, snapshot.cancel_origin, snapshot.cancel_cause) == (
        SubagentStatus.CANCELLED,
        "a",
        "parent",
    )
    del a


# 12 --------------------------------------------------------------------------------------------------------


class BadStrError(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text for you")


def test_12_an_exception_whose_str_raises_still_fails_the_task(session: Session) -> None:
    with pytest.raises(BadStrError), session.start_subagent_task("sync"):
        raise BadStrError

    async def scenario() -> None:
        async with session.start_subagent_task("async"):
            raise BadStrError

    with pytest.raises(BadStrError):
        asyncio.run(scenario())
    for task_id in ("sync", "async"):
        snapshot = session.subagent_task(task_id)
        assert snapshot is not None and snapshot.status == SubagentStatus.FAILED
        assert snapshot.error is not None and "BadStrError" in snapshot.error


# 13 --------------------------------------------------------------------------------------------------------


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_13_a_long_agent_loop_of_waits_leaves_nothing_behind(session: Session) -> None:
    handle = session.start_subagent_task("agent")
    token = handle.token

    async def tool() -> int:
        return 1

    async def chunks() -> AsyncIterator[int]:
        yield 1

    async def loop(iterations: int) -> None:
        for _ in range(iterations):
            await token.run(tool())
            async for _chunk in token.guard(chunks()):
                pass
            token.wait(timeout=0)

    async def measure() -> tuple[int, int, int, int]:
        await loop(5_000)
        gc.collect()
        objects, rss = len(gc.get_objects()), _rss_bytes()
        await loop(25_000)
        gc.collect()
        return objects, rss, len(gc.get_objects()), _rss_bytes()

    # 30,000 iterations of three waits each (90,000 registrations) keep the test within seconds.
    objects_before, rss_before, objects_after, rss_after = asyncio.run(measure())
    assert objects_after - objects_before < 1_000
    assert rss_after - rss_before < 5 * 1024 * 1024
    assert token.callback_count == 0


# 14 --------------------------------------------------------------------------------------------------------


def _collected(reference: weakref.ref[Marker]) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gc.collect()
        gc.collect()
    return reference() is None


def test_14_a_session_reachable_from_metadata_is_collected() -> None:
    session = Session()
    marker = Marker()
    session.start_subagent_task("a", metadata={"session": session, "marker": marker}).complete()
    reference = weakref.ref(marker)
    del session, marker
    assert _collected(reference)


def test_14_an_owner_whose_bound_method_is_a_callback_is_collected(session: Session) -> None:
    class Owner:
        def __init__(self) -> None:
            self.marker = Marker()
            self.handle = session.start_subagent_task("owned")
            self.handle.token.on_cancel(self.stop)

        def stop(self) -> None:
            pass

    owner = Owner()
    reference = weakref.ref(owner.marker)
    del owner
    assert _collected(reference)
    snapshot = session.subagent_task("owned")
    assert snapshot is not None and snapshot.status == SubagentStatus.FAILED


def test_14_a_result_that_holds_its_session_is_collected() -> None:
    session = Session()
    marker = Marker()
    session.start_subagent_task("a").complete(result=[session, marker])
    reference = weakref.ref(marker)
    del session, marker
    assert _collected(reference)


def test_14_a_combined_token_whose_callback_holds_it_is_collected(session: Session) -> None:
    source = session.start_subagent_task("source")

    class Holder:
        def __init__(self) -> None:
            self.marker = Marker()
            self.token = CancellationToken.any(source.token)
            self.token.on_cancel(self.stop)

        def stop(self) -> None:
            pass

    holder = Holder()
    reference = weakref.ref(holder.marker)
    del holder
    assert _collected(reference)
    assert source.token.callback_count == 0


def test_14_a_watch_and_a_snapshot_in_a_cycle_are_collected() -> None:
    session = Session()
    marker = Marker()
    handle = session.start_subagent_task("a", metadata={"marker": marker})
    box: list[object] = [handle.snapshot(), session._watch("a")]
    box.append(box)
    handle.complete(result=box)
    reference = weakref.ref(marker)
    del session, marker, handle, box
    assert _collected(reference)


# 15 --------------------------------------------------------------------------------------------------------


def test_15_nested_any_tokens_build_no_growing_id(session: Session) -> None:
    token = session.start_subagent_task("a").token
    began = time.monotonic()
    for _ in range(2_000):
        token = CancellationToken.any(token)
    assert time.monotonic() - began < 1.0
    assert token.task_id is None
    assert len(repr(token)) < 200


# 16 --------------------------------------------------------------------------------------------------------


def test_16_restarting_a_finished_id_evicts_no_other_task() -> None:
    session = Session(max_finished_tasks=3)
    for task_id in ("a", "b", "c"):
        session.start_subagent_task(task_id).complete()
    for _ in range(5):
        session.start_subagent_task("a").complete()
    assert [task.task_id for task in session.subagent_tasks()] == ["b", "c", "a"]


# 17 --------------------------------------------------------------------------------------------------------


def test_17_an_any_token_that_fires_at_once_registers_nowhere(session: Session) -> None:
    a = session.start_subagent_task("a")
    b = session.start_subagent_task("b")
    session.cancel_subagent_task("a", reason="early")
    combined = CancellationToken.any(a.token, b.token)
    assert combined.is_cancelled and combined.reason == "early"
    assert b.token.callback_count == 0


# 18 --------------------------------------------------------------------------------------------------------


def test_18_a_past_deadline_shows_as_given(session: Session) -> None:
    deadline = time.time() - 10
    snapshot = session.start_subagent_task("late", deadline=deadline).snapshot()
    assert snapshot.deadline is not None and abs(snapshot.deadline - deadline) < 0.05
    assert (snapshot.status, snapshot.cancel_cause) == (SubagentStatus.CANCELLED, "deadline")


# 20 --------------------------------------------------------------------------------------------------------


def test_20_spawning_outside_a_loop_leaves_no_task(session: Session) -> None:
    async def work(handle: Any) -> None:
        return None

    with pytest.raises(RuntimeError):
        session.spawn_subagent_task(work, "x")
    assert session.subagent_task("x") is None
    session.start_subagent_task("x").complete()


# 21 --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, SystemExit])
def test_21_an_interrupt_in_a_callback_is_raised_after_the_others_run(
    session: Session, interrupt: type[BaseException]
) -> None:
    handle = session.start_subagent_task("a")
    ran: list[str] = []

    def interrupting() -> None:
        ran.append("interrupting")
        raise interrupt

    handle.token.on_cancel(interrupting)
    handle.token.on_cancel(lambda: ran.append("after"))
    with pytest.raises(interrupt):
        session.cancel_subagent_task("a")
    assert ran == ["interrupting", "after"]
    assert handle.snapshot().status == SubagentStatus.CANCELLED


# 22 --------------------------------------------------------------------------------------------------------


def test_22_nested_metadata_cannot_change_through_a_snapshot(session: Session) -> None:
    original: dict[str, Any] = {"a": {"b": [1, 2]}, "c": {1, 2}}
    snapshot = session.start_subagent_task("a", metadata=original).snapshot()
    metadata = snapshot.metadata
    assert metadata is not None
    with pytest.raises(TypeError):
        metadata["a"]["x"] = 1
    assert metadata["a"]["b"] == (1, 2)
    assert metadata["c"] == frozenset({1, 2})
    original["a"]["b"].append(3)
    original["a"]["new"] = True
    later = session.subagent_task("a")
    assert later is not None and later.metadata == {"a": {"b": (1, 2)}, "c": frozenset({1, 2})}


def test_cancelled_error_of_a_combined_token_names_the_task_that_fired_it(session: Session) -> None:
    source = session.start_subagent_task("source")
    combined = CancellationToken.any(source.token)
    session.cancel_subagent_task("source", reason="stop")
    with pytest.raises(TaskCancelledError) as raised:
        combined.raise_if_cancelled()
    assert (raised.value.task_id, raised.value.reason) == ("source", "stop")
