"""The coroutine of a native async call that checks its arguments at the call but needs no event loop until it
is awaited: ``asyncio.run(AsyncRedisRegistry.connect(url))`` works, as it does for ``redis.asyncio``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

_T = TypeVar("_T")


async def deferred(start: Callable[[], Awaitable[_T]]) -> _T:
    """Runs ``start()``, which begins the call on the running loop, once this coroutine is awaited."""
    return await start()
