#!/usr/bin/env bash
# Run a command while every core is busy with other work: `stress-ng --cpu N` (N = the cores here), at the same
# priority, stopped when the command ends. The tests must pass like this (docs/contributing.md, "Under load"):
#   bash scripts/under-load.sh .venv/bin/python -m pytest tests/stack/faults/test_faults_stream.py
set -euo pipefail
if ! command -v stress-ng >/dev/null 2>&1; then
  echo "under-load: stress-ng not found (Debian package stress-ng; scripts/system-packages.sh installs it as root)" >&2
  exit 2
fi
cores=$(nproc)
stress-ng --cpu "$cores" --cpu-method matrixprod --quiet &
hog=$!
trap 'kill "$hog" 2>/dev/null; wait "$hog" 2>/dev/null || true' EXIT
echo "under-load: stress-ng --cpu $cores running (pid $hog)" >&2
"$@"
