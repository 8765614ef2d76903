"""Runs every Python block of the README and of the documents named below that is not marked as a fragment,
each in a fresh interpreter.

A block is a fragment when the line before its opening fence is ``<!-- fragment -->``. Exits non-zero, naming
the file and the block's first line, when a block fails or runs longer than a minute: an example in the docs
that rots fails CI.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The documents whose examples must run as written.
DOCUMENTS = [ROOT / "README.md", ROOT / "docs" / "integrations.md"]
BLOCK = re.compile(r"(?P<before>[^\n]*)\n```python\n(?P<code>.*?)\n```", re.DOTALL)
FRAGMENT = "<!-- fragment -->"


def runnable_blocks(text: str) -> list[tuple[int, str]]:
    """The (line number, code) of each Python block that is not a fragment."""
    return [
        (text.count("\n", 0, match.start("code")) + 1, match.group("code"))
        for match in BLOCK.finditer(text)
        if match.group("before").strip() != FRAGMENT
    ]


def main() -> int:
    for document in DOCUMENTS:
        name = document.relative_to(ROOT)
        blocks = runnable_blocks(document.read_text(encoding="utf-8"))
        if not blocks:
            print(f"{name} has no runnable Python block", file=sys.stderr)
            return 1
        for line, code in blocks:
            result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
            if result.returncode != 0:
                failure = f"{name} line {line}: the block failed\n{result.stdout}{result.stderr}"
                print(failure, file=sys.stderr)
                return 1
            print(f"{name} line {line}: ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())
