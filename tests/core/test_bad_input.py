"""CONTRACT §9: bad input gets a clear TypeError or ValueError, and changes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from subagent_tracker import (
    MAX_TASK_ID_BYTES,
    DuplicateTaskError,
    Session,
    SessionClosedError,
    SubagentTrackerError,
    TaskCancelledError,
    UnknownTaskError,
)
from subagent_tracker.integrations._support import BlockingSession

NOT_STRINGS: list[Any] = [1, 1.5, b"bytes", ["a"], {"a": 1}, object(), True]


def test_error_classes_form_the_promised_hierarchy() -> None:
    for error in (TaskCancelledError, DuplicateTaskError, UnknownTaskError, SessionClosedError):
        assert issubclass(error, SubagentTrackerError)
    assert issubclass(DuplicateTaskError, ValueError)
    assert issubclass(UnknownTaskError, LookupError)


def _calls_taking_an_id(session: Session, value: Any) -> list[Callable[[], object]]:
    return [
        lambda: session.start_subagent_task(value),
        lambda: session.cancel_subagent_task(value),
        lambda: session.subagent_task(value),
        lambda: session.start_subagent_task("x", parent_id=value),
    ]


@pytest.mark.parametrize("value", NOT_STRINGS)
def test_a_task_id_of_the_wrong_type_is_a_type_error(session: Session, value: Any) -> None:
    for call in _calls_taking_an_id(session, value):
        with pytest.raises(TypeError, match=r"must be a str, got"):
            call()
    assert session.subagent_tasks() == []


@pytest.mark.parametrize("value", ["", "x" * (MAX_TASK_ID_BYTES + 1), "é" * (MAX_TASK_ID_BYTES // 2 + 1)])
def test_an_empty_or_oversized_id_is_a_value_error(session: Session, value: str) -> None:
    for call in _calls_taking_an_id(session, value):
        with pytest.raises(ValueError, match=r"non-empty|at most"):
            call()
    assert session.subagent_tasks() == []


def test_the_largest_id_is_accepted(session: Session) -> None:
    session.start_subagent_task("x" * MAX_TASK_ID_BYTES).complete()


@pytest.mark.parametrize("field", ["agent", "description"])
def test_descriptive_fields_must_be_strings(session: Session, field: str) -> None:
    with pytest.raises(TypeError, match=f"{field} must be a str"):
        session.start_subagent_task("a", **{field: 5})  # type: ignore[arg-type]
    assert session.subagent_task("a") is None


def test_metadata_must_be_a_mapping(session: Session) -> None:
    with pytest.raises(TypeError, match="metadata must be a mapping"):
        session.start_subagent_task("a", metadata=[("k", 1)])  # type: ignore[arg-type]
    assert session.subagent_task("a") is None


@pytest.mark.parametrize("reserving", [False, True])
def test_every_store_checks_a_start_s_arguments_in_one_order(
    tracked_session: BlockingSession, reserving: bool
) -> None:
    """A start with a bad metadata and a bad agent raises the metadata's error, whichever store it goes to:
    the in-memory and Redis sessions read a start's arguments through one extractor."""
    start = tracked_session.reserve_subagent_task if reserving else tracked_session.start_subagent_task
    with pytest.raises(TypeError, match=r"^metadata must be a mapping"):
        start("a", agent=5, metadata=[("k", 1)])  # type: ignore[arg-type]
    assert tracked_session.subagent_task("a") is None


def test_reasons_must_be_strings(session: Session) -> None:
    handle = session.start_subagent_task("a")
    with pytest.raises(TypeError, match="reason must be a str"):
        session.cancel_subagent_task("a", reason=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="reason must be a str"):
        session.cancel(reason=b"x")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="reason must be a str"):
        session.close(reason=1.0)  # type: ignore[arg-type]
    assert not handle.token.is_cancelled, "a call that raised changed nothing"
    assert not session.closed


def test_runner_arguments_are_checked(session: Session) -> None:
    handle = session.start_subagent_task("a")
    with pytest.raises(TypeError, match="message must be a str"):
        handle.progress(42)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="error must be a str or an exception"):
        handle.fail(42)  # type: ignore[arg-type]
    assert handle.snapshot().status.value == "running"
    assert handle.snapshot().progress_count == 0


@pytest.mark.parametrize(
    ("value", "error"),
    [
        ("1", TypeError),
        (True, TypeError),
        (-1, ValueError),
        (float("nan"), ValueError),
        (float("inf"), ValueError),
    ],
)
def test_timeouts_are_checked(session: Session, value: Any, error: type[Exception]) -> None:
    handle = session.start_subagent_task("a")
    with pytest.raises(error, match="timeout"):
        handle.token.wait(timeout=value)

    async def main() -> None:
        with pytest.raises(error, match="timeout"):
            await session.wait_subagent_task("a", timeout=value)

    asyncio.run(main())


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"max_finished_tasks": -1}, ValueError),
        ({"max_finished_tasks": "10"}, TypeError),
        ({"max_finished_tasks": 1.5}, TypeError),
        ({"max_finished_tasks": True}, TypeError),
        ({"event_buffer": -3}, ValueError),
        ({"session_id": ""}, ValueError),
        ({"session_id": 7}, TypeError),
    ],
)
def test_session_arguments_are_checked(kwargs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        Session(**kwargs)


def test_unknown_keywords_and_missing_arguments_are_type_errors(session: Session) -> None:
    with pytest.raises(TypeError):
        session.start_subagent_task("a", parnet_id="b")  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        session.cancel_subagent_task()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        Session("s", 10)  # type: ignore[call-arg]


def test_strange_strings_are_just_ids(session: Session) -> None:
    for task_id in [
        "\x00",
        "a\nb",
        "🦀" * 10,
        "' OR 1=1 --",
        "\ud800".encode("utf-8", "surrogatepass").decode("utf-8", "replace"),
    ]:
        session.start_subagent_task(task_id).complete()
        snapshot = session.subagent_task(task_id)
        assert snapshot is not None and snapshot.task_id == task_id


def test_an_id_holding_a_lone_surrogate_is_a_value_error_naming_the_argument(session: Session) -> None:
    for call in _calls_taking_an_id(session, "a\ud800"):
        with pytest.raises(ValueError, match=r"^(task_id|parent_id) must be text that UTF-8 can") as bad:
            call()
        assert not isinstance(bad.value, UnicodeError)
    with pytest.raises(ValueError, match=r"^session_id must be text that UTF-8 can encode"):
        Session("\udfff")
    handle = session.start_subagent_task("a")
    with pytest.raises(ValueError, match=r"^message must be text that UTF-8 can encode"):
        handle.progress("\ud800")
    handle.complete()
    assert [task.task_id for task in session.subagent_tasks()] == ["a"]


def test_a_handle_dropped_while_its_call_raises_keeps_the_error(session: Session) -> None:
    """The temporary handle of a call that raised is dropped while the error propagates: its warning must not
    replace the error with a ``SystemError``."""
    with pytest.warns(ResourceWarning, match="never ended"), pytest.raises(TypeError, match="message"):
        session.start_subagent_task("temporary").progress(5)  # type: ignore[arg-type]
    with pytest.warns(ResourceWarning), pytest.raises(ValueError, match="message must be text"):
        session.start_subagent_task("surrogate").progress("\ud800")


def test_a_huge_number_of_seconds_is_shown_short(session: Session) -> None:
    handle = session.start_subagent_task("a")
    with pytest.raises(ValueError) as refused:
        handle.token.wait(timeout=1e300)
    assert str(refused.value) == (
        "timeout must be a finite, non-negative number of seconds no larger than 1e9; got 1e300, which is "
        "more than 1e9 seconds"
    )
    with pytest.raises(ValueError, match=r"got 1e20, which is more than 1e9 seconds"):
        handle.token.wait(timeout=10**20)


def test_errors_quote_ids_alike_and_a_default_reason_is_not_repeated() -> None:
    session = Session("user-42")
    with pytest.raises(UnknownTaskError) as unknown:
        session.claim_subagent_task("summarise")
    assert str(unknown.value).startswith('no task "summarise" is reserved in session "user-42" to be claimed')
    assert "reserve it first" in str(unknown.value)
    running = session.start_subagent_task("dup")
    with pytest.raises(DuplicateTaskError, match='task "dup" is already running'):
        session.start_subagent_task("dup")
    running.complete()
    assert str(TaskCancelledError("summarise")) == 'task "summarise" was cancelled'
    assert str(TaskCancelledError("t1", "user pressed stop")) == 'task "t1" was cancelled: user pressed stop'
    assert str(TaskCancelledError('say "hi"', "stop")) == 'task "say \\"hi\\"" was cancelled: stop'
    # A character that does not print is escaped as the core escapes it: it can neither hide nor reorder text.
    assert str(TaskCancelledError("\u202eevil")) == 'task "\\u{202e}evil" was cancelled'
    with pytest.raises(UnknownTaskError) as reversed_id:
        session.claim_subagent_task("\u202eevil")
    assert '"\\u{202e}evil"' in str(reversed_id.value)


def test_a_url_that_does_not_parse_says_what_a_redis_url_looks_like() -> None:
    from subagent_tracker import RedisRegistry

    with pytest.raises(ValueError) as refused:
        RedisRegistry("not a url", timeout=0.5)
    message = str(refused.value)
    assert message.startswith('"not a url" is not a Redis URL: expected redis://'), message
    assert "InvalidClientConfig" not in message
