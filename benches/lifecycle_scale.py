"""CPU time of a Python lifecycle as a session grows to a million retained finished tasks, ours beside the
plain-Python reference (``reference_tracker.py``), in one run.

    python benches/lifecycle_scale.py            # 1,000 and 1,000,000 retained (a minute or two)
    python benches/lifecycle_scale.py --smoke    # tiny sizes, to check that the script runs

Each session keeps ``retained`` finished tasks: it is filled to its bound first, so every measured end evicts
the oldest record, as a long-running session's does. Each side and size runs in a fresh interpreter (so one
size's heap does not slow the other's), and reports the best of ``--repeats`` loops of
``session.start_subagent_task(id).complete()`` over prebuilt ids, in CPU time of the process. The figure that
matters is the growth: the time per lifecycle at the larger size over the time at the smaller one, ours beside
the reference's own.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))


def session_of(kind: str, retained: int) -> Any:
    if kind == "ours":
        from subagent_tracker import Session

        return Session(max_finished_tasks=retained)
    from reference_tracker import ReferenceSession

    return ReferenceSession(max_finished_tasks=retained)


def probe(kind: str, retained: int, lifecycles: int, repeats: int) -> None:
    """Run in a fresh interpreter: prints the best CPU seconds per lifecycle of a session kept full."""
    session = session_of(kind, retained)
    start = session.start_subagent_task
    for index in range(retained):
        start(f"fill-{index}").complete()
    best = float("inf")
    for repeat in range(repeats):
        ids = [f"r{repeat}-{index}" for index in range(lifecycles)]
        began = time.process_time()
        for task_id in ids:
            start(task_id).complete()
        best = min(best, (time.process_time() - began) / lifecycles)
    print(best)


def measure(kind: str, retained: int, lifecycles: int, repeats: int) -> float:
    output = subprocess.run(
        [sys.executable, __file__, "--probe", kind, str(retained), str(lifecycles), str(repeats)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return float(output.strip())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to check that the script runs")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--probe", nargs=4, help=argparse.SUPPRESS)
    arguments = parser.parse_args()
    if arguments.probe:
        kind, retained, lifecycles, repeats = arguments.probe
        probe(kind, int(retained), int(lifecycles), int(repeats))
        return
    small, large = (100, 10_000) if arguments.smoke else (1_000, 1_000_000)
    lifecycles = 2_000 if arguments.smoke else 100_000
    repeats = 2 if arguments.smoke else arguments.repeats
    rows = {
        kind: [measure(kind, retained, lifecycles, repeats) for retained in (small, large)]
        for kind in ("ours", "reference")
    }
    print(
        f"| CPU time per lifecycle, best of {repeats} x {lifecycles:,} | {small:,} retained "
        f"| {large:,} retained | growth |"
    )
    print("|---|---|---|---|")
    for kind, (at_small, at_large) in rows.items():
        print(f"| {kind} | {at_small * 1e6:.3f} µs | {at_large * 1e6:.3f} µs | {at_large / at_small:.2f}x |")
    ours, reference = rows["ours"], rows["reference"]
    print(f"| reference / ours | {reference[0] / ours[0]:.2f}x | {reference[1] / ours[1]:.2f}x | |")


if __name__ == "__main__":
    main()
