#!/usr/bin/env bash
# Builds the Python extension (Cargo profile `demo`: quick to build, see Cargo.toml) and runs the demo
# orchestrator. Extra arguments go to the demo (see --help).
set -euo pipefail

# Runs a command, printing each line of its output as it comes and, whenever 15 s pass without one, the time
# so far: the setup's downloads and the last crates of the build go quiet for minutes on a busy machine.
with_progress() {
  local started=$SECONDS line
  "$@" 2>&1 | while true; do
    if IFS= read -r -t 15 line; then
      printf '%s\n' "$line"
    elif [ $? -gt 128 ]; then
      [ -z "$line" ] || printf '%s\n' "$line"
      printf '   ... still working: %d s so far\n' $((SECONDS - started))
    else
      [ -z "$line" ] || printf '%s\n' "$line"  # a last line without its newline
      break
    fi
  done
}

echo "== setting up .venv with the build tool and the dashboard's server (the first time only; under a minute)"
SETUP_REQUIREMENTS=scripts/requirements-demo.txt
SETUP_WITH=with_progress
. "$(dirname "$0")/_setup.sh"
echo "== building the Rust core and its Python extension (the first time: under a minute on 2 free cores, less"
echo "   on more, up to 3 on a busy machine; later, seconds for what changed)"
# pip would print a line for each optional dependency of each extra it skips (issue 21 counted 12, the
# framework extras added 4 more): PIP_QUIET keeps them out of a newcomer's first screen. Cargo's own progress
# (one line per crate) stays, so that the build shows how far it is.
PIP_QUIET=1 with_progress maturin develop --profile demo
echo "== running the demo (Ctrl-C stops it; --help lists its options)"
python -m subagent_tracker demo "$@"
