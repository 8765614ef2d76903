"""What cancels owe to callbacks runs on a bounded set of threads: a burst of cancels whose ``on_cancel``
callbacks do slow I/O, fired by deadlines in memory and by a session cancel that reaches a Redis worker,
never grows the process's threads past the delivery pool's bound, and every callback runs. The regression
test of defect 9 of the hostile run on the store (one OS thread per delivery: 3,863 threads for 10,000
cancels); ``crates/subagent-tracker/tests/delivery_threads.rs`` is its Rust twin."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from redis_support import RedisServer

from subagent_tracker import RedisRegistry, Session

#: The delivery pool's bound (``token::delivery_pool::MAX_THREADS``), with room for the threads a Redis
#: registry runs (its runtime, the deadline timer).
THREAD_BOUND = 32 + 8


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    yield server
    server.stop()


def _threads() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise AssertionError("no thread count")


class _Callbacks:
    """``on_cancel`` callbacks that sleep like a little I/O: how many ran, and the most threads seen."""

    def __init__(self) -> None:
        self.ran = 0
        self.peak = 0
        self.lock = threading.Lock()

    def make(self) -> Callable[[], None]:
        def callback() -> None:
            time.sleep(0.02)
            with self.lock:
                self.ran += 1
                self.peak = max(self.peak, _threads())

        return callback

    def wait_for(self, count: int, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while self.ran < count:
            assert time.monotonic() < deadline, f"{self.ran} of {count} callbacks ran"
            time.sleep(0.02)


def test_ten_thousand_deadline_callbacks_run_on_a_bounded_set_of_threads() -> None:
    session = Session(max_finished_tasks=20_000)
    callbacks = _Callbacks()
    before = _threads()
    # Every callback is registered before its deadline, even on a loaded machine: one registered on a token
    # that has fired runs at once in the registering thread, and 10,000 of them would each sleep there.
    handles = [session.start_subagent_task(f"t{index}", timeout=2.0) for index in range(10_000)]
    for handle in handles:
        handle.token.on_cancel(callbacks.make())
    callbacks.wait_for(10_000, 60)
    assert callbacks.peak - before <= THREAD_BOUND


def test_a_session_cancel_across_redis_runs_its_callbacks_on_a_bounded_set_of_threads(
    redis_server: RedisServer,
) -> None:
    runner = RedisRegistry(redis_server.url, reconcile_interval=0.5).session("s")
    callbacks = _Callbacks()
    handles = runner.start_subagent_tasks([{"task_id": f"t{index}"} for index in range(2_000)])
    for handle in handles:
        handle.token.on_cancel(callbacks.make())
    before = _threads()
    assert RedisRegistry(redis_server.url).session("s").cancel("stop everything") == 2_000
    callbacks.wait_for(2_000, 60)
    assert callbacks.peak - before <= THREAD_BOUND
