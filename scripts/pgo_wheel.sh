#!/usr/bin/env bash
# Builds the release wheel with profile-guided optimisation, as pydantic-core builds its own: an instrumented
# build runs a training workload, and the wheel is built again with the profile it wrote. The training is the
# Python benchmarks' smoke runs (the Redis store's too, where redis-server is installed) and the examples, so the
# profile weighs the calls users repeat (a start, an end, a check, a cancel, a wait) and reaches the rest of the
# API. A Python lifecycle then takes about a sixth less CPU time than in a plain `--release` build
# (BENCHMARKS.md): the code is the same, only its inlining and layout follow the profile.
#
#     scripts/pgo_wheel.sh OUT_DIR [maturin build options...]
#
# The training runs with $PYTHON (python3 by default), whose environment must hold the benchmarks' tools
# (scripts/requirements-dev.txt). Needs `llvm-profdata` of rustc's own LLVM: rustup's `llvm-tools` component,
# added when missing, or the program LLVM_PROFDATA names. The builds go to target/pgo, apart from the workspace's
# usual build. Used by bench.sh and by release_check.sh.
set -euo pipefail
out=$(realpath -m "${1:?usage: scripts/pgo_wheel.sh OUT_DIR [maturin build options...]}")
shift
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"

host=$(rustc -vV | sed -n 's/^host: //p')
profdata="${LLVM_PROFDATA:-$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata}"
if [ ! -x "$profdata" ] && command -v rustup >/dev/null; then
  rustup component add llvm-tools
fi
if [ ! -x "$profdata" ]; then
  echo "no llvm-profdata of rustc's LLVM at $profdata: add rustup's llvm-tools, or name one in LLVM_PROFDATA" >&2
  exit 1
fi

pgo_dir="$PWD/target/pgo"
profiles="$pgo_dir/profiles"
profile="$pgo_dir/merged.profdata"
# The final build has a directory of its own, emptied first: a build that kept its objects from an earlier
# profile could miss that the profile changed.
rm -rf "$profiles" "$pgo_dir/instrumented" "$pgo_dir/final-build" "$profile"

# A build's flags: the caller's, then these; encoded, so that no path splits at a space.
encoded_rustflags() {
  local flags=()
  if [ -n "${CARGO_ENCODED_RUSTFLAGS:-}" ]; then
    IFS=$'\x1f' read -r -a flags <<<"$CARGO_ENCODED_RUSTFLAGS"
  elif [ -n "${RUSTFLAGS:-}" ]; then
    read -r -a flags <<<"$RUSTFLAGS"
  fi
  flags+=("$@")
  local IFS=$'\x1f'
  echo "${flags[*]}"
}

instrumented_flags=("-Cprofile-generate=$profiles")
for option in "$@"; do
  if [ "$option" = --zig ]; then
    export PGO_LINKER_VARIABLE="CARGO_TARGET_$(echo "$host" | tr 'a-z-' 'A-Z_')_LINKER"
    instrumented_flags+=("-Clinker=$PWD/scripts/zig_profiler_linker.sh")
  fi
done

echo "-- the instrumented build"
# Both builds take the caller's options (zig's included) and name the target. The profile is keyed by the
# compiled functions' symbols, whose hashes follow the build's configuration (zig sets some); naming the target
# keeps the flags from the build scripts and proc-macros, which would write profiles of their own.
CARGO_ENCODED_RUSTFLAGS=$(encoded_rustflags "${instrumented_flags[@]}") CARGO_TARGET_DIR="$pgo_dir/instrumented-build" \
  maturin build --release --quiet --target "$host" --out "$pgo_dir/instrumented" "$@"

echo "-- the training: the Python benchmarks' smoke runs and the examples, on the instrumented wheel"
"$PYTHON" -m zipfile -e "$pgo_dir"/instrumented/*.whl "$pgo_dir/instrumented/package"
# The instrumented copy comes first on the path, ahead of any installed one; the environment still supplies the
# benchmarks' tools (redis-py), and the processes they start inherit the path.
export PYTHONPATH="$pgo_dir/instrumented/package"
imported=$("$PYTHON" -c 'import subagent_tracker._native as native; print(native.__file__)')
if [[ $imported != "$pgo_dir/instrumented/package/"* ]]; then
  echo "the training would run $imported, not the instrumented build" >&2
  exit 1
fi
training=(benches/python_bench.py benches/lifecycle_scale.py)
if command -v redis-server >/dev/null; then
  training+=(benches/redis_bench.py)
else
  echo "redis-server is missing: the profile leaves out the Redis store's calls"
fi
for script in "${training[@]}"; do
  "$PYTHON" "$script" --smoke >/dev/null
done
for example in examples/quickstart.py examples/streaming_agent.py examples/fanout_deadline.py \
  examples/event_stream_feed.py; do
  "$PYTHON" "$example" >/dev/null
done
unset PYTHONPATH
"$profdata" merge -o "$profile" "$profiles"

echo "-- the wheel, built with the profile"
CARGO_ENCODED_RUSTFLAGS=$(encoded_rustflags "-Cprofile-use=$profile") CARGO_TARGET_DIR="$pgo_dir/final-build" \
  maturin build --release --quiet --target "$host" --out "$out" "$@"
