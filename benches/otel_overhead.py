"""What the OpenTelemetry spans module costs a Python lifecycle while no reporter runs, in instructions
(callgrind): a loop of ``session.start_subagent_task(id).complete()`` with
``subagent_tracker.integrations.otel`` imported, beside the same loop without it, in one run.

Each side is counted as ``lifecycle_profile.py`` counts a lifecycle (two counts of prebuilt ids in processes
of their own, the difference over the difference of the counts), with the import run before the loop in both
of the side's processes, so that the import's own cost cancels out and only what it changes in a lifecycle
stays.

Needs valgrind (Debian: ``apt-get install valgrind``); without it, it says so and exits. ``--smoke`` for tiny
sizes.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from lifecycle_profile import lifecycle


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to check that the script runs")
    arguments = parser.parse_args()
    if shutil.which("valgrind") is None:
        print("skipped: valgrind is not installed (Debian: apt-get install valgrind)")
        return
    low, high = (200, 600) if arguments.smoke else (20_000, 60_000)
    without = lifecycle("ours", low, high).instructions
    imported = lifecycle("ours", low, high, prelude="import subagent_tracker.integrations.otel").instructions
    print("| instructions per Python start + complete | without the module | with it imported | change |")
    print("|---|---|---|---|")
    print(
        f"| callgrind, {high - low:,} lifecycles | {without:,.0f} | {imported:,.0f} | "
        f"{(imported / without - 1) * 100:+.2f}% |"
    )


if __name__ == "__main__":
    main()
