#!/usr/bin/env bash
# Builds everything (release) and runs the demo orchestrator. Extra arguments go to the demo (see --help).
set -euo pipefail
echo "== setting up .venv with the build tool and the dashboard's server (the first time only; under a minute)"
SETUP_REQUIREMENTS=scripts/requirements-demo.txt
. "$(dirname "$0")/_setup.sh"
echo "== building the Rust core and its Python extension in release mode (about two minutes on a fresh machine:"
echo "   cargo shows each crate as it compiles; the last, the extension itself, takes about a minute alone)"
# pip would print a line for each optional dependency of each extra it skips (issue 21 counted 12, the
# framework extras added 4 more): PIP_QUIET keeps them out of a newcomer's first screen. Cargo's own progress
# (one line per crate) stays, so that the build shows how far it is.
PIP_QUIET=1 maturin develop --release
echo "== running the demo: an orchestrator fans out 300 subagents, which start children of their own (about 600"
echo "   tasks in all), for about 15 seconds (--seed N reproduces a run, --speed 2 halves it)"
python -m subagent_tracker demo "$@"
