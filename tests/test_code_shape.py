"""Sizes that keep the code easy to change: no function over 60 lines; a module over 500 lines is a warning, a
hint to look for a second responsibility in it, never the reason for a split (a split names the new owner).

The front end's limit (120 lines a function) is held by `js/test/code_shape.test.ts`.
"""

import ast
import warnings
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "bwd_widgets"
MODULE_LINES = 500
FUNCTION_LINES = 60
SOURCES = sorted(PACKAGE.rglob("*.py"))


def test_a_module_over_500_lines_is_a_hint():
    long = {str(p.relative_to(PACKAGE)): n for p in SOURCES if (n := len(p.read_text().splitlines())) > MODULE_LINES}
    if long:
        warnings.warn(f"modules over {MODULE_LINES} lines: does one of them own two things? {long}", stacklevel=1)


def test_no_function_is_over_60_lines():
    long = {}
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > FUNCTION_LINES:
                    long[f"{path.relative_to(PACKAGE)}:{node.lineno} {node.name}"] = lines
    assert not long, f"split these functions into named steps: {long}"


def test_the_limits_see_every_module():
    """The walk must reach the package's modules, nested packages included, or the limits hold vacuously."""
    names = {str(p.relative_to(PACKAGE)) for p in SOURCES}
    assert {"extraction/extract.py", "core/capture.py", "views/payload.py", "jupyter/widget.py"} <= names


def _calls(name: str) -> list[str]:
    """Where the package calls `name(...)`: `module:function` for each call."""
    found = []
    for path in SOURCES:
        tree = ast.parse(path.read_text())
        for function in ast.walk(tree):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name:
                    found.append(f"{path.relative_to(PACKAGE)}:{function.name}")
    return found


def test_one_factory_builds_every_partition():
    assert _calls("Partition") == ["core/trace.py:build_partition"]
    assert set(_calls("build_partition")) == {
        "core/capture.py:build",
        "core/trace.py:partition",
        "extraction/loaded_trace.py:region_extraction",
    }


def test_partitions_cannot_change_once_built():
    import dataclasses

    import pytest
    import torch

    import bwd_widgets as bw

    partition = bw.extract(torch.nn.Linear(3, 2), torch.randn(4, 3)).partitions[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        partition.forward = partition.backward  # type: ignore[misc]
    with pytest.raises(RuntimeError, match="already recorded"):
        partition.trace.record(None, [])


def test_the_tangent_rule_is_written_once():
    places = [
        f"{p.relative_to(PACKAGE)}:{i}"
        for p in SOURCES
        for i, line in enumerate(p.read_text().splitlines(), 1)
        if '"tangents_"' in line or "startswith(TANGENT_PREFIX)" in line
    ]
    assert [place.partition(":")[0] for place in places] == ["core/kinds.py"] * 2, places


def test_no_view_reads_fx_graphs():
    """The views serialise the core's node table; classifying graph nodes is the core's job."""
    offenders = [
        str(p.relative_to(PACKAGE))
        for p in (PACKAGE / "views").rglob("*.py")
        if "torch.fx" in p.read_text() or "import torch" in p.read_text()
    ]
    assert not offenders, offenders
