"""Checks the Linux wheel that check.sh builds: that it installs on every Linux with glibc 2.17 or newer.

- its tags are ``cp310-abi3`` and ``manylinux_2_17_x86_64`` (manylinux2014);
- ``auditwheel show`` agrees: the extension needs no symbol newer than glibc 2.17;
- the extension carries no debug symbols (stripped);
- it imports, and runs one task, on each CPython from 3.10 to 3.13 that this machine has (pyenv's, or on
  ``PATH``).

Usage: ``python scripts/check_wheel.py target/wheels/subagent_tracker-*.whl``. Exits non-zero on the first
check that fails, saying which.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from elftools.elf.elffile import ELFFile  # installed with auditwheel

POLICY = "manylinux_2_17_x86_64"
PYTHONS = ("3.10", "3.11", "3.12", "3.13")
# One lifecycle: enough to show the extension loaded and its module works.
SMOKE = (
    "import subagent_tracker, sys; "
    "session = subagent_tracker.Session(); "
    "handle = session.start_subagent_task('t'); "
    "assert session.cancel_subagent_task('t'); "
    "assert session.subagent_task('t').status is subagent_tracker.SubagentStatus.CANCELLED; "
    "print(sys.version.split()[0], subagent_tracker.__version__)"
)


def fail(message: str) -> None:
    sys.exit(f"check_wheel: {message}")


def check_tags(wheel: Path) -> None:
    if "-cp310-abi3-" not in wheel.name or POLICY not in wheel.name:
        fail(f"{wheel.name} is not tagged cp310-abi3 and {POLICY}")


def check_auditwheel(wheel: Path) -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "auditwheel", "show", str(wheel)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    # auditwheel wraps its sentences: compare them on one line.
    flat = " ".join(shown.split())
    if f'consistent with the following platform tag: "{POLICY}"' not in flat:
        fail(f"auditwheel does not find {wheel.name} consistent with {POLICY}:\n{shown}")
    print(f"auditwheel: consistent with {POLICY}")


def check_stripped(extension: Path) -> None:
    with extension.open("rb") as stream:
        sections = {section.name for section in ELFFile(stream).iter_sections()}
    debug = sorted(name for name in sections if name == ".symtab" or name.startswith(".debug"))
    if debug:
        fail(f"{extension.name} is not stripped: it has {', '.join(debug)}")
    print(f"{extension.name}: stripped, {extension.stat().st_size / 1e6:.1f} MB")


def _version_numbers(path: str) -> list[int]:
    return [int(number) for number in re.findall(r"\d+", path)]


def interpreters() -> dict[str, str | None]:
    """Each CPython of ``PYTHONS``: pyenv's newest build of that version, else ``pythonX.Y`` on PATH, else
    None."""
    root = os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))
    found: dict[str, str | None] = {}
    for version in PYTHONS:
        pattern = os.path.join(root, "versions", f"{version}.*", "bin", f"python{version}")
        # By version number, so that 3.10.14 comes after 3.10.9: the newest build is taken.
        candidates = sorted(glob.glob(pattern), key=_version_numbers)
        if candidates:
            found[version] = candidates[-1]
            continue
        on_path = shutil.which(f"python{version}")
        # A pyenv shim is on PATH for every version pyenv knows of, even one it cannot run.
        if on_path is not None and subprocess.run([on_path, "-V"], capture_output=True).returncode == 0:
            found[version] = on_path
        else:
            found[version] = None
    return found


def check_imports(unpacked: Path) -> None:
    environment = {**os.environ, "PYTHONPATH": str(unpacked)}
    environment.pop("VIRTUAL_ENV", None)
    for version, python in interpreters().items():
        if python is None:
            print(f"python{version}: not on this machine, skipped")
            continue
        ran = subprocess.run(
            [python, "-s", "-c", SMOKE],
            capture_output=True,
            text=True,
            env=environment,
            cwd=unpacked,
            check=False,
        )
        if ran.returncode != 0:
            fail(f"the wheel does not import on {python}:\n{ran.stderr}")
        print(f"python{version}: imports and runs a task ({ran.stdout.strip()})")


def main() -> None:
    if len(sys.argv) != 2:
        fail("usage: python scripts/check_wheel.py WHEEL")
    wheel = Path(sys.argv[1])
    check_tags(wheel)
    check_auditwheel(wheel)
    with tempfile.TemporaryDirectory() as directory:
        unpacked = Path(directory)
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(unpacked)
        extensions = list(unpacked.glob("subagent_tracker/_native*.so"))
        if len(extensions) != 1:
            fail(f"expected one extension module in {wheel.name}, found {extensions}")
        check_stripped(extensions[0])
        check_imports(unpacked)


if __name__ == "__main__":
    main()
