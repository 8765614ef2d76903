"""Hostile conditions in process: deep chains that must not recurse, huge and bad times, fork, interpreter
exit, callbacks that block, raise or cancel others, reference cycles through tasks (each once a defect found
by a hostile review, one or more tests per defect).

Each test names its defect ("Defect N"). Anything that could crash or hang the interpreter runs in a child
process, so that a regression shows up as a failing test rather than a dead test run.
"""

from __future__ import annotations

import asyncio
import gc
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import textwrap
import threading
import time
import warnings
import weakref
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

import pytest

import subagent_tracker
from subagent_tracker import (
    MAX_SECONDS,
    CancellationToken,
    Session,
    SubagentStatus,
    SubagentTaskHandle,
    TaskCancelledError,
)

# --- helpers


def _run_child(code: str, timeout: float = 20.0) -> subprocess.CompletedProcess[str]:
    """Runs ``code`` in a fresh interpreter; returns the finished process (stdout and stderr as text)."""
    return subprocess.run(
        [sys.executable, "-W", "ignore", "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _describe(finished: subprocess.CompletedProcess[str]) -> str:
    stdout, stderr = finished.stdout[-2000:], finished.stderr[-2000:]
    return f"returncode={finished.returncode}\nstdout={stdout}\nstderr={stderr}"


def _assert_child_ok(finished: subprocess.CompletedProcess[str], expected_stdout: str) -> None:
    assert finished.returncode == 0, _describe(finished)
    assert expected_stdout in finished.stdout, _describe(finished)


class Marker:
    """An object to watch through a weak reference: it dies with the cycle that holds it."""


class Holder:
    """A plain object that takes part in reference cycles."""

    marker: Marker
    token: CancellationToken
    snapshot: Any

    def method(self) -> None:
        pass


# --- Defect 1: firing (and dropping) never recurses


_LINKED_CHAIN = """
import sys, threading
from subagent_tracker import Session

def main():
    session = Session(max_finished_tasks=100_000)
    handles = [session.start_subagent_task("t0")]
    for index in range(1, 5_000):
        handles.append(session.start_subagent_task(f"t{index}", linked=[handles[-1].token]))
    session.cancel_subagent_task("t0", reason="stop the chain")
    snapshots = [handle.snapshot() for handle in handles]
    assert all(s.status.value == "cancelled" for s in snapshots), "not every task of the chain was cancelled"
    assert all(s.cancel_cause == "linked" for s in snapshots[1:]), {s.cancel_cause for s in snapshots[1:]}
    assert snapshots[0].cancel_cause == "requested", snapshots[0].cancel_cause
    print("chain ok")

if sys.argv[1] == "thread":
    threading.stack_size(1 << 20)  # a recursive fire overflows a 1 MiB stack long before depth 5,000
    thread = threading.Thread(target=main)
    thread.start()
    thread.join()
else:
    main()
"""

_NESTED_ANY = """
import gc, sys, threading
from subagent_tracker import CancellationToken, Session

def build(session, name):
    first = session.start_subagent_task(name)
    other = session.start_subagent_task(name + "-other")
    token = first.token
    for _ in range(5_000):
        token = CancellationToken.any(token, other.token)
    return first, other, token

def main():
    session = Session()
    first, other, token = build(session, "fired")
    session.cancel_subagent_task("fired", reason="stop the chain")
    assert token.is_cancelled, "the outermost any() did not fire"
    assert token.reason == "stop the chain", token.reason
    del token
    gc.collect()
    first, other, token = build(session, "dropped")
    assert not token.is_cancelled
    del token
    gc.collect()
    assert first.token.callback_count == 0, first.token.callback_count
    assert other.token.callback_count == 0, other.token.callback_count
    print("nested ok")

if sys.argv[1] == "thread":
    threading.stack_size(1 << 20)
    thread = threading.Thread(target=main)
    thread.start()
    thread.join()
else:
    main()
"""


@pytest.mark.parametrize("where", ["main", "thread"])
def test_cancelling_a_long_chain_of_linked_tasks_does_not_recurse(where: str) -> None:
    """Defect 1(a): 5,000 tasks each linked to the previous one; cancelling the first cancels them all."""
    finished = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", _LINKED_CHAIN, where],
        capture_output=True,
        text=True,
        timeout=30,
    )
    _assert_child_ok(finished, "chain ok")


@pytest.mark.parametrize("where", ["main", "thread"])
def test_firing_and_dropping_deeply_nested_any_tokens_does_not_recurse(where: str) -> None:
    """Defect 1(b): any(any(any(t0, o), o), o) 5,000 deep fires from t0 and is dropped without a crash."""
    finished = subprocess.run(
        [sys.executable, "-W", "ignore", "-c", _NESTED_ANY, where], capture_output=True, text=True, timeout=30
    )
    _assert_child_ok(finished, "nested ok")


# --- Defect 2: interpreter exit while deadlines fire and sync callbacks run


def test_exiting_while_deadlines_fire_and_callbacks_run_is_clean() -> None:
    """Defect 2: 2,000 deadlines over 0-50 ms with slow-ish sync callbacks; the interpreter exits at 20 ms."""
    code = """
    import time
    from subagent_tracker import Session

    session = Session()
    seen = []

    def make(index):
        def callback():
            seen.append(index)
            sum(range(200))
            time.sleep(0.001)
        return callback

    handles = []
    for index in range(2_000):
        handle = session.start_subagent_task(f"t{index}", timeout=(index % 51) / 1000)
        handle.token.on_cancel(make(index))
        handles.append(handle)
    time.sleep(0.02)
    print("exiting", flush=True)
    """
    for _ in range(3):
        finished = _run_child(code, timeout=30)
        _assert_child_ok(finished, "exiting")
        assert "Fatal Python error" not in finished.stderr, finished.stderr
        assert "panicked" not in finished.stderr, finished.stderr


# --- Defects 3 and 19: one rule for every argument in seconds


async def _noop(handle: SubagentTaskHandle) -> None:
    return None


def _value_id(value: object) -> str:
    """A short test id: 10**400 would otherwise spell out 401 digits."""
    if isinstance(value, type):
        return value.__name__
    text = repr(value)
    return text if len(text) <= 20 else f"{text[:8]}...({len(text)} chars)"


BAD_SECONDS: list[tuple[Any, type[Exception]]] = [
    (-1, ValueError),
    (-0.001, ValueError),
    (float("nan"), ValueError),
    (float("inf"), ValueError),
    (float("-inf"), ValueError),
    (MAX_SECONDS * 2, ValueError),
    (MAX_SECONDS + 1, ValueError),
    (1e19, ValueError),
    (2**64, ValueError),
    (10**400, ValueError),
    (-(10**400), ValueError),
    ("1", TypeError),
    (True, TypeError),
    (False, TypeError),
    (object(), TypeError),
    ([1], TypeError),
]

GOOD_SECONDS: list[Any] = [None, 0, 0.0, 1, 0.25, MAX_SECONDS, int(MAX_SECONDS)]


def _seconds_call(kind: str) -> tuple[str, Callable[[Session, Any], object]]:
    """The argument's name, and a call that passes a value as that argument (task "t" exists, finished)."""

    def start(session: Session, value: Any) -> object:
        return session.start_subagent_task("x", timeout=value)

    def token_wait(session: Session, value: Any) -> object:
        handle = session.start_subagent_task("w")
        # Bounds the wait should a bad value be taken for a long timeout.
        safety = threading.Timer(0.5, session.cancel_subagent_task, args=("w",))
        safety.start()
        try:
            return handle.token.wait(timeout=value)
        finally:
            safety.cancel()
            handle.complete()

    def wait_task(session: Session, value: Any) -> object:
        return asyncio.run(session.wait_subagent_task("t", timeout=value))

    def spawn(keyword: str) -> Callable[[Session, Any], object]:
        def call(session: Session, value: Any) -> object:
            async def main() -> object:
                spawned = session.spawn_subagent_task(_noop, "x", **{keyword: value})
                return await spawned

            return asyncio.run(main())

        return call

    calls: dict[str, tuple[str, Callable[[Session, Any], object]]] = {
        "start timeout": ("timeout", start),
        "token.wait timeout": ("timeout", token_wait),
        "wait_subagent_task timeout": ("timeout", wait_task),
        "spawn grace": ("grace", spawn("grace")),
        "spawn timeout": ("timeout", spawn("timeout")),
    }
    return calls[kind]


SECONDS_CALLS = [
    "start timeout",
    "token.wait timeout",
    "wait_subagent_task timeout",
    "spawn grace",
    "spawn timeout",
]


def test_max_seconds_is_a_public_constant_of_a_billion_seconds() -> None:
    """Defect 3: ``MAX_SECONDS`` is public and is 1e9."""
    import subagent_tracker

    assert "MAX_SECONDS" in subagent_tracker.__all__
    assert MAX_SECONDS == 1e9


def test_token_wait_with_a_huge_timeout_does_not_panic(session: Session) -> None:
    """Defect 3: ``token.wait(timeout=1e19)`` raises ValueError naming the argument (it used to panic)."""
    handle = session.start_subagent_task("a")
    safety = threading.Timer(0.5, session.cancel_subagent_task, args=("a",))  # bounds a wrongly taken wait
    safety.start()
    try:
        with pytest.raises(ValueError, match="timeout"):
            handle.token.wait(timeout=1e19)
    finally:
        safety.cancel()
    session.cancel_subagent_task("a")
    with pytest.raises(ValueError, match="timeout"):
        handle.token.wait(timeout=1e19)


@pytest.mark.parametrize("kind", SECONDS_CALLS)
@pytest.mark.parametrize(("value", "error"), BAD_SECONDS, ids=_value_id)
def test_bad_seconds_are_rejected_by_every_call(kind: str, value: Any, error: type[Exception]) -> None:
    """Defect 3: a bad duration is a ValueError or TypeError naming the argument; never Overflow/Panic."""
    session = Session()
    session.start_subagent_task("t").complete()
    name, call = _seconds_call(kind)
    with pytest.raises(error, match=name) as raised:
        call(session, value)
    assert not isinstance(raised.value, OverflowError)
    assert session.subagent_task("x") is None, "a rejected call left a task behind"
    session.start_subagent_task("x").complete()


@pytest.mark.parametrize("kind", SECONDS_CALLS)
@pytest.mark.parametrize("value", GOOD_SECONDS, ids=_value_id)
def test_good_seconds_are_accepted_by_every_call(kind: str, value: Any) -> None:
    """Defect 3: None, zero and anything up to MAX_SECONDS (int or float) is accepted."""
    if value is None and kind == "spawn grace":
        pytest.skip("grace has a default and no 'no limit' spelling")
    session = Session()
    session.start_subagent_task("t").complete()
    _, call = _seconds_call(kind)
    if kind == "token.wait timeout":
        handle = session.start_subagent_task("c")
        session.cancel_subagent_task("c")
        assert handle.token.wait(timeout=value) is True
        return
    result = call(session, value)
    if isinstance(result, SubagentTaskHandle):
        result.complete()


def test_the_largest_timeout_is_a_real_deadline_and_a_real_wait(session: Session) -> None:
    """Defect 3: ``MAX_SECONDS`` itself is accepted: a deadline that far ahead, a wait that long."""
    handle = session.start_subagent_task("far", timeout=MAX_SECONDS)
    deadline = handle.snapshot().deadline
    assert deadline is not None and deadline > time.time() + MAX_SECONDS - 60
    waiter = session.start_subagent_task("w")
    timer = threading.Timer(0.05, session.cancel_subagent_task, args=("w",))
    timer.start()
    try:
        assert waiter.token.wait(timeout=MAX_SECONDS) is True
    finally:
        timer.join()
    handle.complete()


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (float("nan"), ValueError),
        (float("inf"), ValueError),
        (float("-inf"), ValueError),
        (1e19, ValueError),
        (10**400, ValueError),
        ("tomorrow", TypeError),
        (object(), TypeError),
    ],
    ids=_value_id,
)
def test_bad_deadlines_are_rejected(session: Session, value: Any, error: type[Exception]) -> None:
    """Defect 3: ``deadline=`` is finite and no more than MAX_SECONDS ahead; the error names "deadline"."""
    with pytest.raises(error, match="deadline") as raised:
        session.start_subagent_task("x", deadline=value)
    assert not isinstance(raised.value, OverflowError)
    assert session.subagent_task("x") is None


def test_a_deadline_too_far_ahead_is_rejected_and_one_just_inside_is_accepted(session: Session) -> None:
    """Defect 3: at most MAX_SECONDS in the future."""
    with pytest.raises(ValueError, match="deadline"):
        session.start_subagent_task("x", deadline=time.time() + MAX_SECONDS * 2)
    assert session.subagent_task("x") is None
    handle = session.start_subagent_task("x", deadline=time.time() + MAX_SECONDS - 3600)
    assert not handle.token.is_cancelled
    handle.complete()


@pytest.mark.parametrize("value", [0, 0.0, -1.0, 1.5, -1e300], ids=_value_id)
def test_a_deadline_in_the_past_is_accepted_and_cancels_at_start(session: Session, value: float) -> None:
    """Defect 3: any finite deadline in the past is accepted; the task starts cancelled by its deadline."""
    handle = session.start_subagent_task("x", deadline=value)
    snapshot = handle.snapshot()
    assert snapshot.status is SubagentStatus.CANCELLED
    assert snapshot.cancel_cause == "deadline"


def test_a_timeout_of_1e19_is_rejected_not_dropped(session: Session) -> None:
    """Defect 19: ``timeout=1e19`` raises ValueError naming "timeout" (it used to give no deadline at all)."""
    with pytest.raises(ValueError, match="timeout"):
        session.start_subagent_task("x", timeout=1e19)
    assert session.subagent_task("x") is None


def test_a_timeout_too_big_for_a_float_is_a_value_error(session: Session) -> None:
    """Defect 19: ``timeout=10**400`` raises ValueError naming "timeout", not OverflowError."""
    with pytest.raises(ValueError, match="timeout") as raised:
        session.start_subagent_task("x", timeout=10**400)
    assert not isinstance(raised.value, OverflowError)
    assert session.subagent_task("x") is None


# --- Defect 4: EventStream.close() ends an iteration that is waiting


@pytest.mark.parametrize("closer", ["same loop", "other thread"])
def test_closing_an_event_stream_ends_a_waiting_async_for(session: Session, closer: str) -> None:
    """Defect 4: close() from another coroutine or another thread ends ``async for`` within ~1 s."""

    async def main() -> None:
        stream = session.events()
        received: list[str] = []
        first = asyncio.Event()

        async def consume() -> str:
            async for event in stream:
                received.append(event.kind)
                first.set()
            return "ended"

        consumer = asyncio.ensure_future(consume())
        session.start_subagent_task("a").complete()
        await asyncio.wait_for(first.wait(), 2)
        await asyncio.sleep(0.05)  # the consumer is now waiting for an event that never comes
        assert not consumer.done()
        closed_at = time.perf_counter()
        if closer == "same loop":
            stream.close()
        else:
            thread = threading.Thread(target=stream.close)
            thread.start()
            thread.join()
        assert await asyncio.wait_for(consumer, 1.0) == "ended"
        assert time.perf_counter() - closed_at < 1.0
        assert received[0] == "started"

    asyncio.run(main())


# --- Defect 5: deadlines after os.fork()


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_deadlines_fire_in_a_forked_child_and_still_in_the_parent() -> None:
    """Defect 5: a deadline armed in a forked child fires there; one armed before the fork fires in the
    parent (and, inherited, in the child).

    The fork happens in a child interpreter of its own, so pytest itself is never forked.
    """
    code = """
    import os, signal, time
    from subagent_tracker import Session

    session = Session()
    before_fork = session.start_subagent_task("before-fork", timeout=0.3)
    pid = os.fork()
    if pid == 0:
        signal.alarm(5)  # a hung child dies instead of lingering
        code = 0
        try:
            in_child = session.start_subagent_task("in-child", timeout=0.05)
            if not in_child.token.wait(timeout=2):
                code = 3
            elif not before_fork.token.wait(timeout=2):
                code = 4
        except BaseException:
            code = 5
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    child = os.waitstatus_to_exitcode(status)
    parent = before_fork.token.wait(timeout=2)
    print(f"child={child} parent={parent}")
    """
    finished = _run_child(code, timeout=15)
    assert finished.returncode == 0, _describe(finished)
    # child=3: the child's own deadline never fired; child=4: an inherited deadline never fired in the child.
    assert "child=0 parent=True" in finished.stdout, _describe(finished)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_delivers_deadlines_though_the_parent_had_delivery_threads() -> None:
    """The parent's deadlines ran on the delivery pool's threads before the fork (issue 30, defect 9): the
    child has none of them, and its own deadlines still wake their waiters and run their callbacks."""
    code = """
    import os, signal, threading
    from subagent_tracker import Session

    session = Session()
    fired = session.start_subagent_task("in-parent", timeout=0.01)
    assert fired.token.wait(timeout=2)  # the pool has a thread now, idle
    pid = os.fork()
    if pid == 0:
        signal.alarm(5)  # a hung child dies instead of lingering
        code = 0
        try:
            ran = threading.Event()
            in_child = session.start_subagent_task("in-child", timeout=0.05)
            in_child.token.on_cancel(ran.set)
            if not in_child.token.wait(timeout=2):
                code = 3
            elif not ran.wait(timeout=2):
                code = 4
        except BaseException:
            code = 5
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    print(f"child={os.waitstatus_to_exitcode(status)}")
    """
    finished = _run_child(code, timeout=15)
    assert finished.returncode == 0, _describe(finished)
    # child=3: the waiter never woke; child=4: the callback never ran.
    assert "child=0" in finished.stdout, _describe(finished)


# --- Defect 6: a slow callback delays no other deadline, and user code never runs on the timer


def _os_thread_name() -> str:
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/comm") as comm:
            return comm.read().strip()
    except OSError:
        return ""


@pytest.mark.parametrize("what_b_owes", ["its cancel", "its callback"])
def test_a_slow_deadline_callback_delays_no_other_deadline(what_b_owes: str) -> None:
    """Defect 6: task A's deadline callback blocks for up to 2 s; task B's deadline (in another session)
    still cancels B on time, and the callback B's deadline owes is not queued behind A's either."""
    release = threading.Event()
    slow_started = threading.Event()
    b_done = threading.Event()

    def slow() -> None:
        slow_started.set()
        release.wait(2)

    first, second = Session("one"), Session("two")
    try:
        started = time.perf_counter()
        a = first.start_subagent_task("a", timeout=0.05)
        a.token.on_cancel(slow)
        b = second.start_subagent_task("b", timeout=0.2)
        b.token.on_cancel(b_done.set)
        assert slow_started.wait(1), "A's deadline callback never ran"
        if what_b_owes == "its cancel":
            assert b.token.wait(timeout=2) is True
            assert b.snapshot().cancel_cause == "deadline"
        else:
            assert b_done.wait(2), "B's callback never ran"
        elapsed = time.perf_counter() - started
        assert elapsed < 0.6, f"{what_b_owes} came {elapsed:.2f} s after start"
    finally:
        release.set()


def test_deadline_callbacks_never_run_on_the_timer_thread(session: Session) -> None:
    """Defect 6: a deadline-fired callback runs on a thread other than "subagent-deadlines"."""
    names: list[tuple[str, str]] = []
    ran = threading.Event()

    def record() -> None:
        names.append((threading.current_thread().name, _os_thread_name()))
        ran.set()

    handle = session.start_subagent_task("a", timeout=0.02)
    handle.token.on_cancel(record)
    assert ran.wait(2), "the deadline callback never ran"
    python_name, os_name = names[0]
    assert python_name != "subagent-deadlines"
    # The OS truncates thread names to 15 bytes: "subagent-deadli".
    assert not os_name.startswith("subagent-deadli"), os_name


# --- Defect 7: a callback that cancels another task and waits for its waiter


def test_a_callback_that_cancels_and_waits_for_another_tasks_waiter_does_not_deadlock() -> None:
    """Defect 7: A's sync callback cancels B and waits for a coroutine awaiting B's token on a loop thread."""
    code = """
    import asyncio, threading, time
    from subagent_tracker import Session

    session = Session()
    a = session.start_subagent_task("a")
    b = session.start_subagent_task("b")
    b_seen = threading.Event()
    waiting = threading.Event()
    loop = asyncio.new_event_loop()

    async def watch_b():
        cancelled = b.token.cancelled()
        waiting.set()
        await cancelled
        b_seen.set()

    thread = threading.Thread(target=loop.run_until_complete, args=(watch_b(),), daemon=True)
    thread.start()
    assert waiting.wait(5)
    results = []

    def callback():
        session.cancel_subagent_task("b")
        results.append(b_seen.wait(3))

    a.token.on_cancel(callback)
    started = time.monotonic()
    session.cancel_subagent_task("a")
    thread.join(5)
    print(f"results={results} elapsed={time.monotonic() - started:.2f}")
    print("fast" if time.monotonic() - started < 2.5 else "slow")
    """
    finished = _run_child(code, timeout=10)
    _assert_child_ok(finished, "results=[True]")
    assert "fast" in finished.stdout, _describe(finished)


# --- Defect 8: one coroutine iterates a stream at a time


def test_a_second_concurrent_iteration_of_one_stream_is_refused(session: Session) -> None:
    """Defect 8: a concurrent ``__anext__`` raises RuntimeError; iteration by one coroutine then goes on."""

    async def main() -> None:
        stream = session.events()
        first = asyncio.ensure_future(stream.__anext__())
        await asyncio.sleep(0.02)  # the first iteration is now waiting
        assert not first.done()
        with pytest.raises(RuntimeError, match="already being iterated"):
            await asyncio.wait_for(stream.__anext__(), 1)
        with pytest.raises(RuntimeError, match="already being iterated"):
            await asyncio.wait_for(stream.__anext__(), 1)  # the refused call did not take the stream over
        handles = [session.start_subagent_task("x")]
        event = await asyncio.wait_for(first, 1)
        assert (event.task_id, event.kind) == ("x", "started")
        handles.append(session.start_subagent_task("y"))
        event = await asyncio.wait_for(stream.__anext__(), 1)
        assert (event.task_id, event.kind) == ("y", "started")
        handles.append(session.start_subagent_task("z"))
        async for event in stream:
            assert (event.task_id, event.kind) == ("z", "started")
            break
        stream.close()
        for handle in handles:
            handle.complete()

    asyncio.run(main())


def test_two_async_for_loops_over_one_stream(session: Session) -> None:
    """Defect 8: the second ``async for`` over one stream fails with RuntimeError, the first is unharmed."""

    async def main() -> None:
        stream = session.events()
        seen: list[str | None] = []

        async def consume() -> None:
            async for event in stream:
                seen.append(event.task_id)
                if len(seen) == 2:
                    return

        consumers = [asyncio.ensure_future(consume()), asyncio.ensure_future(consume())]
        await asyncio.sleep(0.02)
        done = [consumer for consumer in consumers if consumer.done()]
        assert len(done) == 1
        error = done[0].exception()
        assert isinstance(error, RuntimeError) and "already being iterated" in str(error)
        session.start_subagent_task("p").complete()
        await asyncio.wait_for(asyncio.gather(*(c for c in consumers if c not in done)), 1)
        assert seen == ["p", "p"]
        stream.close()

    asyncio.run(main())


# --- Defect 9: a caller-resolved or caller-cancelled cancelled() future breaks no other


@pytest.mark.parametrize("canceller", ["loop thread", "other thread"])
def test_resolving_or_cancelling_one_cancelled_future_spares_the_others(
    session: Session, canceller: str
) -> None:
    """Defect 9: several ``token.cancelled()`` futures of one token on one loop; two are settled by the
    caller; a cancel still completes every other one."""
    handle = session.start_subagent_task("a")

    async def main() -> None:
        futures = [handle.token.cancelled() for _ in range(6)]
        assert len({id(future) for future in futures}) == len(futures), "each call gives a future of its own"
        futures[1].set_result(None)
        futures[3].cancel()
        await asyncio.sleep(0)
        if canceller == "loop thread":
            session.cancel_subagent_task("a")
        else:
            thread = threading.Thread(target=session.cancel_subagent_task, args=("a",))
            thread.start()
            thread.join()
        others = [future for index, future in enumerate(futures) if index not in (1, 3)]
        await asyncio.wait_for(asyncio.gather(*others), 2)
        assert all(future.done() and not future.cancelled() for future in others)

    asyncio.run(main())


# --- Defect 10: an unkept any() passed as a link stays alive


def test_an_unkept_any_token_passed_as_a_link_still_cancels(session: Session) -> None:
    """Defect 10: ``linked=[CancellationToken.any(stop, budget)]`` works without keeping the any-token."""
    stop = session.start_subagent_task("stop")
    budget = session.start_subagent_task("budget")
    job = session.start_subagent_task("job", linked=[CancellationToken.any(stop.token, budget.token)])
    gc.collect()
    session.cancel_subagent_task("stop", reason="user pressed stop")
    snapshot = job.snapshot()
    assert snapshot.status is SubagentStatus.CANCELLED
    assert snapshot.cancel_cause == "linked"
    assert snapshot.cancel_reason == "user pressed stop"


# --- Defect 11: a cascade passes through a finished middle task


def test_a_cascade_reaches_a_grandchild_through_a_completed_child(session: Session) -> None:
    """Defect 11: a -> b -> c; b completes while c runs; cancelling a cancels c (origin a, cause parent)."""
    a = session.start_subagent_task("a")
    b = session.start_subagent_task("b", parent_id="a")
    c = session.start_subagent_task("c", parent_id="b")
    b.complete()
    session.cancel_subagent_task("a", reason="stop all")
    assert a.token.is_cancelled
    snapshot = c.snapshot()
    assert snapshot.status is SubagentStatus.CANCELLED
    assert (snapshot.cancel_origin, snapshot.cancel_cause) == ("a", "parent")
    assert b.snapshot().status is SubagentStatus.COMPLETED


# --- Defect 12: an exception whose __str__ raises


class BadStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str for you")


class BadStrAndRepr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no str for you")

    def __repr__(self) -> str:
        raise RuntimeError("no repr either")


@pytest.mark.parametrize("error", [BadStr, BadStrAndRepr])
def test_leaving_with_through_an_exception_whose_str_raises(session: Session, error: type[Exception]) -> None:
    """Defect 12: the original exception propagates and the task fails with an error naming its type."""
    with pytest.raises(error), session.start_subagent_task("a") as handle:
        raise error()
    snapshot = handle.snapshot()
    assert snapshot.status is SubagentStatus.FAILED
    assert error.__name__ in (snapshot.error or ""), snapshot.error


@pytest.mark.parametrize("error", [BadStr, BadStrAndRepr])
def test_leaving_async_with_through_an_exception_whose_str_raises(
    session: Session, error: type[Exception]
) -> None:
    """Defect 12: the same for ``async with``."""

    async def main() -> SubagentTaskHandle:
        handle = session.start_subagent_task("a")
        with pytest.raises(error):
            async with handle:
                raise error()
        return handle

    snapshot = asyncio.run(main()).snapshot()
    assert snapshot.status is SubagentStatus.FAILED
    assert error.__name__ in (snapshot.error or ""), snapshot.error


def test_failing_with_an_exception_whose_str_raises(session: Session) -> None:
    """Defect 12 (same conversion through ``handle.fail``): the task fails, the error names the type."""
    handle = session.start_subagent_task("a")
    assert handle.fail(BadStr()) is True
    snapshot = handle.snapshot()
    assert snapshot.status is SubagentStatus.FAILED
    assert "BadStr" in (snapshot.error or ""), snapshot.error


# --- Defect 13: checkpoints on one long-lived token leak nothing


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs /proc")
@pytest.mark.timeout(60)
def test_checkpoints_on_a_long_lived_token_stay_flat() -> None:
    """Defect 13: 100,000 mixed ``token.run``, ``token.guard`` and ``token.wait(timeout=0)`` calls on one
    long-lived token: object count and RSS stay flat after a warm-up, and no callback is left behind.

    (100,000 takes about 2-3 s here: ~15 us per run, ~50 us per guarded stream, <1 us per wait.)
    """
    session = Session()
    handle = session.start_subagent_task("long-lived")
    token = handle.token
    iterations = 100_000

    async def small() -> int:
        return 1

    async def stream() -> AsyncIterator[int]:
        yield 1
        yield 2

    def measure() -> tuple[int, int]:
        gc.collect()
        return len(gc.get_objects()), _rss_bytes()

    async def main() -> list[tuple[int, int]]:
        samples: list[tuple[int, int]] = []
        started = time.perf_counter()
        for index in range(iterations):
            kind = index % 3
            if kind == 0:
                assert await token.run(small()) == 1
            elif kind == 1:
                chunks = [chunk async for chunk in token.guard(stream())]
                assert chunks == [1, 2]
            else:
                assert token.wait(timeout=0) is False
            if index + 1 in (iterations // 2, iterations):
                samples.append(measure())
            assert time.perf_counter() - started < 40, "too slow to finish"
        return samples

    (objects_half, rss_half), (objects_end, rss_end) = asyncio.run(main())
    assert objects_end - objects_half < 1_000, (objects_half, objects_end)
    assert rss_end - rss_half < 5 * 1024 * 1024, (rss_half, rss_end)
    assert token.callback_count == 0
    assert not token.is_cancelled
    handle.complete()


# --- Defect 14: reference cycles through native objects are collected


def _collect() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gc.collect()
        gc.collect()


def test_a_cycle_through_a_tasks_metadata_is_collected() -> None:
    """Defect 14(a): session -> task metadata -> session."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        session = Session()
        marker = Marker()
        dead = weakref.ref(marker)
        handle = session.start_subagent_task("a", metadata={"session": session, "marker": marker})
        handle.complete()
        del handle, session, marker
        _collect()
    assert dead() is None


def test_an_owner_that_registers_its_own_method_is_collected_and_its_task_fails() -> None:
    """Defect 14(b): owner -> handle -> token -> callback (bound method) -> owner, dropped while running."""

    class Owner:
        def __init__(self, session: Session) -> None:
            self.marker = Marker()
            self.handle = session.start_subagent_task("owned")
            self.handle.token.on_cancel(self.stop)

        def stop(self) -> None:
            pass

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        session = Session()
        owner = Owner(session)
        dead = weakref.ref(owner.marker)
        del owner
        _collect()
    assert dead() is None
    snapshot = session.subagent_task("owned")
    assert snapshot is not None
    assert snapshot.status is SubagentStatus.FAILED


def test_a_cycle_through_a_tasks_result_is_collected() -> None:
    """Defect 14(c): session -> task result -> session."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        session = Session()
        marker = Marker()
        dead = weakref.ref(marker)
        handle = session.start_subagent_task("a")
        handle.complete(result=[session, marker])
        del handle, session, marker
        _collect()
    assert dead() is None


@pytest.mark.parametrize("through", ["a queued task's metadata", "a finished task's progress data"])
def test_a_cycle_through_a_tasks_values_is_collected_live_or_finished(through: str) -> None:
    """session -> a task that is still queued (a live run) or has finished (its compact record) -> a value it
    holds -> session: the collector's visit reaches both forms."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        session = Session()
        marker = Marker()
        dead = weakref.ref(marker)
        cycle = {"session": session, "marker": marker}
        if through == "a queued task's metadata":
            session.reserve_subagent_task("queued", metadata=cycle)
        else:
            handle = session.start_subagent_task("finished")
            handle.progress("step", data=cycle)
            handle.complete()
            del handle
        del session, marker, cycle
        _collect()
    assert dead() is None


DEBUG_COLLECTIONS = """
import gc, warnings
warnings.simplefilter("ignore")
from subagent_tracker import Registry, Session

class Marker:
    pass

registry = Registry()
sessions = [Session(), registry.session("listed"), registry.get_session("listed")]
for number, session in enumerate(sessions):
    parent = session.start_subagent_task(f"parent{number}", metadata={"k": "v", "marker": Marker()})
    child = session.start_subagent_task(f"child{number}", parent_id=f"parent{number}")
    child.progress("step", data={"marker": Marker()})
    child.complete(result=[Marker()])
    session.start_subagent_task(f"running{number}", metadata={"session": session})
    gc.collect()
held = registry.session("listed")
del sessions, session, parent, child
gc.collect()
assert held.subagent_task("parent1").metadata["k"] == "v"
print("ok")
"""


def test_the_collectors_counts_hold_under_a_debug_build_of_cpython() -> None:
    """A debug build of CPython checks, on every collection, that no object is shown to the collector more
    often than it is referenced (an abort: "refcount is too small"): sessions alone and in a registry, with
    shared inherited metadata, finished and running tasks, progress data, results and cycles. Debian's
    `python3-dbg` (which `scripts/check.sh` installs) loads the abi3 extension as it is."""
    debug_python = shutil.which("python3-dbg")
    if debug_python is None:
        pytest.skip("no debug build of CPython here (Debian: apt-get install python3-dbg)")
    package_parent = os.path.dirname(os.path.dirname(subagent_tracker.__file__))
    completed = subprocess.run(
        [debug_python, "-c", DEBUG_COLLECTIONS],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": package_parent},
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    assert completed.stdout.strip() == "ok"


def test_a_cycle_through_an_any_tokens_callback_is_collected(session: Session) -> None:
    """Defect 14(d): any-token -> callback -> holder -> any-token; its sources keep no registration."""
    a = session.start_subagent_task("a")
    b = session.start_subagent_task("b")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        holder = Holder()
        holder.marker = Marker()
        dead = weakref.ref(holder.marker)
        holder.token = CancellationToken.any(a.token, b.token)
        holder.token.on_cancel(holder.method)
        del holder
        _collect()
    assert dead() is None
    assert a.token.callback_count == 0
    assert b.token.callback_count == 0


@pytest.mark.parametrize("through", ["result", "metadata"])
def test_a_cycle_through_a_snapshot_is_collected(through: str) -> None:
    """Defect 14(e): snapshot -> result or metadata -> holder -> snapshot, once the session is gone."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        session = Session()
        holder = Holder()
        holder.marker = Marker()
        dead = weakref.ref(holder.marker)
        handle = session.start_subagent_task(
            "a", metadata={"holder": holder} if through == "metadata" else None
        )
        if through == "result":
            handle.complete(result=holder)
        holder.snapshot = handle.snapshot()
        handle.complete()
        del handle, session, holder
        _collect()
    assert dead() is None


def test_a_cycle_through_a_wait_and_a_snapshot_is_collected() -> None:
    """Defect 14(e): a list holding a snapshot, a wait not yet awaited and itself, stored as the task's
    result."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        session = Session()
        marker = Marker()
        dead = weakref.ref(marker)
        handle = session.start_subagent_task("a", metadata={"marker": marker})
        box: list[object] = [handle.snapshot(), session.wait_subagent_task("a")]
        box.append(box)
        handle.complete(result=box)
        del session, marker, handle, box
        _collect()
    assert dead() is None


# --- Defect 15: nested any() tokens do not build growing ids


def test_nested_any_tokens_have_no_task_id_and_a_short_repr(session: Session) -> None:
    """Defect 15: ``any()`` belongs to no task; 2,000 levels build in linear time and repr stays short."""
    a = session.start_subagent_task("a")
    b = session.start_subagent_task("b")
    token = CancellationToken.any(a.token, b.token)
    assert token.task_id is None
    started = time.perf_counter()
    for _ in range(2_000):
        token = CancellationToken.any(token, b.token)
    assert time.perf_counter() - started < 1.0
    assert token.task_id is None
    assert len(repr(token)) < 200, len(repr(token))
    assert len(str(token)) < 200, len(str(token))


# --- Defect 16: restarting a finished id evicts nothing while under the bound


def test_restarting_a_finished_id_evicts_no_other_finished_task() -> None:
    """Defect 16: max_finished_tasks=3; a, b, c finish; a is restarted and finishes; all three are kept."""
    session = Session(max_finished_tasks=3)
    for task_id in ("a", "b", "c"):
        session.start_subagent_task(task_id).complete(result=f"first {task_id}")
    session.start_subagent_task("a").complete(result="second a")
    tasks = {task.task_id: task for task in session.subagent_tasks()}
    assert len(session.subagent_tasks()) == 3
    assert sorted(tasks) == ["a", "b", "c"]
    assert tasks["a"].result == "second a"
    for attempt in range(5):
        session.start_subagent_task("a").complete(result=f"again {attempt}")
    tasks = {task.task_id: task for task in session.subagent_tasks()}
    assert sorted(tasks) == ["a", "b", "c"]
    assert tasks["a"].result == "again 4"


# --- Defect 17: an any() that fires at construction registers nowhere


def test_an_any_that_fires_at_construction_registers_on_no_source(session: Session) -> None:
    """Defect 17: a is cancelled, b runs; ``any(a, b)`` is cancelled at once and b has no registration."""
    a = session.start_subagent_task("a")
    b = session.start_subagent_task("b")
    session.cancel_subagent_task("a", reason="already gone")
    combined = CancellationToken.any(a.token, b.token)
    assert combined.is_cancelled
    assert combined.reason == "already gone"
    assert b.token.callback_count == 0
    del combined


# --- Defect 18: a past deadline is shown as given


def test_a_past_deadline_is_shown_as_given(session: Session) -> None:
    """Defect 18: ``deadline=time.time() - 10`` shows that deadline, not the start time."""
    deadline = time.time() - 10
    handle = session.start_subagent_task("a", deadline=deadline)
    snapshot = handle.snapshot()
    assert snapshot.deadline is not None
    assert math.isclose(snapshot.deadline, deadline, abs_tol=0.05), (snapshot.deadline, deadline)
    assert snapshot.status is SubagentStatus.CANCELLED
    assert snapshot.cancel_cause == "deadline"


# --- Defect 20: spawn outside a running loop


def test_spawn_outside_a_running_loop_leaves_no_task(session: Session) -> None:
    """Defect 20: RuntimeError, no task "x" left behind, and "x" can be started afterwards."""

    async def work(handle: SubagentTaskHandle) -> None:
        return None

    with pytest.raises(RuntimeError):
        session.spawn_subagent_task(work, "x")
    assert session.subagent_task("x") is None
    session.start_subagent_task("x").complete()


# --- Defect 21: KeyboardInterrupt and SystemExit in a cancel callback


@pytest.mark.parametrize("exception", ["KeyboardInterrupt", "SystemExit"])
@pytest.mark.parametrize("canceller", ["session.cancel_subagent_task('a')", "session.cancel()"])
def test_an_interrupt_in_a_callback_is_raised_after_the_cancel_took_effect(
    exception: str, canceller: str
) -> None:
    """Defect 21: the other callbacks run, the task is cancelled, then the canceller raises the interrupt.

    In a child process, so that a stray KeyboardInterrupt cannot stop the pytest run.
    """
    code = f"""
    import json
    from subagent_tracker import Session

    session = Session()
    handle = session.start_subagent_task("a")
    calls = []
    handle.token.on_cancel(lambda: calls.append("before"))

    def interrupt():
        calls.append("interrupt")
        raise {exception}

    handle.token.on_cancel(interrupt)
    handle.token.on_cancel(lambda: calls.append("after"))
    raised = None
    try:
        {canceller}
    except BaseException as error:
        raised = type(error).__name__
    snapshot = handle.snapshot()
    print(json.dumps({{"raised": raised, "calls": sorted(calls), "status": snapshot.status.value}}))
    """
    finished = _run_child(code, timeout=10)
    assert finished.returncode == 0, _describe(finished)
    outcome = json.loads(finished.stdout.strip().splitlines()[-1])
    assert outcome == {"raised": exception, "calls": ["after", "before", "interrupt"], "status": "cancelled"}


def test_an_interrupt_in_a_callback_registered_while_a_filter_compares_is_raised_by_the_cancel() -> None:
    """The filter's comparisons run Python code, here a value's ``__eq__`` that registers the callback, in a
    process that held no callback when the cancel began: the cancel still raises the callback's interrupt.

    In a child process, so that no callback or waiter of another test exists.
    """
    code = """
    import json
    from subagent_tracker import Session

    calls = []

    def interrupt():
        calls.append("interrupt")
        raise KeyboardInterrupt

    class RegistersWhenCompared:
        handle = None

        def __eq__(self, other):
            if self.handle is not None:
                handle, self.handle = self.handle, None
                handle.token.on_cancel(interrupt)
            return True

    value = RegistersWhenCompared()
    session = Session()
    handle = session.start_subagent_task("a", metadata={"key": value})
    value.handle = handle
    raised = None
    try:
        session.cancel_subagent_tasks(metadata={"key": "anything"})
    except BaseException as error:
        raised = type(error).__name__
    print(json.dumps({"raised": raised, "calls": calls, "status": handle.snapshot().status.value}))
    """
    finished = _run_child(code, timeout=10)
    assert finished.returncode == 0, _describe(finished)
    outcome = json.loads(finished.stdout.strip().splitlines()[-1])
    assert outcome == {"raised": "KeyboardInterrupt", "calls": ["interrupt"], "status": "cancelled"}


@pytest.mark.parametrize("when", ["after", "before"])
@pytest.mark.parametrize("canceller", ["the_loop_itself", "another_thread", "another_loop"])
def test_a_ctrl_c_while_waiters_are_resolved_is_raised_and_every_waiter_resolved(
    when: str, canceller: str
) -> None:
    """A Ctrl-C that arrives as a wake-up resolves an awaiter (its signal handler runs in the code that
    ``set_result`` calls), or as it schedules their resolution on their loop from another loop, is never taken
    for a refused result: the cancelling call raises it when it runs on a loop, and the waiters' loop when the
    cancel came from a thread without one. Every awaiter is resolved all the same, the interrupted one
    included, whether the interrupt came before or after the result (or the scheduling) took effect.

    In a child process, so that a stray KeyboardInterrupt cannot stop the pytest run.
    """
    code = f"""
    import asyncio
    import json
    import threading
    from subagent_tracker import Session

    when, canceller = "{when}", "{canceller}"

    class InterruptedFuture(asyncio.Future):
        armed = canceller != "another_loop"

        def set_result(self, result):
            if InterruptedFuture.armed:
                InterruptedFuture.armed = False
                if when == "after":
                    super().set_result(result)
                raise KeyboardInterrupt
            super().set_result(result)

    class Loop(asyncio.SelectorEventLoop):
        armed = False

        def create_future(self):
            return InterruptedFuture(loop=self)

        def call_soon_threadsafe(self, callback, *args, context=None):
            if Loop.armed:
                Loop.armed = False
                if when == "after":
                    super().call_soon_threadsafe(callback, *args, context=context)
                raise KeyboardInterrupt
            return super().call_soon_threadsafe(callback, *args, context=context)

    session = Session()
    handles = [session.start_subagent_task(task_id) for task_id in "abc"]
    futures = []
    raised = []

    def cancel_here():
        try:
            session.cancel()
        except BaseException as error:
            raised.append("by the cancel: " + type(error).__name__)

    async def wait(started):
        futures.extend(handle.token.cancelled() for handle in handles)
        started()
        await asyncio.gather(*futures)

    if canceller == "another_loop":
        waiting = threading.Event()
        waiters = threading.Thread(target=Loop().run_until_complete, args=(wait(waiting.set),))
        waiters.start()
        assert waiting.wait(5)

        async def cancel_from_another_loop():
            Loop.armed = True
            cancel_here()

        asyncio.new_event_loop().run_until_complete(cancel_from_another_loop())
        waiters.join(5)
    else:
        in_a_thread = threading.Thread(target=session.cancel).start
        start = cancel_here if canceller == "the_loop_itself" else in_a_thread
        try:
            Loop().run_until_complete(wait(start))
        except BaseException as error:
            raised.append("by the loop: " + type(error).__name__)
    print(json.dumps({{"raised": raised, "resolved": [future.done() for future in futures]}}))
    """
    finished = _run_child(code, timeout=10)
    assert finished.returncode == 0, _describe(finished)
    outcome = json.loads(finished.stdout.strip().splitlines()[-1])
    where = "by the loop" if canceller == "another_thread" else "by the cancel"
    assert outcome == {"raised": [f"{where}: KeyboardInterrupt"], "resolved": [True, True, True]}


def test_an_interrupt_in_a_nested_cancel_s_callback_is_raised_by_the_nested_cancel_only() -> None:
    """Each call collects its own: a callback of A's cancel cancels B, whose callback raises; the cancel of B
    raises it (where A's callback can catch it), and A's cancel, whose callbacks all ran, raises nothing.

    In a child process, so that a stray KeyboardInterrupt cannot stop the pytest run.
    """
    code = """
    import json
    from subagent_tracker import Session

    session = Session()
    a = session.start_subagent_task("a")
    b = session.start_subagent_task("b")
    calls = []

    def interrupt():
        calls.append("b interrupts")
        raise KeyboardInterrupt

    def cancel_b():
        try:
            session.cancel_subagent_task("b")
        except KeyboardInterrupt:
            calls.append("the cancel of b raised")

    b.token.on_cancel(interrupt)
    a.token.on_cancel(cancel_b)
    a.token.on_cancel(lambda: calls.append("a's other callback"))
    raised = None
    try:
        session.cancel_subagent_task("a")
    except BaseException as error:
        raised = type(error).__name__
    statuses = [handle.snapshot().status.value for handle in (a, b)]
    print(json.dumps({"raised": raised, "calls": calls, "statuses": statuses}))
    """
    finished = _run_child(code, timeout=10)
    assert finished.returncode == 0, _describe(finished)
    outcome = json.loads(finished.stdout.strip().splitlines()[-1])
    assert outcome == {
        "raised": None,
        "calls": ["b interrupts", "the cancel of b raised", "a's other callback"],
        "statuses": ["cancelled", "cancelled"],
    }


# --- Defect 22: nested metadata is frozen


def test_nested_metadata_cannot_be_changed_through_a_snapshot_or_the_original(session: Session) -> None:
    """Defect 22: nested dicts are read-only, lists become tuples, sets frozensets; the caller's objects are
    copied at start."""
    metadata: dict[str, Any] = {"a": {"b": [1, 2]}, "c": {1, 2}}
    handle = session.start_subagent_task("t", metadata=metadata)
    snapshot = handle.snapshot()
    assert snapshot.metadata is not None
    nested = snapshot.metadata["a"]
    with pytest.raises(TypeError):
        nested["b"] = [3]
    with pytest.raises(TypeError):
        nested["new"] = 1
    with pytest.raises(TypeError):
        cast(Any, snapshot.metadata)["z"] = 1
    assert isinstance(nested["b"], tuple) and nested["b"] == (1, 2)
    assert isinstance(snapshot.metadata["c"], frozenset) and snapshot.metadata["c"] == frozenset({1, 2})

    metadata["a"]["b"].append(3)
    metadata["a"]["new"] = 1
    metadata["c"].add(3)
    metadata["d"] = 4
    for later in (handle.snapshot(), session.subagent_task("t")):
        assert later is not None and later.metadata is not None
        assert dict(later.metadata["a"]) == {"b": (1, 2)}
        assert later.metadata["c"] == frozenset({1, 2})
        assert "d" not in later.metadata
    handle.complete()


# --- not one of the 22: kept from the first committed version of this file


def test_the_cancelled_error_of_a_combined_token_names_the_task_that_fired_it(session: Session) -> None:
    """An ``any()`` token has no task id of its own; its TaskCancelledError names the source that fired."""
    source = session.start_subagent_task("source")
    combined = CancellationToken.any(source.token)
    session.cancel_subagent_task("source", reason="stop")
    with pytest.raises(TaskCancelledError) as raised:
        combined.raise_if_cancelled()
    assert (raised.value.task_id, raised.value.reason) == ("source", "stop")


# --- found by the review of the restructure


def test_a_collected_combined_token_leaves_its_linked_tasks_callbacks_whole() -> None:
    """A combined token's object may be collected while a task linked to it still holds its callbacks: the
    collector must not have cleared them, or firing would call a broken function."""
    finished = _run_child(
        """
        import gc
        from subagent_tracker import CancellationToken, Session

        session = Session()
        parent = session.start_subagent_task("parent")
        seen = []

        def start_linked():
            combined = CancellationToken.any(parent.token)
            combined.on_cancel(lambda: seen.append(combined.reason))
            return session.start_subagent_task("linked", linked=[combined])

        linked = start_linked()
        gc.collect()
        session.cancel_subagent_task("parent", reason="stop")
        assert seen == ["stop"], seen
        assert linked.token.is_cancelled
        print("ok")
        """
    )
    _assert_child_ok(finished, "ok")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_deadlines_fire_in_a_child_forked_while_the_timer_was_idle() -> None:
    """The parent's timer thread, idle at the fork, must not absorb the child's first wake-up."""
    finished = _run_child(
        """
        import os, signal, time
        from subagent_tracker import Session

        session = Session()
        warm = session.start_subagent_task("warm", timeout=0.01)
        assert warm.token.wait(timeout=2)  # the timer thread exists and is idle now
        time.sleep(0.05)
        pid = os.fork()
        if pid == 0:
            signal.alarm(10)
            child = session.start_subagent_task("in-child", timeout=0.05)
            os._exit(0 if child.token.wait(timeout=2) else 3)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, status
        print("ok")
        """
    )
    _assert_child_ok(finished, "ok")


def test_a_finalizer_run_by_an_eviction_may_use_the_session() -> None:
    """Letting go of a run (a restart replacing it, an eviction) can free the last reference to its metadata,
    whose finalizer may start and end tasks: nothing of the session may be locked while that happens."""
    finished = _run_child(
        """
        import weakref
        from subagent_tracker import Session

        session = Session(max_finished_tasks=1)
        ran = []
        class Payload:
            pass
        def payload(name):
            held = Payload()
            weakref.finalize(held, lambda: ran.append((name, session.start_subagent_task(name).complete())))
            return {"payload": held}
        session.start_subagent_task("a", metadata=payload("replaced")).complete()
        session.start_subagent_task("a").complete()  # replaces the first run, the last holder of its metadata
        assert ran == [("replaced", True)], ran
        session.start_subagent_task("b", metadata=payload("evicted")).complete()
        session.start_subagent_task("c").complete()  # evicts b, the last holder of its metadata
        assert ran == [("replaced", True), ("evicted", True)], ran
        print("ok")
        """,
        timeout=20,
    )
    _assert_child_ok(finished, "ok")


def test_a_cycle_through_an_unawaited_ready_awaitable_is_collected(session: Session) -> None:
    """Defect 14: the awaitable that `__aenter__` returns holds the handle. Holder -> that awaitable ->
    handle -> token -> the holder's bound method: collected once the holder is dropped, never awaited."""

    class Owner:
        def __init__(self) -> None:
            self.marker = Marker()
            handle = session.start_subagent_task("owned")
            handle.token.on_cancel(self.stop)
            self.entered = handle.__aenter__()  # the only reference to the handle

        def stop(self) -> None:
            pass

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        owner = Owner()
        dead = weakref.ref(owner.marker)
        del owner
        _collect()
    assert dead() is None
    snapshot = session.subagent_task("owned")
    assert snapshot is not None and snapshot.status == SubagentStatus.FAILED
