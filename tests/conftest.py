"""Shared fixtures, and the test tiers.

Markers (registered here): `slow` (minutes: a family of generated cases, a GraphNet corpus, a model zoo),
`browser` (a real JupyterLab or Notebook 7 in Chromium: every test under tests/browser/), and `newest_torch` (run
again in the newest-torch job, scripts/test_newest_torch.sh), and `alone` (a measurement of how long the page's
own tasks take, which a CPU-bound test beside it on a 2-core machine would stretch: `scripts/test.sh` runs these
after the parallel run, on their own, through `--alone=skip` and `--alone=only`). The fast tier,
`scripts/check.sh`, is `-m "not slow and not browser"`; `scripts/test.sh` (CI) runs everything.
"""

import re
from pathlib import Path

import pytest

from shared_data import shared_path

BROWSER_TESTS = Path(__file__).parent / "browser"
NEWEST_TORCH_JOB = Path(__file__).parents[1] / "scripts" / "test_newest_torch.sh"
SLOW_FILES = {
    # each takes from half a minute to many minutes here: model zoos, GraphNet corpora and validators, generated
    # families over every view and partition, the advisor, worker processes, a real kernel, torch.compile races
    "test_advisor.py",
    "test_advisor_newest_apis.py",
    "test_background_invisible.py",
    "test_batch.py",
    "test_batch_output_lock.py",
    "test_capstone.py",
    "test_cli.py",
    "test_corpus.py",
    "test_correctness.py",
    "test_course_claims.py",
    "test_eager_memory.py",
    "test_every_view.py",
    "test_graphnet_pipeline.py",
    "test_interrupt.py",
    "test_keyword_inputs.py",
    "test_magic.py",
    "test_measure.py",
    "test_model_left_as_it_was.py",
    "test_reference.py",
    "test_reliability.py",
    "test_studio.py",
    "test_tied.py",
    "test_torch_partition.py",
    "test_torch_reasons.py",
    "test_trace_cache.py",
    "test_trace_entry_points.py",
    "test_widget.py",
    "test_worked_answers.py",
    "test_zoo.py",
}
"""The slow tier, by file: the fast loop (scripts/check.sh, `-m "not slow and not browser"`) runs the rest in
about two minutes. A new test file is fast until it is listed here."""


def _newest_torch_files() -> set[str]:
    """The test files the newer-torch jobs run: the script's TESTS list is the one place that says which."""
    if not NEWEST_TORCH_JOB.exists():
        return set()
    return set(re.findall(r"\btests/(test_\w+\.py)\b", NEWEST_TORCH_JOB.read_text()))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: minutes of work; left out of the fast tier (scripts/check.sh)")
    config.addinivalue_line("markers", "browser: a real JupyterLab or Notebook 7 in Chromium (tests/browser/)")
    config.addinivalue_line("markers", "newest_torch: run again on the newest torch (scripts/test_newest_torch.sh)")
    config.addinivalue_line("markers", "alone: times the page's tasks; scripts/test.sh runs it with no test beside it")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--alone",
        choices=("with", "skip", "only"),
        default="with",
        help="the tests marked alone: run with the rest (with, the default), leave them out (skip), or run only "
        "them (only); scripts/test.sh runs them after the rest, with nothing beside them. An option, not -m, so "
        "that a -m of the caller's still selects",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test under tests/browser/ is a browser test (the folder is the marker), every test of a file the
    newer-torch jobs run is a newest_torch test, and every test of a file in SLOW_FILES a slow one; `--alone`
    leaves out the `alone` tests, or all but them."""
    newest = _newest_torch_files()
    for item in items:
        path = Path(str(item.path))
        if BROWSER_TESTS in path.parents:
            item.add_marker(pytest.mark.browser)
        if path.name in newest:
            item.add_marker(pytest.mark.newest_torch)
        if path.name in SLOW_FILES:
            item.add_marker(pytest.mark.slow)
    alone = config.getoption("alone")
    if alone != "with":
        keep: list[pytest.Item] = []
        leave: list[pytest.Item] = []
        for item in items:
            (keep if (item.get_closest_marker("alone") is not None) == (alone == "only") else leave).append(item)
        config.hook.pytest_deselected(items=leave)
        items[:] = keep


@pytest.fixture(scope="session")
def conv_bn_dir():
    return shared_path("reference", "conv_bn")


@pytest.fixture(scope="session")
def samples_dir():
    return shared_path("graphnet_samples")


@pytest.fixture(scope="session")
def course_models():
    """The course's small models, extracted once under the default partitioner: tests re-partition them
    with `rerun`, which leaves these extractions as they are."""
    import torch

    import bwd_widgets as bw
    from bwd_widgets.examples import MLP, Block, ConvBN, Transformer

    from models import GraphBreak

    torch.manual_seed(0)
    return {
        "MLP": bw.extract(MLP(width=16, depth=4), torch.randn(8, 16)),
        "Block": bw.extract(Block(width=32), torch.randn(2, 16, 32)),
        "Transformer": bw.extract(Transformer(width=32, depth=2), torch.randint(0, 64, (4, 32))),
        "ConvBN": bw.extract(ConvBN(), torch.randn(2, 3, 16, 16)),
        "GraphBreak": bw.extract(GraphBreak(), torch.randn(3, 4)),
    }
