"""The Redis store under hostile conditions: hostile ids, dead and duplicated workers, cut replies, restarts
and sweeps; one test per defect a hostile run found (each failed before its fix), against a real
``redis-server``, with process faults injected for real (``kill -9``, a stopped worker, a connection cut
through the loopback proxy). CONTRACT §§19-21."""

from __future__ import annotations

import asyncio
import gc
import signal
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import unquote

import pytest
import redis
from redis_support import Proxy, RedisServer, Worker

from subagent_tracker import (
    ORPHANED_RUN_ERROR,
    SESSION_LOST_REASON,
    WORKER_LOST_ERROR,
    RedisRegistry,
    RegistryUnavailableError,
    SessionClosedError,
    SubagentStatus,
)


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    yield server
    server.stop()


def _eventually(condition: Callable[[], bool], seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def _admin(server: RedisServer) -> Any:
    """A plain redis-py client (its types are a union of the blocking and the asyncio replies)."""
    return redis.Redis(port=server.port, decode_responses=True)


# --- 1. Isolation: no id reaches another session's keys

HOSTILE_IDS = ["s", "s}:t:x", "x}:t:victim", "victim", "x}:session", "{", "}", "%7D", "%", "a{b}c:t:"]


def test_ids_with_braces_in_either_position_never_reach_another_session(redis_server: RedisServer) -> None:
    registry = RedisRegistry(redis_server.url)
    sessions = {session_id: registry.session(session_id) for session_id in HOSTILE_IDS}
    handles = {
        (session_id, task_id): session.start_subagent_task(task_id)
        for session_id, session in sessions.items()
        for task_id in HOSTILE_IDS
    }
    # The cancel found by the hostile run: in session "s", the task "x}:t:victim" named task "victim" of
    # session "s}:t:x". Each cancel carries its own target as its reason, so one that reached another task
    # would show there.
    for session_id, task_id in handles:
        assert sessions[session_id].cancel_subagent_task(task_id, reason=f"{session_id}|{task_id}")
    for (session_id, task_id), handle in handles.items():
        assert _eventually(lambda: handle.token.is_cancelled)  # noqa: B023 (called before the loop moves on)
        assert handle.token.reason == f"{session_id}|{task_id}"
    for session in sessions.values():
        assert sorted(task.task_id for task in session.subagent_tasks()) == sorted(HOSTILE_IDS)
    # Every key of every session carries exactly one session's tag.
    admin = _admin(redis_server)
    for key in admin.scan_iter("subagent-tracker:v2:{s:*"):
        tag = key[len("subagent-tracker:v2:{s:") : key.index("}")]
        assert unquote(tag) in HOSTILE_IDS, key


def test_a_session_object_and_its_registry_refuse_nothing_for_hostile_ids(redis_server: RedisServer) -> None:
    registry = RedisRegistry(redis_server.url)
    there = registry.session("s}:t:x")
    victim = there.start_subagent_task("victim")
    here = registry.session("s")
    squatter = here.start_subagent_task("x}:session")
    assert not here.cancel_subagent_task("x}:t:victim")
    assert here.subagent_task("x}:t:victim") is None
    assert not victim.token.is_cancelled
    assert registry.get_session("s}:t:x") == there
    assert sorted(registry.sessions()) == ["s", "s}:t:x"]
    victim.complete()
    squatter.complete()


# --- 2. A dead worker's tasks end whatever the gap with no live worker


def test_a_dead_workers_tasks_end_after_a_gap_of_more_than_ten_leases(redis_server: RedisServer) -> None:
    lease = 0.2
    runner = Worker(redis_server.url, "runner", lease=lease)
    runner.ask(op="start", session="s", task="job")
    time.sleep(lease * 2)  # it has worked for a while: renewed its lease, and what it announced with it
    runner.signal(signal.SIGKILL)
    runner.process.wait(timeout=10)
    time.sleep(lease * 12)  # no worker is alive: nobody can end the task now
    survivor = RedisRegistry(redis_server.url, lease=lease)
    session = survivor.get_session("s")
    assert session is not None
    began = time.monotonic()
    assert _eventually(lambda: session.subagent_task("job").finished, seconds=lease * 10)  # type: ignore[union-attr]
    # Within about a lease of a worker being alive again (the defect was: never), with room for a loaded CI.
    assert time.monotonic() - began < lease * 5
    job = session.subagent_task("job")
    assert job is not None
    assert job.status is SubagentStatus.FAILED
    assert job.error == WORKER_LOST_ERROR


def test_a_group_rule_the_reaper_sets_off_reaches_every_sibling(redis_server: RedisServer) -> None:
    """A child of a structured parent lost with its worker fails, and its siblings are cancelled: over more
    siblings than one step of a cascade, the remaining steps are a worker's timer loop's, since no caller
    takes them (they used to be left undone, and the siblings past the first step ran on)."""
    lease = 0.2
    survivor = RedisRegistry(redis_server.url, lease=lease)
    session = survivor.session("group-reaped")
    group = session.start_subagent_task("group", structured=True)
    siblings = session.start_subagent_tasks(
        [{"task_id": f"c{index}", "parent_id": "group"} for index in range(100)]
    )
    runner = Worker(redis_server.url, "runner", lease=lease)
    runner.ask(op="start", session="group-reaped", task="lost", parent="group")
    time.sleep(lease * 2)
    runner.signal(signal.SIGKILL)
    runner.process.wait(timeout=10)
    assert _eventually(lambda: all(sibling.token.is_cancelled for sibling in siblings), seconds=10), (
        f"{sum(sibling.token.is_cancelled for sibling in siblings)} of 100 siblings cancelled"
    )
    lost = session.subagent_task("lost")
    assert lost is not None and lost.error == WORKER_LOST_ERROR
    for handle in [group, *siblings]:
        handle.complete()


# --- 3. The reaper judges a run by when it began


def test_the_reaper_leaves_alone_a_run_begun_after_the_lease_expired(redis_server: RedisServer) -> None:
    registry = RedisRegistry(redis_server.url)
    session = registry.session("s")
    handle = session.start_subagent_task("job")
    admin = _admin(redis_server)
    session_key = "subagent-tracker:v2:{s:s}:session"
    process = admin.hget("subagent-tracker:v2:{s:s}:t:job", "worker")
    started_ms = int(float(admin.hget("subagent-tracker:v2:{s:s}:t:job", "started_at") or 0) * 1000)
    # The reaper's call for a lease that expired a second before the run began: not the lost worker's run.
    # The reply: how many it ended, the cursor of the next call ("": the session's live index is done), and
    # when a cascade its ends left under way is due ("": none).
    reaped = admin.fcall("stv2_reap", 1, session_key, process, WORKER_LOST_ERROR, str(started_ms - 1000))
    assert reaped == [0, "", ""]
    assert session.subagent_task("job").status is SubagentStatus.RUNNING  # type: ignore[union-attr]
    assert handle.complete()
    # A run begun before the expiry is reaped.
    late = session.start_subagent_task("late")
    reaped = admin.fcall(
        "stv2_reap", 1, session_key, process, WORKER_LOST_ERROR, str(int(time.time() * 1000) + 1000)
    )
    assert reaped == [1, "", ""]
    assert session.subagent_task("late").error == WORKER_LOST_ERROR  # type: ignore[union-attr]
    assert not late.complete()


# --- 4. Two processes given one worker id


def test_two_processes_with_one_worker_id_keep_their_own_runs(redis_server: RedisServer) -> None:
    lease = 0.3
    first = Worker(redis_server.url, "host", lease=lease)
    second = Worker(redis_server.url, "host", lease=lease)
    try:
        first.ask(op="start", session="s", task="first-job")
        second.ask(op="start", session="s", task="second-job")
        session = RedisRegistry(redis_server.url, lease=lease).session("s")
        assert session.subagent_task("first-job").worker == "host"  # type: ignore[union-attr]
        time.sleep(lease * 4)  # several reconciles and reaps: nobody takes the other's runs for orphans
        for task_id in ("first-job", "second-job"):
            assert session.subagent_task(task_id).status is SubagentStatus.RUNNING  # type: ignore[union-attr]
        # A cancel reaches the process that runs the task, and only it.
        assert session.cancel_subagent_task("first-job", reason="only this one")
        assert first.ask(op="wait_cancelled", session="s", task="first-job", timeout=5)["cancelled"]
        assert not second.ask(op="wait_cancelled", session="s", task="second-job", timeout=0.3)["cancelled"]
        # One of them dies: its run fails, the other's goes on.
        first.signal(signal.SIGKILL)
        first.process.wait(timeout=10)
        second.ask(op="start", session="s", task="after")
        assert _eventually(lambda: session.subagent_task("first-job").finished, seconds=lease * 10)  # type: ignore[union-attr]
        assert session.subagent_task("second-job").status is SubagentStatus.RUNNING  # type: ignore[union-attr]
        assert second.ask(op="complete", session="s", task="second-job") is True
        assert second.ask(op="complete", session="s", task="after") is True
    finally:
        if first.process.poll() is None:
            first.stop()
        second.stop()


# --- 5. A reservation whose reply was lost keeps its claim timeout


def test_a_reservation_whose_reply_was_cut_still_fails_on_its_claim_timeout(
    redis_server: RedisServer,
) -> None:
    proxy = Proxy(redis_server.port)
    try:
        registry = RedisRegistry(proxy.url, timeout=0.5, reconcile_interval=0.2)
        session = registry.session("s")
        proxy.cut_after(b"stv2_open")
        with pytest.raises(RegistryUnavailableError):
            session.reserve_subagent_task("queued", claim_timeout=0.5)
        observer = RedisRegistry(redis_server.url).session("s")
        assert observer.subagent_task("queued").status is SubagentStatus.QUEUED  # type: ignore[union-attr]
        assert _eventually(lambda: observer.subagent_task("queued").finished, seconds=8)  # type: ignore[union-attr]
        queued = observer.subagent_task("queued")
        assert queued is not None
        assert queued.status is SubagentStatus.FAILED
        assert "claim" in (queued.error or "")
    finally:
        proxy.close()


def _ended_as_an_orphan(
    redis_server: RedisServer, task_id: str, lose: Callable[[RedisRegistry, Proxy], None]
) -> None:
    """`lose` makes a run of `task_id` in session "s" whose worker never learns the outcome of a call about
    it; the worker's reconcile must end it as an orphan."""
    proxy = Proxy(redis_server.port)
    try:
        # Kept alive throughout: its reconcile ends the orphan.
        worker = RedisRegistry(proxy.url, timeout=0.5, reconcile_interval=0.2)
        lose(worker, proxy)
        observer = RedisRegistry(redis_server.url).session("s")
        assert _eventually(lambda: observer.subagent_task(task_id).finished, seconds=8)  # type: ignore[union-attr]
        assert observer.subagent_task(task_id).error == ORPHANED_RUN_ERROR  # type: ignore[union-attr]
        assert worker.worker_id
    finally:
        proxy.close()


def test_a_start_whose_reply_was_cut_is_ended_as_an_orphan(redis_server: RedisServer) -> None:
    def lose(registry: RedisRegistry, proxy: Proxy) -> None:
        session = registry.session("s")
        proxy.cut_after(b"stv2_open")
        with pytest.raises(RegistryUnavailableError):
            session.start_subagent_task("lost")

    _ended_as_an_orphan(redis_server, "lost", lose)


def test_a_dropped_handle_whose_end_never_arrived_is_ended_as_an_orphan(redis_server: RedisServer) -> None:
    def lose(registry: RedisRegistry, proxy: Proxy) -> None:
        handle = registry.session("s").start_subagent_task("dropped")
        proxy.swallow(b"stv2_end")
        del handle
        gc.collect()

    _ended_as_an_orphan(redis_server, "dropped", lose)


# --- 6. A run number names one run forever; a session object belongs to one incarnation


def test_an_old_runner_never_ends_the_run_of_a_reopened_session(redis_server: RedisServer) -> None:
    old_worker = RedisRegistry(redis_server.url)
    old_session = old_worker.session("s")
    old_runner = old_session.start_subagent_task("t")
    assert old_session.close(reason="done") == 1
    # Cancelled by the close, it finishes now: the closed session has left, and its id opens a new one.
    assert not old_session.end_subagent_task("t", error="ended by id")
    # Until the id is opened again, the closed incarnation's keys exist, and its queries answer.
    assert old_session.subagent_task("t").finished  # type: ignore[union-attr]
    new_session = RedisRegistry(redis_server.url).session("s")
    assert old_worker.session("s") != old_session, "one registry, two incarnations: not the same session"
    new_runner = new_session.start_subagent_task("t")
    assert not old_runner.complete("stale")
    assert new_runner.complete("fresh")
    assert new_session.subagent_task("t").result == "fresh"  # type: ignore[union-attr]
    # The closed incarnation refuses transitions and, its keys gone, queries.
    with pytest.raises(SessionClosedError):
        old_session.start_subagent_task("late")
    with pytest.raises(SessionClosedError):
        old_session.cancel_subagent_task("t")
    with pytest.raises(SessionClosedError):
        old_session.subagent_tasks()
    assert [task.task_id for task in new_session.subagent_tasks()] == ["t"]


def test_a_server_restarted_empty_never_fires_an_old_runners_token_for_a_new_run(
    redis_server: RedisServer,
) -> None:
    """The new run's cancel never reaches the old runner; the old runner may stop, but only because its own
    session was lost with the restart (``SESSION_LOST_REASON``), never with the new run's reason."""
    old = RedisRegistry(redis_server.url, reconcile_interval=0.1)
    old_runner = old.session("s").start_subagent_task("t")
    old_events = old.session("s").events()
    server = redis_server.restart()
    try:
        _eventually(lambda: _reconnects(old), seconds=5)
        fresh = RedisRegistry(server.url)
        new_session = fresh.session("s")
        new_runner = new_session.start_subagent_task("t")
        assert new_session.cancel_subagent_task("t", reason="new run only")
        assert _eventually(lambda: new_runner.token.is_cancelled)
        time.sleep(0.5)  # several reconciles of the old worker
        assert old_runner.token.reason in (None, SESSION_LOST_REASON)
        for index in range(20):
            new_session.start_subagent_task(f"more-{index}").complete()

        async def read_until_it_ends() -> None:
            for _ in range(20):
                try:
                    await old_events.__anext__()
                except RegistryUnavailableError:
                    continue  # the reader's connection died with the server: the next read connects again

        with pytest.raises(SessionClosedError):
            asyncio.run(asyncio.wait_for(read_until_it_ends(), timeout=10))
    finally:
        server.stop()


def _reconnects(registry: RedisRegistry) -> bool:
    try:
        registry.sessions()
        return True
    except RegistryUnavailableError:
        return False


# --- 7. The idle-session sweep keeps up and cannot be starved


def _keys_of_sessions_named(admin: Any, pattern: str) -> int:
    """How many keys the sessions whose ids match ``pattern`` still have, whatever the key layout."""
    return sum(1 for _ in admin.scan_iter(f"*{pattern}*", count=10_000))


def test_the_sweep_removes_thousands_of_closed_sessions_promptly(redis_server: RedisServer) -> None:
    count = 3000
    # Opened and closed by a worker that sweeps nothing younger than an hour, then swept by another.
    opener = RedisRegistry(redis_server.url, session_ttl=3600, lease=0.6)
    for index in range(count):
        opener.session(f"closed-{index}").close()
    del opener
    admin = _admin(redis_server)
    assert _keys_of_sessions_named(admin, "closed-") >= count
    began = time.monotonic()
    sweeper = RedisRegistry(redis_server.url, session_ttl=0.3, lease=0.6)
    assert _eventually(lambda: _keys_of_sessions_named(admin, "closed-") == 0, seconds=10)
    # A round every 0.2 s: 100 sessions a round (the old pace) would take 6 s.
    assert time.monotonic() - began < 2.5
    assert sweeper.sessions() == []


def test_busy_sessions_do_not_starve_the_sweep_of_idle_ones(redis_server: RedisServer) -> None:
    registry = RedisRegistry(redis_server.url, session_ttl=1.0, lease=0.6)
    busy = [registry.session(f"busy-{index}").start_subagent_task("long") for index in range(600)]
    time.sleep(1.2)  # every busy session has been looked at: it cannot go, and waits for the next look
    for index in range(50):
        registry.session(f"idle-{index}").close()
    admin = _admin(redis_server)
    assert _keys_of_sessions_named(admin, "idle-") > 0
    assert _eventually(lambda: _keys_of_sessions_named(admin, "idle-") == 0, seconds=4)
    assert len(registry.sessions()) == 600
    for handle in busy:
        handle.complete()


# --- 8. An idle worker's cost does not grow with the sessions it once touched


def test_an_idle_workers_calls_do_not_grow_with_the_sessions_it_touched(redis_server: RedisServer) -> None:
    registry = RedisRegistry(redis_server.url, timeout=0.1, reconcile_interval=0.1, lease=3.0)
    admin = _admin(redis_server)

    def calls_per_second() -> float:
        before = int(admin.info("commandstats").get("cmdstat_fcall", {}).get("calls", 0))
        time.sleep(1.0)
        return int(admin.info("commandstats").get("cmdstat_fcall", {}).get("calls", 0)) - before

    for index in range(400):
        registry.session(f"touched-{index}").start_subagent_task("job").complete()
    # Past four call timeouts the worker lets go of what it no longer uses, and the sweep's one first look at
    # each new session (a reaper's round, a third of the lease) is over.
    time.sleep(1.5)
    idle_rate = calls_per_second()
    # The timer tick (20/s), the lease (1/s) and the reconcile's nothing-to-do: not one call per session.
    assert idle_rate < 60, idle_rate
    assert int(admin.info("commandstats").get("cmdstat_fcall", {}).get("calls", 0)) > 800
    assert admin.zcard(f"subagent-tracker:v2:{{registry}}:w:{_process_of(admin)}") == 0


def _process_of(admin: Any) -> str:
    workers: list[str] = admin.zrange("subagent-tracker:v2:{registry}:workers", 0, -1)
    assert len(workers) == 1
    return workers[0]


# --- 9. Metadata and results keep the in-memory rules


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {}
    for _ in range(depth):
        value = {"a": value}
    return value


@pytest.mark.parametrize(
    ("metadata", "error", "message"),
    [
        ([1, 2], TypeError, "mapping"),
        ("text", TypeError, "mapping"),
        (7, TypeError, "mapping"),
        (_nested(65), ValueError, "64 deep"),
        (_nested(100_000), ValueError, "64 deep"),
        ({1: "a", "1": "b"}, TypeError, "keys must be str"),
        ({"when": object()}, TypeError, "JSON-serialisable"),
        ({"set": {1, 2}}, TypeError, "JSON-serialisable"),
        ({"score": float("nan")}, ValueError, "finite"),
        ({"score": [float("inf")]}, ValueError, "finite"),
    ],
)
def test_redis_metadata_keeps_the_in_memory_rules(
    redis_server: RedisServer, metadata: Any, error: type[Exception], message: str
) -> None:
    session = RedisRegistry(redis_server.url).session("s")
    with pytest.raises(error, match=message):
        session.start_subagent_task("job", metadata=metadata)
    with pytest.raises(error, match=message):
        session.reserve_subagent_task("queued", metadata=metadata)
    assert session.subagent_tasks() == []


def test_redis_snapshot_metadata_is_read_only(redis_server: RedisServer) -> None:
    session = RedisRegistry(redis_server.url).session("s")
    session.start_subagent_task("job", metadata={"tags": ["a", "b"], "inner": {"x": 1}}).complete()
    metadata = session.subagent_task("job").metadata  # type: ignore[union-attr]
    assert metadata == {"tags": ("a", "b"), "inner": {"x": 1}}
    with pytest.raises(TypeError):
        metadata["new"] = 1  # type: ignore[index]
    with pytest.raises(TypeError):
        metadata["inner"]["x"] = 2


@pytest.mark.parametrize(
    ("result", "error", "message"),
    [
        (object(), TypeError, "JSON-serialisable"),
        (_nested(100_000), ValueError, "64 deep"),
        ({2: "two"}, TypeError, "keys must be str"),
    ],
)
def test_a_result_redis_cannot_keep_is_refused_and_the_task_keeps_running(
    redis_server: RedisServer, result: object, error: type[Exception], message: str
) -> None:
    session = RedisRegistry(redis_server.url).session("s")
    handle = session.start_subagent_task("job")
    with pytest.raises(error, match=message):
        handle.complete(result)
    assert session.subagent_task("job").status is SubagentStatus.RUNNING  # type: ignore[union-attr]
    with pytest.raises(error, match=message):
        session.end_subagent_task("job", result=result)
    assert session.subagent_task("job").status is SubagentStatus.RUNNING  # type: ignore[union-attr]
    assert handle.complete({"fine": [1, 2.5, None, True]})
    assert session.subagent_task("job").result == {"fine": [1, 2.5, None, True]}  # type: ignore[union-attr]


# --- 10. Configuration mistakes get errors that say what to do


def test_a_server_that_wants_a_password_says_so() -> None:
    server = RedisServer(extra_arguments=("--requirepass", "s3cret"))
    try:
        url = f"redis://127.0.0.1:{server.port}/0"
        with pytest.raises(ValueError, match="password"):
            RedisRegistry(url, timeout=2)
        with pytest.raises(ValueError, match="password") as refused:
            RedisRegistry(f"redis://:wrong@127.0.0.1:{server.port}/0", timeout=2)
        assert "wrong" not in str(refused.value), "the password is never shown"
        assert RedisRegistry(f"redis://:s3cret@127.0.0.1:{server.port}/0", timeout=2).session("s")
    finally:
        server.stop()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://127.0.0.1:6379/0", "not a Redis URL"),
        ("/tmp/redis.sock", "not a Redis URL"),
        ("not a url at all", "not a Redis URL"),
        ("redis://127.0.0.1:{port}/99", "no such database"),
    ],
)
def test_urls_that_cannot_work_are_value_errors_not_retryable(
    redis_server: RedisServer, url: str, message: str
) -> None:
    with pytest.raises(ValueError, match=message) as refused:
        RedisRegistry(url.format(port=redis_server.port), timeout=2)
    assert not isinstance(refused.value, ConnectionError), "retry loops must not retry it"


# --- 11. Every registry-wide key is checked before a prefix is taken


def test_a_prefix_whose_reaper_lock_is_other_data_is_refused(redis_server: RedisServer) -> None:
    admin = _admin(redis_server)
    admin.set("app:v2:{registry}:reaper", "application data")
    with pytest.raises(ValueError, match="used by other data"):
        RedisRegistry(redis_server.url, key_prefix="app:", timeout=2)
    # A lock of ours (it expires) is no obstacle.
    admin.set("ours:v2:{registry}:reaper", "a-worker/0123", px=5000)
    assert RedisRegistry(redis_server.url, key_prefix="ours:", timeout=2).session("s")


# --- 12. Versions: functions and keys of one version; never replaced silently


def test_a_library_of_another_version_loads_beside_ours_and_is_left_alone(redis_server: RedisServer) -> None:
    admin = _admin(redis_server)
    old_library = (
        "#!lua name=subagent_tracker_v1\n"
        "redis.register_function('st_open', function() return 'the old rules' end)\n"
        "redis.register_function('st_cancel', function() return 'the old rules' end)\n"
    )
    admin.function_load(old_library)
    session = RedisRegistry(redis_server.url).session("s")
    handle = session.start_subagent_task("job")
    assert session.cancel_subagent_task("job")
    assert handle.token.is_cancelled or _eventually(lambda: handle.token.is_cancelled)
    assert admin.fcall("st_open", 0) == "the old rules"
    libraries = {_fields(library)["library_name"] for library in admin.function_list()}
    assert libraries == {"subagent_tracker_v1", "subagent_tracker_v2"}


def test_another_build_of_our_version_is_never_replaced(redis_server: RedisServer) -> None:
    admin = _admin(redis_server)
    RedisRegistry(redis_server.url, timeout=2)
    [ours] = admin.function_list(library="subagent_tracker_v2", withcode=True)
    other_build = _fields(ours)["library_code"] + "\n-- another build of the same version\n"
    admin.function_load(other_build, replace=True)
    with pytest.raises(ValueError, match="another build"):
        RedisRegistry(redis_server.url, timeout=2)
    [library] = admin.function_list(library="subagent_tracker_v2", withcode=True)
    assert _fields(library)["library_code"] == other_build


def _fields(flat: list[Any]) -> dict[str, Any]:
    """A reply of names and values, as RESP2 sends a map."""
    return dict(zip(flat[::2], flat[1::2], strict=True))
