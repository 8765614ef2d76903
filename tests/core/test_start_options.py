"""The start options are declared once for Python (``StartOptions``) and once for the native sessions
(``START_OPTIONS`` in the binding): the two lists are equal, every session takes each option by keyword and
in a batch, and each refuses a name that is not one."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import Any

import pytest

from subagent_tracker import (
    AsyncSessionProtocol,
    AwaitableSession,
    ReserveOptions,
    Session,
    SessionProtocol,
    StartOptions,
    _native,
)
from subagent_tracker._session import _spawn_subagent_task, _spawn_subagent_task_async
from subagent_tracker.integrations._support import BlockingSession


def _keys(options: type) -> set[str]:
    return set(options.__required_keys__ | options.__optional_keys__)  # type: ignore[attr-defined]


def test_the_typed_options_are_the_native_sessions_options() -> None:
    assert _keys(StartOptions) == set(_native._START_OPTIONS)
    assert _keys(ReserveOptions) == set(_native._START_OPTIONS) | {"claim_timeout"}


@pytest.mark.parametrize(
    "function",
    [
        SessionProtocol.start_subagent_task,
        SessionProtocol.reserve_subagent_task,
        SessionProtocol.spawn_subagent_task,
        AsyncSessionProtocol.start_subagent_task,
        AsyncSessionProtocol.reserve_subagent_task,
        AsyncSessionProtocol.spawn_subagent_task,
        AwaitableSession.start_subagent_task,
        AwaitableSession.reserve_subagent_task,
        AwaitableSession.spawn_subagent_task,
        _spawn_subagent_task,
        _spawn_subagent_task_async,
        _native.Session.start_subagent_task,
        _native.RedisSession.reserve_subagent_task,
        _native.AsyncRedisSession.start_subagent_task,
    ],
)
def test_every_start_signature_takes_the_options_as_one_declaration(function: Callable[..., Any]) -> None:
    # An option written out in a signature is a copy that can drift: each takes them as `**options`.
    parameters = inspect.signature(function).parameters.values()
    keyword_only = {parameter.name for parameter in parameters if parameter.kind is parameter.KEYWORD_ONLY}
    assert keyword_only <= {"grace"}
    var_keyword = [parameter.name for parameter in parameters if parameter.kind is parameter.VAR_KEYWORD]
    assert var_keyword == ["options"]


#: A task of another session, whose token the tasks below are linked to.
_LINK = Session().start_subagent_task("link")


def _every_option(parent_id: str) -> dict[str, Any]:
    options: dict[str, Any] = {
        "parent_id": parent_id,
        "agent": "researcher",
        "description": "reads",
        "metadata": {"topic": "otters"},
        "timeout": 60.0,
        "deadline": time.time() + 120,
        "detached": True,
        "structured": True,
        "linked": [_LINK.token],
    }
    assert set(options) == _keys(StartOptions), "a new option needs a value here"
    return options


def test_every_session_takes_every_option_by_keyword_and_in_a_batch(tracked_session: BlockingSession) -> None:
    parent = tracked_session.start_subagent_task("parent")
    by_keyword = tracked_session.start_subagent_task("by-keyword", **_every_option("parent"))
    (in_batch,) = tracked_session.start_subagent_tasks([{"task_id": "in-batch", **_every_option("parent")}])
    reserved = tracked_session.reserve_subagent_task("reserved", claim_timeout=30, **_every_option("parent"))
    for task_id in (by_keyword.task_id, in_batch.task_id, reserved):
        task = tracked_session.subagent_task(task_id)
        assert task is not None
        assert (task.parent_id, task.agent, task.description) == ("parent", "researcher", "reads")
        assert (dict(task.metadata or {}), task.detached) == ({"topic": "otters"}, True)
        assert task.deadline is not None
    for handle in (by_keyword, in_batch, parent):
        handle.complete()


def test_a_name_that_is_no_option_is_refused_by_keyword_and_in_a_batch(
    tracked_session: BlockingSession,
) -> None:
    call = rf"{type(tracked_session).__name__}\.start_subagent_task\(\)"
    with pytest.raises(TypeError, match=rf"^{call} got an unexpected keyword argument 'prio'$"):
        tracked_session.start_subagent_task("a", prio=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"unexpected keyword argument 'claim_timeout'"):
        tracked_session.start_subagent_task("a", claim_timeout=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"^task 0 of the batch has the unknown key 'prio'"):
        tracked_session.start_subagent_tasks([{"task_id": "a", "prio": 1}])
    # Nothing was started by the calls that raised.
    assert tracked_session.subagent_task("a") is None


def test_a_flag_given_none_is_refused_as_python_refuses_it(tracked_session: BlockingSession) -> None:
    with pytest.raises(TypeError, match=r"^argument 'detached': "):
        tracked_session.start_subagent_task("a", detached=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"^argument 'timeout': timeout must be a number of seconds or None"):
        tracked_session.start_subagent_task("a", timeout="soon")  # type: ignore[arg-type]
    assert tracked_session.subagent_task("a") is None
