#!/usr/bin/env bash
# The fast loop while you work (under 3 minutes on a 2-core machine): lint and format, the Python and TypeScript
# type checks, the kernel-browser contract fixture and the front end's unit tests, then the Python tests outside
# the slow and browser tiers (tests/conftest.py names the markers). It sets nothing up: run scripts/setup.sh once
# first. scripts/test.sh runs everything, as CI does.
# Extra arguments go to the last pytest: bash scripts/check.sh -k cache
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x .venv/bin/python ] || [ ! -f bwd_widgets/static/widget.js ]; then
    echo "check.sh: nothing is set up here yet: run bash scripts/setup.sh once, then this again" >&2
    exit 2
fi
START=$SECONDS
step() { echo "== check: $1 ($((SECONDS - START)) s so far)"; }
export PYTHONUNBUFFERED=1
step "ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
step "mypy"
.venv/bin/mypy
step "TypeScript"
npm run --silent typecheck
npm run --silent build
step "contract fixture and front-end unit tests"
.venv/bin/python -m pytest tests/test_contract.py -q -p no:logging
npx vitest run --silent
step "fast Python tests"
.venv/bin/python -m pytest tests -q -p no:logging -m "not slow and not browser" --deselect tests/test_contract.py "$@"
step "done"
