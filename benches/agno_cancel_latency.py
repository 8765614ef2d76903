"""How long an Agno run takes to see a cancel made in another process, on a ``redis-server`` this script
starts: the adapter's manager (``SubagentCancellationManager`` on a ``RedisRegistry`` session) and Agno's own
``RedisRunCancellationManager``, beside a bare ``PUBLISH`` to a subscriber, measured in the same run.

    python benches/agno_cancel_latency.py            # full sizes (about a minute)
    python benches/agno_cancel_latency.py --smoke    # tiny sizes, to check that it still runs

A run process registers a run with its manager and checks it as Agno's checkpoints do
(``raise_if_cancelled``), one check after another, until it raises; the main process cancels the run through
its own manager. Each sample is the time from the cancel's call to the raise, read from ``time.monotonic``
(one clock for the whole machine). Checking without pause is the most a run can check: Agno's own manager
makes a server call for each check, the adapter's none (its run's token is fired by a push).
"""

from __future__ import annotations

import argparse
import logging
import multiprocessing
import os
import time
from multiprocessing.connection import Connection

import redis
from redis_latency import percentiles, publish_latency, start_server

os.environ["AGNO_TELEMETRY"] = "false"
# Agno logs each cancel and each raise at INFO, in both processes (the run process inherits this).
logging.disable(logging.INFO)

#: The two managers measured, by the name the table gives them.
MANAGERS = ("subagent-tracker (push)", "Agno's RedisRunCancellationManager (a GET per check)")


def make_manager(kind: str, url: str, worker: str) -> object:
    if kind == MANAGERS[0]:
        from subagent_tracker import RedisRegistry
        from subagent_tracker.integrations.agno import SubagentCancellationManager

        return SubagentCancellationManager(RedisRegistry(url, worker_id=worker).session("agno-latency"))
    from agno.run.cancellation_management.redis_cancellation_manager import RedisRunCancellationManager

    return RedisRunCancellationManager(redis_client=redis.Redis.from_url(url))


def run_process(kind: str, url: str, rounds: int, connection: Connection) -> None:
    """Registers a run per round, says so, checks it until it raises, and reports when it did."""
    from agno.exceptions import RunCancelledException

    manager = make_manager(kind, url, "bench-runner")
    for index in range(rounds):
        run_id = f"run-{kind[:4]}-{index}"
        manager.register_run(run_id)  # type: ignore[attr-defined]
        connection.send("registered")
        deadline = time.monotonic() + 10
        seen = float("nan")
        while time.monotonic() < deadline:
            try:
                manager.raise_if_cancelled(run_id)  # type: ignore[attr-defined]
            except RunCancelledException:
                seen = time.monotonic()
                break
        connection.send(seen)
        manager.cleanup_run(run_id)  # type: ignore[attr-defined]


def cancel_latency(kind: str, url: str, rounds: int) -> list[float]:
    parent, child = multiprocessing.Pipe()
    process = multiprocessing.get_context("spawn").Process(
        target=run_process, args=(kind, url, rounds, child)
    )
    process.start()
    manager = make_manager(kind, url, "bench-canceller")
    samples = []
    for index in range(rounds):
        assert parent.recv() == "registered"
        time.sleep(0.002)  # the run is checking by now
        sent = time.monotonic()
        manager.cancel_run(f"run-{kind[:4]}-{index}")  # type: ignore[attr-defined]
        seen: float = parent.recv()
        if seen != seen:
            raise RuntimeError(f"{kind}: the run did not see the cancel within 10 s")
        samples.append(seen - sent)
    process.join(30)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to check that the script runs")
    rounds = 20 if parser.parse_args().smoke else 300
    server, url, port = start_server()
    try:
        rows = [("PUBLISH to a subscriber (bare redis-py)", publish_latency(port, rounds))]
        rows += [(kind, cancel_latency(kind, url, rounds)) for kind in MANAGERS]
    finally:
        server.terminate()
        server.wait(10)
    _, baseline = percentiles(rows[0][1])
    title = f"a cancel from another process, seen by an Agno run ({rounds} runs)"
    print(f"| {title} | p50 | p99 | p99 / PUBLISH p99 |")
    print("|---|---|---|---|")
    for name, samples in rows:
        median, p99 = percentiles(samples)
        print(f"| {name} | {median * 1e6:,.0f} µs | {p99 * 1e6:,.0f} µs | {p99 / baseline:.2f}x |")


if __name__ == "__main__":
    main()
