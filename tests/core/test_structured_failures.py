"""Structured failures (contract §5): a failure keeps its message as ``error``, and a type and a code beside
it, by handle and by id, on every store; an exception's type defaults to its class name."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
from redis_support import RedisServer

from subagent_tracker import AsyncRedisRegistry, SubagentStatus
from subagent_tracker.integrations._support import BlockingSession


class RateLimitError(Exception):
    pass


@pytest.fixture
def session(tracked_session: BlockingSession) -> BlockingSession:
    return tracked_session


def test_a_runner_s_failure_keeps_its_type_and_code(session: BlockingSession) -> None:
    handle = session.start_subagent_task("a")
    assert handle.fail("too many requests", error_type="RateLimitError", error_code="rate_limited")
    task = session.subagent_task("a")
    assert task is not None and task.status is SubagentStatus.FAILED
    assert (task.error, task.error_type, task.error_code) == (
        "too many requests",
        "RateLimitError",
        "rate_limited",
    )


def test_an_exception_s_type_defaults_to_its_class_name(session: BlockingSession) -> None:
    handle = session.start_subagent_task("a")
    assert handle.fail(RateLimitError("slow down"), error_code=429)
    task = session.subagent_task("a")
    assert task is not None
    assert (task.error, task.error_type, task.error_code) == (
        "RateLimitError: slow down",
        "RateLimitError",
        "429",
    )


def test_a_with_block_that_raises_records_the_exception_s_class(session: BlockingSession) -> None:
    with pytest.raises(RateLimitError), session.start_subagent_task("a"):
        raise RateLimitError("slow down")
    task = session.subagent_task("a")
    assert task is not None and task.status is SubagentStatus.FAILED
    assert (task.error_type, task.error_code) == ("RateLimitError", None)


def test_a_plain_failure_has_no_type_or_code(session: BlockingSession) -> None:
    session.start_subagent_task("a").fail("boom")
    task = session.subagent_task("a")
    assert task is not None and (task.error, task.error_type, task.error_code) == ("boom", None, None)


def test_an_empty_type_or_code_counts_as_none_on_every_store(session: BlockingSession) -> None:
    session.start_subagent_task("a").fail("boom", error_type="", error_code="")
    task = session.subagent_task("a")
    assert task is not None and (task.error, task.error_type, task.error_code) == ("boom", None, None)


def test_an_end_by_id_keeps_the_type_and_code_and_the_first_end_wins(session: BlockingSession) -> None:
    handle = session.start_subagent_task("a")
    assert session.end_subagent_task("a", error="refused", error_type="PolicyError", error_code="refused")
    assert not session.end_subagent_task("a", error="later", error_code="other")
    assert not handle.complete()
    task = session.subagent_task("a")
    assert task is not None and task.status is SubagentStatus.FAILED
    assert (task.error, task.error_type, task.error_code) == ("refused", "PolicyError", "refused")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"error_type": "PolicyError"}, ValueError, "give error too"),
        ({"error": "x", "error_type": 5}, TypeError, "error_type must be a str"),
        ({"error": "x", "error_code": True}, TypeError, "error_code must be a str, an int or None"),
        ({"error": "x", "error_code": 1.5}, TypeError, "error_code must be a str, an int or None"),
    ],
)
def test_bad_failure_arguments_are_refused_and_change_nothing(
    session: BlockingSession, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    handle = session.start_subagent_task("a")
    with pytest.raises(error, match=match):
        session.end_subagent_task("a", **kwargs)
    if "error" in kwargs:
        with pytest.raises(error, match=match):
            handle.fail(
                kwargs["error"], error_type=kwargs.get("error_type"), error_code=kwargs.get("error_code")
            )
    task = session.subagent_task("a")
    assert task is not None and task.status is SubagentStatus.RUNNING
    handle.complete()


def _fail_at(start: threading.Barrier, handle: Any, outcome: list[bool]) -> None:
    start.wait(timeout=5)
    outcome.append(handle.fail("boom", error_type="BoomError", error_code="boom"))


def test_a_failure_racing_a_cancel_leaves_one_whole_outcome(session: BlockingSession) -> None:
    for round_number in range(20):
        task_id = f"race-{round_number}"
        handle = session.start_subagent_task(task_id)
        start = threading.Barrier(2)
        outcome: list[bool] = []
        failing = threading.Thread(target=_fail_at, args=(start, handle, outcome))
        failing.start()
        start.wait(timeout=5)
        cancelled = session.cancel_subagent_task(task_id)
        failing.join(timeout=10)
        assert outcome == [not cancelled]
        task = session.subagent_task(task_id)
        assert task is not None
        assert task.status is (SubagentStatus.CANCELLED if cancelled else SubagentStatus.FAILED)
        # Whoever won, the runner's failure is recorded whole.
        assert (task.error, task.error_type, task.error_code) == ("boom", "BoomError", "boom")


def test_the_asyncio_redis_api_keeps_the_failure(module_redis_server: RedisServer) -> None:
    async def scenario() -> None:
        registry = await AsyncRedisRegistry.connect(module_redis_server.url)
        session = await registry.session("structured-failures-asyncio")
        handle = await session.start_subagent_task("a")
        assert await handle.fail(RateLimitError("slow down"), error_code="rate_limited")
        await session.start_subagent_task("b")
        assert await session.end_subagent_task("b", error="refused", error_type="PolicyError", error_code=403)
        a, b = await session.subagent_task("a"), await session.subagent_task("b")
        assert a is not None and (a.error_type, a.error_code) == ("RateLimitError", "rate_limited")
        assert b is not None and (b.error, b.error_type, b.error_code) == ("refused", "PolicyError", "403")

    asyncio.run(scenario())
