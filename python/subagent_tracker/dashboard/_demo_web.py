"""``python -m subagent_tracker demo --web``: the in-memory demo with its dashboard on a local port."""

from __future__ import annotations

import asyncio
from collections import Counter

from subagent_tracker import Registry
from subagent_tracker._ctrl_c import ctrl_c_sets, set_before_done
from subagent_tracker._demo import WEB_START_WAIT_SECONDS, DemoOptions, DemoSummary, run_demo
from subagent_tracker.dashboard._serve import address, bind, server, start_serving, stop_serving


async def run_demo_with_dashboard(
    options: DemoOptions, port: int, linger: float | None, start_wait: float = WEB_START_WAIT_SECONDS
) -> DemoSummary:
    """Runs the demo on a registry that the dashboard shows, once the page (or any client) has connected or
    ``start_wait`` seconds have passed, then keeps the dashboard up for ``linger`` seconds (``None``: until
    Ctrl-C). Ctrl-C cancels the demo's session and stops the dashboard, in whichever phase it comes."""
    registry = Registry()
    listener = bind("127.0.0.1", port)
    connected = asyncio.Event()
    dashboard = server(
        registry, host="127.0.0.1", port=port, token=None, details=True, first_request=connected
    )
    pressed = asyncio.Event()
    with ctrl_c_sets(pressed):
        serving = await start_serving(dashboard, listener)
        print(f"dashboard: {address('127.0.0.1', listener)}  (open it to watch the demo live)", flush=True)
        print(f"the demo starts when the page connects, or in {start_wait:g} s", flush=True)
        try:
            page = asyncio.ensure_future(asyncio.wait_for(connected.wait(), start_wait))
            if await set_before_done(pressed, page):
                page.cancel()
                print("stopped by Ctrl-C before the demo started", flush=True)
                return DemoSummary(counts=Counter(), latencies_ms=[], all_finished=True, interrupted=True)
            if page.exception() is None:
                print("the page connected: starting the demo", flush=True)
            else:
                print(f"no page connected within {start_wait:g} s: starting the demo", flush=True)
            summary = await run_demo(options, registry, ctrl_c=pressed)
            if summary.interrupted:
                return summary
            if linger is None:
                print("the demo is over; the dashboard stays up until Ctrl-C", flush=True)
                await pressed.wait()
                summary.interrupted = True
            else:
                lingering = asyncio.ensure_future(asyncio.sleep(linger))
                summary.interrupted = await set_before_done(pressed, lingering)
                lingering.cancel()
            if summary.interrupted:
                print("stopped by Ctrl-C: the dashboard is closed", flush=True)
            return summary
        finally:
            await stop_serving(dashboard, serving)
