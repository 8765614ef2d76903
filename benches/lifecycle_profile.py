"""A Python lifecycle in instructions and atomic read-modify-writes (callgrind), ours beside the plain-Python
reference (``reference_tracker.py``), in one run: a loop of ``session.start_subagent_task(id).complete()``.

Each side runs the loop over two counts of prebuilt ids in processes of their own; both build the ids of the
larger count before the loop, so the difference of the two totals over the difference of the counts is one
lifecycle and nothing else: the interpreter's start-up, the import and the ids cancel out. String hashing is
fixed (``PYTHONHASHSEED=0``), as dict probe lengths otherwise move the figure by 2-3%.

Atomic read-modify-writes are callgrind's "global bus events" (``--collect-bus=yes``): every executed
instruction with a ``lock`` prefix, or an ``xchg`` with memory, which is what an atomic increment, swap or
compare-exchange compiles to on x86-64. ``--by-function`` names where ours are, per lifecycle, from the same
runs (``--dump-instr=yes``, read by ``callgrind_annotate``); the names need an extension that keeps its
symbols (the wheel strips them: ``cargo build --release -p subagent-tracker-py`` and its ``lib_native.so`` in
place of the installed ``_native.abi3.so``), or they read as addresses. ``--by-line`` names each locked
instruction by the source lines it was inlined from (``addr2line -i``), which needs line tables too:
``CARGO_PROFILE_RELEASE_DEBUG=line-tables-only`` on that build.

Needs valgrind (Debian: ``apt-get install valgrind``); without it, it says so and exits. ``--smoke`` for tiny
sizes.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

LOOP = """
import sys
kind, count, built = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
if kind == "ours":
    from subagent_tracker import Session
    session = Session(max_finished_tasks=10_000)
else:
    sys.path.insert(0, sys.argv[4])
    from reference_tracker import ReferenceSession
    session = ReferenceSession(max_finished_tasks=10_000)


def loop(ids):
    start = session.start_subagent_task
    for task_id in ids:
        start(task_id).complete()


ids = [f"task-{index}" for index in range(built)]
loop(ids[:count])
"""


@dataclass
class Run:
    instructions: int
    atomics: int
    profile: str


@dataclass
class Lifecycle:
    instructions: float
    atomics: float
    atomics_by_function: list[tuple[float, str]]
    atomics_by_line: list[tuple[float, str]]


def run(kind: str, count: int, built: int, directory: str, prelude: str) -> Run:
    """One process that runs ``prelude`` (a statement), then the loop over ``count`` of ``built`` ids, under
    callgrind."""
    output = os.path.join(directory, f"callgrind.{kind}.{count}.out")
    subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--collect-bus=yes",
            "--dump-instr=yes",
            f"--callgrind-out-file={output}",
            sys.executable,
            "-c",
            f"{prelude}\n{LOOP}",
            kind,
            str(count),
            str(built),
            str(Path(__file__).parent),
        ],
        check=True,
        capture_output=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    with open(output) as profile:
        events = re.search(r"^events:\s+(.+)$", profile.read(), re.MULTILINE)
    with open(output) as profile:
        summary = re.search(r"^summary:\s+(.+)$", profile.read(), re.MULTILINE)
    assert events is not None and summary is not None, "callgrind wrote no summary"
    totals = dict(zip(events.group(1).split(), map(int, summary.group(1).split()), strict=True))
    return Run(instructions=totals["Ir"], atomics=totals.get("Ge", 0), profile=output)


def atomics_by_function(profile: str) -> dict[str, int]:
    """Atomic read-modify-writes per function (its own, not its callees'), from ``callgrind_annotate``."""
    report = subprocess.run(
        ["callgrind_annotate", "--show=Ge", "--inclusive=no", "--auto=no", "--threshold=100", profile],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    counts: dict[str, int] = {}
    for line in report.splitlines():
        row = re.match(r"\s*([\d,]+)\s+\([\s\d.]+%\)\s+(.+?)(?: \[.*\])?$", line)
        if row and "PROGRAM TOTALS" not in line:
            # "file:function": the file is the text before the first colon that is not half of a "::".
            function = re.sub(r"^\S*?(?<!:):(?!:)", "", row.group(2))
            counts[function] = counts.get(function, 0) + int(row.group(1).replace(",", ""))
    return counts


def atomics_by_address(profile: str) -> tuple[dict[int, int], int | None]:
    """Atomic read-modify-writes per executed address of the extension, and where the extension was loaded
    (the address of its ``PyInit__native`` less that symbol's own), from callgrind's ``--dump-instr``."""
    names: dict[tuple[str, str], str] = {}
    counts: dict[int, int] = {}
    module_init: int | None = None
    in_extension = in_module_init = after_calls = False
    last = 0
    with open(profile) as lines:
        for line in lines:
            named = re.match(r"^c?(ob|fn|fl|fi|fe)=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
            if named:
                kind, ident, name = named.groups()
                if name:
                    names[(kind, ident)] = name
                if line.startswith("ob="):
                    in_extension = "_native" in names.get(("ob", ident), "")
                elif line.startswith("fn="):
                    in_module_init = names.get(("fn", ident)) == "PyInit__native"
                continue
            if line.startswith("calls="):
                after_calls = True
                continue
            cost = re.match(r"^(0x[0-9a-f]+|[+-]\d+|\*)\s+(.*)$", line)
            if not cost:
                continue
            position, values = cost.groups()
            if position.startswith("0x"):
                last = int(position, 16)
            elif position != "*":
                last += int(position)
            # A call's cost line carries its callee's inclusive cost, counted where the callee is.
            if after_calls:
                after_calls = False
                continue
            if in_extension:
                if in_module_init:
                    module_init = last if module_init is None else min(module_init, last)
                events = values.split()
                if len(events) >= 3 and int(events[2]):
                    counts[last] = counts.get(last, 0) + int(events[2])
    return counts, module_init


def atomics_by_line(fewer: str, more: str, lifecycles: int) -> list[tuple[float, str]]:
    """Each locked instruction of the extension per lifecycle, named by the lines it was inlined from."""
    import subagent_tracker._native as native

    extension = native.__file__
    assert extension is not None
    before, loaded_at = atomics_by_address(fewer)
    after, module_init = atomics_by_address(more)
    # The two runs' counts are subtracted address by address: both must have loaded the extension alike.
    assert loaded_at == module_init, "the two runs loaded the extension at different addresses"
    symbols = subprocess.run(
        # The dynamic symbols: the module's entry point is one, in a stripped wheel too.
        ["nm", "--dynamic", "--defined-only", extension],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    symbol = re.search(r"^([0-9a-f]+) T PyInit__native$", symbols, re.MULTILINE)
    assert module_init is not None and symbol is not None, "no PyInit__native in the profile or the symbols"
    base = module_init - int(symbol.group(1), 16)
    shares = {
        address: (after.get(address, 0) - before.get(address, 0)) / lifecycles
        for address in after.keys() | before.keys()
    }
    hot = sorted(address for address, share in shares.items() if share >= 0.5)
    if not hot:
        return []
    located = subprocess.run(
        ["addr2line", "-a", "-i", "-f", "-C", "-e", extension, *(hex(address - base) for address in hot)],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    # One block per address: a function name and a source line for each frame of inlining. As binutils'
    # addr2line prints them, the first name is the function the code sits in, and the lines run from the
    # locked instruction's out to that function's own.
    blocks = re.split(r"^0x[0-9a-f]+$", located, flags=re.MULTILINE)[1:]
    rows = []
    for address, block in zip(hot, blocks, strict=True):
        lines = block.strip().splitlines()
        owner = re.sub(r"<[^<>]*>", "", re.sub(r"<[^<>]*>", "", lines[0])).split("::")[-1]
        # The standard library's frames (the atomic, the `Arc`, the mutex's guard) are left out; a
        # dependency's are named by its crate.
        places = [
            re.sub(r"^.*/registry/src/[^/]+/([^/]+?)-[\d.]+/src/", r"\1 ", line).rsplit("/", 1)[-1]
            for line in lines[1::2]
            if "/rustc/" not in line
        ]
        if not places:
            # Drop glue alone: the type it drops says whose reference goes.
            owner = re.sub(r"\w+::", "", lines[0])
        rows.append((shares[address], f"`{owner}`: " + " > ".join(reversed(places))))
    return rows


def lifecycle(
    kind: str, low: int, high: int, by_function: bool = False, prelude: str = "", by_line: bool = False
) -> Lifecycle:
    """One lifecycle of ``kind`` (``ours`` or ``reference``): the runs over ``high`` and ``low`` ids, their
    difference over ``high - low``; ``prelude`` runs first in both (an import whose cost is measured, say)."""
    with tempfile.TemporaryDirectory() as directory:
        fewer, more = run(kind, low, high, directory, prelude), run(kind, high, high, directory, prelude)
        lifecycles = high - low
        rows: list[tuple[float, str]] = []
        if by_function:
            before, after = atomics_by_function(fewer.profile), atomics_by_function(more.profile)
            for function in after.keys() | before.keys():
                share = (after.get(function, 0) - before.get(function, 0)) / lifecycles
                if share >= 0.5:
                    rows.append((share, function))
        return Lifecycle(
            instructions=(more.instructions - fewer.instructions) / lifecycles,
            atomics=(more.atomics - fewer.atomics) / lifecycles,
            atomics_by_function=sorted(rows, reverse=True),
            atomics_by_line=atomics_by_line(fewer.profile, more.profile, lifecycles) if by_line else [],
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, to check that the script runs")
    parser.add_argument("--by-function", action="store_true", help="where ours makes its atomic operations")
    parser.add_argument(
        "--by-line", action="store_true", help="each of ours, by the source lines it was inlined from"
    )
    arguments = parser.parse_args()
    if shutil.which("valgrind") is None:
        print("skipped: valgrind is not installed (Debian: apt-get install valgrind)")
        return
    if arguments.by_line and not (shutil.which("nm") and shutil.which("addr2line")):
        print("--by-line skipped: it needs nm and addr2line (Debian: apt-get install binutils)")
        arguments.by_line = False
    low, high = (200, 600) if arguments.smoke else (20_000, 60_000)
    ours = lifecycle("ours", low, high, arguments.by_function, by_line=arguments.by_line)
    reference = lifecycle("reference", low, high)
    print(
        f"| per Python start + complete (callgrind, {high - low:,} lifecycles) | ours | reference "
        "| reference / ours |"
    )
    print("|---|---|---|---|")
    print(
        f"| instructions | {ours.instructions:,.0f} | {reference.instructions:,.0f} "
        f"| {reference.instructions / ours.instructions:.2f}x |"
    )
    print(f"| atomic read-modify-writes | {ours.atomics:.1f} | {reference.atomics:.1f} | |")
    if arguments.by_function:
        print("\n| ours: atomic read-modify-writes per lifecycle | function |")
        print("|---|---|")
        for share, function in ours.atomics_by_function:
            print(f"| {share:.1f} | `{function}` |")
    if arguments.by_line:
        print("\n| ours: per lifecycle | the function, and the lines inlined into it, outermost first |")
        print("|---|---|")
        for share, frames in ours.atomics_by_line:
            print(f"| {share:.1f} | {frames} |")


if __name__ == "__main__":
    main()
