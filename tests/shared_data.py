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
