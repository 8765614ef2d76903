#!/usr/bin/env bash
# Adds extras (server, pydantic-ai, openai-agents, langgraph, strands, agno, adk, crewai, otel) to the .venv that
# ./scripts/demo.sh or ./scripts/check.sh made, without rebuilding the extension: pip reads each extra's
# dependencies from the installed package's own metadata, and installs them at the versions the tests run
# (scripts/constraints-frameworks.txt).   Usage: ./scripts/add_extra.sh pydantic-ai [strands ...]
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then
  echo "usage: ./scripts/add_extra.sh EXTRA... (server, pydantic-ai, openai-agents, langgraph, strands, agno, adk, crewai, otel)" >&2
  exit 2
fi
if ! extras=$(.venv/bin/python -c 'from importlib.metadata import metadata
print(" ".join(metadata("subagent-tracker").get_all("Provides-Extra") or ()))' 2>/dev/null); then
  echo "add_extra.sh: .venv holds no subagent-tracker: run ./scripts/demo.sh first" >&2
  exit 1
fi
constraints=scripts/constraints-frameworks.txt
requirements=()
for extra in "$@"; do
  if [ "$extra" = crewai ]; then
    # CrewAI's pins conflict with openai-agents' and google-adk's (docs/integrations.md): pip would downgrade
    # what they need under them.
    if .venv/bin/python -c 'import importlib.util, sys
sys.exit(0 if any(importlib.util.find_spec(m) for m in ("agents", "google.adk")) else 1)' 2>/dev/null; then
      echo "add_extra.sh: crewai cannot share .venv with openai-agents or adk: pip install '.[crewai]' into a virtualenv of its own" >&2
      exit 2
    fi
    constraints=scripts/constraints-crewai.txt
  fi
  case " $extras " in
    *" $extra "*) requirements+=("subagent-tracker[$extra]") ;;
    *) echo "add_extra.sh: no extra '$extra': the extras are: $extras" >&2; exit 2 ;;
  esac
done
.venv/bin/python -m pip install --quiet --disable-pip-version-check -c "$constraints" \
  "${requirements[@]}"
echo "added to .venv: $*"
