"""Shared helpers for the pytest suite."""

from __future__ import annotations

import gc
import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis_support import STARTED_SERVERS, RedisCluster, RedisServer

from subagent_tracker import RedisRegistry, Session
from subagent_tracker.integrations._support import BlockingSession


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Spreads each folder's test files evenly through the run, each file's tests kept together (its module's
    servers start once). pytest-xdist hands tests out in this order, and the store tests (servers, clusters,
    subprocesses) run all at once on every worker would starve each other at the end of the run."""
    files: dict[Path, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.path, []).append(item)
    folders: dict[Path, list[Path]] = {}
    for path in files:
        folders.setdefault(path.parent, []).append(path)
    position = {
        path: (index + 0.5) / len(paths) for paths in folders.values() for index, path in enumerate(paths)
    }
    items[:] = [item for path in sorted(files, key=position.__getitem__) for item in files[path]]


@pytest.fixture
def session() -> Session:
    return Session("test-session", max_finished_tasks=100_000)


@pytest.fixture(scope="session", autouse=True)
def no_redis_server_outlives_the_run() -> Iterator[None]:
    """Every server a test starts is stopped by it: one left running fails the run (and is stopped here), so
    that a test that loses track of a server it restarted cannot leave it behind on the machine."""
    yield
    left = [process for process in STARTED_SERVERS if process.poll() is None]
    for process in left:
        process.kill()
        process.wait(timeout=10)
    assert not left, f"{len(left)} redis-server process(es) were never stopped: {[p.args for p in left]}"


@pytest.fixture(autouse=True)
def _collect_garbage_between_tests() -> None:
    # Handles end their tasks when collected; collect now so no test sees another's leftovers.
    gc.collect()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisCluster]:
    """One Redis Cluster for the whole run (three primaries, three replicas, on free loopback ports), which
    the tests share and never break: each uses sessions of its own. The failover tests make their own."""
    cluster = RedisCluster(tmp_path_factory.mktemp("cluster"))
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def module_redis_server() -> Iterator[RedisServer]:
    """One redis-server for a test module, on a free loopback port, stopped after the module."""
    server = RedisServer()
    yield server
    server.stop()


_TRACKED_SESSIONS = itertools.count()


@pytest.fixture(params=["memory", "redis"])
def tracked_session(request: pytest.FixtureRequest) -> BlockingSession:
    """Each session kind the integrations accept: in memory, and a Redis session of its own on the module's
    server."""
    if request.param == "memory":
        return Session(max_finished_tasks=10_000)
    server: RedisServer = request.getfixturevalue("module_redis_server")
    return RedisRegistry(server.url, reconcile_interval=0.1).session(f"tracked-{next(_TRACKED_SESSIONS)}")
