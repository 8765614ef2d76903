"""100,000 concurrent tasks with deadlines and cancel callbacks: memory, threads and leftovers.

    python benches/deadline_soak.py [--tasks N] [--rounds R]

Each round starts N tasks, each with a deadline and a callback; half are completed by their runners, the rest
are cancelled by their deadline (a short one, fired by the shared timer thread). After every round it checks
that no timer entry and no callback registration is left, and prints RSS and the process's OS thread count.
"""

from __future__ import annotations

import argparse
import gc
import os
import time

from subagent_tracker import Session
from subagent_tracker.diagnostics import pending_deadlines


def rss_mib() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def os_threads() -> int:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("Threads:"))


def soak_round(tasks: int) -> tuple[float, float, int, float]:
    session = Session(max_finished_tasks=tasks)
    fired = 0

    def on_cancel() -> None:
        nonlocal fired
        fired += 1

    handles = []
    for index in range(tasks):
        # Even tasks get a long deadline and finish first; odd ones a short deadline that fires.
        timeout = 3600.0 if index % 2 == 0 else 0.2
        handle = session.start_subagent_task(f"t{index}", timeout=timeout)
        handle.token.on_cancel(on_cancel)
        handles.append(handle)
    peak_rss = rss_mib()
    scheduled = pending_deadlines()
    for handle in handles[::2]:
        handle.complete()
    began = time.perf_counter()
    while fired < tasks // 2 and time.perf_counter() - began < 30:
        time.sleep(0.01)
    fire_seconds = time.perf_counter() - began
    for handle in handles[1::2]:
        handle.complete()  # the runners notice and stop: late ends
    tokens = [handle.token for handle in handles]
    leftover_callbacks = sum(token.callback_count for token in tokens)
    assert fired == tasks // 2, f"{fired} callbacks ran, expected {tasks // 2}"
    assert leftover_callbacks == 0
    assert pending_deadlines() == 0, f"{pending_deadlines()} timer entries left"
    del handles, tokens, session
    gc.collect()
    return peak_rss, fire_seconds, scheduled, rss_mib()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    arguments = parser.parse_args()
    print(f"start: RSS {rss_mib():.1f} MiB, {os_threads()} OS threads")
    print(
        "| round | timers scheduled at peak | peak RSS | deadline fan-out fired in | RSS after | OS threads |"
    )
    print("|---|---|---|---|---|---|")
    for round_number in range(1, arguments.rounds + 1):
        peak, fire_seconds, scheduled, after = soak_round(arguments.tasks)
        print(
            f"| {round_number} | {scheduled:,} | {peak:.1f} MiB | {fire_seconds * 1000:.0f} ms "
            f"| {after:.1f} MiB | {os_threads()} |"
        )
    print(f"leftover after all rounds: {pending_deadlines()} timer entries, 0 callbacks (checked each round)")


if __name__ == "__main__":
    main()
