"""Rich display: in a Jupyter kernel, an extraction, a comparison or a sweep that ends a cell shows as
the widget (with a static SVG beside it for GitHub and nbviewer); in a terminal it stays text.

The package registers these hooks when it is imported inside a kernel (and `%load_ext bwd_widgets`
does too); nothing below the Jupyter layer knows about them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..extraction import BackwardExtraction
from ..studio import Comparison, Sweep

if TYPE_CHECKING:
    from IPython.core.interactiveshell import InteractiveShell

SHOWN_AS_WIDGET = (BackwardExtraction, Comparison, Sweep)


def widget_bundle(obj: object) -> tuple[dict, dict] | None:
    """The widget's (data, metadata) for `obj`, with `obj`'s own text; None (plain text) if this cell
    already drew it."""
    from .widget import drawn_in_this_cell, show

    if drawn_in_this_cell(obj):
        return None
    if isinstance(obj, Sweep) and not obj.points:
        return None
    data, metadata = show(obj)._repr_mimebundle_()
    return {**data, "text/plain": repr(obj)}, metadata


def in_kernel(shell: InteractiveShell | None) -> bool:
    """A Jupyter kernel (which can draw widgets), as opposed to a terminal IPython."""
    return shell is not None and getattr(shell, "kernel", None) is not None


def register(shell: InteractiveShell) -> None:
    """Show extractions, comparisons and sweeps as the widget when a cell ends with one."""
    if not in_kernel(shell):
        return
    formatter = shell.display_formatter.mimebundle_formatter
    for kind in SHOWN_AS_WIDGET:
        formatter.for_type(kind, widget_bundle)
