"""CPU time of a Python lifecycle as a session grows to a million retained finished tasks, ours beside the
plain-Python reference (``reference_tracker.py``), in one run.

    python benches/lifecycle_scale.py            # 1,000 and 1,000,000 retained (a minute or two)
    python benches/lifecycle_scale.py --smoke    # tiny sizes, to check that the script runs
    python benches/lifecycle_scale.py --by-function   # and where the time goes at each size (perf)

Each session keeps ``retained`` finished tasks: it is filled to its bound first, so every measured end evicts
the oldest record, as a long-running session's does. Each side and size runs in a fresh interpreter (so one
size's heap does not slow the other's), and reports the best of ``--repeats`` loops of
``session.start_subagent_task(id).complete()`` over prebuilt ids, in CPU time of the process. The figure that
matters is the growth: the time per lifecycle at the larger size over the time at the smaller one, ours beside
the reference's own.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))


def session_of(kind: str, retained: int) -> Any:
    if kind == "ours":
        from subagent_tracker import Session

        return Session(max_finished_tasks=retained)
    from reference_tracker import ReferenceSession

    return ReferenceSession(max_finished_tasks=retained)


@contextmanager
def sampled() -> Iterator[None]:
    """perf samples the block, when this process runs under ``profile`` (else it does nothing)."""
    control = os.environ.get("LIFECYCLE_SCALE_PERF_CONTROL")
    if control is None:
        yield
        return
    command, acknowledged = control.split(",")
    with open(command, "w") as commands, open(acknowledged) as acks:
        # Each command is answered once perf has acted on it, so no sample misses the loop's start or end.
        commands.write("enable\n")
        commands.flush()
        acks.readline()
        try:
            yield
        finally:
            commands.write("disable\n")
            commands.flush()
            acks.readline()


def probe(kind: str, retained: int, lifecycles: int, repeats: int) -> None:
    """Run in a fresh interpreter: prints the best CPU seconds per lifecycle of a session kept full."""
    session = session_of(kind, retained)
    start = session.start_subagent_task
    for index in range(retained):
        start(f"fill-{index}").complete()
    best = float("inf")
    for repeat in range(repeats):
        ids = [f"r{repeat}-{index}" for index in range(lifecycles)]
        with sampled():
            began = time.process_time()
            for task_id in ids:
                start(task_id).complete()
            best = min(best, (time.process_time() - began) / lifecycles)
    print(best)


def probe_command(kind: str, retained: int, lifecycles: int, repeats: int) -> list[str]:
    return [sys.executable, __file__, "--probe", kind, str(retained), str(lifecycles), str(repeats)]


def measure(kind: str, retained: int, lifecycles: int, repeats: int) -> float:
    output = subprocess.run(
        probe_command(kind, retained, lifecycles, repeats), check=True, capture_output=True, text=True
    ).stdout
    return float(output.strip())


# A row of `perf report --stdio`: the share, the privilege level (`[.]` user, `[k]` kernel, ...), the symbol.
SAMPLE_ROW = re.compile(r"\s*([\d.]+)%\s+\[[^\]]+\]\s+(.+?)\s*$")


class PerfUnavailable(Exception):
    """perf is installed but gave no profile (a kernel's ``perf_event_paranoid``, a container's policy)."""


def profile(kind: str, retained: int, lifecycles: int, repeats: int, directory: str) -> dict[str, float]:
    """Each function's share of the CPU-clock samples taken during the timed loops, from ``perf``."""
    data = os.path.join(directory, f"perf.{kind}.{retained}.data")
    command, acknowledged = os.path.join(directory, "control"), os.path.join(directory, "ack")
    for fifo in (command, acknowledged):
        if not os.path.exists(fifo):
            os.mkfifo(fifo)
    recorded = subprocess.run(
        [
            *("perf", "record", "--delay=-1", f"--control=fifo:{command},{acknowledged}"),
            *("--event=cpu-clock", "--freq=5000", f"--output={data}", "--"),
            *probe_command(kind, retained, lifecycles, repeats),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "LIFECYCLE_SCALE_PERF_CONTROL": f"{command},{acknowledged}"},
    )
    try:
        # The probe prints its figure only once its loops have run: without it, nothing was profiled.
        float(recorded.stdout.strip())
    except ValueError:
        reason = recorded.stderr.strip().splitlines()
        raise PerfUnavailable(reason[0] if reason else f"perf record exited {recorded.returncode}") from None
    report = subprocess.run(
        ["perf", "report", f"--input={data}", "--stdio", "--no-children", "--sort=sym", "--percent-limit=0"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    shares: dict[str, float] = {}
    for line in report.splitlines():
        row = SAMPLE_ROW.match(line)
        if row:
            shares[row.group(2)] = shares.get(row.group(2), 0.0) + float(row.group(1)) / 100
    if not shares:
        raise PerfUnavailable("perf recorded no samples")
    return shares


def print_growth_by_function(
    kind: str, sizes: tuple[int, int], seconds: list[float], shares: list[dict[str, float]], rows: int
) -> None:
    small, large = sizes
    nanoseconds = [
        {function: share * at_size * 1e9 for function, share in by_function.items()}
        for at_size, by_function in zip(seconds, shares, strict=True)
    ]
    growth = sorted(
        (
            (nanoseconds[1].get(function, 0.0) - nanoseconds[0].get(function, 0.0), function)
            for function in nanoseconds[0].keys() | nanoseconds[1].keys()
        ),
        reverse=True,
    )
    print()
    print(f"| {kind}: ns per lifecycle | {small:,} retained | {large:,} retained | grew by | function |")
    print("|---|---|---|---|---|")
    for grew, function in growth[:rows]:
        at_small, at_large = nanoseconds[0].get(function, 0.0), nanoseconds[1].get(function, 0.0)
        print(f"| | {at_small:.1f} | {at_large:.1f} | {grew:+.1f} | `{function}` |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to check that the script runs")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--by-function", action="store_true", help="where the time goes at each size (perf)")
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
    if not arguments.by_function:
        return
    if shutil.which("perf") is None:
        print("\n--by-function skipped: perf is not installed (Debian: apt-get install linux-perf)")
        return
    with tempfile.TemporaryDirectory() as directory:
        try:
            profiles = {
                kind: [profile(kind, retained, lifecycles, repeats, directory) for retained in (small, large)]
                for kind in rows
            }
        except PerfUnavailable as error:
            print(f"\n--by-function skipped: perf could not sample ({error})")
            return
    shown = 6 if arguments.smoke else 12
    for kind, seconds in rows.items():
        print_growth_by_function(kind, (small, large), seconds, profiles[kind], rows=shown)


if __name__ == "__main__":
    main()
