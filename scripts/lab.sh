#!/usr/bin/env bash
# Set up, then open JupyterLab on the teaching notebooks.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
extra=()
[ "$(id -u)" -ne 0 ] || extra+=(--allow-root)
exec .venv/bin/jupyter lab --notebook-dir=notebooks "${extra[@]}" "$@"
