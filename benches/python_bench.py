"""Python benchmarks: subagent_tracker beside real baselines, all measured in the same run.

    python benches/python_bench.py            # full sizes (a minute or two)
    python benches/python_bench.py --smoke    # tiny sizes, to check that the benchmarks still run

Each scenario runs against (a) our ``Session``, (b) trpc-agent-py's ``trpc_agent_sdk.cancel`` (when installed;
``scripts/bench.sh`` installs it), (c) the plain-Python ``ReferenceSession`` beside this file, and, where one
exists, (d) the bare Python or asyncio primitive. Ratios are our time over the baseline's: below 1 is faster.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import queue
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path
from typing import Any, TypeVar

sys.path.insert(0, str(Path(__file__).parent))

from reference_tracker import ReferenceSession

from subagent_tracker import Session

trpc: Any = None

T = TypeVar("T")


def load_trpc() -> bool:
    """Imports trpc-agent-py on demand: it loads ~270,000 objects that the cyclic GC then walks on every full
    collection, which would bill a 180 ms pause to whichever scenario shares its process."""
    global trpc
    try:
        import trpc_agent_sdk.cancel
        from trpc_agent_sdk.log import LogLevel, get_logger
    except ImportError:
        return False
    # As the issue measured it: trpc's logging at WARNING, so its info/debug calls cost a level check only.
    get_logger().set_level(LogLevel.WARNING)
    trpc = trpc_agent_sdk.cancel
    return True


perf_counter = time.perf_counter


@dataclass
class Row:
    scenario: str
    unit: str
    ours: float
    reference: float | None = None
    trpc: float | None = None
    bare: float | None = None
    bare_label: str = ""


def best(measure: Callable[..., float], repeats: int) -> float:
    """The best of several runs: the least disturbed by the shared machine. ``measure`` is called with no
    arguments (``...`` lets it be a lambda whose parameters all have defaults)."""
    results = []
    for _ in range(repeats):
        gc.collect()
        results.append(measure())
    return min(results)


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


# --- lifecycle ---


def lifecycle(session: Any, count: int) -> float:
    """Seconds per start + complete; ``session`` is ours or the reference (the same calls)."""
    start = session.start_subagent_task
    ids = [f"t{index}" for index in range(count)]
    began = perf_counter()
    for task_id in ids:
        start(task_id).complete()
    return (perf_counter() - began) / count


async def lifecycle_trpc(count: int) -> float:
    ids = [f"t{index}" for index in range(count)]
    register, cleanup = trpc.register_run, trpc.cleanup_run
    began = perf_counter()
    for task_id in ids:
        await register("bench", "user", task_id)
        await cleanup("bench", "user", task_id)
    return (perf_counter() - began) / count


# --- check ---


def check(session: Any, count: int, cancelled: bool) -> float:
    """Seconds per ``is_cancelled`` read; ours reads its token, the reference its task object."""
    handle = session.start_subagent_task("t")
    if cancelled:
        session.cancel_subagent_task("t")
    token = handle.token if isinstance(session, Session) else handle
    began = perf_counter()
    for _ in repeat(None, count):
        token.is_cancelled  # noqa: B018
    return (perf_counter() - began) / count


async def check_trpc(count: int, cancelled: bool) -> float:
    key = await trpc.register_run("bench", "user", "check")
    if cancelled:
        await trpc.cancel_run("bench", "user", "check")
    is_cancelled = trpc.is_run_cancelled
    began = perf_counter()
    for _ in repeat(None, count):
        await is_cancelled(key)
    elapsed = (perf_counter() - began) / count
    await trpc.cleanup_run("bench", "user", "check")
    return elapsed


def check_bare(count: int, cancelled: bool) -> float:
    event = threading.Event()
    if cancelled:
        event.set()
    is_set = event.is_set
    began = perf_counter()
    for _ in repeat(None, count):
        is_set()
    return (perf_counter() - began) / count


# ------------------------------------------------------------------------------------ cancel: many waiters


async def _resume_all(
    waiters: list[Callable[[], Awaitable[Any]]], cancel: Callable[[], object], from_thread: bool
) -> float:
    """Starts one asyncio task per waiter, cancels, and returns the time until the last one has resumed."""
    last = 0.0

    async def wait(waiter: Callable[[], Awaitable[Any]]) -> None:
        nonlocal last
        await waiter()
        last = perf_counter()

    tasks = [asyncio.ensure_future(wait(waiter)) for waiter in waiters]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    began = 0.0
    if from_thread:

        def cancel_in_thread() -> None:
            nonlocal began
            began = perf_counter()
            cancel()

        thread = threading.Thread(target=cancel_in_thread)
        thread.start()
        await asyncio.gather(*tasks)
        thread.join()
    else:
        began = perf_counter()
        cancel()
        await asyncio.gather(*tasks)
    return last - began


async def fan_in_ours(count: int, from_thread: bool) -> float:
    session = Session()
    handles = [session.start_subagent_task(f"t{index}") for index in range(count)]
    return await _resume_all([handle.token.cancelled for handle in handles], session.cancel, from_thread)


async def fan_in_reference(count: int, from_thread: bool) -> float:
    session = ReferenceSession()
    tasks = [session.start_subagent_task(f"t{index}") for index in range(count)]
    return await _resume_all([task.cancelled for task in tasks], session.cancel, from_thread)


async def fan_in_bare(count: int, from_thread: bool) -> float:
    events = [asyncio.Event() for _ in range(count)]
    loop = asyncio.get_running_loop()

    def set_all() -> None:
        for event in events:
            event.set()

    cancel = (lambda: loop.call_soon_threadsafe(set_all)) if from_thread else set_all
    return await _resume_all([event.wait for event in events], cancel, from_thread)


async def fan_in_trpc(count: int) -> float:
    keys = [await trpc.register_run("bench", "user", f"t{index}") for index in range(count)]
    events = [await trpc.get_cancel_event(key) for key in keys]
    last = 0.0

    async def wait(event: asyncio.Event) -> None:
        nonlocal last
        await event.wait()
        last = perf_counter()

    tasks = [asyncio.ensure_future(wait(event)) for event in events]
    await asyncio.sleep(0)
    began = perf_counter()
    for key in keys:
        await trpc.cancel_run(key.app_name, key.user_id, key.session_id)
    await asyncio.gather(*tasks)
    for key in keys:
        await trpc.cleanup_run(key.app_name, key.user_id, key.session_id)
    return last - began


# ----------------------------------------------------------------------------- cancel: one waiter, p50/p99


async def one_waiter_latencies(kind: str, rounds: int) -> list[float]:
    """From a cancel issued in another thread to the awaiting coroutine running, ``rounds`` times."""
    loop = asyncio.get_running_loop()
    commands: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
    worker = threading.Thread(target=lambda: [command() for command in iter(commands.get, None)])
    worker.start()
    samples = []
    try:
        for index in range(rounds):
            began = 0.0
            if kind == "ours":
                session = Session()
                handle = session.start_subagent_task("t")
                waiter: Callable[[], Awaitable[Any]] = handle.token.cancelled
                # ``...``: each lambda binds its own objects through a defaulted parameter.
                cancel: Callable[..., Any] = lambda session=session: session.cancel_subagent_task("t")  # noqa: E731
            elif kind == "reference":
                reference = ReferenceSession()
                task = reference.start_subagent_task("t")
                waiter = task.cancelled
                cancel = lambda reference=reference: reference.cancel_subagent_task("t")  # noqa: E731
            else:
                event = asyncio.Event()
                waiter = event.wait
                cancel = lambda event=event: loop.call_soon_threadsafe(event.set)  # noqa: E731

            async def wait(waiter: Callable[[], Awaitable[Any]] = waiter) -> float:
                await waiter()
                return perf_counter()

            pending = asyncio.ensure_future(wait())
            await asyncio.sleep(0)

            def issue(cancel: Callable[[], Any] = cancel) -> None:
                nonlocal began
                began = perf_counter()
                cancel()

            commands.put(issue)
            resumed = await pending
            if index >= rounds // 10:  # the first tenth warms up
                samples.append(resumed - began)
    finally:
        commands.put(None)
        worker.join()
    return samples


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


# --- listing ---


def listing(make: Callable[[int], Any], retained: int, running: int, calls: int) -> float:
    session = make(retained)
    for index in range(retained):
        session.start_subagent_task(f"done-{index}").complete()
    handles = [session.start_subagent_task(f"run-{index}") for index in range(running)]
    pending = session.pending_subagent_tasks
    assert len(pending()) == running
    samples = []
    for _ in range(calls):
        began = perf_counter()
        pending()
        samples.append(perf_counter() - began)
    del handles
    return statistics.median(samples)


async def listing_trpc(running: int, calls: int) -> float:
    keys = [await trpc.register_run("bench", "user", f"run-{index}") for index in range(running)]
    samples = []
    for _ in range(calls):
        began = perf_counter()
        trpc._cancel._manager.get_active_sessions()
        samples.append(perf_counter() - began)
    for key in keys:
        await trpc.cleanup_run(key.app_name, key.user_id, key.session_id)
    return statistics.median(samples)


# --- memory ---


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def memory_probe(kind: str, count: int) -> None:
    """Run in a fresh interpreter: prints the RSS bytes per retained finished task."""
    ids = [f"t{index}" for index in range(count)]
    session: Any = Session(max_finished_tasks=count) if kind == "ours" else ReferenceSession(count)
    gc.collect()
    before = rss_bytes()
    for task_id in ids:
        session.start_subagent_task(task_id).complete()
    gc.collect()
    print((rss_bytes() - before) / count)


def collection_probe(kind: str, count: int, repeats: int) -> None:
    """Run in a fresh interpreter: prints the best time of a full garbage collection while the session retains
    ``count`` finished tasks, which the collector visits (each holds a result it could be a cycle through)."""
    session: Any = Session(max_finished_tasks=count) if kind == "ours" else ReferenceSession(count)
    start = session.start_subagent_task
    for index in range(count):
        start(f"t{index}").complete(result=index)
    print(best(lambda: timed(gc.collect), repeats))


def timed(call: Callable[[], object]) -> float:
    began = time.perf_counter()
    call()
    return time.perf_counter() - began


def full_collection(kind: str, count: int, repeats: int) -> float:
    command = [sys.executable, __file__, "--collection-probe", kind, "--count", str(count)]
    output = subprocess.run(
        [*command, "--repeats", str(repeats)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return float(output.strip().splitlines()[-1])


FAN_IN = {
    "ours": fan_in_ours,
    "reference": fan_in_reference,
    "bare": fan_in_bare,
}


def fan_in_probe(kind: str, count: int, from_thread: bool, repeats: int) -> None:
    """Run in a fresh interpreter: prints the best time for ``count`` awaiting tasks to resume."""
    if kind == "trpc":
        load_trpc()
        print(best(lambda: run(fan_in_trpc(count)), repeats))
    else:
        print(best(lambda: run(FAN_IN[kind](count, from_thread)), repeats))


def fan_in_isolated(kind: str, count: int, from_thread: bool, repeats: int) -> float:
    """Each implementation in its own fresh interpreter without trpc-agent-py loaded, so that no scenario pays
    for another's heap: a full GC pass over trpc's objects costs ~180 ms and would land inside the window."""
    command = [sys.executable, __file__, "--fan-in-probe", kind, "--count", str(count)]
    command += ["--repeats", str(repeats)] + (["--from-thread"] if from_thread else [])
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return float(output.strip().splitlines()[-1])


def bytes_per_task(kind: str, count: int) -> float:
    output = subprocess.run(
        [sys.executable, __file__, "--memory-probe", kind, "--count", str(count)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return float(output.strip().splitlines()[-1])


def rss_over_lifecycles(total: int, samples: int) -> list[tuple[int, float]]:
    session = Session()
    start = session.start_subagent_task
    step = total // samples
    series = []
    for sample in range(samples):
        base = sample * step
        for index in range(base, base + step):
            start(f"t{index}").complete()
        series.append((base + step, rss_bytes() / 2**20))
    return series


# --- report ---


def ratio(ours: float, baseline: float | None) -> str:
    return "" if baseline is None or baseline == 0 else f"{ours / baseline:.2f}x"


def seconds(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    scale = {"ns": 1e9, "µs": 1e6, "ms": 1e3, "B": 1.0}[unit]
    return f"{value * scale:,.1f} {unit}" if unit != "B" else f"{value:,.0f} B"


def print_table(rows: list[Row]) -> None:
    header = (
        "| scenario | ours | plain-Python reference | ours / ref | trpc-agent-py | ours / trpc "
        "| bare primitive | ours / bare |"
    )
    print(header)
    print("|" + "---|" * 8)
    for row in rows:
        print(
            f"| {row.scenario} | {seconds(row.ours, row.unit)} | {seconds(row.reference, row.unit)} "
            f"| {ratio(row.ours, row.reference)} | {seconds(row.trpc, row.unit)} "
            f"| {ratio(row.ours, row.trpc)} "
            f"| {seconds(row.bare, row.unit)}{' ' + row.bare_label if row.bare_label else ''} "
            f"| {ratio(row.ours, row.bare)} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: check that everything runs")
    parser.add_argument("--memory-probe", choices=["ours", "reference"], help=argparse.SUPPRESS)
    parser.add_argument("--collection-probe", choices=["ours", "reference"], help=argparse.SUPPRESS)
    parser.add_argument(
        "--fan-in-probe", choices=["ours", "reference", "bare", "trpc"], help=argparse.SUPPRESS
    )
    parser.add_argument("--from-thread", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--repeats", type=int, default=5, help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, default=100_000, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.memory_probe:
        memory_probe(arguments.memory_probe, arguments.count)
        return
    if arguments.collection_probe:
        collection_probe(arguments.collection_probe, arguments.count, arguments.repeats)
        return
    if arguments.fan_in_probe:
        fan_in_probe(arguments.fan_in_probe, arguments.count, arguments.from_thread, arguments.repeats)
        return

    smoke = arguments.smoke
    lifecycles = 2_000 if smoke else 200_000
    checks = 10_000 if smoke else 2_000_000
    waiters = 200 if smoke else 10_000
    rounds = 50 if smoke else 2_000
    retained = 1_000 if smoke else 100_000
    memory_tasks = 2_000 if smoke else 200_000
    collected = 2_000 if smoke else 1_000_000
    churn = 20_000 if smoke else 5_000_000
    repeats = 1 if smoke else 5
    have_trpc = load_trpc()
    print(f"python {sys.version.split()[0]}, trpc-agent-py {'installed' if have_trpc else 'NOT installed'}")
    print(f"sizes: {'smoke' if smoke else 'full'}; each figure is the best of {repeats} runs\n")

    rows = [
        Row(
            "lifecycle: start + complete",
            "µs",
            best(lambda: lifecycle(Session(max_finished_tasks=10_000), lifecycles), repeats),
            best(lambda: lifecycle(ReferenceSession(max_finished_tasks=10_000), lifecycles), repeats),
            best(lambda: run(lifecycle_trpc(lifecycles // 4)), repeats) if have_trpc else None,
        )
    ]
    for cancelled in (False, True):
        state = "cancelled" if cancelled else "not cancelled"
        rows.append(
            Row(
                f"check: is_cancelled, {state}",
                "ns",
                best(lambda cancelled=cancelled: check(Session(), checks, cancelled), repeats),
                best(lambda cancelled=cancelled: check(ReferenceSession(), checks, cancelled), repeats),
                best(lambda cancelled=cancelled: run(check_trpc(checks // 20, cancelled)), repeats)
                if have_trpc
                else None,
                best(lambda cancelled=cancelled: check_bare(checks, cancelled), repeats),
                "(threading.Event.is_set)",
            )
        )
    for from_thread in (False, True):
        where = "another thread" if from_thread else "the loop's thread"
        rows.append(
            Row(
                f"cancel {waiters:,} awaiting tasks from {where}: all resumed",
                "ms",
                fan_in_isolated("ours", waiters, from_thread, repeats),
                fan_in_isolated("reference", waiters, from_thread, repeats),
                fan_in_isolated("trpc", waiters, from_thread, repeats)
                if have_trpc and not from_thread
                else None,
                fan_in_isolated("bare", waiters, from_thread, repeats),
                f"({waiters:,} asyncio.Event set)",
            )
        )
    latencies = {kind: run(one_waiter_latencies(kind, rounds)) for kind in ("ours", "reference", "bare")}
    for label, fraction in (("p50", 0.5), ("p99", 0.99)):
        rows.append(
            Row(
                f"cancel one awaiting task from another thread, {label}",
                "µs",
                percentile(latencies["ours"], fraction),
                percentile(latencies["reference"], fraction),
                None,
                percentile(latencies["bare"], fraction),
                "(call_soon_threadsafe(event.set))",
            )
        )
    rows.append(
        Row(
            f"pending_subagent_tasks: 100 running among {retained:,} retained",
            "µs",
            listing(lambda size: Session(max_finished_tasks=size), retained, 100, 200),
            listing(lambda size: ReferenceSession(size), retained, 100, 200),
            run(listing_trpc(100, 200)) if have_trpc else None,
        )
    )
    rows.append(
        Row(
            "memory: RSS per retained finished task",
            "B",
            bytes_per_task("ours", memory_tasks),
            bytes_per_task("reference", memory_tasks),
        )
    )
    rows.append(
        Row(
            f"a full garbage collection with {collected:,} finished tasks retained",
            "ms",
            full_collection("ours", collected, repeats),
            full_collection("reference", collected, repeats),
        )
    )
    print_table(rows)

    print(f"\nRSS across {churn:,} lifecycles with the default retention (10,000 finished kept):")
    series = rss_over_lifecycles(churn, 10)
    print("  " + "  ".join(f"{done // 1000:,}k: {megabytes:.1f} MiB" for done, megabytes in series))
    # Warm-up ends once retention is full and the allocator has settled: judge the second half.
    warm = series[len(series) // 2 - 1][1]
    growth = max(megabytes for _, megabytes in series[len(series) // 2 :]) - warm
    print(f"  growth over the second half: {growth:+.1f} MiB")
    if not have_trpc:
        print("\ntrpc-agent-py is not installed here: its columns say n/a. scripts/bench.sh installs it.")


if __name__ == "__main__":
    main()
