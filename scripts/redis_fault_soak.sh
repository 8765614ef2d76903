#!/usr/bin/env bash
# The soak of the Redis store under Redis's own faults: the stress runs with a restore to older state and with
# a slot migration part way, each ROUNDS times (default 10) for SECONDS seconds (default 20), then the regression
# tests of lost writes, eviction and slot moves as many times. Too long for check.sh, which runs each once, short;
# run this after ./scripts/check.sh, whose wheel it tests. Each round prints how many tasks met the restore.
set -euo pipefail
. "$(dirname "$0")/_setup.sh"
if ! python -c "import subagent_tracker" 2>/dev/null; then
  echo "the package is not installed in .venv: run ./scripts/check.sh first" >&2
  exit 1
fi
rounds="${ROUNDS:-10}"
export SUBAGENT_TRACKER_STRESS_SECONDS="${SECONDS_PER_RUN:-20}"
for round in $(seq 1 "$rounds"); do
  echo "== round $round of $rounds"
  python -m pytest --timeout 600 -p no:cacheprovider -q -s \
    "tests/stores/test_redis_stress.py::test_a_restore_to_older_state_part_way_keeps_every_rule_for_what_redis_kept" \
    "tests/stores/test_redis_stress.py::test_a_slot_migration_part_way_keeps_every_rule" \
    tests/stores/test_redis_lost_writes.py tests/stores/test_redis_eviction.py \
    "tests/stores/test_redis_cluster.py::test_a_session_whose_slot_moves_is_never_cut_in_half" "$@"
done
