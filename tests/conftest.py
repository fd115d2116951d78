import os
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"


def shared_path(*parts) -> Path:
    """A path under ../shared: missing fails under CI, skips with a reason elsewhere."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        message = f"shared data {path} is missing (it lives next to the project root as ../shared)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path


@pytest.fixture(scope="session")
def conv_bn_dir():
    return shared_path("reference", "conv_bn")


@pytest.fixture(scope="session")
def samples_dir():
    return shared_path("graphnet_samples")
