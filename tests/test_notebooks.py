"""Committed notebooks: no widget state, small, and with pinned outputs for nbval to check.

Running them is the README test command's `pytest --nbval-lax --nbval-current-env notebooks/`.
"""

from pathlib import Path

import nbformat
import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def test_the_course_has_six_notebooks():
    assert [p.name[:2] for p in NOTEBOOKS] == ["01", "02", "03", "04", "05", "06"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_clean_small_and_pinned(path):
    assert path.stat().st_size < 200_000
    notebook = nbformat.read(path, as_version=4)
    assert "widgets" not in notebook.metadata, "strip widget state: scripts/strip_notebooks.py"
    outputs = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs]
    assert not any(WIDGET_VIEW in o.get("data", {}) for o in outputs)
    pinned = [c for c in notebook.cells if c.cell_type == "code" and c.source.startswith("# NBVAL_CHECK_OUTPUT")]
    assert len(pinned) >= 3 and all(c.outputs for c in pinned), "pinned cells need their expected outputs stored"
    assert not any(o.get("output_type") == "error" for o in outputs)
    text = " ".join(c.source for c in notebook.cells if c.cell_type == "markdown")
    assert "## Exercises" in text and "Worked answers" in text
