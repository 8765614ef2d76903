#!/usr/bin/env bash
# The failover tests, and the fault and stress tests again, each against a Redis Cluster of its own (three
# primaries and three replicas, started on loopback by the fixtures) instead of one server. They take longer than
# check.sh's budget allows, so they live here; run this after ./scripts/check.sh, whose wheel it tests. Tests that
# need what only one server has (a proxy in front of it, a replica made by hand) say so and are skipped.
set -euo pipefail
. "$(dirname "$0")/_setup.sh"
if ! python -c "import subagent_tracker" 2>/dev/null; then
  echo "the package is not installed in .venv: run ./scripts/check.sh first" >&2
  exit 1
fi
SUBAGENT_TRACKER_TEST_REDIS=cluster python -m pytest --timeout 300 -p no:cacheprovider \
  tests/stores/test_redis_cluster.py tests/stores/test_redis_faults.py tests/stores/test_redis_stress.py "$@"
