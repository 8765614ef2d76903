"""Runs every Python block of the README and of the documents named below that is not marked as a fragment,
each in a fresh interpreter.

A block is a fragment when the line before its opening fence is ``<!-- fragment -->``. Exits non-zero, naming
the file and the block's first line, when a block fails or runs longer than a minute: an example in the docs
that rots fails CI.

A block that imports a module of an extra this interpreter lacks (a framework, the dashboard's server) is
skipped, with the extra it needs and the command that adds it; ``--strict`` (which ``scripts/check.sh`` gives)
counts a skip as a failure, so that CI runs every block.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The documents whose examples must run as written.
DOCUMENTS = [ROOT / "README.md", ROOT / "docs" / "integrations.md"]
BLOCK = re.compile(r"(?P<before>[^\n]*)\n```python\n(?P<code>.*?)\n```", re.DOTALL)
FRAGMENT = "<!-- fragment -->"
TIMEOUT_SECONDS = 60
#: The extra that installs each top-level module a block may import (pyproject.toml's optional dependencies
#: name distributions, not the modules they provide).
EXTRA_OF_MODULE = {
    "pydantic_ai": "pydantic-ai",
    "agents": "openai-agents",
    "langgraph": "langgraph",
    "strands": "strands",
    "agno": "agno",
    "google": "adk",
    "crewai": "crewai",
    "opentelemetry": "otel",
    "starlette": "server",
    "uvicorn": "server",
    "prometheus_client": "server",
}
#: The extras whose framework needs a later Python than this package's oldest (pyproject.toml's markers).
OLDEST_PYTHON_OF_EXTRA = {"pydantic-ai": (3, 11), "adk": (3, 11)}
#: The extras that cannot be installed beside the others, and the environment that scripts/check.sh makes for
#: each: a block that needs one runs with that environment's interpreter.
ENVIRONMENT_OF_EXTRA = {"crewai": ROOT / ".venv-crewai" / "bin" / "python"}
#: The modules of this package that need an extra, and the module of the extra they import.
EXTRA_OF_PACKAGE_MODULE = {
    "subagent_tracker.integrations.pydantic_ai": "pydantic_ai",
    "subagent_tracker.integrations.openai_agents": "agents",
    "subagent_tracker.integrations.langgraph": "langgraph",
    "subagent_tracker.integrations.strands": "strands",
    "subagent_tracker.integrations.agno": "agno",
    "subagent_tracker.integrations.adk": "google",
    "subagent_tracker.integrations.crewai": "crewai",
    "subagent_tracker.integrations.otel": "opentelemetry",
    "subagent_tracker.dashboard": "starlette",
}


def runnable_blocks(text: str) -> list[tuple[int, str]]:
    """The (line number, code) of each Python block that is not a fragment."""
    return [
        (text.count("\n", 0, match.start("code")) + 1, match.group("code"))
        for match in BLOCK.finditer(text)
        if match.group("before").strip() != FRAGMENT
    ]


def missing_extra(code: str) -> tuple[str, str] | None:
    """The extra a block needs that this interpreter lacks, and the module it lacks; ``None`` if none (or if
    the block does not parse: running it says so, naming the block)."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None and node.level == 0:
            names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            continue
        for name in names:
            module = EXTRA_OF_PACKAGE_MODULE.get(name, name.partition(".")[0])
            extra = EXTRA_OF_MODULE.get(module)
            if extra is not None and importlib.util.find_spec(module) is None:
                return extra, module
    return None


def run_block(name: str, line: int, code: str, strict: bool) -> bool:
    """Runs one block; false if it failed, timed out, or (with ``strict``) was skipped."""
    lacking = missing_extra(code)
    interpreter = sys.executable
    if lacking is not None and ENVIRONMENT_OF_EXTRA.get(lacking[0], Path("/nonexistent")).exists():
        interpreter = str(ENVIRONMENT_OF_EXTRA[lacking[0]])
        lacking = None
    if lacking is not None:
        extra, module = lacking
        oldest = OLDEST_PYTHON_OF_EXTRA.get(extra)
        if oldest is not None and sys.version_info < oldest:
            # Nothing can add it here: not a failure, even in CI's strict run.
            shown = ".".join(map(str, oldest))
            print(f"{name} line {line}: skipped: the {extra!r} extra needs Python {shown} or later")
            return True
        print(
            f"{name} line {line}: skipped: it needs the {extra!r} extra (no module {module!r} here); "
            f"add it with ./scripts/add_extra.sh {extra}",
            file=sys.stderr if strict else sys.stdout,
        )
        return not strict
    try:
        result = subprocess.run(
            [interpreter, "-c", code], capture_output=True, text=True, timeout=TIMEOUT_SECONDS
        )
    except subprocess.TimeoutExpired:
        print(f"{name} line {line}: the block ran longer than {TIMEOUT_SECONDS} s", file=sys.stderr)
        return False
    if result.returncode != 0:
        print(f"{name} line {line}: the block failed\n{result.stdout}{result.stderr}", file=sys.stderr)
        return False
    print(f"{name} line {line}: ran")
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--strict", action="store_true", help="count a skipped block as a failure")
    strict = parser.parse_args(argv).strict
    passed = True
    for document in DOCUMENTS:
        name = str(document.relative_to(ROOT))
        blocks = runnable_blocks(document.read_text(encoding="utf-8"))
        if not blocks:
            print(f"{name} has no runnable Python block", file=sys.stderr)
            return 1
        for line, code in blocks:
            passed = run_block(name, line, code, strict) and passed
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
