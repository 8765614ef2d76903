#!/usr/bin/env bash
# Builds the release wheel with profile-guided optimisation, as pydantic-core builds its own: an instrumented
# build runs a training workload, and the wheel is built again with the profile it wrote. The training is the
# benchmarks' smoke runs (the Redis store's too, where redis-server is installed) and the examples, so the
# profile weighs the calls users repeat (a start, an end, a check, a cancel, a wait) and reaches the rest of the
# API. A Python lifecycle then takes about a sixth less CPU time than in a plain `--release` build
# (BENCHMARKS.md): the code is the same, only its inlining and layout follow the profile.
#
#     scripts/pgo_wheel.sh OUT_DIR [maturin build options...]
#
# The training runs with $PYTHON (python3 by default), whose environment must hold the benchmarks' tools
# (scripts/requirements-dev.txt). Needs `llvm-profdata` of the toolchain's own LLVM: rustup's `llvm-tools`
# component, added when missing. The builds go to target/pgo, apart from the workspace's usual build. Used by
# bench.sh (so the figures are those of the wheel users get) and by release_check.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: scripts/pgo_wheel.sh OUT_DIR [maturin build options...]}"
shift
PYTHON="${PYTHON:-python3}"

host=$(rustc -vV | sed -n 's/^host: //p')
profdata="$(rustc --print sysroot)/lib/rustlib/$host/bin/llvm-profdata"
if [ ! -x "$profdata" ]; then
  rustup component add llvm-tools
fi

pgo="$PWD/target/pgo"
rm -rf "$pgo/profiles" "$pgo/instrumented" "$pgo"/*.profdata
mkdir -p "$pgo"
generate="-Cprofile-generate=$pgo/profiles"
if [[ " $* " == *" --zig "* ]]; then
  # zig's C compiler, which links for `--zig`, reads the `-u SYMBOL` by which rustc pulls in the profiler's
  # runtime as a file to link: this linker passes it on as the linker's own flag, to the linker maturin chose.
  linker_variable="CARGO_TARGET_$(echo "$host" | tr 'a-z-' 'A-Z_')_LINKER"
  cat >"$pgo/zig-profiler-linker.sh" <<LINKER
#!/usr/bin/env bash
arguments=()
while [ \$# -gt 0 ]; do
  if [ "\$1" = -u ]; then arguments+=("-Wl,-u,\$2"); shift 2; else arguments+=("\$1"); shift; fi
done
exec "\$$linker_variable" "\${arguments[@]}"
LINKER
  chmod +x "$pgo/zig-profiler-linker.sh"
  generate="$generate -Clinker=$pgo/zig-profiler-linker.sh"
fi
echo "-- the instrumented build"
# With the same options as the wheel's: the profile is keyed by the compiled functions' symbols, whose hashes
# follow the build's configuration (zig's included).
RUSTFLAGS="$generate" CARGO_TARGET_DIR="$pgo" maturin build --release --quiet --out "$pgo/instrumented" "$@"

echo "-- the training: the benchmarks' smoke runs and the examples, on the instrumented wheel"
# Unpacked ahead of the calling environment's own copy of the package, whose tools (redis-py) it uses.
"$PYTHON" -m zipfile -e "$pgo"/instrumented/*.whl "$pgo/instrumented/package"
training=(benches/python_bench.py benches/thread_scaling.py benches/lifecycle_scale.py)
if command -v redis-server >/dev/null; then
  training+=(benches/redis_bench.py)
else
  echo "redis-server is missing: the profile leaves out the Redis store's calls"
fi
for script in "${training[@]}"; do
  PYTHONPATH="$pgo/instrumented/package" "$PYTHON" "$script" --smoke >/dev/null
done
for example in examples/quickstart.py examples/streaming_agent.py examples/fanout_deadline.py \
  examples/event_stream_feed.py; do
  PYTHONPATH="$pgo/instrumented/package" "$PYTHON" "$example" >/dev/null
done
"$profdata" merge -o "$pgo/merged.profdata" "$pgo/profiles"
# Named by its content: cargo rebuilds when its flags change, not when a file they name does.
profile="$pgo/$(sha256sum "$pgo/merged.profdata" | cut -c1-16).profdata"
mv "$pgo/merged.profdata" "$profile"

echo "-- the wheel, built with the profile"
RUSTFLAGS="-Cprofile-use=$profile" CARGO_TARGET_DIR="$pgo" \
  maturin build --release --quiet --out "$out" "$@"
rm "$profile"
