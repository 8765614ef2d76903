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
# uv installs what the requirements pin in seconds where pip takes most of a minute (pip resolves and
# byte-compiles one package at a time); it comes from the package index as one wheel, pinned here.
python -m pip install --quiet --disable-pip-version-check "uv==0.13.9"
# As pip is set up here: the system's certificates, and a machine's own folder of wheels if it names one.
export UV_NATIVE_TLS=1
if [ -n "${PIP_FIND_LINKS:-}" ] && [ -z "${UV_FIND_LINKS:-}" ]; then
  export UV_FIND_LINKS="$PIP_FIND_LINKS"
fi
# SETUP_WITH: a command to run the install under (demo.sh's prints the time while it is quiet).
${SETUP_WITH:-} uv pip install --quiet -r "${SETUP_REQUIREMENTS:-scripts/requirements-dev.txt}"
