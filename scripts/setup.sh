#!/usr/bin/env bash
# Idempotent set-up on a fresh Debian machine: Python venv with everything, JS deps and bundle.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# torch is pinned exactly: this machine serves a CPU build of 2.13.0 from local disk.
.venv/bin/python -m pip install --quiet "torch==2.13.0"
.venv/bin/python -m pip install --quiet -e ".[test]"
