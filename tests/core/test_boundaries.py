"""The boundary between the package and its binding goes one way: the package hands the binding what it uses
of the Python half once, at import, and the binding imports no module of the package. A call goes from Python
into the binding and never back into the package's modules by an import."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

import subagent_tracker
from subagent_tracker import AsyncRedisSession, RedisSession, Session, _native

# Every path on which the binding once imported a package module: an error, a status, a progress log, a
# registry's session, the checkpoints a token hands out, an async cancel handler, and a session's spawn.
_PROBE = textwrap.dedent(
    """
    import asyncio, sys
    import subagent_tracker
    from subagent_tracker import Registry, Session, TaskCancelledError, UnknownTaskError

    class NoPackageImports:
        def find_spec(self, name, path=None, target=None):
            if name.startswith("subagent_tracker"):
                raise AssertionError(f"the binding imported {name}")
            return None

    for name in [name for name in sys.modules if name.startswith("subagent_tracker.")]:
        if name != "subagent_tracker._native":
            del sys.modules[name]
    sys.meta_path.insert(0, NoPackageImports())

    session = Registry().session("s")
    assert type(session) is Session
    try:
        session.claim_subagent_task("missing")
    except UnknownTaskError:
        pass
    handle = session.start_subagent_task("job")
    handle.progress("half way")
    snapshot = session.subagent_task("job")
    assert snapshot.status == "running" and snapshot.progress_log[0].message == "half way"

    async def main():
        handled = asyncio.Event()

        async def on_cancel():
            handled.set()

        handle.token.on_cancel(on_cancel)

        async def chunks():
            yield 1
            await asyncio.sleep(60)

        stream = handle.token.guard(chunks())
        assert await stream.__anext__() == 1
        pending = asyncio.ensure_future(handle.token.run(asyncio.sleep(60)))
        spawned = session.spawn_subagent_task(lambda task: asyncio.sleep(60), "spawned", grace=0.05)
        await asyncio.sleep(0)
        session.cancel_subagent_task("job", "stop")
        for cancelled in (stream.__anext__(), pending):
            try:
                await cancelled
            except TaskCancelledError:
                pass
            else:
                raise AssertionError("the token did not stop it")
        session.cancel_subagent_task("spawned")
        assert (await spawned).status == "cancelled"
        await asyncio.wait_for(handled.wait(), 5)

    asyncio.run(main())
    handle.complete()
    print("one way")
    """
)


def test_the_binding_imports_no_module_of_the_package_on_any_path() -> None:
    finished = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=60)
    assert finished.returncode == 0, finished.stderr
    assert finished.stdout.strip() == "one way"


def test_the_python_half_is_handed_over_once_with_the_classes_the_binding_builds() -> None:
    with pytest.raises(TypeError, match="must be a subclass of RedisSession"):
        _native._bind_python_half(
            errors=subagent_tracker._errors,
            status=subagent_tracker.SubagentStatus,
            progress_entry=subagent_tracker.ProgressEntry,
            guarded_stream=subagent_tracker.GuardedStream,
            run_until_cancelled=subagent_tracker.run_until_cancelled,
            run_cancel_handler=subagent_tracker._checkpoints.run_cancel_handler,
            session=Session,
            redis_session=Session,  # type: ignore[arg-type]
            async_redis_session=AsyncRedisSession,
        )
    assert type(subagent_tracker.Registry().session()) is Session, "a refused call changes nothing"
    assert issubclass(RedisSession, _native.RedisSession)
