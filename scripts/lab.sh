#!/usr/bin/env bash
# Set up, then open JupyterLab on the teaching notebooks.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/jupyter lab --notebook-dir=notebooks "$@"
