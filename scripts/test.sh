#!/usr/bin/env bash
# The whole test suite, as CI runs it: set up; lint and type checks (ruff, mypy, tsc); the kernel-browser contract
# fixture, then the front end's unit tests; the Python tests (the GraphNet corpus and the
# real-browser JupyterLab tests among them); the notebooks; then the core tests on each newer tested torch, from the
# built wheel (scripts/test_newest_torch.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export PYTHONUNBUFFERED=1
.venv/bin/ruff check .
.venv/bin/ruff format --check .
.venv/bin/mypy  # the package, zero errors (pyproject.toml [tool.mypy])
npm run --silent typecheck
.venv/bin/python -m pytest tests/test_contract.py -q -p no:logging  # writes js/test/fixtures/payload.json
npx vitest run
# The zoo's timm and torchvision models need torchvision, which does not load beside the local torch 2.13.0 CPU
# build: they run in the newest-torch job below (BWD_ZOO=all there).
# On every core (pytest-xdist; BWD_TEST_WORKERS to choose): the suite is mostly single-threaded Python (tracing,
# Dynamo, Inductor's compiles), so two workers on a 2-core machine run it about 1.4x faster than one
# (tests/test_torch_partition.py: 173 s alone, 120 s on two). worksteal: a worker that runs dry takes tests from
# the other, since one file's cases can take minutes.
# The `alone` tests time the page's own tasks (tests/browser/test_long_tasks.py): beside tests compiling models,
# a 48-layer landing had tasks of 102-125 ms (a CI run; 102-107 ms here beside tests/test_torch_partition.py), so
# they run after the others, with nothing beside them.
# Through --alone (tests/conftest.py), not -m, so that a -m given here still selects; pytest's status 5 says the
# arguments selected none of a run's tests, which is fine for one of the two runs but not for both.
rest=0
.venv/bin/python -m pytest tests -p no:logging -n "${BWD_TEST_WORKERS:-2}" --dist worksteal --durations=25 --alone=skip "$@" || rest=$?
[ "$rest" -eq 0 ] || [ "$rest" -eq 5 ] || exit "$rest"
alone=0
.venv/bin/python -m pytest tests -p no:logging --alone=only "$@" -n 0 || alone=$?
[ "$alone" -eq 0 ] || [ "$alone" -eq 5 ] || exit "$alone"
[ "$rest" -eq 0 ] || [ "$alone" -eq 0 ] || { echo "scripts/test.sh: the arguments given select no test" >&2; exit 5; }
.venv/bin/python -m pytest --nbval-lax --nbval-current-env notebooks/ -p no:logging
# The newer-torch jobs: a fresh venv for each tested release after the oldest (2.14.1, 2.15.0), the built wheel
# installed into it.
bash scripts/test_newest_torch.sh
