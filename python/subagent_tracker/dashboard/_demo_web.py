"""``python -m subagent_tracker demo --web``: the in-memory demo with its dashboard on a local port."""

from __future__ import annotations

import asyncio
import contextlib

from subagent_tracker import Registry
from subagent_tracker._demo import DemoOptions, DemoSummary, run_demo
from subagent_tracker._loopback import free_port
from subagent_tracker.dashboard._serve import server, start_serving


async def run_demo_with_dashboard(options: DemoOptions, port: int, linger: float | None) -> DemoSummary:
    """Runs the demo on a registry that the dashboard shows, then keeps the dashboard up for ``linger``
    seconds (``None``: until Ctrl-C)."""
    registry = Registry()
    port = port or free_port()
    dashboard = server(registry, host="127.0.0.1", port=port, token=None, details=True)
    serving = await start_serving(dashboard)
    print(f"dashboard: http://127.0.0.1:{port}/  (open it to watch the demo live)", flush=True)
    try:
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
