#!/usr/bin/env bash
# Quickstart command 1: set up, then answer the source article's two prompts with the real model.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
exec .venv/bin/pdserve demo "$@"
