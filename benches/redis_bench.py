"""Redis benchmarks: sessions across processes beside bare redis-py baselines, measured in the same run on a
``redis-server`` that this script starts on 127.0.0.1 on a free port (and stops).

    python benches/redis_bench.py            # full sizes (about a minute)
    python benches/redis_bench.py --smoke    # tiny sizes, to check that the benchmarks still run

Times across processes are read from ``time.monotonic`` (CLOCK_MONOTONIC, one clock for the whole machine).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import statistics
import sys
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

import redis
from redis_latency import (
    cancel_latency,
    percentiles,
    publish_latency,
    server_side_cancel_latency,
    start_server,
)

from subagent_tracker import AsyncRedisRegistry, RedisRegistry

# --- lifecycles


def lifecycles(url: str, count: int, worker: str) -> float:
    session = RedisRegistry(url, worker_id=worker).session(f"lifecycles-{worker}", max_finished_tasks=1000)
    started = time.perf_counter()
    for _ in range(count):
        session.start_subagent_task().complete()
    return count / (time.perf_counter() - started)


def blocking_runner_lifecycles(url: str, count: int) -> float:
    """Start, one progress report and complete, one after the other through the blocking API."""
    registry = RedisRegistry(url, worker_id="blocking-runner")
    session = registry.session("runners-blocking", max_finished_tasks=1000)
    started = time.perf_counter()
    for _ in range(count):
        handle = session.start_subagent_task()
        handle.progress("working")
        handle.complete()
    return count / (time.perf_counter() - started)


def asyncio_runner_lifecycles(url: str, count: int, runners: int) -> float:
    """The same lifecycles, run by ``runners`` concurrent asyncio runners of one loop through the asyncio
    API."""

    async def run() -> float:
        registry = await AsyncRedisRegistry.connect(url, worker_id="asyncio-runner")
        session = await registry.session("runners-asyncio", max_finished_tasks=1000)

        async def runner(share: int) -> None:
            for _ in range(share):
                handle = await session.start_subagent_task()
                await handle.progress("working")
                await handle.complete()

        started = time.perf_counter()
        await asyncio.gather(*(runner(count // runners) for _ in range(runners)))
        return (count // runners * runners) / (time.perf_counter() - started)

    return asyncio.run(run())


def cpu_per_lifecycle(url: str, port: int, count: int) -> tuple[float, float]:
    """The CPU seconds one lifecycle costs this process (its runtime thread included) and the server: on a
    machine of C cores, no number of processes can go beyond C / (their sum) lifecycles per second."""
    admin = redis.Redis(port=port)

    def server_cpu() -> float:
        info: dict[str, Any] = admin.info("cpu")  # type: ignore[assignment]
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    client_before, server_before = time.process_time(), server_cpu()
    lifecycles(url, count, "cpu")
    return (time.process_time() - client_before) / count, (server_cpu() - server_before) / count


def server_cost(url: str, port: int, count: int, bound: int) -> tuple[float, float, float, float]:
    """What the server spends per start + complete, at steady state with the session's retention bound full,
    beside two bare ``HSET``s in the same run: (our CPU, our function execution time, the bare CPU, the bare
    execution time), in seconds. CPU is ``INFO cpu`` (network handling included); execution time is ``INFO
    commandstats``."""
    admin = redis.Redis(port=port)

    def server(commands: tuple[str, ...]) -> tuple[float, float]:
        """The server's CPU seconds so far, and the seconds spent executing `commands` (a function's own time
        includes the commands it calls, which are counted again under their own names)."""
        cpu: dict[str, Any] = admin.info("cpu")  # type: ignore[assignment]
        stats: dict[str, Any] = admin.info("commandstats")  # type: ignore[assignment]
        executed = sum(
            float(stats[f"cmdstat_{name}"]["usec"]) for name in commands if f"cmdstat_{name}" in stats
        )
        return float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]), executed / 1e6

    session = RedisRegistry(url, worker_id="server-cost").session("server-cost", max_finished_tasks=bound)
    for _ in range(bound + bound // 2):  # the retention bound full: every completion now evicts the oldest
        session.start_subagent_task().complete()
    functions = ("fcall", "fcall_ro")
    cpu_before, executed_before = server(functions)
    for _ in range(count):
        session.start_subagent_task().complete()
    cpu_after, executed_after = server(functions)
    ours = ((cpu_after - cpu_before) / count, (executed_after - executed_before) / count)
    client = redis.Redis(port=port)
    cpu_before, executed_before = server(("hset",))
    for index in range(count):
        client.hset(f"bare:{index % 1000}", mapping={"status": "running"})
        client.hset(f"bare:{index % 1000}", mapping={"status": "completed"})
    cpu_after, executed_after = server(("hset",))
    return (*ours, (cpu_after - cpu_before) / count, (executed_after - executed_before) / count)


def batch_against_singles(url: str, size: int) -> tuple[float, float]:
    """Seconds to start ``size`` subagents of one parent: in one batch, and one call each."""
    session = RedisRegistry(url, worker_id="batch").session("batch", max_finished_tasks=10_000)
    parent = session.start_subagent_task("parent")
    started = time.perf_counter()
    batch = session.start_subagent_tasks([{"parent_id": "parent"} for _ in range(size)])
    batched = time.perf_counter() - started
    started = time.perf_counter()
    singles = [session.start_subagent_task(parent_id="parent") for _ in range(size)]
    single = time.perf_counter() - started
    for handle in [*batch, *singles]:
        handle.complete()
    parent.complete()
    return batched, single


def loop_lags(url: str, port: int, calls: int, pause_ms: int) -> dict[str, float]:
    """The event loop's largest lag (how late a 1 ms heartbeat wakes) while calls run on it: through the
    blocking API and the asyncio API, during a ``CLIENT PAUSE`` of ``pause_ms`` and during a burst of
    ``calls`` calls."""
    admin = redis.Redis(port=port)
    blocking = RedisRegistry(url, worker_id="lag-blocking", timeout=10).session("lag")

    async def lag_during(work: Callable[[], Any]) -> float:
        largest, running = 0.0, True

        async def beat() -> None:
            nonlocal largest
            while running:
                before = time.monotonic()
                await asyncio.sleep(0.001)
                largest = max(largest, time.monotonic() - before - 0.001)

        heartbeat = asyncio.ensure_future(beat())
        await asyncio.sleep(0.01)
        await work()
        running = False
        await heartbeat
        return largest

    async def measure() -> dict[str, float]:
        registry = await AsyncRedisRegistry.connect(url, worker_id="lag-asyncio", timeout=10)
        awaited = await registry.session("lag")

        async def blocking_pause() -> None:
            admin.client_pause(pause_ms, all=True)
            blocking.subagent_tasks()

        async def awaited_pause() -> None:
            admin.client_pause(pause_ms, all=True)
            await awaited.subagent_tasks()

        async def blocking_burst() -> None:
            for _ in range(calls):
                blocking.subagent_task("missing")

        async def awaited_burst() -> None:
            await asyncio.gather(*(awaited.subagent_task("missing") for _ in range(calls)))

        return {
            "blocking, paused": await lag_during(blocking_pause),
            "asyncio, paused": await lag_during(awaited_pause),
            "blocking, burst": await lag_during(blocking_burst),
            "asyncio, burst": await lag_during(awaited_burst),
        }

    return asyncio.run(measure())


def lifecycle_worker(url: str, count: int, worker: str, results: Any) -> None:
    results.put(lifecycles(url, count, worker))


def parallel_lifecycles(url: str, count: int, processes: int) -> float:
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    workers = [
        context.Process(target=lifecycle_worker, args=(url, count, f"w{index}", results))
        for index in range(processes)
    ]
    for process in workers:
        process.start()
    rates: list[float] = [results.get(timeout=120) for _ in workers]
    for process in workers:
        process.join(30)
    return sum(rates)


def asyncio_lifecycle_worker(url: str, count: int, runners: int, worker: str, ready: Any, go: Any) -> None:
    """``runners`` asyncio runners of one process, ``count`` start + complete in all, begun when ``go`` is set
    (the process reports ``ready`` once connected and warmed up)."""

    async def run() -> None:
        registry = await AsyncRedisRegistry.connect(url, worker_id=worker)
        session = await registry.session(f"fleet-{worker}", max_finished_tasks=1000)

        async def runner(share: int) -> None:
            for _ in range(share):
                handle = await session.start_subagent_task()
                await handle.complete()

        await asyncio.gather(*(runner(4) for _ in range(runners)))
        ready.set()
        await asyncio.get_running_loop().run_in_executor(None, go.wait)
        await asyncio.gather(*(runner(count // runners) for _ in range(runners)))

    asyncio.run(run())


def node_throughput(url: str, port: int, count: int, processes: int, runners: int) -> tuple[float, float]:
    """``processes`` client processes of ``runners`` asyncio runners each, ``count`` start + complete per
    process, all at once: the lifecycles a second measured, and the server's CPU per lifecycle (``INFO cpu``,
    whose inverse is the node's ceiling: on this machine the clients take CPU from the server)."""
    context = multiprocessing.get_context("spawn")
    ready = [context.Event() for _ in range(processes)]
    go = context.Event()
    workers = [
        context.Process(
            target=asyncio_lifecycle_worker, args=(url, count, runners, f"fleet{index}", ready[index], go)
        )
        for index in range(processes)
    ]
    for process in workers:
        process.start()
    for event in ready:
        if not event.wait(120):
            raise RuntimeError("a client process did not get ready within 120 s")
    admin = redis.Redis(port=port)

    def server_cpu() -> float:
        info: dict[str, Any] = admin.info("cpu")  # type: ignore[assignment]
        return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

    before, started = server_cpu(), time.perf_counter()
    go.set()
    for process in workers:
        process.join(300)
    elapsed, spent = time.perf_counter() - started, server_cpu() - before
    done = processes * (count // runners * runners)
    return done / elapsed, spent / done


def bare_round_trips(port: int, count: int) -> float:
    client = redis.Redis(port=port)
    started = time.perf_counter()
    for index in range(count):
        client.hset(f"bare:{index % 1000}", mapping={"status": "running"})
        client.hset(f"bare:{index % 1000}", mapping={"status": "completed"})
    return count / (time.perf_counter() - started)


# --- a cascade over many tasks in several processes


def cascade_worker(url: str, index: int, tasks: int, connection: Connection) -> None:
    session = RedisRegistry(url, worker_id=f"cascade-{index}").session("cascade", max_finished_tasks=100_000)
    handles = [session.start_subagent_task(f"w{index}-{task}", parent_id="root") for task in range(tasks)]
    connection.send("started")
    for handle in handles:
        handle.token.wait(30)
    connection.send(time.monotonic())
    for handle in handles:
        handle.complete()


def cascade(url: str, tasks: int, processes: int) -> float:
    session = RedisRegistry(url, worker_id="cascade-root").session("cascade", max_finished_tasks=100_000)
    root = session.start_subagent_task("root")
    context = multiprocessing.get_context("spawn")
    pipes = [multiprocessing.Pipe() for _ in range(processes)]
    workers = [
        context.Process(target=cascade_worker, args=(url, index, tasks // processes, pipes[index][1]))
        for index in range(processes)
    ]
    for process in workers:
        process.start()
    for parent, _ in pipes:
        assert parent.recv() == "started"
    sent = time.monotonic()
    session.cancel_subagent_task("root")
    last: float = max(parent.recv() for parent, _ in pipes)
    for process in workers:
        process.join(60)
    root.complete()
    return last - sent


def used_memory(admin: redis.Redis) -> int:
    info: dict[str, Any] = admin.info("memory")  # type: ignore[assignment]
    return int(info["used_memory"])


def memory_per_task(url: str, port: int, tasks: int) -> float:
    """Redis memory per retained finished task: the growth of ``used_memory`` from ``tasks / 2`` to ``tasks``
    retained finished tasks, over the ``tasks / 2`` that grew it. What a session costs whatever its size (its
    hash, its keys' own headers, the server's buffers) is in both readings, so it drops out; the event stream,
    trimmed at about 10,000 events whatever the number of tasks, is deleted before each reading. BENCHMARKS.md
    quotes this method only."""
    admin = redis.Redis(port=port)
    session = RedisRegistry(url, worker_id="memory").session("memory", max_finished_tasks=tasks)
    events = "subagent-tracker:v2:{s:memory}:events"

    def retained_memory(first: int, count: int) -> int:
        for index in range(first, first + count):
            session.start_subagent_task(f"task-{index}", agent="researcher").complete("done")
        admin.delete(events)
        return used_memory(admin)

    half = tasks // 2
    before = retained_memory(0, half)
    after = retained_memory(half, tasks - half)
    return (after - before) / (tasks - half)


# --- sessions: the sweep beside the rate one process opens and closes them; an idle worker's cost


def session_churn(url: str, sessions: int) -> float:
    """Sessions one process opens, runs one task in, and closes, per second (they are left for the sweep:
    their TTL here is an hour)."""
    registry = RedisRegistry(url, worker_id="churn", session_ttl=3600)
    started = time.perf_counter()
    for index in range(sessions):
        session = registry.session(f"churn-{index}")
        session.start_subagent_task("job").complete()
        session.close()
    return sessions / (time.perf_counter() - started)


def sweep_rate(url: str, port: int, sessions: int, lease: float) -> float:
    """Closed, idle sessions removed per second by one worker's sweep, rounds and their pauses included."""
    admin: Any = redis.Redis(port=port)
    index = "subagent-tracker:v2:{registry}:sessions"
    left = admin.zcount(index, "-inf", "+inf")
    started = time.perf_counter()
    sweeper = RedisRegistry(url, worker_id="sweeper", session_ttl=0.001, lease=lease)
    deadline = time.monotonic() + 120
    while admin.zcard(index) > left - sessions and time.monotonic() < deadline:
        time.sleep(0.01)
    elapsed = time.perf_counter() - started
    swept: int = left - admin.zcard(index)
    del sweeper
    return swept / elapsed


def idle_worker(url: str, sessions: int, connection: Connection) -> None:
    # A prefix of its own, so that its sessions are swept by its own rounds (every half second), not by the
    # other workers of the run.
    registry = RedisRegistry(
        url,
        worker_id=f"idle-{sessions}",
        key_prefix=f"idle-{sessions}:",
        timeout=0.25,
        reconcile_interval=0.25,
        lease=1.5,
    )
    rss_before = resident_bytes()
    for index in range(sessions):
        registry.session(f"idle-{sessions}-{index}").start_subagent_task("job").complete()
    connection.send("touched")
    connection.recv()  # measured meanwhile
    connection.send(resident_bytes() - rss_before)


def resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def idle_worker_cost(url: str, port: int, sessions: int) -> tuple[float, int]:
    """An idle worker that once touched `sessions` sessions: its server calls per second, and how much its
    resident memory grew, measured in a process of its own."""
    admin = redis.Redis(port=port)
    parent, child = multiprocessing.Pipe()
    process = multiprocessing.get_context("spawn").Process(target=idle_worker, args=(url, sessions, child))
    process.start()
    assert parent.recv() == "touched"
    # It lets go of the sessions after four call timeouts, and its sweep's one first look at each new session
    # (a round every half second) is over.
    time.sleep(2.0)

    def calls() -> int:
        stats: dict[str, Any] = admin.info("commandstats")  # type: ignore[assignment]
        return int(stats.get("cmdstat_fcall", {}).get("calls", 0))

    before = calls()
    time.sleep(2.0)
    rate = (calls() - before) / 2.0
    parent.send("done")
    grown: int = parent.recv()
    process.join(30)
    return rate, grown


def row(name: str, ours: str, baseline: str, verdict: str) -> None:
    print(f"| {name} | {ours} | {baseline} | {verdict} |")


def timed(what: str, function: Callable[[], Any]) -> Any:
    started = time.perf_counter()
    result = function()
    print(f"  ({what}: {time.perf_counter() - started:.1f} s)", file=sys.stderr)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes")
    smoke = parser.parse_args().smoke
    rounds, count, cascade_tasks, memory_tasks = (20, 200, 400, 200) if smoke else (300, 5000, 10_000, 10_000)
    churn_sessions, idle_few, idle_many = (300, 10, 300) if smoke else (10_000, 100, 10_000)
    server, url, port = start_server()
    try:
        print(f"machine: {os.cpu_count()} cores; redis-server on loopback; smoke={smoke}")
        print()
        print("| scenario | ours | baseline | ratio or verdict |")
        print("|---|---|---|---|")
        ours = timed("cancel latency", lambda: cancel_latency(url, rounds, False, port))
        bare = timed("publish latency", lambda: publish_latency(port, rounds))
        (p50, p99), (bare50, bare99) = percentiles(ours), percentiles(bare)
        row(
            "cancel in one process → token fired in another (p50 / p99)",
            f"{p50 * 1e3:.2f} / {p99 * 1e3:.2f} ms",
            f"redis-py PUBLISH → subscriber: {bare50 * 1e3:.2f} / {bare99 * 1e3:.2f} ms",
            f"{p50 / bare50:.2f}x / {p99 / bare99:.2f}x the baseline",
        )
        server_side = timed(
            "server-side cancel latency", lambda: server_side_cancel_latency(url, port, rounds)
        )
        side50, side99 = percentiles(server_side)
        row(
            "the same, our cancel function called and its message read by bare redis-py (p50 / p99)",
            f"{side50 * 1e3:.2f} / {side99 * 1e3:.2f} ms",
            f"redis-py PUBLISH → subscriber: {bare50 * 1e3:.2f} / {bare99 * 1e3:.2f} ms",
            f"{side50 / bare50:.2f}x / {side99 / bare99:.2f}x the baseline",
        )
        lost = timed(
            "cancel latency, push lost", lambda: cancel_latency(url, max(5, rounds // 20), True, port)
        )
        lost50, lost99 = percentiles(lost)
        row(
            "the same with the push lost (reconcile every 2 s)",
            f"{lost50 * 1e3:.0f} / {lost99 * 1e3:.0f} ms",
            "arq polls every 500 ms; dramatiq-abort every 1 s",
            f"max {max(lost):.2f} s ≤ 2 s: {'met' if max(lost) <= 2.1 else 'missed'}",
        )
        one = timed("lifecycles, one process", lambda: lifecycles(url, count, "one"))
        bare_rate = timed("bare round trips", lambda: bare_round_trips(port, count))
        row(
            "start + complete, one process (2 round trips each)",
            f"{one:,.0f}/s",
            f"redis-py, 2 round trips: {bare_rate:,.0f}/s",
            f"{one / bare_rate:.0%} of the baseline",
        )
        blocking_runners = timed(
            "runner lifecycles, blocking", lambda: blocking_runner_lifecycles(url, count)
        )
        asyncio_runners = timed(
            "runner lifecycles, asyncio", lambda: asyncio_runner_lifecycles(url, count, 64)
        )
        row(
            "start + progress + complete, one process: 64 asyncio runners through the asyncio API",
            f"{asyncio_runners:,.0f}/s",
            f"one after the other through the blocking API: {blocking_runners:,.0f}/s",
            f"{asyncio_runners / blocking_runners:.2f}x",
        )
        size = 50 if smoke else 500
        batched, single = timed("batch against singles", lambda: batch_against_singles(url, size))
        row(
            f"start {size} subagents of one parent: one batch (one round trip)",
            f"{batched * 1e3:.1f} ms",
            f"{size} single starts: {single * 1e3:.1f} ms",
            f"{single / batched:.1f}x faster",
        )
        pause_ms = 200 if smoke else 2000
        lags = timed("loop lag", lambda: loop_lags(url, port, 100 if smoke else 1000, pause_ms))
        row(
            f"the event loop's largest lag while the server is paused {pause_ms / 1000:g} s: asyncio API",
            f"{lags['asyncio, paused'] * 1e3:.1f} ms",
            f"blocking API: {lags['blocking, paused'] * 1e3:.0f} ms",
            f"{lags['asyncio, paused'] / lags['blocking, paused']:.1%} of it "
            f"({'met' if lags['asyncio, paused'] < 0.05 * lags['blocking, paused'] else 'missed'}: < 5%)",
        )
        row(
            f"the same during a burst of {100 if smoke else 1000:,} calls",
            f"{lags['asyncio, burst'] * 1e3:.1f} ms",
            f"blocking API: {lags['blocking, burst'] * 1e3:.0f} ms",
            f"{lags['asyncio, burst'] / lags['blocking, burst']:.1%} of it",
        )
        fleet_rate, fleet_cpu = timed(
            "node throughput", lambda: node_throughput(url, port, count * 4, processes=2, runners=64)
        )
        row(
            "start + complete, 2 processes of 64 asyncio runners (coalesced): one node's throughput",
            f"{fleet_rate:,.0f}/s measured (the clients share the cores with the server)",
            f"server CPU {fleet_cpu * 1e6:.1f} µs per lifecycle: a ceiling of {1 / fleet_cpu:,.0f}/s a node",
            f"{'met' if 1 / fleet_cpu >= 30_000 else 'missed'}: ceiling ≥ 30,000/s",
        )
        four = timed("lifecycles, four processes", lambda: parallel_lifecycles(url, count, 4))
        row(
            "start + complete, 4 processes",
            f"{four:,.0f}/s",
            f"one process: {one:,.0f}/s",
            f"{four / one:.2f}x",
        )
        ours_cpu, ours_executed, bare_cpu, bare_executed = timed(
            "server cost", lambda: server_cost(url, port, count, 100 if smoke else 1000)
        )
        row(
            "server CPU per start + complete (INFO cpu), retention bound full",
            f"{ours_cpu * 1e6:.1f} µs",
            f"two bare HSETs: {bare_cpu * 1e6:.1f} µs",
            f"{ours_cpu / bare_cpu:.2f}x ({'met' if ours_cpu <= 1.5 * bare_cpu else 'missed'}: ≤ 1.5x); "
            f"≈ {1 / ours_cpu:,.0f} lifecycles/s per node",
        )
        row(
            "server execution time per start + complete (INFO commandstats)",
            f"{ours_executed * 1e6:.1f} µs",
            f"two bare HSETs: {bare_executed * 1e6:.1f} µs",
            f"{ours_executed / bare_executed:.1f}x",
        )
        client_cpu, server_cpu = timed("CPU per lifecycle", lambda: cpu_per_lifecycle(url, port, count))
        cores = os.cpu_count() or 1
        ceiling = cores / (client_cpu + server_cpu)
        row(
            "the profile: CPU per lifecycle, client + server",
            f"{client_cpu * 1e6:.0f} + {server_cpu * 1e6:.0f} µs",
            f"{cores} cores: at most {ceiling:,.0f}/s in any number of processes",
            f"ceiling {ceiling / one:.2f}x one process",
        )
        spread = timed("cascade", lambda: cascade(url, cascade_tasks, 4))
        row(
            f"cascade over {cascade_tasks:,} tasks in 4 processes, until every token fired",
            f"{spread * 1e3:.0f} ms",
            "none",
            f"{'met' if spread <= 0.1 else 'missed'} (target 100 ms)",
        )
        churn = timed("sessions opened and closed", lambda: session_churn(url, churn_sessions))
        lease = 3.0
        swept = timed("sweep", lambda: sweep_rate(url, port, churn_sessions, lease))
        row(
            f"idle sessions swept by one worker (lease {lease:.0f} s: a round every {lease / 3:.0f} s, "
            "half of it sweeping)",
            f"{swept:,.0f}/s",
            f"one process opens, runs a task in and closes: {churn:,.0f}/s",
            f"{swept / churn:.2f}x: {'keeps up' if swept >= churn else 'falls behind'}",
        )
        few_rate, few_grown = timed(
            "idle worker, few sessions", lambda: idle_worker_cost(url, port, idle_few)
        )
        many_rate, many_grown = timed(
            "idle worker, many sessions", lambda: idle_worker_cost(url, port, idle_many)
        )
        row(
            f"an idle worker after {idle_many:,} sessions: server calls/s (all workers), RSS growth",
            f"{many_rate:.0f}/s, {many_grown / 1e6:.1f} MB",
            f"after {idle_few:,} sessions: {few_rate:.0f}/s, {few_grown / 1e6:.1f} MB",
            f"{many_rate / max(few_rate, 1):.2f}x the calls: "
            f"{'flat' if many_rate <= few_rate * 1.5 + 5 else 'grows'}",
        )
        memory = timed("memory", lambda: memory_per_task(url, port, memory_tasks))
        row(
            "Redis memory per retained finished task",
            f"{memory:.0f} B",
            "none",
            f"{'met' if memory <= 1024 else 'missed'} (target 1 KiB)",
        )
        print(
            f"\nsamples: latency {len(ours)}, lost-push {len(lost)}; statistics.mean(latency) = "
            f"{statistics.mean(ours) * 1e3:.2f} ms"
        )
    finally:
        server.kill()
        server.wait()


if __name__ == "__main__":
    main()
