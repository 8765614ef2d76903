"""The keyword options are declared once for Python (the typed dicts of ``subagent_tracker._options``) and
once for the native classes (the binding's lists): each pair is equal, every session and registry takes each
option, and each refuses a name that is not one, as Python's own keyword parsing does."""

from __future__ import annotations

import inspect
import time
from collections.abc import Callable
from typing import Any

import pytest
from redis_support import RedisServer

from subagent_tracker import (
    AsyncRedisRegistry,
    AsyncSessionProtocol,
    AwaitableSession,
    RedisRegistry,
    RedisSession,
    Registry,
    RegistryOptions,
    ReserveOptions,
    Session,
    SessionOptions,
    SessionProtocol,
    StartOptions,
    _native,
)
from subagent_tracker._session import _spawn_subagent_task, _spawn_subagent_task_async
from subagent_tracker.integrations._support import BlockingSession


def _keys(options: type) -> set[str]:
    return set(options.__required_keys__ | options.__optional_keys__)  # type: ignore[attr-defined]


def test_the_typed_options_are_the_native_classes_options() -> None:
    assert _keys(StartOptions) == set(_native._START_OPTIONS)
    assert _keys(ReserveOptions) == set(_native._START_OPTIONS) | {"claim_timeout"}
    assert _keys(SessionOptions) == set(_native._SESSION_OPTIONS)
    assert _keys(RegistryOptions) == set(_native._REGISTRY_OPTIONS)


def test_every_session_setting_is_taken_by_a_session_and_by_every_registry(
    module_redis_server: RedisServer,
) -> None:
    settings: dict[str, Any] = {
        "max_finished_tasks": 7,
        "event_buffer": 64,
        "max_finished_age": 60.0,
        "early_cancel_ttl": 5.0,
        "progress_log_size": 3,
    }
    assert set(settings) == _keys(SessionOptions), "a new setting needs a value here"
    sessions: list[Session | RedisSession] = [
        Session("direct", **settings),
        Registry().session("in-registry", **settings),
        # A Redis session's events wait in its stream, not in a buffer per subscriber: it refuses the setting.
        RedisRegistry(module_redis_server.url).session(
            "settings", **{key: value for key, value in settings.items() if key != "event_buffer"}
        ),
    ]
    for session in sessions:
        assert session.max_finished_tasks == 7
    # `help(Session)` shows each setting with its default (test_session_shape.py): the same names.
    assert set(inspect.signature(Session).parameters) == {"session_id"} | _keys(SessionOptions)
    with pytest.raises(TypeError, match=r"^Session\(\) got an unexpected keyword argument 'max_tasks'$"):
        Session(max_tasks=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"^Registry\.session\(\) got an unexpected keyword argument 'size'$"):
        Registry().session("s", size=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"^argument 'max_finished_age': "):
        Session(max_finished_age="old")  # type: ignore[arg-type]


def test_every_registry_option_is_taken_and_a_name_that_is_none_is_refused(
    module_redis_server: RedisServer,
) -> None:
    options: dict[str, Any] = {
        "worker_id": "worker-a",
        "lease": 10.0,
        "reconcile_interval": 2.0,
        "timeout": 5.0,
        "session_ttl": 3600.0,
        "key_prefix": "options-test:",
        "cluster": False,
        "wait_for_replicas": 0,
        "allow_eviction": False,
    }
    assert set(options) == _keys(RegistryOptions), "a new option needs a value here"
    assert RedisRegistry(module_redis_server.url, **options).worker_id == "worker-a"
    with pytest.raises(TypeError, match=r"^RedisRegistry\(\) got an unexpected keyword argument 'leases'$"):
        RedisRegistry(module_redis_server.url, leases=3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match=r"^AsyncRedisRegistry\.connect\(\) got an unexpected keyword"):
        AsyncRedisRegistry.connect(module_redis_server.url, leases=3)  # type: ignore[call-arg,unused-coroutine]
    with pytest.raises(TypeError, match=r"^argument 'cluster': "):
        RedisRegistry(module_redis_server.url, cluster="yes")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "function",
    [
        SessionProtocol.reserve_subagent_task,
        SessionProtocol.spawn_subagent_task,
        AsyncSessionProtocol.reserve_subagent_task,
        AsyncSessionProtocol.spawn_subagent_task,
        AwaitableSession.reserve_subagent_task,
        AwaitableSession.spawn_subagent_task,
        _spawn_subagent_task,
        _spawn_subagent_task_async,
        _native.RedisSession.reserve_subagent_task,
        _native.Registry.session,
        _native.RedisRegistry,
        _native.RedisRegistry.session,
        _native.AsyncRedisRegistry.connect,
        _native.AsyncRedisRegistry.session,
    ],
)
def test_every_signature_takes_its_options_as_one_declaration(function: Callable[..., Any]) -> None:
    # An option written out in a signature is a copy that can drift: each takes them as `**options` (but a
    # start, whose list the test below holds to the binding's).
    parameters = inspect.signature(function).parameters.values()
    keyword_only = {parameter.name for parameter in parameters if parameter.kind is parameter.KEYWORD_ONLY}
    assert keyword_only <= {"grace"}
    var_keyword = [parameter.name for parameter in parameters if parameter.kind is parameter.VAR_KEYWORD]
    assert var_keyword == ["options"]


@pytest.mark.parametrize(
    "function",
    [
        SessionProtocol.start_subagent_task,
        AsyncSessionProtocol.start_subagent_task,
        AwaitableSession.start_subagent_task,
        _native.Session.start_subagent_task,
        _native.RedisSession.start_subagent_task,
        _native.AsyncRedisSession.start_subagent_task,
        _native.AwaitableSession.start_subagent_task,
    ],
)
def test_a_start_names_the_start_options_in_the_binding_s_order(function: Callable[..., Any]) -> None:
    # The call users repeat most takes each option by its own keyword, so that it is read without a dict: the
    # names are the binding's one list, in its order, so a new option that misses the signature fails here.
    parameters = inspect.signature(function).parameters.values()
    keyword_only = [parameter.name for parameter in parameters if parameter.kind is parameter.KEYWORD_ONLY]
    assert keyword_only == list(_native._START_OPTIONS)
    assert not [parameter for parameter in parameters if parameter.kind is parameter.VAR_KEYWORD]


def test_a_bound_start_s_signature_binds_a_positional_id_to_task_id(tracked_session: BlockingSession) -> None:
    # `help()`, editors and `Signature.bind` read the bound method: its first parameter is the id, not `self`.
    signature = inspect.signature(tracked_session.start_subagent_task)
    assert next(iter(signature.parameters)) == "task_id"
    assert signature.bind("a").arguments == {"task_id": "a"}


def test_of_several_bad_start_options_each_store_reports_the_one_its_type_is_read_first(
    tracked_session: BlockingSession,
) -> None:
    # The order `START_OPTIONS` documents: the types read as they are extracted first, then the strings.
    cases: list[tuple[dict[str, Any], str]] = [
        ({"agent": 1, "timeout": "soon"}, "timeout"),
        ({"agent": 1, "description": 2}, "agent"),
    ]
    for options, reported in cases:
        with pytest.raises(TypeError, match=reported):
            tracked_session.start_subagent_task("a", **options)
    assert tracked_session.subagent_task("a") is None


def test_of_several_bad_session_settings_each_session_reports_the_same_one_first() -> None:
    # The seconds are read as they are extracted, then the counts: the log's size, the bound, the buffer.
    cases: list[tuple[dict[str, Any], str]] = [
        ({"event_buffer": -1, "early_cancel_ttl": "soon"}, "early_cancel_ttl"),
        ({"event_buffer": -1, "max_finished_tasks": -1, "progress_log_size": 10**6}, "progress_log_size"),
        ({"event_buffer": -1, "max_finished_tasks": -1}, "max_finished_tasks"),
        ({"event_buffer": -1}, "event_buffer"),
    ]
    for settings, reported in cases:
        with pytest.raises((TypeError, ValueError), match=reported):
            Session(**settings)
        with pytest.raises((TypeError, ValueError), match=reported):
            Registry().session("s", **settings)


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


def test_the_flags_and_the_links_given_by_keyword_take_effect(tracked_session: BlockingSession) -> None:
    # The snapshot shows neither a group nor a link: each is seen by what it does. A group's end has fired
    # its children's tokens in this process when it returns, on either store; on Redis a linked task is
    # cancelled by a call the source's token sets off, a moment after the cancel of the source returned.
    def cancelled(handle: Any) -> bool:
        deadline = time.monotonic() + 5
        while not handle.token.is_cancelled and time.monotonic() < deadline:
            time.sleep(0.01)
        return bool(handle.token.is_cancelled)

    group = tracked_session.start_subagent_task("group", structured=True)
    child = tracked_session.start_subagent_task("child", parent_id="group")
    group.complete()
    assert child.token.is_cancelled, "a group's end cancels its pending children"
    source = tracked_session.start_subagent_task("source")
    linked = tracked_session.start_subagent_task("linked", linked=[source.token])
    tracked_session.cancel_subagent_task("source")
    assert cancelled(linked), "a linked token's cancel reaches the task"
    for handle in (child, source, linked):
        handle.complete()


def test_a_name_that_is_no_option_is_refused_by_keyword_and_in_a_batch(
    tracked_session: BlockingSession,
) -> None:
    call = rf"{type(tracked_session).__name__}\.start_subagent_task\(\)"
    with pytest.raises(TypeError, match=rf"^{call} got an unexpected keyword argument 'prio'$"):
        tracked_session.start_subagent_task("a", prio=1)  # type: ignore[call-arg]
    # As Python's own functions do: the unknown name is found before any argument's type is read.
    with pytest.raises(TypeError, match=rf"^{call} got an unexpected keyword argument 'prio'$"):
        tracked_session.start_subagent_task(1, prio=1)  # type: ignore[call-arg,arg-type]
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
