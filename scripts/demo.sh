#!/usr/bin/env bash
# Builds everything (release) and runs the demo orchestrator. Extra arguments go to the demo (see --help).
set -euo pipefail
. "$(dirname "$0")/_setup.sh"
maturin develop --release --quiet
cargo build --release --quiet --example orchestrator -p subagent-tracker
python -m subagent_tracker demo "$@"
