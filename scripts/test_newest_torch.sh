#!/usr/bin/env bash
# The newer-torch CI jobs, one per tested release after the oldest (bwd_widgets/core/compat.py TESTED_TORCH;
# tests/test_torch_version.py holds the two lists equal): a fresh venv per release (.venv-newest-<release>) with
# PyPI's CUDA build of that torch, run on the CPU, and transformers. The project goes in as its built wheel, which
# must leave that torch in place, and the tests run against the installed wheel, not the source folder.
# scripts/test.sh calls it last; run alone: bash scripts/test_newest_torch.sh [RELEASE] [extra pytest args]
# (RELEASE: one of NEWER_TORCH below; none: each in turn).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1

NEWER_TORCH=(2.14.1 2.15.0)
if [ $# -eq 0 ] || [[ "$1" != [0-9]* ]]; then
    for release in "${NEWER_TORCH[@]}"; do
        bash "$0" "$release" "$@"
    done
    exit 0
fi
TORCH="$1"
shift
case "$TORCH" in
# torchvision (and so timm) exists for 2.14.1 (0.29.1; PyPI's torchvision does not load beside the local 2.13.0
# CPU build), so the model zoo's vision models run there (BWD_ZOO=all). None is built for 2.15.0 yet.
2.14.1) VISION=("torchvision==0.29.1" "timm==1.0.29") ZOO=all ;;
*) VISION=() ZOO=transformers ;;
esac
# This machine's pip config caps torch at the releases on its disk (2.14.1); a newer one comes from the package
# index, with a pip that reads no config (a few minutes: the CUDA build is several GB).
PIP=(env)
[[ "$TORCH" == 2.1[3-4].* ]] || PIP=(env PIP_CONFIG_FILE=/dev/null)
VENV=".venv-newest-$TORCH"
PY="$VENV/bin/python"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
START=$SECONDS
phase() { echo "== torch $TORCH: $1 ($((SECONDS - START)) s so far)"; }

# torch's version as pip recorded it, without importing torch; fails unless it is $TORCH.
assert_torch() {
    "$PY" -P - "$TORCH" "$1" <<'EOF'
import importlib.metadata
import sys

expected, after = sys.argv[1], sys.argv[2]
installed = importlib.metadata.version("torch")
print(f"torch after {after}: {installed} (expected {expected})")
if installed != expected:
    sys.exit(f"FAIL: {after} replaced torch {expected} with {installed}")
EOF
}

phase "fresh venv $VENV"
rm -rf "$VENV"
python3 -m venv "$VENV"
"${PIP[@]}" "$PY" -m pip install --quiet --upgrade pip
"${PIP[@]}" "$PY" -m pip install --quiet "torch==$TORCH" "${VISION[@]}"
assert_torch "installing torch ${VISION[*]}"
# The model zoo's libraries and what these tests need (pytest; the project's own deps come with its wheel).
"${PIP[@]}" "$PY" -m pip install --quiet "transformers==5.18.0" "diffusers==0.42.1" "pytest>=8" "pytest-xdist>=3.5" \
    "nbval>=0.11" "ipykernel>=6"
assert_torch "installing transformers and pytest"

phase "build the wheel"
# The hatch build hook runs `npm install` and `npm run build`, so the wheel carries the front-end bundle.
"${PIP[@]}" "$PY" -m pip wheel --quiet --no-deps . -w "$WORK"
WHEEL="$(ls "$WORK"/bwd_widgets-*.whl)"
echo "built $(basename "$WHEEL")"
"${PIP[@]}" "$PY" -m pip install --quiet "$WHEEL"
# The issue's check: the built wheel, installed into a venv that holds torch 2.14.1, leaves that torch in place.
assert_torch "pip install of the built wheel"

phase "tests against the installed wheel"
SITE="$("$PY" -P -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
# -P: the current folder (the repo root, holding the source bwd_widgets/) is not put on sys.path, as for pytest's
# own entry point below.
"$PY" -P -c 'import bwd_widgets, torch; print("bwd_widgets from", bwd_widgets.__file__, "on torch", torch.__version__)'
# A plugin that prints, in pytest's own process, which bwd_widgets the tests import, and stops the run unless it
# is the installed wheel's. (pytest's entry point puts tests/ on sys.path, for the tests' helpers, not the root.)
cat >"$WORK/newest_torch_check.py" <<'EOF'
import os

import pytest


def pytest_report_header(config):
    import bwd_widgets
    import torch

    return f"newest torch job: bwd_widgets from {bwd_widgets.__file__}, torch {torch.__version__}"


def pytest_sessionstart(session):
    import bwd_widgets

    if not os.path.abspath(bwd_widgets.__file__).startswith(os.environ["BWD_WIDGETS_SITE"] + os.sep):
        raise pytest.UsageError(f"the tests import {bwd_widgets.__file__}, not the installed wheel")
EOF
# On the newest torch (NEWEST below): the reference, extraction, correctness and corpus tests, torch's reasons, the
# advisor and measured memory, keyword inputs and tied weights, the trace cache, what users type first, the widget's
# background work unseen by the kernel's thread, torch.compile's own saved set at every budget, a training step's
# gradients, the claims of the course's notebook 8 (tests/test_course_lessons.py), attention's kernels, the studio's
# sweeps and splits made again (tests/test_studio.py: they share torch's CSE pass and flow-graph cuts, which each
# release calls its own way), and the model zoo. On a release between the oldest and the newest, what reads torch's own decisions (the reference, torch's
# reasons, torch.compile's saved set at every budget, correctness, attention's kernels, the torch.fx route's patches of
# torch's checkpoint functions) and the model zoo, with its
# timm and torchvision models (BWD_ZOO=all) where they load: the rest reads nothing that differs between releases
# that the oldest and the newest do not cover, and CI's 90 minutes hold the whole list once, not twice.
# tests/conftest.py marks these files newest_torch, reading these lists.
NEWEST="${NEWER_TORCH[-1]}"
TESTS=(tests/test_torch_version.py tests/test_reference.py tests/test_correctness.py tests/test_torch_reasons.py
    tests/test_torch_partition.py tests/test_attention_kernels.py tests/test_zoo.py tests/test_fx_route_refusals.py)
if [ "$TORCH" == "$NEWEST" ]; then
    TESTS+=(tests/test_extract.py tests/test_corpus.py tests/test_advisor.py tests/test_measure.py
        tests/test_keyword_inputs.py tests/test_tied.py tests/test_trace_cache.py tests/test_first_steps.py
        tests/test_background_invisible.py tests/test_training_step.py tests/test_course_lessons.py
        tests/test_studio.py)
fi
BWD_ZOO="$ZOO" BWD_WIDGETS_SITE="$SITE" PYTHONPATH="$WORK" "$VENV/bin/pytest" -p newest_torch_check -p no:logging \
    -n "${BWD_TEST_WORKERS:-2}" --dist worksteal --durations=10 "${TESTS[@]}" "$@"
assert_torch "the tests"
if [ "$TORCH" == "$NEWEST" ]; then
    # The notebooks, top to bottom, on the newest torch: a cell that raises fails; what a cell prints is held on the
    # oldest torch only (scripts/nbval_any_output.cfg says why). The kernel runs in notebooks/, so it imports the
    # installed wheel, not the source folder.
    phase "the notebooks run top to bottom"
    "$VENV/bin/pytest" -p no:logging --nbval-lax --nbval-current-env \
        --nbval-sanitize-with scripts/nbval_any_output.cfg notebooks/
    assert_torch "the notebooks"
fi
phase "done"
