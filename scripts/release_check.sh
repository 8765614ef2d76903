#!/usr/bin/env bash
# Before a release: what check.sh does not build, since each compiles the workspace once more. Run it after
# ./scripts/check.sh (it reuses its .venv):
# - the release wheel builds with profile-guided optimisation (scripts/pgo_wheel.sh) for manylinux2014, as
#   check.sh's plain one does, passes the same checks, and the core's and the stores' tests pass against it
#   (target/release-wheel holds it; .venv keeps it installed);
# - the sdist builds and installs into a fresh virtualenv, where the package imports and runs a task;
# - `cargo publish --dry-run` packages and builds the core and the Redis crate together (the Redis crate depends
#   on a core that is not yet published, hence the one multi-package call);
# - `cargo doc` of the published crates has no warnings (missing docs on public items included).
set -euo pipefail
. "$(dirname "$0")/_setup.sh"

step() { printf '\n== %s (at %d s)\n' "$*" "$SECONDS"; }

step "the release wheel: built with profile-guided optimisation, checked, and tested"
rm -rf target/release-wheel
scripts/pgo_wheel.sh target/release-wheel --zig --compatibility manylinux2014
python scripts/check_wheel.py target/release-wheel/*.whl
uv pip install --quiet --reinstall --no-deps --compile-bytecode target/release-wheel/*.whl
python -m pytest -n 2 --timeout 120 -p no:cacheprovider -q tests/core tests/stores

step "the sdist: build it, install it into a fresh virtualenv, import it"
rm -rf target/sdist target/sdist-venv
maturin sdist --out target/sdist
python -m venv target/sdist-venv
# The sdist's build runs in a directory of its own; its crates' dependencies come from this workspace's cache.
CARGO_TARGET_DIR="$PWD/target/sdist-build" target/sdist-venv/bin/python -m pip install --quiet \
  --disable-pip-version-check target/sdist/subagent_tracker-*.tar.gz
target/sdist-venv/bin/python -c "
import subagent_tracker
session = subagent_tracker.Session()
handle = session.start_subagent_task('t')
assert session.cancel_subagent_task('t')
print('the sdist installs and imports:', subagent_tracker.__version__)
"

step "cargo publish --dry-run of the core and the Redis crate"
cargo publish --dry-run --allow-dirty -p subagent-tracker -p subagent-tracker-redis

step "cargo doc of the published crates, warnings denied"
RUSTDOCFLAGS="-D warnings" cargo doc --no-deps -p subagent-tracker -p subagent-tracker-redis

step "done"
