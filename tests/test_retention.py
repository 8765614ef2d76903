"""CONTRACT §7: finished tasks are retained within a bound; unfinished tasks never are evicted."""

from __future__ import annotations

import threading

from subagent_tracker import DEFAULT_MAX_FINISHED_TASKS, Session


def test_the_default_bound_is_sensible() -> None:
    assert Session().max_finished_tasks == DEFAULT_MAX_FINISHED_TASKS == 10_000


def test_the_oldest_finished_are_evicted_first_and_unfinished_never() -> None:
    session = Session(max_finished_tasks=3)
    long_running = session.start_subagent_task("long")
    cancelled = session.start_subagent_task("cancelled-unfinished")
    session.cancel_subagent_task("cancelled-unfinished")
    for index in range(10):
        session.start_subagent_task(f"f{index}").complete()
    assert [task.task_id for task in session.subagent_tasks()] == [
        "long",
        "cancelled-unfinished",
        "f7",
        "f8",
        "f9",
    ]
    del long_running, cancelled


def test_retention_stays_bounded_under_churn_from_threads() -> None:
    session = Session(max_finished_tasks=500)

    def churn(prefix: str) -> None:
        for index in range(20_000):
            handle = session.start_subagent_task(f"{prefix}{index % 2_000}")
            if index % 5 == 0:
                session.cancel_subagent_task(handle.task_id)
            handle.complete()

    threads = [threading.Thread(target=churn, args=(prefix,)) for prefix in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(session.subagent_tasks()) <= 500
    assert session.pending_subagent_tasks() == []
