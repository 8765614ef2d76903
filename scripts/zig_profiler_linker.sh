#!/usr/bin/env bash
# The linker of an instrumented build for `maturin --zig` (scripts/pgo_wheel.sh). rustc pulls in the profiler's
# runtime with `-u SYMBOL`, which zig's C compiler reads as a file to link (cargo-zigbuild issue #315): this passes
# it on as the linker's own flag, to the linker maturin chose, which PGO_LINKER_VARIABLE names.
set -euo pipefail
arguments=()
while [ $# -gt 0 ]; do
  if [ "$1" = -u ] && [ $# -ge 2 ]; then
    arguments+=("-Wl,-u,$2")
    shift 2
  else
    arguments+=("$1")
    shift
  fi
done
exec "${!PGO_LINKER_VARIABLE:?the linker maturin chose is not set}" "${arguments[@]}"
