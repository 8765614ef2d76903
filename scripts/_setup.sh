# Sourced by the other scripts: makes .venv with the pinned tools, from nothing, on a fresh machine. A script
# that needs fewer tools names its own list in SETUP_REQUIREMENTS (demo.sh installs no test tools).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
# shellcheck disable=SC1091
. .venv/bin/activate
# SETUP_WITH: a command to run the install under (demo.sh's prints the time while it is quiet).
${SETUP_WITH:-} python -m pip install --quiet --disable-pip-version-check \
  -r "${SETUP_REQUIREMENTS:-scripts/requirements-dev.txt}"
