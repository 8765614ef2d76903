"""Ctrl-C in the command line's asyncio commands: an event the command waits on beside its work, so that it
stops that work through the library (a session cancel, a server's shutdown) rather than at whatever line a
``KeyboardInterrupt`` would land on."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def ctrl_c_sets(pressed: asyncio.Event) -> Iterator[None]:
    """While inside, SIGINT sets ``pressed`` on the running loop. Where the loop cannot take the signal (a
    thread other than the main one, a platform without it), Ctrl-C raises ``KeyboardInterrupt`` as usual."""
    loop = asyncio.get_running_loop()
    try:
        loop.add_signal_handler(signal.SIGINT, pressed.set)
    except (NotImplementedError, RuntimeError, ValueError):
        yield
        return
    try:
        yield
    finally:
        loop.remove_signal_handler(signal.SIGINT)


async def set_before_done(event: asyncio.Event, work: asyncio.Future[Any]) -> bool:
    """Waits until ``work`` is done or ``event`` is set; true if ``event`` was set first, ``work`` still
    running (the caller stops it as it must)."""
    waiting = asyncio.ensure_future(event.wait())
    try:
        await asyncio.wait({work, waiting}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiting.cancel()
    return not work.done()
