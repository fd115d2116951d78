#!/usr/bin/env bash
# The whole test suite, as CI runs it: set up, then every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PYTHONUNBUFFERED=1
.venv/bin/python -m pytest tests -p no:logging "$@"
