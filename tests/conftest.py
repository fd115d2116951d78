"""Shared fixtures, and the test tiers.

Markers (registered here): `slow` (minutes: a family of generated cases, a GraphNet corpus, a model zoo),
`browser` (a real JupyterLab or Notebook 7 in Chromium: every test under tests/browser/), and `newest_torch` (run
again in the newest-torch job, scripts/test_newest_torch.sh). The fast tier, `scripts/check.sh`, is
`-m "not slow and not browser"`; `scripts/test.sh` (CI) runs everything.
"""

import re
from pathlib import Path

import pytest

from shared_data import shared_path

BROWSER_TESTS = Path(__file__).parent / "browser"
NEWEST_TORCH_JOB = Path(__file__).parents[1] / "scripts" / "test_newest_torch.sh"


def _newest_torch_files() -> set[str]:
    """The test files the newer-torch jobs run: the script's TESTS list is the one place that says which."""
    if not NEWEST_TORCH_JOB.exists():
        return set()
    return set(re.findall(r"\btests/(test_\w+\.py)\b", NEWEST_TORCH_JOB.read_text()))


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow: minutes of work; left out of the fast tier (scripts/check.sh)")
    config.addinivalue_line("markers", "browser: a real JupyterLab or Notebook 7 in Chromium (tests/browser/)")
    config.addinivalue_line("markers", "newest_torch: run again on the newest torch (scripts/test_newest_torch.sh)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test under tests/browser/ is a browser test (the folder is the marker), and every test of a file the
    newer-torch jobs run is a newest_torch test."""
    newest = _newest_torch_files()
    for item in items:
        path = Path(str(item.path))
        if BROWSER_TESTS in path.parents:
            item.add_marker(pytest.mark.browser)
        if path.name in newest:
            item.add_marker(pytest.mark.newest_torch)


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
