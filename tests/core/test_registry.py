"""CONTRACT §19: sessions looked up by id in a registry."""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
import weakref

import pytest

from subagent_tracker import Registry, Session


def test_session_gets_or_creates_and_get_session_never_creates() -> None:
    registry = Registry()
    assert registry.get_session("run") is None
    created = registry.session("run", max_finished_tasks=7)
    assert isinstance(created, Session)
    assert created.session_id == "run"
    again = registry.session("run", max_finished_tasks=99)
    assert again == created and hash(again) == hash(created)
    assert again.max_finished_tasks == 7, "an existing session keeps its settings"
    assert registry.get_session("run") == created
    assert registry.get_session("other") is None
    assert registry.sessions() == ["run"]
    assert created != Session("run"), "a session made outside the registry is another session"


def test_a_generated_session_id_is_listed() -> None:
    registry = Registry()
    session = registry.session()
    assert registry.sessions() == [session.session_id]


@pytest.mark.parametrize(
    ("session_id", "error"), [("", ValueError), (5, TypeError), ("x" * 10_000, ValueError)]
)
def test_bad_session_ids_are_refused(session_id: object, error: type[Exception]) -> None:
    registry = Registry()
    with pytest.raises(error, match="session_id"):
        registry.session(session_id)  # type: ignore[arg-type]
    with pytest.raises(error, match="session_id"):
        registry.get_session(session_id)  # type: ignore[arg-type]
    assert registry.sessions() == []


def test_bad_settings_create_nothing() -> None:
    registry = Registry()
    with pytest.raises(ValueError, match="max_finished_tasks"):
        registry.session("run", max_finished_tasks=-1)
    assert registry.sessions() == []


def test_a_stop_reaches_a_task_through_the_registry() -> None:
    registry = Registry()
    handle = registry.session("run").start_subagent_task("worker")
    # The code that receives "stop" holds only the ids.
    session = registry.get_session("run")
    assert session is not None
    assert session.cancel_subagent_task("worker", reason="user pressed stop")
    assert handle.token.is_cancelled
    handle.complete()


def test_a_session_from_the_registry_awaits_and_spawns() -> None:
    async def main() -> None:
        registry = Registry()
        session = registry.session("run")

        async def work(handle: object) -> str:
            return "done"

        spawned = session.spawn_subagent_task(work, "job")
        final = await registry.session("run").wait_subagent_task("job", timeout=5)
        assert final.result == "done"
        await spawned

    asyncio.run(asyncio.wait_for(main(), 10))


def test_a_closed_session_leaves_once_its_tasks_are_finished() -> None:
    registry = Registry()
    session = registry.session("run")
    running = session.start_subagent_task("a")
    session.reserve_subagent_task("q")
    assert session.close() == 2
    assert registry.get_session("run") is not None, "a cancelled runner is still running"
    running.complete()
    assert registry.get_session("run") is None
    assert registry.sessions() == []
    fresh = registry.session("run")
    assert fresh != session and not fresh.closed
    queued = session.subagent_task("q")
    assert queued is not None and queued.finished, "the old session keeps answering"


def test_an_empty_session_leaves_when_closed_and_an_open_one_stays() -> None:
    registry = Registry()
    registry.session("open").start_subagent_task().complete()
    registry.session("empty").close()
    assert registry.sessions() == ["open"]


def test_concurrent_get_or_create_makes_one_session() -> None:
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for round_ in range(50):
            registry = Registry()
            barrier = threading.Barrier(4)
            sessions: list[Session] = []
            threads = [threading.Thread(target=_create, args=(registry, barrier, sessions)) for _ in range(4)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            # One object, not merely equal ones: a second object of a session that later leaves its registry
            # would show the session's values to the garbage collector a second time.
            assert len(sessions) == 4 and all(session is sessions[0] for session in sessions), round_
            assert registry.sessions() == ["run"]
    finally:
        sys.setswitchinterval(previous)


def test_a_registry_keeps_no_trace_of_session_objects_gone() -> None:
    registry = Registry()
    for index in range(1_000):
        # Each object goes at once; its session stays listed, so no two sessions share an address (and so a
        # place in the registry's record of the objects it handed out).
        registry.session(f"run-{index}")
    assert len(registry.sessions()) == 1_000
    # That record, shown to the collector: swept as it grows.
    (handed_out,) = [referent for referent in gc.get_referents(registry) if isinstance(referent, dict)]
    assert len(handed_out) <= 64


def _create(registry: Registry, barrier: threading.Barrier, sessions: list[Session]) -> None:
    barrier.wait()
    sessions.append(registry.session("run"))


def test_a_registry_in_a_cycle_through_task_metadata_is_collected() -> None:
    class Marker:
        pass

    registry = Registry()
    marker = Marker()
    registry.session("run").reserve_subagent_task("job", metadata={"registry": registry, "marker": marker})
    collected = weakref.ref(marker)
    del registry, marker
    gc.collect()
    assert collected() is None


def _shown(value: object, *holders: object) -> int:
    """How many references to ``value`` the garbage collector is shown by ``holders``."""
    return sum(1 for holder in holders for referent in gc.get_referents(holder) if referent is value)


@pytest.mark.parametrize("from_registry", [False, True])
def test_each_value_is_shown_to_the_collector_once_for_each_reference_held(from_registry: bool) -> None:
    """A child with no metadata of its own shares its parent's: one reference, shown once. A registry's
    session has a Python object for each call that hands it out; the registry shows its values, and none of
    them does. (Shown more often than held, a reference breaks the collector's count: a debug build of CPython
    aborts.)"""
    registry = Registry()
    first = registry.session("shared") if from_registry else Session()
    second = registry.get_session("shared") if from_registry else first
    parent = first.start_subagent_task("parent", metadata={"k": "v"})
    child = first.start_subagent_task("child", parent_id="parent")
    parent_snapshot, child_snapshot = first.subagent_task("parent"), first.subagent_task("child")
    assert parent_snapshot is not None and child_snapshot is not None
    metadata = child_snapshot.metadata
    assert metadata is parent_snapshot.metadata
    del parent_snapshot, child_snapshot
    # What the sessions hold: the count less this function's own reference and getrefcount's argument.
    held = sys.getrefcount(metadata) - 2
    assert held == 1
    holders = [registry, first] + ([second] if second is not first else [])
    assert _shown(metadata, *holders) == held
    child.complete()
    parent.complete()


def test_an_object_of_a_registrys_session_collected_in_a_cycle_leaves_the_session_whole() -> None:
    """The collector clears the session object that only a garbage cycle holds; the registry's session, which
    the registry still lists, keeps its metadata and results."""
    registry = Registry()
    handle = registry.session("kept").start_subagent_task("a", metadata={"k": "v"})
    handle.complete(result={"answer": 42})
    session = registry.session("kept")

    class Holder:
        pass

    holder = Holder()
    holder.itself = holder  # type: ignore[attr-defined]
    holder.session = session  # type: ignore[attr-defined]
    del holder, session
    gc.collect()
    snapshot = registry.session("kept").subagent_task("a")
    assert snapshot is not None
    assert snapshot.metadata == {"k": "v"}
    assert snapshot.result == {"answer": 42}


def test_a_session_that_left_its_registry_shows_its_values_again() -> None:
    """Closed with every task finished, a session leaves its registry: a cycle through its values is then its
    own to show, and is collected."""

    class Marker:
        pass

    registry = Registry()
    session = registry.session("leaving")
    marker = Marker()
    collected = weakref.ref(marker)
    handle = session.start_subagent_task("a", metadata={"session": session, "marker": marker})
    handle.complete()
    session.close()
    assert registry.sessions() == []
    del session, handle, marker
    gc.collect()
    assert collected() is None


def test_a_registry_hands_out_one_object_per_session_while_it_lives() -> None:
    """One object at a time, so that the one object shows the session's values to the collector once the
    registry no longer lists it; a new one once it has gone."""
    registry = Registry()
    first = registry.session("one")
    assert registry.session("one") is first
    assert registry.get_session("one") is first
    gone = weakref.ref(first)
    del first
    assert gone() is None
    again = registry.session("one")
    assert registry.get_session("one") is again


def test_a_session_object_keeps_its_registry_and_its_values_alive() -> None:
    """Held alone, a session object keeps the registry that handed it out, and so the values that registry
    shows: a collection never takes them for garbage, even when only a task's metadata refers to the
    registry."""
    registry = Registry()
    session = registry.session("held")
    handle = session.start_subagent_task("a", metadata={"registry": registry, "k": "v"})
    handle.complete(result={"answer": 42})
    del registry, handle
    gc.collect()
    snapshot = session.subagent_task("a")
    assert snapshot is not None
    metadata = dict(snapshot.metadata or {})
    assert isinstance(metadata.pop("registry", None), Registry)
    assert metadata == {"k": "v"}
    assert snapshot.result == {"answer": 42}
