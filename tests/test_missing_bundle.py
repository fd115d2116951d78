"""Without the built front end (a source checkout before `npm run build`): the package imports and extracts, and
the widget says in one sentence what is missing and what to do, instead of anywidget's bare FileNotFoundError."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "bwd_widgets"

CHECK = """
import torch

import bwd_widgets as bw

assert bw.__file__.startswith({root!r}), bw.__file__  # the copy without static/, not the checkout
extraction = bw.extract(torch.nn.Linear(3, 2), torch.randn(4, 3))
print("gradients", len(extraction.gradients))
print("dot", "digraph" in bw.to_dot(extraction))
for attempt in ("attribute", "attribute again", "show"):
    try:
        bw.BackwardGraphWidget if attempt != "show" else bw.show(extraction)
    except bw.FrontEndNotBuiltError as error:
        assert isinstance(error, bw.BwdWidgetsError) and isinstance(error, RuntimeError)
        print(attempt, "|", error)
    else:
        print(attempt, "| no error")
"""


def test_without_the_front_end_the_package_works_and_the_widget_says_what_to_do(tmp_path):
    shutil.copytree(PACKAGE, tmp_path / "bwd_widgets", ignore=shutil.ignore_patterns("static", "__pycache__"))
    assert not (tmp_path / "bwd_widgets" / "static").exists()
    isolated = ["-P"] if sys.version_info >= (3, 11) else []  # the copy, not this checkout, on sys.path
    done = subprocess.run(
        [sys.executable, *isolated, "-c", CHECK.format(root=str(tmp_path))],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split()[0] == "gradients" and int(lines[0].split()[1]) >= 2, done.stdout  # extract works
    assert lines[1] == "dot True", done.stdout  # and the views that need no front end
    sentence = (
        "the widget's front end is not built (bwd_widgets/static/widget.js is missing): run `npm run build` "
        "in the project, or install the package with pip, which builds it."
    )
    assert lines[2:] == [f"{attempt} | {sentence}" for attempt in ("attribute", "attribute again", "show")], done.stdout
    assert "FileNotFoundError" not in done.stderr
