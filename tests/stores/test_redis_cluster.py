"""The Redis store on a Redis Cluster (three primaries, three replicas, started on loopback by the fixtures):
sessions spread across the primaries by hash slot, and what a failover keeps.

The contract's model and the across-process tests also run against a cluster (``test_contract_model.py``,
``test_redis_across_processes.py``); this file holds what only a cluster has. The failover tests start a
cluster each and wait out a failover: ``scripts/cluster_reruns.sh`` runs them, beside the fault and stress
tests on a cluster, to keep the README's test command within its time."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis_support import TARGET_VARIABLE, RedisCluster, RedisServer, SlotMigration

from subagent_tracker import (
    RedisRegistry,
    RedisSession,
    RegistryUnavailableError,
    ReplicationTimeoutError,
    SubagentStatus,
)

#: The failover tests run under ``scripts/cluster_reruns.sh``.
failover = pytest.mark.skipif(
    os.environ.get(TARGET_VARIABLE) != "cluster",
    reason="scripts/cluster_reruns.sh runs the failover tests",
)

#: The longest a failover may take here: the nodes call a primary dead after 1 s without an answer.
FAILOVER_BOUND = 15.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[RedisCluster]:
    """A cluster of the test's own, which it may break."""
    made = RedisCluster(tmp_path)
    yield made
    made.stop()


def _keys_per_primary(cluster: RedisCluster) -> dict[int, int]:
    counts = {}
    for node in cluster.primaries():
        keyspace = node.cli("INFO", "keyspace")
        line = next((line for line in keyspace if line.startswith("db0:")), "db0:keys=0")
        counts[node.port] = int(line.split("keys=")[1].split(",")[0])
    return counts


def test_a_cluster_setting_the_node_contradicts_is_refused_with_what_to_do(
    redis_cluster: RedisCluster, module_redis_server: RedisServer
) -> None:
    """A one-server client on a cluster node would retry its MOVED answers until its timeout; a cluster client
    on a plain server cannot start. Both are set-up mistakes: ValueErrors that say what to set."""
    with pytest.raises(ValueError, match="is a node of a Redis Cluster, but the cluster setting says"):
        RedisRegistry(redis_cluster.url, cluster=False, timeout=2)
    with pytest.raises(ValueError, match="is not a node of a Redis Cluster, but the cluster setting"):
        RedisRegistry(module_redis_server.url, cluster=True, timeout=2)
    # Unset, the registry asks each node which it is.
    RedisRegistry(redis_cluster.url).session("asked").start_subagent_task("t").complete()
    RedisRegistry(module_redis_server.url).session("asked").start_subagent_task("t").complete()


def test_a_thousand_sessions_spread_evenly_across_the_primaries(redis_cluster: RedisCluster) -> None:
    """Counted with ``INFO keyspace`` on each primary, before and after: the keys the 1,000 sessions added."""
    registry = RedisRegistry(redis_cluster.url, cluster=True, key_prefix="spread:")
    before = _keys_per_primary(redis_cluster)
    for index in range(1000):
        registry.session(f"user-{index}")
    after = _keys_per_primary(redis_cluster)
    counts = {port: after[port] - before[port] for port in after}
    total = sum(counts.values())
    # 1,000 session hashes, and a few keys of the registry (its session index and its worker's lease).
    assert 1000 <= total <= 1010, counts
    share = total / len(counts)
    print(f"\nkeys per primary (INFO keyspace): {sorted(counts.values())}; an even share is {share:.0f}")
    for port, keys in counts.items():
        assert abs(keys - share) <= 0.2 * share, f"primary {port} holds {keys} keys, not {share:.0f} ± 20%"


def _session_on(registry: RedisRegistry, primary: RedisServer, name: str) -> RedisSession:
    """A session whose keys live on ``primary``."""
    for index in range(10_000):
        session_id = f"{name}-{index}"
        slot = int(primary.cli("CLUSTER", "KEYSLOT", f"{{s:{session_id}}}")[0])
        if any(start <= slot <= end for start, end in _slots_of(primary)):
            return registry.session(session_id)
    raise AssertionError("no session id hashed to the primary")


def _slots_of(node: RedisServer) -> list[tuple[int, int]]:
    node_id = node.cli("CLUSTER", "MYID")[0]
    ranges = []
    for line in node.cli("CLUSTER", "NODES"):
        fields = line.split()
        if fields[0] != node_id:
            continue
        for part in fields[8:]:
            if "-" in part and not part.startswith("["):
                start, end = part.split("-")
                ranges.append((int(start), int(end)))
            elif part.isdigit():
                ranges.append((int(part), int(part)))
    return ranges


def _kill(node: RedisServer) -> float:
    node.process.kill()
    node.process.wait(timeout=10)
    return time.monotonic()


def _cancel_until_answered(session: RedisSession, task_id: str) -> bool | None:
    """Cancels, retrying while the cluster cannot answer; None when the answer is a cancel not confirmed
    replicated."""
    deadline = time.monotonic() + FAILOVER_BOUND
    while True:
        try:
            return session.cancel_subagent_task(task_id, "stop")
        except ReplicationTimeoutError:
            return None
        except RegistryUnavailableError:
            assert time.monotonic() < deadline, "the cluster did not answer again after the failover"
            time.sleep(0.05)


@failover
def test_after_a_primary_dies_cancels_succeed_again_and_runs_survive(cluster: RedisCluster) -> None:
    registry = RedisRegistry(cluster.url, cluster=True, timeout=1, worker_id="runner")
    victim = cluster.primaries()[0]
    session = _session_on(registry, victim, "failover")
    handles = {task_id: session.start_subagent_task(task_id) for task_id in ("a", "b", "c")}
    cluster.wait_until_healthy()  # the replica has the starts
    died = _kill(victim)
    assert _cancel_until_answered(session, "a") is True
    recovered = time.monotonic() - died
    print(f"\nfrom the primary's death until a cancel succeeded: {recovered:.2f} s")
    assert handles["a"].token.wait(5), "the runner's token fired after the failover"
    # The runs this worker held are still its own on the new primary: they end as any run does.
    assert handles["b"].complete("done") is True
    task = session.subagent_task("b")
    assert task is not None and task.status is SubagentStatus.COMPLETED and task.result == "done"
    assert not handles["c"].token.is_cancelled
    handles["c"].complete()
    handles["a"].complete()


@failover
def test_with_wait_for_replicas_no_acknowledged_cancel_is_lost_across_a_failover(
    cluster: RedisCluster,
) -> None:
    """Cancels one by one, the session's primary killed right after the 100th returned true; the cancels go on
    through the failover, and after the dead node came back as the new primary's replica. Every cancel that
    returned true is in the cluster afterwards. While the new primary has no replica in sync, a cancel
    takes effect but cannot be confirmed: ``ReplicationTimeoutError``."""
    registry = RedisRegistry(cluster.url, cluster=True, timeout=1, wait_for_replicas=1, worker_id="runner")
    victim = cluster.primaries()[0]
    session = _session_on(registry, victim, "acknowledged")
    count = 320
    handles = session.start_subagent_tasks([{"task_id": f"t{index}"} for index in range(count)])
    acknowledged: list[str] = []
    unconfirmed: list[str] = []
    pending = [f"t{index}" for index in range(count)]

    def cancel_next() -> None:
        task_id = pending.pop(0)
        answer = _cancel_until_answered(session, task_id)
        (acknowledged if answer is True else unconfirmed).append(task_id)

    for _ in range(100):
        cancel_next()
    assert len(acknowledged) == 100
    died = _kill(victim)
    while not cluster.has_failed_over(victim):
        cancel_next()
        assert time.monotonic() - died < FAILOVER_BOUND, "no replica took over"
    failed_over = time.monotonic() - died
    cluster.restart(victim)
    cluster.wait_until_healthy()
    while pending:
        cancel_next()
    lost = [
        task_id
        for task_id in acknowledged
        if (task := session.subagent_task(task_id)) is None or task.status is not SubagentStatus.CANCELLED
    ]
    print(
        f"\n{len(acknowledged)} cancels acknowledged, {len(unconfirmed)} took effect unconfirmed while the "
        f"new primary had no replica, {len(lost)} acknowledged cancels lost; failover in {failed_over:.2f} s"
    )
    assert len(acknowledged) >= 200
    assert lost == []
    for handle in handles:
        handle.complete()


def test_a_session_whose_slot_moves_is_never_cut_in_half(redis_cluster: RedisCluster) -> None:
    """Defects 5-7 of the slot-migration attack: a function wrote part of a transition and then failed on a
    key that had moved, that failure was a ``RegistryProtocolError``, and functions ran on the node the
    slot moves to without the session's other keys. The slot moves here as ``redis-cli --cluster reshard``
    moves it; while it moves, every transition is refused before it runs with ``RegistryUnavailableError``,
    and after it the same calls succeed."""
    session = RedisRegistry(redis_cluster.url, timeout=0.5, key_prefix="moving:").session("moving")
    first = session.start_subagent_task("first")
    second = session.start_subagent_task("second")
    base = "moving:v2:{s:moving}:"
    migration = SlotMigration(redis_cluster, f"{base}session")
    migration.move(f"{base}events")
    with pytest.raises(RegistryUnavailableError):
        first.complete("done")
    with pytest.raises(RegistryUnavailableError):
        session.cancel_subagent_task("second", "stop")
    assert migration.source.cli("HGET", f"{base}t:first", "status") == ["running"]
    migration.finish()

    assert first.complete("done") is True
    assert session.cancel_subagent_task("second", "stop") is True
    assert second.token.wait(5)
    events = "\n".join(migration.target.cli("XRANGE", f"{base}events", "-", "+"))
    assert "ended" in events
    assert "cancelled" in events
