"""``default_registry()``: one registry per process, made on first use, that reaches any of its sessions by
id; a forked child gets its own."""

from __future__ import annotations

import os
import threading

import pytest

from subagent_tracker import Registry, _default_registry, default_registry


def test_every_call_returns_the_same_registry() -> None:
    registry = default_registry()
    assert isinstance(registry, Registry)
    assert default_registry() is registry


def test_a_stop_reaches_a_session_made_elsewhere_in_the_process() -> None:
    session = default_registry().session("default-registry-stop")
    with session.start_subagent_task("worker") as task:
        found = default_registry().get_session("default-registry-stop")
        assert found == session
        assert found is not None and found.cancel(reason="user pressed stop") == 1
        assert task.token.is_cancelled
    session.close()


def test_threads_that_ask_first_at_once_share_one_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_default_registry, "_registry", None)
    start = threading.Barrier(8)
    seen: list[Registry] = []

    def ask() -> None:
        start.wait(timeout=5)
        seen.append(default_registry())

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=5)
    assert len(seen) == 8
    assert all(registry is seen[0] for registry in seen)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork is POSIX only")
def test_a_forked_child_starts_with_an_empty_registry_of_its_own() -> None:
    parent_session = default_registry().session("default-registry-fork")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - runs in the child, which reports through the pipe
        try:
            registry = default_registry()
            answer = b"fresh" if registry.get_session("default-registry-fork") is None else b"shared"
            os.write(write, answer)
        finally:
            os._exit(0)
    os.close(write)
    try:
        answer = os.read(read, 16)
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    assert answer == b"fresh"
    assert default_registry().get_session("default-registry-fork") == parent_session
    parent_session.close()
    assert _default_registry._registry is default_registry()
