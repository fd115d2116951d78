"""Sizes that keep the code easy to change: no module over 500 lines, no function over 60.

The front end's limit (120 lines a function) is held by `js/test/code_shape.test.ts`.
"""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "bwd_widgets"
MODULE_LINES = 500
FUNCTION_LINES = 60
SOURCES = sorted(PACKAGE.rglob("*.py"))


def test_no_module_is_over_500_lines():
    long = {str(p.relative_to(PACKAGE)): n for p in SOURCES if (n := len(p.read_text().splitlines())) > MODULE_LINES}
    assert not long, f"split these modules: {long}"


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
    assert {"extractor.py", "core/capture.py", "views/payload.py", "jupyter/widget.py"} <= names
