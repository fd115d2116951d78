"""Where tests find ../shared: missing fails under CI, skips with a reason elsewhere."""

import os
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parents[2] / "shared"


def require(condition: bool, message: str) -> None:
    if condition:
        return
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message)
    pytest.skip(message)


def shared_path(*parts) -> Path:
    path = SHARED.joinpath(*parts)
    require(path.exists(), f"shared data {path} is missing (it lives next to the project root as ../shared)")
    return path


def graphnet_sample_names() -> list[str]:
    """The shared GraphNet samples by name (`dev_list.txt`), for parametrizing; a missing folder gives one case,
    which then fails under CI or skips elsewhere where the test opens it."""
    listing = SHARED / "graphnet_samples" / "dev_list.txt"
    if not listing.exists():
        return ["<missing ../shared/graphnet_samples>"]
    return [line.strip() for line in listing.read_text().splitlines() if line.strip()]
