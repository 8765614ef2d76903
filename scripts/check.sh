#!/usr/bin/env bash
# Builds everything and runs every test and lint: the fast checks first (formatting, clippy, the wheel, Python
# lints, the Rust tests and loom model checks with mypy beside them, pytest against the installed wheel), then
# the slower smoke runs of the demo, the examples and the benchmarks.
set -euo pipefail
# Each phase says how long the run has taken so far, so that the suite's budget can be kept; the compiling
# phases show cargo's own line per crate, so that no phase is silent for long.
step() { printf '\n== %s (at %d s)\n' "$*" "$SECONDS"; }
# A build from nothing, as CI's is, gains nothing from incremental compilation and pays for its bookkeeping.
[ -z "${CI:-}" ] || export CARGO_INCREMENTAL=0
step "set up .venv with the pinned tools (the first time: about 10 s)"
. "$(dirname "$0")/_setup.sh"

step "the Debian packages the tests start (redis-server, chromium, openssl, python3-dbg) or lint with (lua-check), installed when missing"
missing=()
command -v redis-server >/dev/null || missing+=(redis-server)
command -v chromium >/dev/null || missing+=(chromium fonts-dejavu-core)
# The TLS tests make their certificates with openssl.
command -v openssl >/dev/null || missing+=(openssl)
# luacheck lints the server functions' library as Redis loads it (a test of `src/library.rs`).
command -v luacheck >/dev/null || missing+=(lua-check)
# A debug build of CPython checks the garbage collector's counts on every collection (a test of the sessions').
command -v python3-dbg >/dev/null || missing+=(python3-dbg)
if [ ${#missing[@]} -gt 0 ]; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
redis-server --version
chromium --version

step "rustfmt"
cargo fmt --all -- --check
step "clippy (with the MSRV of clippy.toml)"
cargo clippy --workspace --all-targets -- -D warnings
step "the core's one unsafe block stays the prefetch instruction"
# The core denies unsafe code; a module that allows it must be the prefetch's.
allowed=$(grep -rl "allow(unsafe_code)" crates/subagent-tracker/src)
[ "$allowed" = crates/subagent-tracker/src/tracker/prefetch.rs ] || {
  echo "unsafe code allowed outside tracker/prefetch.rs: $allowed" >&2
  exit 1
}
step "build the abi3 wheel for manylinux2014 (zig links it against glibc 2.17), check it, and install it"
rm -rf target/wheels
maturin build --release --zig --compatibility manylinux2014 --out target/wheels
# Its tags, auditwheel's verdict, its stripped extension, and an import on each CPython 3.10-3.13 here.
python scripts/check_wheel.py target/wheels/*.whl
# Byte-compiled here, as pip did: the many processes the tests start then import the package at once.
uv pip install --quiet --reinstall --no-deps --compile-bytecode target/wheels/*.whl
step "the agent frameworks of the integration tests: the wheel's extras, at the versions tested"
uv pip install --quiet -c scripts/constraints-frameworks.txt \
  "$(ls target/wheels/*.whl)[pydantic-ai,openai-agents,langgraph,strands,agno,adk,otel]"

# CrewAI's pins conflict with the main environment's (openai<3, OpenTelemetry >= 1.45.1): its tests run in
# .venv-crewai, made from the same wheel beside the compiling steps below, and run beside the smoke runs.
step "the environment of the CrewAI tests (.venv-crewai), made in the background from the same wheel"
(
  set -e
  [ -x .venv-crewai/bin/python ] || python -m venv .venv-crewai
  # uv byte-compiles nothing: compiling CrewAI's 1.2 GB would take the cores from the compiling steps beside
  # it; the few modules the tests import are compiled as they are imported.
  uv pip install --quiet --python .venv-crewai/bin/python --reinstall --no-deps target/wheels/*.whl
  uv pip install --quiet --python .venv-crewai/bin/python -c scripts/constraints-crewai.txt \
    "$(ls target/wheels/*.whl)[crewai,pydantic-ai,langgraph,strands,agno]" pytest pytest-timeout pytest-xdist redis
) >target/crewai-env.log 2>&1 &
crewai_env_pid=$!

step "ruff, and oxlint for the dashboard's script"
ruff check python tests benches examples scripts
ruff format --check python tests benches examples scripts
oxlint --deny-warnings python/subagent_tracker/dashboard/static/
# mypy runs on one core for over a minute: it checks beside the Rust tests, which spend much of their time
# compiling, and its verdict is collected after them.
step "mypy (package, tests, examples, benchmarks) and stubtest, in the background"
(
  mypy python/subagent_tracker
  mypy --strict tests examples benches scripts
  python -m mypy.stubtest subagent_tracker --allowlist .ci/stubtest-allowlist.txt --mypy-config-file pyproject.toml
) >target/mypy.log 2>&1 &
mypy_pid=$!

step "cargo test and the loom model checks of the core's concurrent transitions, built, then run side by side"
cargo test --workspace --no-run
# Loom's own target directory: another cfg.
loom() {
  RUSTFLAGS="--cfg subagent_tracker_loom" CARGO_TARGET_DIR=target/loom \
    cargo test --quiet --release -p subagent-tracker --test loom "$@"
}
loom --no-run
# The Rust tests spend most of their time waiting on Redis servers, the model checks on the cores.
cargo test --workspace --quiet >target/cargo-test.log 2>&1 &
cargo_test_pid=$!
loom_status=0
loom || loom_status=$?
cargo_test_status=0
wait "$cargo_test_pid" || cargo_test_status=$?
cat target/cargo-test.log
[ "$cargo_test_status" -eq 0 ] || { echo "cargo test failed"; exit "$cargo_test_status"; }
[ "$loom_status" -eq 0 ] || { echo "the loom model checks failed"; exit "$loom_status"; }

step "mypy's verdict"
mypy_status=0
wait "$mypy_pid" || mypy_status=$?
cat target/mypy.log
[ "$mypy_status" -eq 0 ] || { echo "mypy or stubtest failed"; exit "$mypy_status"; }

step "pytest (against the installed wheel), in three processes"
# Three workers on the two cores of the machines this runs on: most tests wait on servers, subprocesses and
# timers, and a third worker fills those waits (about a fifth off the phase; a fourth was no faster, each
# starting a cluster of its own). Each starts the servers its tests need (Redis on free loopback ports, a cluster
# of its own), so none shares state with another.
python -m pytest -n 3 --timeout 120 -p no:cacheprovider --durations=15 | tee target/pytest-summary.log

# The smoke runs wait on servers and timers more than on the CPU: two lanes run beside each other.
step "smoke runs, in two lanes (sizes for a smoke test; the figures are not judged)"
(
  set -e
  echo "-- the Rust examples, each Rust benchmark once (divan's test mode), the Redis benchmarks"
  cargo run --quiet --example orchestrator -p subagent-tracker
  cargo run --quiet --example two_workers -p subagent-tracker-redis
  cargo test --quiet --benches -p subagent-tracker
  python benches/redis_bench.py --smoke >/dev/null
  python benches/redis_server_profile.py --smoke >/dev/null
  python benches/redis_bounded_calls.py --smoke >/dev/null
) >target/smoke-lane.log 2>&1 &
lane=$!
# The CrewAI tests, in their own environment, run beside the smoke runs too (they also mostly wait).
(
  set -e
  wait_for_crewai_env() { while kill -0 "$crewai_env_pid" 2>/dev/null; do sleep 1; done; }
  wait_for_crewai_env
  .venv-crewai/bin/python -c "import crewai, subagent_tracker.integrations.crewai" \
    || { cat target/crewai-env.log; echo "could not make .venv-crewai"; exit 1; }
  SUBAGENT_TRACKER_FRAMEWORKS=crewai,pydantic_ai,langgraph,strands,agno .venv-crewai/bin/python -m pytest \
    --timeout 120 -p no:cacheprovider tests/integrations/test_integrations_crewai.py \
    tests/integrations/test_integrations_cross_framework.py
) >target/pytest-crewai-summary.log 2>&1 &
crewai_lane=$!
# If the Python lane fails, set -e ends the script here: stop the other lane and show what it printed.
trap 'pkill -P "$lane" 2>/dev/null; kill "$lane" "$crewai_lane" 2>/dev/null; cat target/smoke-lane.log' EXIT
echo "-- the Python blocks of the README and docs/integrations.md, as written; the demo, the examples and the"
echo "   Python benchmarks"
# The CrewAI block of docs/integrations.md runs in .venv-crewai, once it is made.
while kill -0 "$crewai_env_pid" 2>/dev/null; do sleep 1; done
python scripts/run_doc_examples.py --strict
python -m subagent_tracker demo --plain --subagents 60 --speed 4 >/dev/null
python examples/quickstart.py >/dev/null
python examples/streaming_agent.py >/dev/null
python examples/fanout_deadline.py >/dev/null
python examples/event_stream_feed.py >/dev/null
for example in examples/integrations/*.py; do python "$example" >/dev/null; done
python benches/python_bench.py --smoke >/dev/null
python benches/lifecycle_scale.py --smoke --by-function >/dev/null
python benches/lifecycle_profile.py --smoke --by-function --by-line >/dev/null
python benches/integrations_bench.py --smoke >/dev/null
python benches/deadline_soak.py --tasks 1000 --rounds 1 >/dev/null
lane_status=0
wait "$lane" || lane_status=$?
crewai_status=0
wait "$crewai_lane" || crewai_status=$?
trap - EXIT
cat target/smoke-lane.log
[ "$lane_status" -eq 0 ] || { echo "the smoke lane of the Rust examples and Redis benchmarks failed"; exit 1; }
echo "-- pytest in .venv-crewai: CrewAI, and the cross-framework pairs of the frameworks installed with it"
cat target/pytest-crewai-summary.log
[ "$crewai_status" -eq 0 ] || { echo "the CrewAI tests failed"; exit 1; }
# The CrewAI module skips itself where CrewAI is missing: here a skip would hide that it never ran.
if grep -Eq "[0-9]+ skipped" target/pytest-crewai-summary.log; then
  echo "a test was skipped in .venv-crewai"
  exit 1
fi
step "done"

# The counts again, last, since the smoke runs above print after pytest's own summary.
for log in target/pytest-summary.log target/pytest-crewai-summary.log; do
  summary=$(grep -Eo '[0-9]+ passed' "$log" | tail -1 | grep -Eo '[0-9]+')
  failed=$(grep -Eo '[0-9]+ failed' "$log" | tail -1 | grep -Eo '[0-9]+' || true)
  printf '\npytest (%s): %s passed, %s failed\n' "$log" "${summary:-0}" "${failed:-0}"
done
