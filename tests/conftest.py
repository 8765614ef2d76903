"""Shared helpers for the pytest suite."""

from __future__ import annotations

import gc
import itertools
from collections.abc import Iterator

import pytest
from redis_support import RedisCluster, RedisServer

from subagent_tracker import RedisRegistry, Session
from subagent_tracker.integrations._support import BlockingSession


@pytest.fixture
def session() -> Session:
    return Session("test-session", max_finished_tasks=100_000)


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
