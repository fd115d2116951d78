#!/usr/bin/env bash
# Idempotent set-up on a fresh Debian machine: Chromium, Python venv, JS deps and bundle.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v chromium >/dev/null 2>&1 || ! command -v dot >/dev/null 2>&1; then
    echo "installing Debian's chromium (real-browser tests) and graphviz (static SVG export)"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq chromium graphviz >/dev/null
fi

npm ci --no-audit --no-fund --loglevel=error
npm run build

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
# torch first, exactly the oldest tested release: pyproject declares a range (torch>=2.13.0,<2.17), and with no
# torch installed pip would meet that range with a multi-GB CUDA build from PyPI; this machine serves a CPU build
# of 2.13.0 from local disk, which the range then keeps. (scripts/test_newest_torch.sh tests the newer ones, 2.14.1 and 2.15.0.)
.venv/bin/python -m pip install --quiet "torch==2.13.0"
# editable install; its build hook runs `npm run build` again, which is quick
.venv/bin/python -m pip install --quiet -e ".[test]"
