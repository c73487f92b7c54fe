#!/usr/bin/env bash
# Quickstart command 2: set up, then run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
bash scripts/system-packages.sh
# The Node.js client's packages and buf (examples/node/package-lock.json), when npm is there and the lock changed
if command -v npm >/dev/null 2>&1 && \
    ! [ examples/node/node_modules/.package-lock.json -nt examples/node/package-lock.json ]; then
  npm ci --prefix examples/node --no-audit --no-fund --loglevel=error
fi
exec .venv/bin/python -m pytest "$@"
