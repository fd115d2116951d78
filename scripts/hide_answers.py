"""Clear the saved outputs that would show a reader an answer before they run its cell.

Run after executing a notebook (and scripts/strip_notebooks.py): the code cells between a
`my_guess = ...` cell and the markdown after it, every code cell tagged `hide-answer` (a later cell
whose output would answer a prediction, such as a sweep's peaks), and every code cell after
"### Worked answers" lose their outputs; worked answers' code is also collapsed in JupyterLab.
tests/test_notebooks.py holds the rule.

A prediction's check cell raises while its guess is `...` (so Run All stops there, in one line); it is
tagged `nbval-raises-exception` for nbval. To execute a whole notebook from the command line, let
those cells fail, then strip and hide:
    .venv/bin/jupyter nbconvert --to notebook --execute --inplace --allow-errors notebooks/NAME.ipynb
Usage: .venv/bin/python scripts/hide_answers.py notebooks/*.ipynb
"""

import sys

import nbformat


def hide(path: str) -> None:
    notebook = nbformat.read(path, as_version=4)
    cells = notebook.cells
    hidden = []
    for i, cell in enumerate(cells):
        if cell.cell_type == "code" and cell.source.startswith("my_guess = ..."):
            end = next(k for k in range(i + 1, len(cells)) if cells[k].cell_type == "markdown")
            hidden += cells[i + 1 : end]
        if cell.cell_type == "code" and "hide-answer" in cell.metadata.get("tags", []):
            hidden.append(cell)
    answers = next(i for i, c in enumerate(cells) if c.cell_type == "markdown" and "### Worked answers" in c.source)
    for cell in cells[answers + 1 :]:
        if cell.cell_type == "code":
            cell.metadata.setdefault("jupyter", {})["source_hidden"] = True
            hidden.append(cell)
    for cell in hidden:
        cell.outputs = []
        cell.execution_count = None
    nbformat.write(notebook, path)


if __name__ == "__main__":
    for name in sys.argv[1:]:
        hide(name)
