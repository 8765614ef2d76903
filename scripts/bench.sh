#!/usr/bin/env bash
# Builds everything in release mode (the Python extension as the release wheel is built: with profile-guided
# optimisation, scripts/pgo_wheel.sh) and runs every benchmark: the Rust microbenchmarks (divan) and the Python
# scenarios beside trpc-agent-py and a plain-Python reference, the agent frameworks, and the Redis store (with the
# server's instruction counts when valgrind is installed). Pass --smoke for tiny sizes.
set -euo pipefail
cd "$(dirname "$0")/.."
smoke=""
[ "${1:-}" = "--smoke" ] && smoke="--smoke"

# trpc-agent-py brings ~90 packages, so it lives in its own virtualenv, never in the test one.
PYTHON="${PYTHON:-python3}"
[ -x .venv-bench/bin/python ] || "$PYTHON" -m venv .venv-bench
. .venv-bench/bin/activate
python -m pip install --quiet --disable-pip-version-check -r scripts/requirements-dev.txt "trpc-agent-py==1.2.0"
rm -rf target/bench-wheels
# Built the way the release wheel is (with the profile of a training run), so the figures are those users get.
PYTHON=python scripts/pgo_wheel.sh target/bench-wheels
python -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps target/bench-wheels/*.whl
# The frameworks the benchmarks below run, at the versions the tests pin: those of check.sh's main environment
# (CrewAI's pins conflict with them, so integrations_bench.py skips it here).
python -m pip install --quiet --disable-pip-version-check -c scripts/constraints-frameworks.txt \
  "$(ls target/bench-wheels/*.whl)[pydantic-ai,openai-agents,langgraph,strands,agno,adk,otel]"

echo "== machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)"
echo "== Rust microbenchmarks (divan)"
if [ -n "$smoke" ]; then
  cargo bench --quiet -p subagent-tracker --bench tracker -- --sample-count 2 --sample-size 1
else
  cargo bench --quiet -p subagent-tracker --bench tracker
fi
echo
echo "== two threads against one, the median of three runs"
python benches/thread_scaling.py $smoke
echo
echo "== Python scenarios"
python benches/python_bench.py $smoke
echo
echo "== a Python lifecycle at 1,000 and at 1,000,000 retained tasks, beside the reference's own growth"
python benches/lifecycle_scale.py $smoke --by-function
echo
echo "== a Python lifecycle's instructions and atomic read-modify-writes (callgrind; skipped without valgrind)"
python benches/lifecycle_profile.py $smoke --by-function
echo
echo "== the agent frameworks: one run untracked against tracked"
python benches/integrations_bench.py $smoke
echo
echo "== across processes, on Redis"
python benches/redis_bench.py $smoke
echo
echo "== the longest server call over 100k tasks (SLOWLOG)"
python benches/redis_bounded_calls.py $smoke
echo
echo "== the Redis server's instructions per start + complete (callgrind; skipped without valgrind)"
python benches/redis_server_profile.py $smoke
echo
echo "== a cancel from another process, seen by an Agno run: the adapter's manager and Agno's own"
python benches/agno_cancel_latency.py $smoke
echo
echo "== a Python lifecycle with the OpenTelemetry spans module imported and no reporter (callgrind)"
python benches/otel_overhead.py $smoke
