"""Strip widget state from notebooks before committing: it embeds the whole JS bundle.

Keeps outputs (nbval compares the pinned ones); a widget's output keeps its text/plain repr.
Usage: .venv/bin/python scripts/strip_notebooks.py notebooks/*.ipynb
"""

import sys

import nbformat

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def strip(path: str) -> None:
    notebook = nbformat.read(path, as_version=4)
    notebook.metadata.pop("widgets", None)
    for cell in notebook.cells:
        cell.metadata.pop("execution", None)
        for output in cell.get("outputs", []):
            output.get("data", {}).pop(WIDGET_VIEW, None)
        # a display that held only widget state (or a progress placeholder emptied at the end) leaves nothing
        if cell.cell_type == "code":
            cell.outputs = [o for o in cell.outputs if o.get("output_type") != "display_data" or o["data"]]
    nbformat.write(notebook, path)


if __name__ == "__main__":
    for name in sys.argv[1:]:
        strip(name)
