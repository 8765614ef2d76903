"""``python -m subagent_tracker demo --web``: the in-memory demo with its dashboard on a local port."""

from __future__ import annotations

import asyncio
import contextlib

from subagent_tracker import Registry
from subagent_tracker._demo import WEB_START_WAIT_SECONDS, DemoOptions, DemoSummary, run_demo
from subagent_tracker._loopback import free_port
from subagent_tracker.dashboard._serve import server, start_serving


async def run_demo_with_dashboard(
    options: DemoOptions, port: int, linger: float | None, start_wait: float = WEB_START_WAIT_SECONDS
) -> DemoSummary:
    """Runs the demo on a registry that the dashboard shows, once the page (or any client) has connected or
    ``start_wait`` seconds have passed, then keeps the dashboard up for ``linger`` seconds (``None``: until
    Ctrl-C)."""
    registry = Registry()
    port = port or free_port()
    connected = asyncio.Event()
    dashboard = server(
        registry, host="127.0.0.1", port=port, token=None, details=True, first_request=connected
    )
    serving = await start_serving(dashboard)
    print(f"dashboard: http://127.0.0.1:{port}/  (open it to watch the demo live)", flush=True)
    print(f"the demo starts when the page connects, or in {start_wait:g} s", flush=True)
    try:
        try:
            await asyncio.wait_for(connected.wait(), start_wait)
            print("the page connected: starting the demo", flush=True)
        except asyncio.TimeoutError:
            print(f"no page connected within {start_wait:g} s: starting the demo", flush=True)
        summary = await run_demo(options, registry)
        if linger is None:
            print("the demo is over; the dashboard stays up until Ctrl-C", flush=True)
            await serving
        else:
            await asyncio.sleep(linger)
    finally:
        dashboard.should_exit = True
        with contextlib.suppress(BaseException):
            await serving
    return summary
