"""CONTRACT §§20 and 21 under faults: each ends with no cancel lost and no task left pending."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis_support import (
    APIS,
    Api,
    Proxy,
    RedisServer,
    RedisTarget,
    Worker,
    connect,
    only_on_one_server,
    start_target,
    wait_finished,
)

from subagent_tracker import (
    LEASE_LOST_REASON,
    WORKER_LOST_ERROR,
    AsyncRedisRegistry,
    RedisRegistry,
    RegistryProtocolError,
    RegistryUnavailableError,
    ReplicationTimeoutError,
    SubagentStatus,
)
from subagent_tracker._loopback import free_port


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisTarget]:
    """One server; a cluster under ``scripts/cluster_reruns.sh`` (``SUBAGENT_TRACKER_TEST_REDIS=cluster``)."""
    target = start_target(tmp_path)
    yield target
    target.stop()


def test_a_cancel_during_client_pause_waits_and_is_not_lost(redis_server: RedisTarget) -> None:
    runner = Worker(redis_server.url, "runner")
    try:
        runner.ask(op="start", session="s", task="job")
        session = RedisRegistry(redis_server.url, timeout=5).session("s")
        assert redis_server.admin("CLIENT", "PAUSE", "400", "ALL") == b"+OK"
        started = time.monotonic()
        assert session.cancel_subagent_task("job", reason="during the pause")
        assert time.monotonic() - started >= 0.2, "the call waited for the pause to end"
        assert runner.ask(op="wait_cancelled", session="s", task="job", timeout=5) == {
            "cancelled": True,
            "reason": "during the pause",
        }
    finally:
        runner.stop()


@pytest.mark.parametrize("api", APIS)
def test_a_cancel_in_the_process_that_runs_the_tasks_returns_with_their_tokens_fired(
    redis_server: RedisTarget, api: Api
) -> None:
    """As in memory, whether or not the push comes: every subscription is dropped first, so it never does."""
    session = connect(api, redis_server.url, timeout=5).session("s")
    root = session.start_subagent_task("root")
    # More children than one step of a cascade reads (32): the rest are the cascade's later steps.
    children = [session.start_subagent_task(f"child-{index}", parent_id="root") for index in range(40)]
    picked = session.start_subagent_task("picked", agent="picked")
    last = session.start_subagent_task("last")
    assert redis_server.admin("CLIENT", "KILL", "TYPE", "pubsub").startswith(b":")
    assert session.cancel_subagent_task("root", reason="by id")
    assert root.token.is_cancelled
    assert [child.token.is_cancelled for child in children] == [True] * len(children)
    assert not picked.token.is_cancelled and not last.token.is_cancelled
    assert session.cancel_subagent_tasks(agent="picked", reason="by filter") == ["picked"]
    assert picked.token.is_cancelled and not last.token.is_cancelled
    assert session.cancel(reason="the session") == 1
    assert last.token.is_cancelled
    closing = session.start_subagent_task("closing")
    assert redis_server.admin("CLIENT", "KILL", "TYPE", "pubsub").startswith(b":")
    assert session.close(reason="closed") == 1
    assert closing.token.is_cancelled
    assert closing.token.reason == "closed"


def test_a_resume_or_an_end_by_id_returns_with_the_runner_paused_in_this_registry_told(
    redis_server: RedisTarget,
) -> None:
    """As in memory: no subscription can be made and the worker's timer never reconciles during the test, so
    only the calls' replies can tell the paused runners."""
    session = RedisRegistry(redis_server.url, timeout=5, reconcile_interval=600).session("s")
    approved = session.start_subagent_task("approved")
    ended = session.start_subagent_task("ended")
    assert approved.pause("approval") and ended.pause("approval")
    assert redis_server.admin("ACL", "SETUSER", "default", "-subscribe") == b"+OK"
    assert redis_server.admin("CLIENT", "KILL", "TYPE", "pubsub").startswith(b":")
    assert session.resume_subagent_task("approved", "yes")
    assert approved.wait_resumed(timeout=0) == "yes"
    with pytest.raises(TimeoutError):
        ended.wait_resumed(timeout=0)
    assert session.end_subagent_task("ended", result="done elsewhere")
    assert ended.wait_resumed(timeout=0) is None, "its own end will change nothing"
    assert not ended.complete()


def test_a_cancel_racing_this_registry_s_own_start_of_the_task_reaches_its_handle(
    redis_server: RedisTarget,
) -> None:
    """A cancel sent while this registry's own start of the task may still be under way: the first that finds
    the task moves it, and the handle the start returns has its token fired. No subscription can be made and
    the worker's timer never reconciles, so only the cancel's reply can tell the start. Which of the two
    replies this process takes first is up to the scheduler, so the race runs many times, bounded in count
    and time."""

    async def race() -> int:
        registry = await AsyncRedisRegistry.connect(redis_server.url, timeout=5, reconcile_interval=600)
        session = await registry.session("s")
        assert redis_server.admin("ACL", "SETUSER", "default", "-subscribe") == b"+OK"
        assert redis_server.admin("CLIENT", "KILL", "TYPE", "pubsub").startswith(b":")
        races, until = 0, time.monotonic() + 10
        while races < 300 and time.monotonic() < until:
            races += 1
            task_id = f"task-{races}"
            starting = asyncio.ensure_future(session.start_subagent_task(task_id))
            for _ in range(1_000):
                if await session.cancel_subagent_task(task_id):
                    break
            else:
                pytest.fail(f"no cancel found {task_id}")
            handle = await starting
            assert handle.token.is_cancelled, f"the start of {task_id} returned with its token unfired"
        return races

    assert asyncio.run(race()) > 0


@pytest.mark.parametrize("api", APIS)
def test_cancels_whose_pushes_were_dropped_by_client_kill_are_delivered_by_the_reconcile(
    redis_server: RedisTarget, api: Api
) -> None:
    runner = Worker(redis_server.url, "runner", api=api)
    try:
        for task in ("root", "child", "other"):
            runner.ask(op="start", session="s", task=task, parent="root" if task == "child" else None)
        session = connect(api, redis_server.url, timeout=5).session("s")
        # Every subscription is dropped, then a cancel by id (with its cascade) and a session cancel are
        # published at once to nobody.
        assert redis_server.admin("CLIENT", "KILL", "TYPE", "pubsub").startswith(b":")
        assert session.cancel_subagent_task("root", reason="pushed to nobody")
        assert session.cancel(reason="session, pushed to nobody") == 1
        for task, reason in [
            ("root", "pushed to nobody"),
            ("child", "pushed to nobody"),
            ("other", "session, pushed to nobody"),
        ]:
            assert runner.ask(op="wait_cancelled", session="s", task=task, timeout=5) == {
                "cancelled": True,
                "reason": reason,
            }
            assert runner.ask(op="complete", session="s", task=task) is False
        child = session.subagent_task("child")
        assert child is not None and (child.cancel_origin, child.cancel_cause) == ("root", "parent")
        other = session.subagent_task("other")
        assert other is not None and (other.cancel_origin, other.cancel_cause) == ("other", "session")
        assert session.pending_subagent_tasks() == []
    finally:
        runner.stop()


def test_an_event_stream_whose_connection_was_killed_connects_again_and_goes_on(
    redis_server: RedisTarget,
) -> None:
    session = RedisRegistry(redis_server.url, timeout=2).session("s")

    async def main() -> None:
        events = session.events()
        first = session.start_subagent_task("before")
        assert (await anext(events)).task_id == "before"
        assert redis_server.admin("CLIENT", "KILL", "TYPE", "normal").startswith(b":")
        # The registry's own connection reconnects too; a call caught by the kill raises, and is made again.
        with contextlib.suppress(RegistryUnavailableError):
            session.start_subagent_task("probe").complete()
        second = session.start_subagent_task("after")
        seen = []
        for _ in range(5):
            try:
                seen.append((await asyncio.wait_for(anext(events), 5)).task_id)
                break
            except RegistryUnavailableError:
                seen.append("unavailable")  # once: the read that found the connection gone
        assert seen[-1] in ("probe", "after") and seen.count("unavailable") <= 1, seen
        events.close()
        first.complete()
        second.complete()

    asyncio.run(main())


def test_a_stopped_and_continued_server_loses_nothing(redis_server: RedisTarget) -> None:
    runner = Worker(redis_server.url, "runner")
    try:
        runner.ask(op="start", session="s", task="job")
        session = RedisRegistry(redis_server.url, timeout=5).session("s")
        redis_server.signal(signal.SIGSTOP)
        threading.Timer(0.4, redis_server.signal, args=(signal.SIGCONT,)).start()
        assert session.cancel_subagent_task("job", reason="while stopped")
        assert runner.ask(op="wait_cancelled", session="s", task="job", timeout=5)["cancelled"] is True
        assert runner.ask(op="complete", session="s", task="job") is False
        final = session.subagent_task("job")
        assert final is not None and (final.status, final.finished) == (SubagentStatus.CANCELLED, True)
    finally:
        runner.stop()


@pytest.mark.parametrize("api", APIS)
def test_a_server_restarted_from_its_append_only_file_loses_no_cancel(tmp_path: Path, api: Api) -> None:
    server = RedisServer(aof_directory=tmp_path)
    runner = Worker(server.url, "runner", api=api)
    try:
        runner.ask(op="start", session="s", task="job")
        server = server.restart()
        session = connect(api, server.url, timeout=5).session("s")
        snapshot = session.subagent_task("job")
        assert snapshot is not None and snapshot.status is SubagentStatus.RUNNING, "the session survived"
        assert session.cancel_subagent_task("job", reason="after the restart")
        assert runner.ask(op="wait_cancelled", session="s", task="job", timeout=5) == {
            "cancelled": True,
            "reason": "after the restart",
        }
    finally:
        runner.stop()
        server.stop()


@pytest.mark.parametrize("api", APIS)
def test_a_worker_stopped_past_its_lease_has_fenced_itself_when_it_continues(
    redis_server: RedisTarget, api: Api
) -> None:
    frozen = Worker(redis_server.url, "frozen", lease=0.5, api=api)
    survivor = connect(api, redis_server.url, worker_id="survivor", lease=0.5)
    try:
        frozen.ask(op="start", session="s", task="job")
        frozen.signal(signal.SIGSTOP)
        session = survivor.session("s")
        snapshot = wait_finished(session, "job", timeout=10)
        assert (snapshot.status, snapshot.error) == (SubagentStatus.FAILED, WORKER_LOST_ERROR)
        frozen.signal(signal.SIGCONT)
        assert frozen.ask(op="wait_cancelled", session="s", task="job", timeout=5) == {
            "cancelled": True,
            "reason": LEASE_LOST_REASON,
        }
        assert frozen.ask(op="complete", session="s", task="job") is False, "its late end changes nothing"
        # Back in service, it runs new work; should it die now, that work is found and failed too.
        assert frozen.ask(op="start", session="s", task="later") == {"cancelled": False, "reason": None}
        frozen.signal(signal.SIGKILL)
        frozen.process.wait(timeout=10)
        snapshot = wait_finished(session, "later", timeout=10)
        assert (snapshot.status, snapshot.error) == (SubagentStatus.FAILED, WORKER_LOST_ERROR)
    finally:
        if frozen.process.poll() is None:
            frozen.signal(signal.SIGCONT)
            frozen.stop()


class _NotRedis:
    """A TCP server on loopback that answers every connection with text that is not the Redis protocol."""

    def __init__(self) -> None:
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            connection.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            connection.close()

    def close(self) -> None:
        self.listener.close()


@pytest.mark.parametrize(
    "describe",
    ["unreachable", "not redis"],
)
def test_bad_servers_get_a_clear_error_within_the_timeout(redis_server: RedisTarget, describe: str) -> None:
    not_redis = _NotRedis()
    urls = {
        "unreachable": f"redis://127.0.0.1:{free_port()}/0",
        "not redis": f"redis://127.0.0.1:{not_redis.port}/0",
    }
    # A server that is down may come back; one that speaks another protocol is the wrong address.
    expected = {"unreachable": RegistryUnavailableError, "not redis": ValueError}
    started = time.monotonic()
    try:
        with pytest.raises(expected[describe], match=r"127\.0\.0\.1|unavailable"):
            RedisRegistry(urls[describe], timeout=0.5)
    finally:
        not_redis.close()
    assert time.monotonic() - started < 3


def test_a_password_the_server_refuses_is_a_value_error_that_never_shows_it(
    redis_server: RedisTarget,
) -> None:
    redis_server = only_on_one_server(redis_server, "it connects to one node by its port")
    # This server wants none: the password is as wrong as one it would refuse, and retrying cannot help.
    started = time.monotonic()
    with pytest.raises(ValueError, match="authenticate") as refused:
        RedisRegistry(f"redis://:wrong@127.0.0.1:{redis_server.port}/0", timeout=0.5)
    assert not isinstance(refused.value, RegistryUnavailableError)
    assert "wrong" not in str(refused.value)
    assert time.monotonic() - started < 3


def test_a_malformed_url_is_a_value_error() -> None:
    with pytest.raises((ValueError, RegistryUnavailableError)):
        RedisRegistry("not a url", timeout=0.5)


def test_a_forked_child_refuses_its_parent_s_registry_and_makes_its_own(redis_server: RedisTarget) -> None:
    parent = RedisRegistry(redis_server.url)
    parent.session("s").start_subagent_task("parent's").complete()
    read, write = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child reports through the pipe
        outcome = []
        try:
            parent.session("s")
        except RuntimeError as error:
            outcome.append("refused" if "os.fork" in str(error) else repr(error))
        fresh = RedisRegistry(redis_server.url).session("s")
        outcome.append(fresh.subagent_task("parent's").status.value)  # type: ignore[union-attr]
        os.write(write, ",".join(outcome).encode())
        os._exit(0)
    os.close(write)
    _, status = os.waitpid(child, 0)
    report = os.read(read, 1024).decode()
    os.close(read)
    assert status == 0
    assert report == "refused,completed"
    assert parent.session("s").subagent_task("parent's") is not None, "the parent's registry still works"


@pytest.mark.parametrize("api", APIS)
def test_connections_reset_by_the_network_lose_no_cancel(redis_server: RedisTarget, api: Api) -> None:
    redis_server = only_on_one_server(redis_server, "a proxy cannot front a cluster's every node")
    proxy = Proxy(redis_server.port)
    try:
        runner = connect(api, proxy.url, worker_id="runner", reconcile_interval=0.2, timeout=1)
        handle = runner.session("s").start_subagent_task("job")
        proxy.reset()
        stopper = connect(api, redis_server.url, worker_id="stopper").session("s")
        assert stopper.cancel_subagent_task("job", reason="while reset")
        assert handle.token.wait(5), "the runner reconnected, resubscribed and reconciled"
        assert handle.token.reason == "while reset"
    finally:
        proxy.close()


@pytest.mark.parametrize("api", APIS)
def test_a_worker_cut_off_past_its_lease_is_failed_and_fences_itself(
    redis_server: RedisTarget, api: Api
) -> None:
    redis_server = only_on_one_server(redis_server, "a proxy cannot front a cluster's every node")
    proxy = Proxy(redis_server.port)
    try:
        runner = connect(api, proxy.url, worker_id="cut-off", lease=0.6, reconcile_interval=0.2, timeout=0.3)
        handle = runner.session("s").start_subagent_task("job")
        survivor = connect(api, redis_server.url, worker_id="survivor", lease=0.6).session("s")
        proxy.blackholed.set()
        snapshot = wait_finished(survivor, "job", timeout=10)
        assert (snapshot.status, snapshot.error) == (SubagentStatus.FAILED, WORKER_LOST_ERROR)
        assert handle.token.wait(5), "the cut-off worker fenced itself"
        assert handle.token.reason == LEASE_LOST_REASON
        proxy.blackholed.clear()
        proxy.reset()
        deadline = time.monotonic() + 10
        while True:
            try:
                assert handle.complete() is False, "its late end changes nothing"
                break
            except RegistryUnavailableError:
                assert time.monotonic() < deadline, "the worker never reconnected"
                time.sleep(0.1)
    finally:
        proxy.close()


def test_a_key_prefix_holding_other_data_is_refused(redis_server: RedisTarget) -> None:
    redis_server = only_on_one_server(redis_server, "it writes a key to one node by hand")
    assert redis_server.admin("SET", "shared:v2:{registry}:workers", "other-data") == b"+OK"
    with pytest.raises(ValueError, match="used by other data"):
        RedisRegistry(redis_server.url, key_prefix="shared:", timeout=1)
    with pytest.raises(ValueError, match="must not contain"):
        RedisRegistry(redis_server.url, key_prefix="app{1}:", timeout=1)


@pytest.mark.parametrize(
    ("option", "value", "expected"),
    [
        ("lease", 0, "lease must be at least 0.003 seconds, got 0"),
        ("lease", 0.002, "lease must be at least 0.003 seconds, got 0.002"),
        ("reconcile_interval", 0, "reconcile_interval must be at least 0.001 seconds, got 0"),
        ("timeout", 0, "timeout must be at least 0.001 seconds, got 0"),
    ],
)
def test_settings_too_short_to_act_on_are_refused_before_connecting(
    option: str, value: float, expected: str
) -> None:
    # Port 1 has no server: a refusal that came after trying to connect would be RegistryUnavailableError.
    with pytest.raises(ValueError, match=f"^{expected}$"):
        RedisRegistry("redis://127.0.0.1:1/0", **{option: value})  # type: ignore[arg-type]


def test_the_shortest_settings_allowed_work(redis_server: RedisTarget) -> None:
    # A 3 ms lease may lapse on a loaded machine (the task is then cancelled or failed): either way it ends.
    registry = RedisRegistry(redis_server.url, lease=0.003, reconcile_interval=0.001, timeout=1)
    session = registry.session("shortest")
    session.start_subagent_task("a").complete()
    task = session.subagent_task("a")
    assert task is not None and task.finished
    # A TTL of 0 is allowed: idle sessions go at the next sweep.
    assert RedisRegistry(redis_server.url, session_ttl=0).worker_id


def test_a_user_without_scripting_gets_a_clear_error_within_the_timeout(redis_server: RedisTarget) -> None:
    redis_server = only_on_one_server(redis_server, "it connects to one node by its port")
    reply = redis_server.admin(
        "ACL", "SETUSER", "noscript", "on", ">secret", "~*", "&*", "+@all", "-@scripting"
    )
    assert reply == b"+OK"
    started = time.monotonic()
    with pytest.raises(ValueError, match=r"may not run what the registry needs") as refused:
        RedisRegistry(f"redis://noscript:secret@127.0.0.1:{redis_server.port}/0", timeout=1)
    assert not isinstance(refused.value, RegistryUnavailableError), "retrying cannot help"
    assert time.monotonic() - started < 3


@pytest.mark.parametrize(
    ("state", "enter", "leave"),
    [
        ("OOM", ("CONFIG", "SET", "maxmemory", "1"), ("CONFIG", "SET", "maxmemory", "0")),
        ("(?i)read ?only", ("REPLICAOF", "127.0.0.1", "{port}"), ("REPLICAOF", "NO", "ONE")),
    ],
)
def test_a_server_that_cannot_write_for_now_is_unavailable_and_the_call_works_once_it_can(
    redis_server: RedisTarget, state: str, enter: tuple[str, ...], leave: tuple[str, ...]
) -> None:
    """Short of memory, or a replica (as a primary is for a moment during a failover): a retry may succeed, so
    these stay ``RegistryUnavailableError``, which retry loops retry."""
    if enter[0] == "REPLICAOF":
        redis_server = only_on_one_server(redis_server, "a cluster node cannot be made a replica by hand")
    session = RedisRegistry(redis_server.url, timeout=1).session("s")
    assert redis_server.admin(*(part.format(port=free_port()) for part in enter)) == b"+OK"
    try:
        with pytest.raises(RegistryUnavailableError, match=state):
            session.start_subagent_task("job")
        assert session.subagent_task("job") is None, "reads still work, and nothing was written"
    finally:
        assert redis_server.admin(*leave) == b"+OK"
    session.start_subagent_task("job").complete()


def test_an_error_reply_the_store_does_not_know_is_a_protocol_error_never_retryable(
    redis_server: RedisTarget,
) -> None:
    redis_server = only_on_one_server(redis_server, "it overwrites a key on one node by hand")
    session = RedisRegistry(redis_server.url, timeout=1).session("s")
    session.start_subagent_task("job").complete()
    (task_key,) = redis_server.cli("KEYS", "*t:job")
    assert redis_server.cli("SET", task_key, "not a hash") == ["OK"]
    with pytest.raises(RegistryProtocolError, match="WRONGTYPE") as refused:
        session.subagent_task("job")
    assert not isinstance(refused.value, ConnectionError), "nothing tells callers to retry"


def test_a_cancel_no_replica_confirms_took_effect_and_says_so(redis_server: RedisTarget) -> None:
    """``wait_for_replicas`` on a server with no replica: the cancel is made, but cannot be confirmed."""
    redis_server = only_on_one_server(redis_server, "a cluster has replicas, which confirm the cancel")
    registry = RedisRegistry(redis_server.url, timeout=1.0, wait_for_replicas=1)
    session = registry.session("s")
    handle = session.start_subagent_task("job")
    started = time.monotonic()
    with pytest.raises(ReplicationTimeoutError, match="0 of the 1 replicas") as unconfirmed:
        session.cancel_subagent_task("job", "stop")
    assert time.monotonic() - started < 2, "it waits three quarters of the timeout, not the retries"
    assert not isinstance(unconfirmed.value, ConnectionError), "a retry would not cancel it again"
    # Read back by a client that does not wait for replicas: every call of the first waits too.
    unreplicated = RedisRegistry(redis_server.url, timeout=5).session("s")
    cancelled = unreplicated.subagent_task("job")
    assert cancelled is not None and cancelled.status == "cancelled", "it took effect"
    assert handle.token.wait(2)
    handle.complete()


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"wait_for_replicas": -1}, ValueError, "wait_for_replicas"),
        ({"wait_for_replicas": 1.5}, TypeError, "wait_for_replicas must be an int"),
        ({"cluster": "yes"}, TypeError, "bool"),
    ],
)
def test_cluster_and_replica_settings_of_the_wrong_kind_are_refused(
    options: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        RedisRegistry("redis://127.0.0.1:1/0", **options)  # type: ignore[arg-type]
