"""What the OpenTelemetry spans module costs a Python lifecycle while no reporter runs, in instructions
(callgrind): a loop of ``session.start_subagent_task(id).complete()`` with
``subagent_tracker.integrations.otel`` imported, beside the same loop without it, in one run.

Each side runs the loop over two counts of ids in processes of their own; the difference of the two totals
over the difference of the counts is one lifecycle, with the interpreter's start-up and the import cancelled
out.
String hashing is fixed (``PYTHONHASHSEED=0``), as dict probe lengths otherwise move the figure by 2-3%.

Needs valgrind (Debian: ``apt-get install valgrind``); without it, it says so and exits. ``--smoke`` for tiny
sizes.
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

LOOP = """
import sys
{imports}
from subagent_tracker import Session

session = Session(max_finished_tasks=1_000)
ids = [f"t{{index}}" for index in range(int(sys.argv[1]))]
for task_id in ids:
    session.start_subagent_task(task_id).complete()
"""


def instructions(imports: str, count: int) -> int:
    """The instructions of one process that runs the loop over ``count`` ids."""
    with tempfile.TemporaryDirectory() as directory:
        output = os.path.join(directory, "callgrind.out")
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={output}",
                sys.executable,
                "-c",
                LOOP.format(imports=imports),
                str(count),
            ],
            check=True,
            capture_output=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        (written,) = glob.glob(output)
        with open(written) as profile:
            totals = re.search(r"^summary:\s+(\d+)", profile.read(), re.MULTILINE)
        assert totals is not None, "callgrind wrote no summary"
        return int(totals.group(1))


def per_lifecycle(imports: str, low: int, high: int) -> float:
    return (instructions(imports, high) - instructions(imports, low)) / (high - low)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to check that the script runs")
    arguments = parser.parse_args()
    if shutil.which("valgrind") is None:
        print("skipped: valgrind is not installed (Debian: apt-get install valgrind)")
        return
    low, high = (200, 600) if arguments.smoke else (20_000, 60_000)
    without = per_lifecycle("", low, high)
    imported = per_lifecycle("import subagent_tracker.integrations.otel", low, high)
    print("| instructions per Python start + complete | without the module | with it imported | change |")
    print("|---|---|---|---|")
    print(
        f"| callgrind, {high - low:,} lifecycles | {without:,.0f} | {imported:,.0f} | "
        f"{(imported / without - 1) * 100:+.2f}% |"
    )


if __name__ == "__main__":
    main()
