#!/usr/bin/env bash
# The whole test suite, as CI runs it: set up, then JS unit tests, Python tests
# (the GraphNet corpus and the real-browser JupyterLab test among them) and the notebooks.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PYTHONUNBUFFERED=1
npx vitest run
.venv/bin/python -m pytest tests -p no:logging "$@"
.venv/bin/python -m pytest --nbval-lax --nbval-current-env notebooks/ -p no:logging
